//go:build tools

// Package tools records the OCI distribution-spec conformance suite that tests/oci-conformance
// compiles, so `go mod tidy` keeps every module it needs in go.sum. It is never built itself.
package tools

import (
	_ "github.com/opencontainers/distribution-spec/conformance"
)
