//! `stepshim-bench cluster --artifacts-mib N`: one artifact (one large file plus 10,000 small ones, N
//! MiB in all) moved from one step pod into another three ways, one after the other into the same
//! pods: a direct pull (a grant on the source, a pull by the destination's shim), streamed through
//! the controller (`controller::transfer`, as `stepctl` does when pods cannot reach each other), and a
//! `kubectl exec tar c | kubectl exec -i tar x` pipeline (what an exec-based runtime does). Each is
//! measured for MB/s, the controller's CPU seconds (this process; for the pipeline, its two kubectl
//! children), the bytes that crossed the host's own side of the pod bridge (the controller runs on
//! the host: a byte it carries crosses it twice, a byte going pod to pod not at all), and
//! kube-apiserver's CPU. An idle interval as long as the direct pull gives the noise floor. Then four
//! inputs of N, N/2, N/4 and N/8 MiB from four pods are pulled into one pod at once, against the
//! largest alone. Every copy is checked against its source by a digest of all its files.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use client::ShimClient;
use controller::runtime::{Runtime, TargetConfig, kube_client};
use controller::token::Key;
use controller::transfer::{self, How};
use futures_util::future::try_join_all;
use k8s_openapi::api::core::v1::Namespace;

use super::apiserver::{Probe, find_pid};
use super::artifacts_probe::{bridge_bytes, digest_of, sh, shim_cpu};
use super::artifacts_report::{self, Method, Parallel, Report, Row};
use super::scenarios::measured;
use crate::args::ClusterArgs;
use crate::procfs::own_cpu_secs;

/// Small files in the full-size artifact (inputs a fraction of its size get that fraction).
const SMALL_FILES: u64 = 10_000;
/// Bytes of each small file (text: the step image's busybox has no `split`, so awk writes them).
const SMALL_BYTES: u64 = 2048;
/// Where an artifact lives in its source pod, and where copies land in the destination.
const ART: &str = "/build/art";
pub(super) const IN: &str = "/build/in";

/// One step pod of the scenario.
pub(super) struct Pod {
    pub(super) name: String,
    pub(super) shim: ShimClient,
}

/// A runtime for `worker` with a fresh key, in `args.namespace`, which is made if missing and
/// waited for until its default ServiceAccount exists.
pub(super) async fn worker_in_namespace(
    args: &ClusterArgs,
    client: &kube::Client,
    worker: &str,
) -> Result<Runtime> {
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    if namespaces.get_opt(&args.namespace).await?.is_none() {
        let mut n = Namespace::default();
        n.metadata.name = Some(args.namespace.clone());
        namespaces.create(&Default::default(), &n).await?;
    }
    crate::access::wait_default_service_account(client, &args.namespace).await?;
    let key =
        Key::from_bytes(rand::random::<[u8; 32]>().to_vec()).map_err(|_| anyhow::anyhow!("key"))?;
    let tc = TargetConfig {
        kubeconfig: args.kubeconfig.clone(),
        namespace: args.namespace.clone(),
        worker: worker.into(),
    };
    Ok(Runtime::connect(&tc, key).await?)
}

