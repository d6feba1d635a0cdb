//! `stepshim-bench cluster`: the shim (straight to the pod IP, and through the apiserver's
//! `pods/proxy`) against apiserver exec, side by side on a real cluster. Creates step pods, then
//! runs every scenario on the three paths into the same pods, rotating which path goes first,
//! while watching what each costs kube-apiserver; writes a markdown table, JSON and an SVG chart.
//! Fails if either shim path lost a byte or got an exit status wrong. `--soak DURATION` runs the
//! soak (`soak/`) instead; `--only images` the images scenario (`images.rs`).

mod apiserver;
mod artifacts;
mod artifacts_probe;
mod artifacts_report;
mod chart;
mod faults;
mod images;
mod images_consumer;
mod images_registry;
mod images_report;
mod images_ways;
mod nodes;
mod paths;
mod podcpu;
mod podspawn;
mod report;
mod results;
mod scenarios;
mod sequence;
mod soak;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::future::try_join_all;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::PostParams;

use crate::args::ClusterArgs;
use controller::podspec::{Delivery, StepSpec};
use controller::runtime::{Runtime, TargetConfig, kube_client};
use controller::token::Key;
use paths::Pod2;
use report::Results;
use scenarios::Env;

/// The admin kubeconfig, kept for building a second client through the cutting proxy.
static ADMIN_CONFIG: OnceLock<kube::Config> = OnceLock::new();

async fn setup(args: &ClusterArgs) -> Result<(Runtime, Env)> {
    let config = crate::access::admin_config(args.kubeconfig.as_deref()).await?;
    let _ = ADMIN_CONFIG.set(config);
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let ns = args.namespace.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(&ns).await?.is_none() {
        let mut n = Namespace::default();
        n.metadata.name = Some(ns.clone());
        namespaces.create(&PostParams::default(), &n).await?;
    }
    crate::access::wait_default_service_account(&client, &ns).await?;
    let key =
        Key::from_bytes(rand::random::<[u8; 32]>().to_vec()).map_err(|_| anyhow::anyhow!("key"))?;
    let tc = TargetConfig {
        kubeconfig: args.kubeconfig.clone(),
        namespace: ns.clone(),
        worker: "stepctl-bench".into(),
    };
    let rt = Runtime::connect(&tc, key).await?;
    // Pods a killed earlier run left behind go first; fresh names avoid waiting for them.
    let leftovers = controller::gc::retire(&rt).await?;
    if !leftovers.is_empty() {
        eprintln!("bench: deleted {} pods of an earlier run", leftovers.len());
    }
    let run_id = format!("{:08x}", rand::random::<u32>());
    let names: Vec<String> = (0..args.pods)
        .map(|i| format!("bench-{run_id}-{i}"))
        .collect();
    create_pods(&rt, args, &names, "bench").await?;
    let ips = wait_ready_all(&rt, &names).await?;
    let pods = names
        .iter()
        .zip(&ips)
        .map(|(n, ip)| {
            Ok(Pod2 {
                name: n.clone(),
                shim: rt.shim_at(n, ip)?,
                proxy: rt.shim_proxy(n)?,
                token: rt.token(n),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let probe = apiserver::Probe::new(apiserver::find_pid(args.apiserver_pid)?, client.clone());
    let env = Env {
        pods_api: Api::<Pod>::namespaced(client, &ns),
        pods,
        probe,
    };
    Ok((rt, env))
}

/// Creates one step pod per name from the bench's images, labelled with `build` and carrying the
/// CPU request asked for; readiness is the caller's to wait for.
pub(crate) async fn create_pods(
    rt: &Runtime,
    args: &ClusterArgs,
    names: &[String],
    build: &str,
) -> Result<()> {
    for name in names {
        let mut spec = StepSpec::new(
            name,
            &args.step_image,
            Delivery::InitContainer {
                image: args.shim_image.clone(),
            },
        );
        spec.build = Some(build.into());
        spec.cpu_request = args.cpu_request().map(str::to_owned);
        spec.env.extend(args.pod_env.iter().cloned());
        rt.create(&spec)
            .await
            .with_context(|| format!("creating {name}"))?;
    }
    Ok(())
}

/// Waits (up to 300 s each) until every named pod is ready; their IPs, in order.
pub(crate) async fn wait_ready_all(rt: &Runtime, names: &[String]) -> Result<Vec<String>> {
    Ok(try_join_all(
        names
            .iter()
            .map(|n| rt.wait_ready(n, Duration::from_secs(300), |_| {})),
    )
    .await?)
}

/// Runs the cluster benchmark.
pub async fn run(args: &ClusterArgs) -> Result<i32> {
    if let Some(duration) = args.soak {
        return soak::run(args, duration).await;
    }
    if args.artifacts_only {
        return artifacts::run(args).await;
    }
    if let Some(bad) = args
        .only
        .iter()
        .find(|o| !crate::args::CLUSTER_SCENARIOS.contains(&o.as_str()))
    {
        bail!(
            "unknown scenario '{bad}' in --only (known: {})",
            crate::args::CLUSTER_SCENARIOS.join(", ")
        );
    }
    if args.images_only() {
        return images::run(args).await;
    }
    if args.only.iter().any(|o| o == "nodes") {
        return nodes::run(args).await;
    }
    let started = Instant::now();
    let (rt, mut env) = setup(args).await?;
    eprintln!(
        "bench: {} pods ready in {:.1} s",
        env.pods.len(),
        started.elapsed().as_secs_f64()
    );
    let result = sequence::scenarios_all(&rt, &mut env, args).await;
    for p in &env.pods {
        let _ = rt.delete(&p.name).await;
    }
    let results = result?;
    let dir = args
        .results
        .clone()
        .unwrap_or_else(|| "results/cluster".into());
    report::write(&dir, &results)?;
    print!("{}", report::markdown(&results));
    eprintln!("bench: results in {}", dir.display());
    let shim_bad = shim_failures(&results);
    if shim_bad > 0 {
        eprintln!(
            "bench: FAIL: {shim_bad} runs on a shim path (direct or proxy) lost bytes or got a wrong exit status"
        );
        return Ok(1);
    }
    if args.artifacts_mib > 0 && artifacts::run(args).await? != 0 {
        return Ok(1);
    }
    if args.runs("images") {
        return images::run(args).await;
    }
    Ok(0)
}

/// Runs on the two shim paths that lost, repeated or changed a byte or got an exit status wrong,
/// and cut streams that were never cut.
fn shim_failures(r: &Results) -> usize {
    let latency: usize = r
        .latency
        .iter()
        .filter(|l| l.path.is_shim())
        .map(|l| l.errors)
        .sum();
    let concurrency: usize = r
        .concurrency
        .iter()
        .filter(|c| c.path.is_shim())
        .map(|c| c.errors)
        .sum();
    let throughput = r
        .throughput
        .iter()
        .filter(|t| t.path.is_shim() && !t.ok)
        .count();
    let faults = r.faults.as_ref().map_or(0, |f| {
        let restart: usize = f
            .restart_whole
            .iter()
            .filter(|(p, _)| p.is_shim())
            .map(|(_, whole)| f.restart_processes - whole)
            .sum();
        restart
            + f.cuts
                .iter()
                .filter(|c| c.path.is_shim() && c.failed())
                .count()
    });
    latency + concurrency + throughput + faults
}
fn controller_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
