//! `stepshim-bench scale`: the control plane at thousands of step pods. Creates a namespace with
//! that many pending step pods of one worker (see `setup` for why they stay Pending untouched), then
//! runs each driver in turn as a child process, the Rust runtime (`controller::runtime::Runtime`,
//! one reflector per worker, `controller::gc`) and the Go kit's `k8s.Worker` (one informer), and
//! measures its first sync, the apiserver requests it makes per GC tick, its RSS, how long after a
//! pod's deletion it notices, and what it does across an apiserver restart. Deletes the namespace at
//! the end, also on failure. Fails only on a pod LIST per tick or a deletion never noticed.
//!
//! # Layout
//! - [`setup`]: namespace, the worker's service account and kubeconfig, FlowSchemas, the pods.
//! - [`requests`]: the worker's own requests, from the apiserver's `/metrics`.
//! - [`proxy`]: the worker's own requests as it sent them, through a counting pass-through.
//! - [`child`]: a driver as a child process and its line protocol; its memory.
//! - [`worker`]: the Rust driver (`stepshim-bench scale-worker`).
//! - [`measure`]: one driver measured: start, ticks, deletions, restart.
//! - [`report`]: markdown, JSON, the verdict.

mod child;
mod measure;
mod proxy;
mod report;
mod requests;
mod setup;
pub mod worker;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::args::ScaleArgs;
use child::{Kind, Spec};
use controller::runtime::kube_client;
use report::Results;

/// Builds the Go driver into `dir` with the Go toolchain on PATH or in /usr/local/go.
async fn build_go(dir: &Path) -> Result<PathBuf> {
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("../go");
    let out = dir.join("scale-worker");
    let go = if Path::new("/usr/local/go/bin/go").exists() {
        "/usr/local/go/bin/go"
    } else {
        "go"
    };
    let status = tokio::process::Command::new(go)
        .current_dir(&module)
        .args(["build", "-o"])
        .arg(&out)
        .arg("./cmd/scale-worker")
        .status()
        .await
        .context("running go build")?;
    if !status.success() {
        bail!("go build of the Go driver failed: {status}");
    }
    Ok(out)
}

/// Runs the scale benchmark.
pub async fn run(args: &ScaleArgs) -> Result<i32> {
    let kinds = args
        .drivers
        .iter()
        .map(|d| Kind::parse(d))
        .collect::<Result<Vec<_>>>()?;
    let victims_each = args.deletions.max(1);
    if args.pods < victims_each * kinds.len() {
        bail!("--pods must be at least --deletions per driver");
    }
    let work = std::env::temp_dir().join(format!("stepshim-scale-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let go_bin = match (&args.go_worker, kinds.contains(&Kind::Go)) {
        (Some(p), _) => p.clone(),
        (None, true) => build_go(&work).await?,
        (None, false) => PathBuf::new(),
    };
    let admin = crate::access::admin_config(args.kubeconfig.as_deref()).await?;
    let proxy = proxy::Proxy::start(&admin).await?;
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    setup::check_free(&client, &args.namespace).await?;
    let result = scene_and_measure(client.clone(), proxy, args, &kinds, &go_bin, &work).await;
    let torn = setup::teardown(&client, &args.namespace).await;
    let _ = std::fs::remove_dir_all(&work);
    let results = result?;
    torn?;
    let dir = args
        .results
        .clone()
        .unwrap_or_else(|| "results/scale".into());
    report::write(&dir, &results)?;
    print!("{}", report::markdown(&results));
    eprintln!("scale: results in {}", dir.display());
    let failures = report::failures(&results);
    for f in &failures {
        eprintln!("scale: FAIL: {f}");
    }
    Ok(i32::from(!failures.is_empty()))
}

async fn scene_and_measure(
    client: kube::Client,
    proxy: proxy::Proxy,
    args: &ScaleArgs,
    kinds: &[Kind],
    go_bin: &Path,
    work: &Path,
) -> Result<Results> {
    let scene = setup::scene(client, proxy, &args.namespace, work).await?;
    let names: Vec<String> = (0..args.pods)
        .map(|i| format!("{}{i}", setup::PREFIX))
        .collect();
    let create_secs = scene.create(names, args.parallel).await?;
    eprintln!(
        "scale: {} pods created in {create_secs:.1} s ({:.0}/s)",
        args.pods,
        args.pods as f64 / create_secs.max(0.001)
    );
    let spec = Spec {
        kubeconfig: scene.kubeconfig.clone(),
        namespace: args.namespace.clone(),
        worker: setup::WORKER.into(),
        key: scene.key_file.clone(),
        prefix: setup::PREFIX.into(),
        count: args.pods,
    };
    let mut drivers = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        let orphans: Vec<String> = (0..args.orphans)
            .map(|i| format!("orphan-{}-{i}", format!("{kind:?}").to_lowercase()))
            .collect();
        scene.create(orphans, args.parallel).await?;
        let victims: Vec<String> = (0..args.deletions.max(1))
            .map(|i| format!("{}{}", setup::PREFIX, k * args.deletions.max(1) + i))
            .collect();
        drivers.push(measure::driver(*kind, &spec, go_bin, &scene, args, &victims).await?);
    }
    let version = scene
        .client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_default();
    let context = json!({
        "date": k8s_openapi::jiff::Timestamp::now().to_string(),
        "kubernetes": version,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "pods": args.pods,
        "orphans": args.orphans,
        "tick_ms": args.tick_ms,
    });
    Ok(Results {
        context,
        create_secs,
        drivers,
    })
}
