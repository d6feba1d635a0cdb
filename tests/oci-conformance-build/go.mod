// Go module that pins the OCI distribution-spec conformance suite (no tagged release: a pseudo
// version of its main branch) and holds the program that writes the images it is run against.
// Built by tests/oci-conformance.
module stepshim.local/tests/oci-conformance-build

go 1.24.0

require github.com/opencontainers/distribution-spec/conformance v0.0.0-20260831232431-97274622c111

require (
	github.com/goccy/go-yaml v1.18.0 // indirect
	github.com/opencontainers/distribution-spec/specs-go v0.0.0-20240926185104-8376368dd8aa // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
