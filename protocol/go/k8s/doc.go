// Package k8s is the Kubernetes side of the stepshim Go kit, what Concourse's ATC needs to run steps
// as pods: the step pod for a step description (the same pod the Rust controller builds, checked by a
// golden test on both sides), per-pod token derivation, and a Worker that keeps one shared, label-
// filtered informer on its pods and creates, waits for, lists, collects and retires them, checks its
// credentials, and hands out shim clients (package stepshim.dev/protocol/go) with each pod's token.
//
// Shims serve TLS 1.3 when delivered by init container (the image's /stepshim-tls; turn it off with
// Delivery.WithTLS(TLSOff) for an image without it) and plain HTTP when delivered by ConfigMap. The
// pod spec carries the seed of the shim's key, HMAC-SHA256 of the pod token; the Worker derives the
// same seed from the token it holds and pins the key's public half (PROTOCOL.md 1.1), so no
// certificate authority or extra API object is involved, and a pod is taken as TLS iff its main
// container has STEPSHIM_TLS_SEED.
//
// The Worker never uses pods/exec, pods/attach or pods/portforward: pods are created and deleted
// through the API and everything else goes over HTTP (or HTTPS) to the shim in the pod.
//
// # Layout
//
//   - podspec.go: StepSpec, Delivery and StepPod, the pod of a step; LabelValue.
//   - token.go: Key and Token, HMAC-SHA256(key, "namespace/pod") and its SHA-256 for the pod spec.
//   - tls.go: TLSMode and Delivery.WithTLS, PodAuth (what the pod carries of its token), PodTLS,
//     Worker.Pin, ShimAt (https with the pod's pin for a TLS pod) and PullSource.
//   - progress.go: Progress, a pod's way to ready read from its status with Kubernetes' reasons.
//   - worker.go: Worker, the informer-backed view of one worker's pods: Create, WaitReady, Get, List,
//     Delete, Shim, ShimViaProxy, and Connect (Shim with the shim's protocol version checked once
//     per pod).
//   - gc.go: GC by desired set with a grace period, Retire, and Check (SelfSubjectAccessReview).
//
// Tests: golden_test.go checks the files in protocol/testdata, shared with the Rust controller's
// controller/tests/golden.rs (pod, token, readiness verdicts); unit_test.go the pure rules;
// tls_test.go TLS pods, pins and proxy paths against stand-in shims and apiserver;
// cluster_test.go (build tag cluster) runs against a real cluster from tests/cluster/tests.d/30-go-kit.
package k8s