/// Runs the artifact scenario on its own pods and writes `artifacts.md` and `artifacts.json`.
/// Returns 1 when a copy differed from its source.
pub async fn run(args: &ClusterArgs) -> Result<i32> {
    let mib = if args.artifacts_mib == 0 {
        1024
    } else {
        args.artifacts_mib
    };
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let rt = worker_in_namespace(args, &client, "stepctl-bench-art").await?;
    let _ = controller::gc::retire(&rt).await?;
    let run_id = format!("{:06x}", rand::random::<u32>() >> 8);
    let names: Vec<String> = ["dst", "src0", "src1", "src2", "src3"]
        .iter()
        .map(|r| format!("art-{run_id}-{r}"))
        .collect();
    super::create_pods(&rt, args, &names, "bench-artifacts").await?;
    let result = async {
        let ips = super::wait_ready_all(&rt, &names).await?;
        let pods = names
            .iter()
            .zip(&ips)
            .map(|(n, ip)| {
                Ok(Pod {
                    name: n.clone(),
                    shim: rt.shim_at(n, ip)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let probe = Probe::new(find_pid(args.apiserver_pid)?, client.clone());
        scenario(args, &pods, &probe, mib).await
    }
    .await;
    for n in &names {
        let _ = rt.delete(n).await;
    }
    let report = result?;
    let dir = args
        .results
        .clone()
        .unwrap_or_else(|| "results/cluster".into());
    artifacts_report::write(&dir, &report)?;
    print!("{}", artifacts_report::markdown(&report));
    let bad = report.rows.iter().filter(|r| !r.ok).count() + usize::from(!report.parallel.ok);
    if bad > 0 {
        eprintln!("bench: FAIL: {bad} artifact copies differ from their source");
        return Ok(1);
    }
    Ok(0)
}

async fn scenario(args: &ClusterArgs, pods: &[Pod], probe: &Probe, mib: u64) -> Result<Report> {
    let (dst, sources) = (&pods[0], &pods[1..]);
    let digests = make_artifacts(sources, mib).await?;
    let src = &sources[0];
    // Every copy keeps its own directory until the pods go: deleting thousands of files just before
    // the next copy makes each file created soon after cost more on a node whose ext4 runs without a
    // journal (the allocator skips recently freed inodes), which measured the disk, not the shim
    // (a 10,000-file pull: 0.37 CPU s, 4.78 s right after 30,000 deletions).
    let mut rows: Vec<Row> = Vec::new();
    for method in [Method::Direct, Method::Controller, Method::Exec] {
        // The same tree: the direct pull's stream length stands for the exec pipeline's size.
        let direct_bytes = rows.first().map_or(0, |r| r.bytes);
        let copy = Copy {
            args,
            probe,
            src,
            dst,
            direct_bytes,
        };
        if let Some(row) = copy.row(method, mib, &digests[0]).await? {
            rows.push(row);
        }
    }
    rows.push(idle_row(probe, rows[0].secs).await);
    let parallel = parallel_inputs(dst, sources, &digests, mib, rows[0].secs).await?;
    Ok(Report {
        context: context(),
        mib,
        rows,
        parallel,
    })
}

/// Makes the four sources' artifacts, of 1, 1/2, 1/4 and 1/8 of `mib`, and returns each one's
/// digest, computed by its own source.
pub(super) async fn make_artifacts(sources: &[Pod], mib: u64) -> Result<Vec<String>> {
    let started = Instant::now();
    let digests = try_join_all(sources.iter().enumerate().map(|(i, p)| async move {
        let bytes = (mib << 20) >> i;
        let small = SMALL_FILES >> i;
        let big = bytes.saturating_sub(small * SMALL_BYTES);
        sh(
            &p.shim,
            &format!(
                "set -e; rm -rf {ART}; mkdir -p {ART}/small; cd {ART}/small
                 awk -v n={small} 'BEGIN {{ srand(); for (i = 0; i < n; i++) {{
                     f = sprintf(\"f%05d\", i); s = \"\"
                     while (length(s) < {SMALL_BYTES}) s = s rand()
                     printf \"%s\\n\", substr(s, 1, {SMALL_BYTES} - 1) > f; close(f) }} }}'
                 head -c {big} /dev/urandom > {ART}/big.bin
                 {}",
                digest_of(ART)
            ),
        )
        .await
    }))
    .await?;
    eprintln!(
        "bench: artifacts of {mib}, {}, {}, {} MiB made in {:.1} s",
        mib >> 1,
        mib >> 2,
        mib >> 3,
        started.elapsed().as_secs_f64()
    );
    Ok(digests)
}

/// One copy of the largest artifact from `src` into `dst`, with what it is measured against.
struct Copy<'a> {
    args: &'a ClusterArgs,
    probe: &'a Probe,
    src: &'a Pod,
    dst: &'a Pod,
    /// The direct pull's stream length: the size the exec pipeline is credited with.
    direct_bytes: u64,
}

impl Copy<'_> {
    /// Copies by `method` into its own directory and measures it; `None` when the exec pipeline
    /// failed (it is the comparison, not what is tested: its row is left out).
    async fn row(&self, method: Method, mib: u64, digest: &str) -> Result<Option<Row>> {
        let (src, dst) = (self.src, self.dst);
        let to = format!("{IN}/{}", method.dir());
        let (cpu0, children0, bridge0) = (own_cpu_secs(false), own_cpu_secs(true), bridge_bytes());
        let (src0, dst0) = (shim_cpu(&src.shim).await?, shim_cpu(&dst.shim).await?);
        let t = Instant::now();
        let (moved, cost) = measured(self.probe, self.copy(method, &to)).await;
        let secs = t.elapsed().as_secs_f64();
        let controller_cpu = if method == Method::Exec {
            own_cpu_secs(true) - children0
        } else {
            own_cpu_secs(false) - cpu0
        };
        let bridge = bridge_bytes().zip(bridge0).map(|(a, b)| a - b);
        let shims_cpu = [
            shim_cpu(&src.shim).await? - src0,
            shim_cpu(&dst.shim).await? - dst0,
        ];
        let bytes = match moved {
            Ok(b) => b,
            Err(e) if method == Method::Exec => {
                eprintln!("bench: no exec row: {e:#}");
                return Ok(None);
            }
            Err(e) => return Err(e.context(format!("{method:?}"))),
        };
        let ok = sh(&dst.shim, &digest_of(&to)).await? == digest;
        eprintln!(
            "bench: {mib} MiB {method:?}: {:.0} MB/s, controller {controller_cpu:.2} CPU s, \
             apiserver {:.2} CPU s{}",
            bytes as f64 / secs / 1e6,
            cost.cpu_secs,
            if ok { "" } else { ", CONTENT DIFFERS" }
        );
        Ok(Some(Row {
            method,
            bytes,
            secs,
            mb_per_s: bytes as f64 / secs / 1e6,
            controller_cpu_secs: controller_cpu,
            shims_cpu_secs: shims_cpu,
            bridge_bytes: bridge,
            apiserver: cost,
            ok,
        }))
    }

    /// The copy itself: the bytes moved.
    async fn copy(&self, method: Method, to: &str) -> Result<u64> {
        let (src, dst) = (self.src, self.dst);
        let id = format!("bench-{}", rand::random::<u32>());
        match method {
            Method::Direct | Method::Controller => {
                let how = if method == Method::Direct {
                    How::Direct
                } else {
                    How::Controller
                };
                let c =
                    transfer::copy(&src.shim, &format!("{ART}/"), &dst.shim, to, &id, how).await?;
                if method == Method::Direct && !c.direct {
                    bail!(
                        "the direct pull fell back to the controller: {:?}",
                        c.fallback
                    );
                }
                Ok(c.bytes)
            }
            Method::Exec | Method::Idle => exec_pipeline(self.args, &src.name, &dst.name, to)
                .await
                .map(|()| self.direct_bytes),
        }
    }
}

/// The noise floor: nothing moves for `secs` (as long as the direct pull took).
async fn idle_row(probe: &Probe, secs: f64) -> Row {
    let (cpu0, bridge0) = (own_cpu_secs(false), bridge_bytes());
    let ((), idle) = measured(probe, tokio::time::sleep(Duration::from_secs_f64(secs))).await;
    Row {
        method: Method::Idle,
        bytes: 0,
        secs,
        mb_per_s: 0.0,
        controller_cpu_secs: own_cpu_secs(false) - cpu0,
        shims_cpu_secs: [0.0; 2],
        bridge_bytes: bridge_bytes().zip(bridge0).map(|(a, b)| a - b),
        apiserver: idle,
        ok: true,
    }
}

/// The four inputs one after another, then at once into one pod (as `stepctl run --input` pulls
/// them), with the destination shim's CPU seconds for each way; `largest_alone` is the direct
/// pull's time.
async fn parallel_inputs(
    dst: &Pod,
    sources: &[Pod],
    digests: &[String],
    mib: u64,
    largest_alone: f64,
) -> Result<Parallel> {
    let dst0 = shim_cpu(&dst.shim).await?;
    let t = Instant::now();
    for (i, s) in sources.iter().enumerate() {
        pull_input(s, dst, "seq", i).await?;
    }
    let sequential_secs = t.elapsed().as_secs_f64();
    let sequential_dst_cpu = shim_cpu(&dst.shim).await? - dst0;
    let dst0 = shim_cpu(&dst.shim).await?;
    let t = Instant::now();
    let copies = try_join_all(sources.iter().enumerate().map(|(i, s)| async move {
        let c = pull_input(s, dst, "par", i).await?;
        anyhow::Ok((c, Instant::now()))
    }))
    .await?;
    let secs = t.elapsed().as_secs_f64();
    let parallel_dst_cpu = shim_cpu(&dst.shim).await? - dst0;
    let mut ok = copies.iter().all(|(c, _)| c.direct);
    for (i, d) in digests.iter().enumerate() {
        ok &= sh(&dst.shim, &digest_of(&format!("{IN}/par/in{i}"))).await? == *d;
    }
    eprintln!("bench: four inputs at once {secs:.1} s, the largest alone {largest_alone:.1} s");
    Ok(Parallel {
        inputs_mib: (0..4).map(|i| mib >> i).collect(),
        bytes: copies.iter().map(|(c, _)| c.bytes).sum(),
        secs,
        each_secs: copies
            .iter()
            .map(|(_, end)| end.duration_since(t).as_secs_f64())
            .collect(),
        largest_alone_secs: largest_alone,
        sequential_secs,
        dst_cpu_secs: [sequential_dst_cpu, parallel_dst_cpu],
        ok,
    })
}

/// Where and how the scenario ran, for the report.
fn context() -> serde_json::Value {
    serde_json::json!({
        "date": k8s_openapi::jiff::Timestamp::now().to_string(),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "small_files": SMALL_FILES,
        "small_file_bytes": SMALL_BYTES,
    })
}

/// Input `i` of a pass (`seq` or `par`) pulled directly from `src` into its own directory of `dst`.
pub(super) async fn pull_input(
    src: &Pod,
    dst: &Pod,
    pass: &str,
    i: usize,
) -> Result<transfer::Copied> {
    let to = format!("{IN}/{pass}/in{i}");
    let id = format!("bench-{pass}{i}-{}", rand::random::<u32>());
    Ok(transfer::copy(
        &src.shim,
        &format!("{ART}/"),
        &dst.shim,
        &to,
        &id,
        How::Direct,
    )
    .await?)
}

/// `kubectl exec SRC -- tar c | kubectl exec -i DST -- tar x`, as an exec-based runtime streams.
/// Exec streams do lose data now and then (CI saw `tar: short read`); like such a runtime, the
/// pipeline is tried again, up to three times in all, each attempt counted in its time.
async fn exec_pipeline(args: &ClusterArgs, src: &str, dst: &str, to: &str) -> Result<()> {
    let kubectl = {
        let mut k = format!("kubectl -n {}", args.namespace);
        if let Some(kc) = &args.kubeconfig {
            k.push_str(&format!(" --kubeconfig {}", kc.display()));
        }
        k
    };
    let mut status = None;
    for attempt in 1..=3 {
        let s = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -o pipefail; {kubectl} exec {src} -c step -- tar c -C {ART} . \
                 | {kubectl} exec -i {dst} -c step -- sh -c 'rm -rf {to}; mkdir -p {to} && tar x -C {to}'"
            ))
            .status()
            .await
            .context("kubectl exec pipeline")?;
        if s.success() {
            return Ok(());
        }
        eprintln!("bench: the kubectl exec pipeline failed ({s}), attempt {attempt} of 3");
        status = Some(s);
    }
    bail!(
        "the kubectl exec pipeline failed three times, last: {}",
        status.map_or_else(String::new, |s| s.to_string())
    )
}
