// Package k8s is the Kubernetes side of the stepshim Go kit, what Concourse's ATC needs to run steps
// as pods: the step pod for a step description (the same pod the Rust controller builds, checked by a
// golden test on both sides), per-pod token derivation, and a Worker that keeps one shared, label-
// filtered informer on its pods and creates, waits for, lists, collects and retires them, checks its
// credentials, and hands out shim clients (package stepshim.dev/go/shim) with each pod's token.
//
// Shims serve TLS 1.3 when delivered by init container (the image's /stepshim-tls; turn it off with
// Delivery.WithTLS(TLSOff) for an image without it) and plain HTTP when delivered by ConfigMap. The
// pod spec carries the seed of the shim's key, HMAC-SHA256 of the pod token; the Worker derives the
// same seed from the token it holds and pins the key's public half (PROTOCOL.md 1.1), so no
// certificate authority or extra API object is involved, and a pod is taken as TLS iff its main
// container has STEPSHIM_TLS_SEED.
//
// # Images from step pods
//
// A step's output directory can be the image of a later step's pod: set StepSpec.ImageFrom to
// ImageFrom{Pod, Path} (a pod of the same worker and a directory in it holding an OCI image layout,
// or Concourse's rootfs/ and metadata.json) instead of Image. Create then makes a read grant on the
// source pod's shim for the directory (a fresh random 32-byte token, Config.ImageGrantTTL, one hour
// by default), resolves the image's digest with it (HEAD /v2/<name>/manifests/latest, name being
// the directory's last component, which must be an OCI name component), creates an image-pull
// Secret (kubernetes.io/dockerconfigjson for 127.0.0.1:<Config.ForwarderPort>/<source IP>/<name>,
// the port 7779 by default,
// user "tls-<pin>" or "plain", the grant token as password, labelled stepshim.dev/image-for), then
// the pod with image 127.0.0.1:<port>/<source IP>/<name>@<digest> and that Secret in its
// imagePullSecrets, and makes the pod the Secret's owner so Kubernetes deletes it with the pod. The
// kubelet pulls through the node-local forwarder (stepshim-forward), which reaches the source shim
// pod to pod. The pod token never leaves the worker. GC deletes image-pull Secrets whose pod is
// gone (a worker that died between the Secret and the owner); grants are never revoked by GC, they
// expire by their ttl. A pull that fails is the pod's own reason (ErrImagePull with the kubelet's
// message), which WaitReady returns at once as a *PodFailedError. The worker's Role needs secrets
// list, create, patch and delete (SecretVerbs); `stepctl manifests` grants them.
//
// StepSpec.ImageVolumes mounts such images read-only into the main container as image volumes
// (volumes[].image, named image-0, image-1, ..., pullPolicy IfNotPresent; Kubernetes 1.35), with
// or without ImageFrom: each is granted and resolved as ImageFrom's, and the pod's one Secret holds
// an entry per image keyed by its repository (127.0.0.1:<port>/<source IP>/<name>), which the
// kubelet matches by prefix, so each pull presents its own grant.
//
// StepSpec.Hermetic cuts a step off the network: Create first makes the pod's own NetworkPolicy
// (HermeticPolicy, selecting the pod alone by the label stepshim.dev/hermetic, Egress only, denying
// all but TCP to the shim port of the worker's pods, DNS included), then the pod, then makes the pod
// the policy's owner; GC deletes policies whose pod is gone. It takes effect only where the network
// plugin enforces NetworkPolicy. The Role needs networkpolicies list, create, patch and delete
// (PolicyVerbs). StepSpec.CertsConfigMap mounts a ConfigMap read-only at /etc/ssl/certs;
// StepSpec.CPURequest is a CPU request without a limit (a weight, as Garden's CPU shares).
//
// StepSpec.Claims mounts PersistentVolumeClaims of the namespace read-write into the main container
// (volumes claim-0, claim-1, ...), so what a pod keeps there outlives it. Worker.EnsureClaim creates
// such a claim (ReadWriteOnce, a storage class or the cluster's default, a size, labelled with the
// worker) unless it exists, and Worker.DeleteClaim deletes it. The Role needs
// persistentvolumeclaims get, create and delete (ClaimVerbs).
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
//   - image.go: ImageFrom, image names and references, the image-pull Secret and GC's rule for it.
//   - image_worker.go: ResolveImage (grant and digest on a shim), Worker.PrepareImage, Create with
//     ImageFrom (Secret, pod, owner) and GCImageSecrets.
//   - hermetic.go: HermeticPolicy, Create's policy before a hermetic pod, and GCHermeticPolicies.
//   - claim.go: ClaimMount and the pod's claim volumes, Worker.EnsureClaim and DeleteClaim.
//
// Tests: golden_test.go checks the files in protocol/testdata, shared with the Rust controller's
// controller/tests/golden.rs (pod, token, readiness verdicts); unit_test.go the pure rules;
// tls_test.go TLS pods, pins and proxy paths against stand-in shims and apiserver;
// hermetic_test.go the step spec's options and the order of Create's API calls; claim_test.go the
// claim mounts, their refusals and the claims' shape; cluster_test.go (build tag cluster) runs
// against a real cluster from tests/cluster/tests.d/30-go-kit, and spec_cluster_test.go from
// 80-step-spec.
package k8s
