//! `stepctl`'s command line, as clap derive structs apart from the logic.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// stepctl: run CI steps as Kubernetes pods with stepshim as PID 1, never through pods/exec.
#[derive(Debug, Parser)]
#[command(name = "stepctl", version, about)]
pub struct Cli {
    /// Where and as whom.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Output format for results a machine may read.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Result format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// One JSON document.
    Json,
}

/// The target: a cluster namespace and worker, or a local shim.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, global = true, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the step pods.
    #[arg(
        long,
        short = 'n',
        global = true,
        env = "STEPCTL_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    /// Worker name: the org.concourse-ci.worker label of every pod this worker owns.
    #[arg(long, global = true, env = "STEPCTL_WORKER", default_value = "stepctl")]
    pub worker: String,
    /// File holding the controller key (at least 32 random bytes) that per-pod tokens derive from.
    #[arg(long, global = true, env = "STEPCTL_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Use a stepshim started as a local child process instead of a cluster.
    #[arg(long, global = true)]
    pub local: bool,
    /// The stepshim binary for --local (default: $STEPSHIM_BIN, beside stepctl, then PATH).
    #[arg(long, global = true)]
    pub shim_bin: Option<PathBuf>,
    /// How to reach shims: the pod IP, the apiserver's pods/proxy (needs `manifests --via proxy`
    /// rights), or the pod IP when it answers within --probe-ms and the proxy otherwise.
    #[arg(long, global = true, env = "STEPCTL_VIA", value_enum, default_value_t = ViaArg::Direct)]
    pub via: ViaArg,
    /// With --via auto: milliseconds the pod IP gets to accept a connection.
    #[arg(long, global = true, env = "STEPCTL_PROBE_MS", default_value_t = 1000)]
    pub probe_ms: u64,
}

/// The way to the shims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ViaArg {
    /// Straight to the pod IP.
    Direct,
    /// Through the apiserver's pods/{name}:7777/proxy with the kubeconfig's credentials.
    Proxy,
    /// The pod IP if it answers in time, else the proxy.
    Auto,
}

