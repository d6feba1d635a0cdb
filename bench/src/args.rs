//! `stepshim-bench`'s command line: one subcommand per benchmark, each with only its own flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// stepshim-bench: benchmarks that print numbers (never pass/fail timing tests).
#[derive(Debug, Parser)]
#[command(name = "stepshim-bench", version, about)]
pub struct Cli {
    /// Which benchmark.
    #[command(subcommand)]
    pub command: Command,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The shim's own footprint against a raw fork/exec on this machine.
    Local(LocalArgs),
    /// The shim against apiserver exec on a real cluster (admin kubeconfig: exec needs it).
    Cluster(Box<ClusterArgs>),
    /// The control plane at scale: thousands of pending step pods of one worker, driven by the Rust
    /// runtime and by the Go kit's worker (admin kubeconfig: it creates RBAC and FlowSchemas).
    Scale(ScaleArgs),
    /// One driver of `scale` for the Rust side (the benchmark starts it as its child).
    #[command(hide = true)]
    ScaleWorker(ScaleWorkerArgs),
    /// The bare HTTP responder `local` measures the shim's HTTP floor against (it starts it).
    #[command(hide = true)]
    FloorServer,
}

/// `local`
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// The stepshim binary (default: $STEPSHIM_BIN, beside this executable, then PATH).
    #[arg(long)]
    pub shim_bin: Option<PathBuf>,
    /// Sequential spawns for the latency comparison.
    #[arg(long, default_value_t = 400)]
    pub iterations: usize,
    /// Processes followed at once in the concurrency run.
    #[arg(long, default_value_t = 2000)]
    pub concurrent: usize,
    /// Idle output streams held open at once for the memory-per-stream row. Each is a socket on
    /// both sides, and the shim keeps `STEPSHIM_FD_RESERVE` descriptors out of the connection cap:
    /// 10,000 needs a hard `RLIMIT_NOFILE` of about 11,100 for the shim and 10,100 for this bench.
    #[arg(long, default_value_t = 10_000)]
    pub idle_streams: usize,
    /// MiB of stdout streamed in each throughput run.
    #[arg(long, default_value_t = 2048)]
    pub stream_mib: u64,
    /// Throughput runs (in `tls`: of the stream and of the pull, per side); the row is their
    /// median, with the range beside it.
    #[arg(long, default_value_t = 5)]
    pub stream_runs: usize,
    /// MiB of the large file in the `tls` part's pull (beside 200 small files).
    #[arg(long, default_value_t = 256)]
    pub pull_mib: u64,
    /// MiB of the `images` part's rootfs/ (5,000 files) and of its one OCI layout blob.
    #[arg(long, default_value_t = 200)]
    pub image_mib: u64,
    /// MiB of the `fanout` part's tree (one file, beside 200 small files).
    #[arg(long, default_value_t = 64)]
    pub fanout_mib: u64,
    /// Pulls at once in the `fanout` part, each count against that many pulls alone.
    #[arg(long, value_delimiter = ',', default_value = "2,10,30")]
    pub fanout: Vec<usize>,
    /// Parts to run (default all): ready, spawn, floor, streams, stream, tls, images, fanout, many. `tls` compares
    /// a plain and a TLS shim of the same binary (spawn latency, a new connection, a stream, a
    /// pull, CPU per GiB); it needs a binary built with TLS (`images/build-shim-binary --tls`:
    /// target/image/stepshim-tls), and the default set skips it for a binary without.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Directory for local.json and local.md.
    #[arg(long)]
    pub results: Option<PathBuf>,
}

