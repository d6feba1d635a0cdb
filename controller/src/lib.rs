//! The control-plane side of stepshim: creates and deletes step pods through the Kubernetes API and
//! does everything else over HTTP to the shims. It never uses `pods/exec`, `pods/attach` or
//! `pods/portforward`.
//!
//! # Layout
//! - [`token`]: per-pod tokens derived from the controller key (HMAC of namespace/name).
//! - [`podspec`]: the step pod: user image, shim as PID 1, delivery by init container or ConfigMap.
//! - [`runtime`]: one target (kubeconfig, namespace, worker): create, wait, delete, list pods (a
//!   hermetic pod's policy with it), and shim clients whose protocol version was checked.
//! - [`progress`]: a pod's way to ready, from its status, with Kubernetes' reasons.
//! - [`watch`]: the one shared reflector on the worker's pods that every wait reads.
//! - [`via`]: the way to a shim: the pod IP, or the apiserver's `pods/proxy` with our credentials.
//! - [`hermetic`]: the NetworkPolicy of a hermetic step pod and gc's rule for it (pure; its creation
//!   and ownership are the runtime's, its collection gc's).
//! - [`selection`]: gc's rule for what to delete, shared by pods, Secrets and policies (pure).
//! - [`gc`]: garbage collection (pods, hermetic pods' policies), retirement and the credentials
//!   health check.
//! - [`transfer`]: artifacts between step pods: a grant and a pull, or through the controller.
//! - [`image`]: images from step pods, the pure part: `POD:/PATH`, the image's name and reference,
//!   the image-pull Secret and gc's rule for it.
//! - [`image_source`]: images from step pods, the I/O: the grant and the digest on the source
//!   shim, the consuming pod with its Secret, and gc of Secrets left behind.
//! - [`manifests`]: RBAC (the one list of verbs a worker needs), the shim ConfigMap and the step
//!   pods' NetworkPolicy as YAML.
//!
//! The modules are layered, each importing only those below it: pure code (`token`, `podspec`,
//! `selection`, `hermetic`, `image`, `manifests`, `progress`), then I/O (`via`, `watch`,
//! `runtime`), then what drives it (`gc`, `transfer`, `image_source`), and `stepctl`'s CLI on top.
//!
//! The shim's HTTP client is the `client` crate; `stepctl`'s commands live in the binary's `cli`
//! module; the benchmarks are the `bench` crate.

pub mod gc;
pub mod hermetic;
pub mod image;
pub mod image_source;
pub mod manifests;
pub mod podspec;
pub mod progress;
pub mod runtime;
pub mod selection;
pub mod token;
pub mod transfer;
pub mod via;
pub mod watch;