impl From<ViaArg> for controller::via::Via {
    fn from(v: ViaArg) -> Self {
        match v {
            ViaArg::Direct => Self::Direct,
            ViaArg::Proxy => Self::Proxy,
            ViaArg::Auto => Self::Auto,
        }
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a step pod, run a command in it, stream its output, exit with its status, delete it.
    Run(Box<RunArgs>),
    /// Open an interactive shell (or a command) with a terminal in a running step pod.
    Hijack(HijackArgs),
    /// Follow a process's output from an offset to its exit and exit with its status.
    Attach(AttachArgs),
    /// List the worker's pods, or the processes of one pod.
    Ps(PsArgs),
    /// Delete the worker's pods that are not kept, once older than the grace period.
    Gc(GcArgs),
    /// Delete every pod of the worker.
    Retire,
    /// Check the apiserver and that the credentials hold the needed verbs (and no exec rights).
    Check,
    /// Print the RBAC objects (and optionally the shim ConfigMap and a NetworkPolicy) to apply once
    /// per namespace.
    Manifests(ManifestArgs),
    /// Copy files between here and a pod, or between two pods (POD:/PATH), through the shims.
    Cp(CpArgs),
}

/// `cp`
#[derive(Debug, Args)]
pub struct CpArgs {
    /// Source: POD:/PATH or a local path (a trailing / copies a directory's contents).
    pub src: String,
    /// Destination directory: POD:/DIR or a local directory.
    pub dst: String,
    /// Pod to pod: stream through stepctl instead of a direct pull between the pods.
    #[arg(long)]
    pub through_controller: bool,
}

/// `run`
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Image of the step (any image; the shim brings its own binary). Required for a cluster,
    /// unless --image-from names it.
    #[arg(long, env = "STEPCTL_IMAGE")]
    pub image: Option<String>,
    /// The step's image is a directory of another step pod of this worker (an OCI image layout,
    /// or Concourse's rootfs/ and metadata.json), named after the directory (an OCI name
    /// component): pulled by the kubelet through the node-local forwarder, with a grant on POD
    /// and an image-pull Secret the pod owns. Takes the place of --image.
    #[arg(long, value_name = "POD:/PATH")]
    pub image_from: Option<String>,
    /// Mount the image in directory PATH of step pod POD read-only at MOUNT of the step's
    /// container (a Kubernetes image volume; repeatable), pulled as --image-from's, with the same
    /// image-pull Secret (one per pod, an entry per image).
    #[arg(long, value_name = "POD:/PATH=/MOUNT")]
    pub image_volume: Vec<String>,
    /// With --image-from or --image-volume: the port of the node-local forwarder (stepshim-forward) on 127.0.0.1.
    #[arg(long, env = "STEPCTL_FORWARDER_PORT", default_value_t = controller::image::FORWARDER_PORT)]
    pub forwarder_port: u16,
    /// With --image-from or --image-volume: seconds each grant on a source pod lasts (the pull must start within
    /// it; it is revoked when the step ends).
    #[arg(long, env = "STEPCTL_IMAGE_GRANT_TTL", value_name = "SECONDS",
          default_value_t = controller::image::GRANT_TTL.as_secs())]
    pub image_grant_ttl: u64,
    /// Give the process a terminal (raw mode, resized with the window).
    #[arg(long)]
    pub tty: bool,
    /// Keep the pod after the command ends (delete it later with `gc` or `retire`).
    #[arg(long)]
    pub keep: bool,
    /// Pod name (default: step-<random>).
    #[arg(long)]
    pub name: Option<String>,
    /// Process id in the shim.
    #[arg(long, default_value = "main")]
    pub id: String,
    /// Environment entries K=V for the process.
    #[arg(long = "env", short = 'e')]
    pub env: Vec<String>,
    /// Working directory of the process.
    #[arg(long)]
    pub dir: Option<String>,
    /// User of the process (uid, uid:gid or a name in the image).
    #[arg(long)]
    pub user: Option<String>,
    /// How the shim reaches the pod.
    #[arg(long, value_enum, default_value_t = DeliveryArg::Init)]
    pub delivery: DeliveryArg,
    /// Shim image for init-container delivery, best by digest (REPO@sha256:..., as
    /// `images/build-shim-image --push REPO` prints it). Required with `--delivery init`.
    #[arg(long, env = "STEPCTL_SHIM_IMAGE")]
    pub shim_image: Option<String>,
    /// Plain HTTP to the shim with `--delivery init` (for a shim image without `/stepshim-tls`,
    /// as 0.1.0 built them). Init-container delivery serves TLS 1.3 by default; ConfigMap
    /// delivery never does (the ConfigMap holds the plain build).
    #[arg(long)]
    pub no_tls: bool,
    /// ConfigMap name for configmap delivery.
    #[arg(long, default_value = "stepshim")]
    pub configmap: String,
    /// Build name (label and annotation).
    #[arg(long)]
    pub build: Option<String>,
    /// Step name (label and annotation).
    #[arg(long)]
    pub step: Option<String>,
    /// CPU request and limit (e.g. 500m).
    #[arg(long)]
    pub cpu: Option<String>,
    /// CPU request without a limit (e.g. 100m): a weight against the node's other pods, never a
    /// cap. Not with --cpu.
    #[arg(long, value_name = "QUANTITY")]
    pub cpu_request: Option<String>,
    /// Cut the step off the network: the pod's own NetworkPolicy, created before the pod and
    /// deleted with it, denies all egress (DNS too) but to the shim port of the worker's step pods
    /// (pulls of inputs). Needs a network plugin that enforces NetworkPolicy, and the Role's
    /// networkpolicies rule (`stepctl manifests`).
    #[arg(long)]
    pub hermetic: bool,
    /// Mount this ConfigMap read-only at /etc/ssl/certs of the step's container, in place of the
    /// image's (a CA bundle, e.g. the key ca-certificates.crt).
    #[arg(long, value_name = "NAME")]
    pub certs_configmap: Option<String>,
    /// Memory request and limit (e.g. 1Gi).
    #[arg(long)]
    pub memory: Option<String>,
    /// Image pull policy of the step image (Always, IfNotPresent, Never).
    #[arg(long)]
    pub pull_policy: Option<String>,
    /// Run the main container privileged.
    #[arg(long)]
    pub privileged: bool,
    /// Seconds to wait for the pod to be ready.
    #[arg(long, default_value_t = 300)]
    pub ready_timeout: u64,
    /// Seconds the pod's shim may answer nothing (probed every 5 s) while the command runs before
    /// its node counts as lost: stepctl then deletes the pod without grace and exits 1 naming the
    /// node (0: wait for ever).
    #[arg(long, default_value_t = 20, value_name = "SECONDS")]
    pub node_lost_after: u64,
    /// An input NAME=POD:/PATH: PATH's contents pulled from POD into DIR/NAME (DIR: --dir, default
    /// /tmp/build) before the command starts; all inputs in parallel. Repeatable.
    #[arg(long = "input", value_name = "NAME=POD:/PATH")]
    pub inputs: Vec<String>,
    /// An output directory of the step: created before the command, and the pod is kept so later
    /// steps can take it with --input NAME=POD:/PATH. Repeatable. (`--output` is the global format.)
    #[arg(long = "output-dir", value_name = "PATH")]
    pub outputs: Vec<String>,
    /// Inputs stream through stepctl instead of being pulled by the step's pod.
    #[arg(long)]
    pub through_controller: bool,
    /// Pass stdin to the process (always on with --tty).
    #[arg(long, short = 'i')]
    pub stdin: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Shim delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeliveryArg {
    /// Init container copying the shim from its image into an emptyDir.
    Init,
    /// A ConfigMap holding the binary (see `stepctl manifests --shim-configmap`).
    Configmap,
}