/// `cluster`
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the bench pods (created if missing).
    #[arg(long, default_value = "stepshim-bench")]
    pub namespace: String,
    /// Step pods to spread processes over.
    #[arg(long, default_value_t = 10)]
    pub pods: usize,
    /// Sequential runs per command and path in the latency scenario.
    #[arg(long, default_value_t = 200)]
    pub iterations: usize,
    /// Processes at once, per level.
    #[arg(long, value_delimiter = ',', default_value = "10,100,500")]
    pub levels: Vec<usize>,
    /// Lines (one a second) each concurrent process prints.
    #[arg(long, default_value_t = 10)]
    pub lines: u32,
    /// MiB of stdout in the throughput and cut-stream runs.
    #[arg(long, default_value_t = 1024)]
    pub stream_mib: u64,
    /// Command that restarts kube-apiserver (the fault scenarios need it).
    #[arg(long)]
    pub restart_cmd: Option<String>,
    /// Skip the fault scenarios.
    #[arg(long)]
    pub no_faults: bool,
    /// kube-apiserver's pid (default: the test cluster's pid file).
    #[arg(long)]
    pub apiserver_pid: Option<u32>,
    /// Image of the step pods.
    #[arg(long, default_value = "stepshim.local/step:dev")]
    pub step_image: String,
    /// Image carrying the shim.
    #[arg(long, default_value = "stepshim.local/stepshim:dev")]
    pub shim_image: String,
    /// Directory for results.json, results.md and the chart.
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// The runtime of the latency scenario's clients (every path alike): one thread, as a sequential
    /// caller like stepctl runs, or the multi-thread runtime the other scenarios use.
    #[arg(long, value_enum, default_value = "current-thread")]
    pub latency_runtime: LatencyRuntime,
    /// MiB of the artifact scenario (pod to pod: a direct pull, through the controller, a kubectl
    /// exec tar pipeline; then four inputs at once), run after the others; 0 skips it. Its results
    /// go to artifacts.md and artifacts.json.
    #[arg(long, default_value_t = 0)]
    pub artifacts_mib: u64,
    /// Run only the artifact scenario (1024 MiB unless --artifacts-mib says otherwise).
    #[arg(long)]
    pub artifacts_only: bool,
    /// Scenarios to run (default all but images and nodes): latency, podspawn, concurrency,
    /// throughput, faults, images, nodes. `nodes` runs only when named, alone: a pull within a node
    /// against one across nodes (needs two nodes; results in results/nodes). `images` runs only
    /// when named: a step's output handed to a later step as
    /// its image, through the producing pod's shim and pushed to a registry on the node (needs
    /// `--crane`); its results go to cluster.md and cluster.json in `--results` (default
    /// results/images).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Rounds of the `nodes` scenario (`--only nodes`: a pull into a pod of the source's node and
    /// into one of another node, alternating which goes first; results in results/nodes).
    #[arg(long, default_value_t = 5)]
    pub node_rounds: u32,
    /// MiB of the `images` scenario's rootfs/.
    #[arg(long, default_value_t = 200)]
    pub image_mib: u64,
    /// Files of the `images` scenario's rootfs/ (the MiB spread evenly over them).
    #[arg(long, default_value_t = 5000)]
    pub image_files: u64,
    /// Rounds of the `images` scenario: each hands a new tree over both ways, alternating which
    /// goes first.
    #[arg(long, default_value_t = 3)]
    pub image_rounds: usize,
    /// The pod network, for the forwarder the `images` scenario applies (the test cluster's).
    #[arg(long, default_value = "10.244.0.0/24")]
    pub pod_cidr: String,
    /// The forwarder's port on the node's loopback.
    #[arg(long, default_value_t = controller::image::FORWARDER_PORT)]
    pub forwarder_port: u16,
    /// A statically linked crane (go-containerregistry's CLI), uploaded into the producing pod to
    /// push its image: `CGO_ENABLED=0 go install github.com/google/go-containerregistry/cmd/crane@v0.22.1`.
    #[arg(long)]
    pub crane: Option<PathBuf>,
    /// CNCF distribution's `registry` binary for the `images` scenario's own registry (default:
    /// what tests/cluster/build-registry prints).
    #[arg(long)]
    pub registry_bin: Option<PathBuf>,
    /// Port of that registry, on the node's loopback (where containerd pulls) and on
    /// `--bridge-ip` (where the producing pod pushes).
    #[arg(long, default_value_t = 5874)]
    pub registry_port: u16,
    /// containerd's socket on the node: the `images` scenario removes each consumer's image from
    /// it afterwards (`ctr images rm`), so a long run does not fill the disk.
    #[arg(long, env = "STEPSHIM_CONTAINERD_SOCK")]
    pub containerd_sock: Option<PathBuf>,
    /// The host's address on the pod bridge, which pods reach it at.
    #[arg(long, default_value = "10.244.0.1")]
    pub bridge_ip: String,
    /// CPU request of each step pod, without a limit, e.g. `100m` (a Burstable pod); `none`: no
    /// request, a BestEffort pod (`cpu.shares` 2 under cgroup v1). Side by side the two measured
    /// the same within noise (README, load test).
    #[arg(long, default_value = "none")]
    pub cpu_request: String,
    /// `NAME=VALUE` in each step pod's environment (repeatable), e.g. `STEPSHIM_LOG=warn`: the
    /// shim reads its `STEPSHIM_*` settings from there.
    #[arg(long = "pod-env", value_parser = parse_pair)]
    pub pod_env: Vec<(String, String)>,
    /// Run the soak instead of the scenarios for this long (`90s`, `3m`, `1h`): steps of every kind
    /// started and finished continuously on `--pods` pods, with connections cut, the apiserver
    /// restarted (with `--restart-cmd`) and pods deleted mid-step, while each shim's and this
    /// process's memory, descriptors, threads and spill files are sampled. Writes soak.json and
    /// soak.md into `--results` (default results/soak).
    #[arg(long, value_parser = parse_duration)]
    pub soak: Option<std::time::Duration>,
    /// Steps the soak runs at once.
    #[arg(long, default_value_t = 4)]
    pub soak_workers: usize,
    /// Seconds between the soak's samples (default: the duration / 120, 5 to 60).
    #[arg(long)]
    pub soak_sample_secs: Option<u64>,
}

/// `90s`, `3m`, `1h` or `1h30m`: a bounded duration of at least a second.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("{s:?} is not a duration like 90s, 3m or 1h");
    let (mut total, mut num) = (0u64, String::new());
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(bad()),
        };
        let n: u64 = num.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        num.clear();
    }
    if !num.is_empty() || total == 0 || total > 7 * 24 * 3600 {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs(total))
}

/// `NAME=VALUE`.
fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))
}

impl ClusterArgs {
    /// Whether `--only` leaves scenario `name` in.
    pub fn runs(&self, name: &str) -> bool {
        (self.only.is_empty() && name != "images" && name != "nodes")
            || self.only.iter().any(|o| o == name)
    }

    /// Whether `--only` names only the `images` scenario (no step pods of the others needed).
    pub fn images_only(&self) -> bool {
        !self.only.is_empty() && self.only.iter().all(|o| o == "images")
    }

    /// The pods' CPU request, if any.
    pub fn cpu_request(&self) -> Option<&str> {
        Some(self.cpu_request.as_str()).filter(|c| !c.is_empty() && *c != "none")
    }
}

/// The scenarios `cluster --only` knows.
pub const CLUSTER_SCENARIOS: [&str; 7] = [
    "latency",
    "podspawn",
    "concurrency",
    "throughput",
    "faults",
    "images",
    "nodes",
];

/// Which tokio runtime the latency scenario's clients run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LatencyRuntime {
    /// A `current_thread` runtime on a thread of its own, with clients made there.
    CurrentThread,
    /// The benchmark's multi-thread runtime.
    MultiThread,
}

/// `scale`
#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Kubeconfig file with admin rights (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the pods; created, and deleted at the end (it must not exist before).
    #[arg(long, default_value = "stepshim-scale")]
    pub namespace: String,
    /// Pending step pods of the worker.
    #[arg(long, default_value_t = 5000)]
    pub pods: usize,
    /// Pod creations in flight at once.
    #[arg(long, default_value_t = 16)]
    pub parallel: usize,
    /// Pods outside the desired set, created before each driver, that its first GC tick collects.
    #[arg(long, default_value_t = 20)]
    pub orphans: usize,
    /// GC ticks measured per driver.
    #[arg(long, default_value_t = 20)]
    pub ticks: usize,
    /// Milliseconds between ticks.
    #[arg(long, default_value_t = 1000)]
    pub tick_ms: u64,
    /// Pods deleted one at a time per driver, timing when the worker notices each.
    #[arg(long, default_value_t = 20)]
    pub deletions: usize,
    /// The Go driver (`go/cmd/scale-worker`); built with `go build` when not given.
    #[arg(long)]
    pub go_worker: Option<PathBuf>,
    /// Drivers to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "rust,go")]
    pub drivers: Vec<String>,
    /// Command that restarts kube-apiserver; without it the restart is skipped.
    #[arg(long)]
    pub restart_cmd: Option<String>,
    /// Seconds of ticks after the restart before its requests are counted.
    #[arg(long, default_value_t = 20)]
    pub after_restart_secs: u64,
    /// Directory for scale.json and scale.md.
    #[arg(long)]
    pub results: Option<PathBuf>,
}

/// `scale-worker`: the same flags as the Go driver.
#[derive(Debug, Args)]
pub struct ScaleWorkerArgs {
    /// Kubeconfig of the worker's credentials.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Namespace of the step pods.
    #[arg(long)]
    pub namespace: String,
    /// Worker name.
    #[arg(long)]
    pub worker: String,
    /// File holding the worker's key.
    #[arg(long)]
    pub key: PathBuf,
    /// Name prefix of the desired pods.
    #[arg(long)]
    pub prefix: String,
    /// Number of desired pods: prefix0 .. prefix(count-1).
    #[arg(long)]
    pub count: usize,
    /// Memory analysis only: the runtime's reflector with `metadata.managedFields` dropped before
    /// the store; says `ready` and then answers only `quit`.
    #[arg(long)]
    pub strip_managed_fields: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn images_runs_only_when_named() {
        let cli = |only: &str| {
            let mut argv = vec!["stepshim-bench", "cluster"];
            if !only.is_empty() {
                argv.extend(["--only", only]);
            }
            match Cli::parse_from(argv).command {
                Command::Cluster(c) => *c,
                _ => unreachable!(),
            }
        };
        let all = cli("");
        assert!(all.runs("latency") && !all.runs("images") && !all.images_only());
        let images = cli("images");
        assert!(images.runs("images") && !images.runs("latency") && images.images_only());
        let both = cli("latency,images");
        assert!(both.runs("images") && both.runs("latency") && !both.images_only());
    }

    #[test]
    fn durations_read_in_seconds_minutes_and_hours() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("3m"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "3", "m", "0s", "1d", "-3m", "9999h", "3m5"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