/// `hijack`
#[derive(Debug, Args)]
pub struct HijackArgs {
    /// The step pod (ignored with --local).
    pub pod: Option<String>,
    /// Process id (default: hijack-<random>).
    #[arg(long)]
    pub id: Option<String>,
    /// Command (default: /bin/sh).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `attach`
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The step pod.
    pub pod: String,
    /// The process id.
    pub id: String,
    /// Log offset to start from (a frame boundary; 0 replays everything).
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Seconds the pod's shim may answer nothing (probed every 5 s) before its node counts as
    /// lost: stepctl then exits 1 naming the node (0: wait for ever).
    #[arg(long, default_value_t = 20, value_name = "SECONDS")]
    pub node_lost_after: u64,
}

/// `ps`
#[derive(Debug, Args)]
pub struct PsArgs {
    /// List the processes of this pod instead of the pods.
    pub pod: Option<String>,
}

/// `gc`
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Pods to keep (the desired set).
    #[arg(long = "keep")]
    pub keep: Vec<String>,
    /// Never collect pods younger than this many seconds (they may be starting).
    #[arg(long, default_value_t = 60)]
    pub grace: u64,
}

/// `manifests`
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// Name of the ServiceAccount, Role and RoleBinding.
    #[arg(long, default_value = "stepshim-worker")]
    pub name: String,
    /// Also print the ConfigMap carrying this shim binary.
    #[arg(long)]
    pub shim_configmap: Option<PathBuf>,
    /// Name of that ConfigMap.
    #[arg(long, default_value = "stepshim")]
    pub configmap: String,
    /// Also print a NetworkPolicy (named as --name) for the step pods of --worker: ingress to them
    /// only on the shim's port 7777/TCP, from the controller (--controller-label,
    /// --controller-cidr) and from the worker's own step pods (pulls between steps); nothing else
    /// may connect to them, on any port. Egress stays open. Needs a network plugin that enforces
    /// NetworkPolicy; the kubelet's readiness probe comes from the node, which such plugins admit.
    #[arg(long)]
    pub network_policy: bool,
    /// With --network-policy: a label KEY=VALUE the operator puts on the controller's pods (the
    /// pods running stepctl or ATC); repeat for several labels, all of which must match.
    #[arg(
        long = "controller-label",
        value_name = "KEY=VALUE",
        default_value = "app.kubernetes.io/component=stepshim-controller"
    )]
    pub controller_labels: Vec<String>,
    /// With --network-policy: the namespace of the controller's pods, if not the step pods' own.
    #[arg(long, value_name = "NAMESPACE")]
    pub controller_namespace: Option<String>,
    /// With --network-policy: an address block also admitted, e.g. 203.0.113.7/32: a controller
    /// outside the pod network (its address as the pods see it, often its node's), or, with
    /// --via proxy or auto, the apiserver's addresses as the pods see them (the control-plane
    /// nodes' IPs). Repeatable.
    #[arg(long = "controller-cidr", value_name = "CIDR")]
    pub controller_cidrs: Vec<String>,
    /// With --network-policy: the step pods of another worker also admitted, so that its steps
    /// pull from these (P2P between the workers of one cluster, the Go kit's atcruntime.Cluster):
    /// WORKER in the same namespace, or NAMESPACE/WORKER. Repeatable; give each worker's policy
    /// the others.
    #[arg(long = "peer-worker", value_name = "[NAMESPACE/]WORKER")]
    pub peer_workers: Vec<String>,
    /// Also print the DaemonSet of the node-local forwarder (/stepshim-forward of the shim image,
    /// one pod per node on the host network, listening on 127.0.0.1:7779 only): what a node's
    /// containerd pulls the images of earlier steps through. Runs as non-root with no capability,
    /// no service account token and no RBAC. Needs --pod-cidr and the shim image.
    #[arg(long)]
    pub forwarder: bool,
    /// With --forwarder: an IPv4 CIDR of the pod network, e.g. 10.244.0.0/16; the forwarder
    /// reaches only source pods inside these. Repeatable.
    #[arg(long = "pod-cidr", value_name = "CIDR")]
    pub pod_cidrs: Vec<String>,
    /// With --forwarder: the shim image carrying /stepshim-forward (images/build-shim-image
    /// --push REPO prints one).
    #[arg(long, env = "STEPCTL_SHIM_IMAGE", value_name = "REF")]
    pub forwarder_image: Option<String>,
    /// With --forwarder: the DaemonSet's name.
    #[arg(long, default_value = "stepshim-forward")]
    pub forwarder_name: String,
}
