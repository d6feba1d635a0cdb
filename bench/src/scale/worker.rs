//! The Rust driver of the scale benchmark (`stepshim-bench scale-worker`, started by the benchmark as
//! its child): one `controller::runtime::Runtime` (one reflector on the worker's pods) answering the
//! same line protocol on stdin and stdout as the Go driver `go/cmd/scale-worker`:
//! `tick` runs `controller::gc::collect` on the desired set `prefix0 .. prefix(count-1)` with no
//! grace, `gone NAME MS` reports when the pod left the cache, `quit` stops. Replies are JSON lines
//! (`ready`, `tick`, `watching`, `gone`, `error`), the first one `ready` once the cache is filled.
//! `--strip-managed-fields` is a memory-only variant for the side-by-side in `results/scale`.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::args::ScaleWorkerArgs;
use controller::podspec::{WORKER_LABEL, label_value};
use controller::runtime::{Runtime, TargetConfig};
use controller::token::Key;

fn emit(v: Value) {
    // stdout is line-buffered: each reply reaches the benchmark at its newline.
    println!("{v}");
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs the driver until `quit` or the end of stdin.
pub async fn run(a: &ScaleWorkerArgs) -> Result<i32> {
    if a.strip_managed_fields {
        return stripped(a).await;
    }
    let key = Key::from_file(&a.key).context("worker key")?;
    let target = TargetConfig {
        kubeconfig: Some(a.kubeconfig.clone()),
        namespace: a.namespace.clone(),
        worker: a.worker.clone(),
    };
    let started = Instant::now();
    let rt = Runtime::connect(&target, key).await.context("connecting")?;
    emit(json!({
        "event": "ready",
        "pods": rt.pods().len(),
        "sync_ms": started.elapsed().as_millis() as u64,
    }));
    let desired: HashSet<String> = (0..a.count).map(|i| format!("{}{i}", a.prefix)).collect();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["quit"] => break,
            ["tick"] => {
                let t = Instant::now();
                match controller::gc::collect(&rt, &desired, Duration::ZERO).await {
                    Ok(collected) => emit(json!({
                        "event": "tick",
                        "pods": rt.pods().len(),
                        "collected": collected,
                        "ms": t.elapsed().as_millis() as u64,
                    })),
                    Err(e) => emit(json!({"event": "error", "error": e.to_string()})),
                }
            }
            ["gone", name, ms] => {
                let Ok(ms) = ms.parse::<u64>() else {
                    emit(json!({"event": "error", "error": format!("gone: bad timeout {ms}")}));
                    continue;
                };
                emit(json!({"event": "watching", "name": name}));
                let ok = rt.wait_gone(name, Duration::from_millis(ms)).await;
                let noticed = unix_ns();
                emit(json!({"event": "gone", "name": name, "ok": ok, "noticed_unix_ns": noticed}));
            }
            _ => emit(json!({"event": "error", "error": format!("unknown command {line:?}")})),
        }
    }
    Ok(0)
}

/// The side-by-side variant behind the README's memory line: the same label-filtered watcher with
/// backoff and reflector as `controller::watch`, but every pod's `metadata.managedFields` (a
/// `serde_json::Value` tree per pod) dropped before the store. Reports `ready` with the cache filled,
/// then waits for `quit`; the benchmark reads its RSS meanwhile.
async fn stripped(a: &ScaleWorkerArgs) -> Result<i32> {
    let client = controller::runtime::kube_client(Some(&a.kubeconfig)).await?;
    let api: Api<Pod> = Api::namespaced(client, &a.namespace);
    let selector = format!("{WORKER_LABEL}={}", label_value(&a.worker));
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default().labels(&selector))
            .default_backoff()
            .modify(|p: &mut Pod| p.metadata.managed_fields = None),
    );
    let started = Instant::now();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    tokio::time::timeout(Duration::from_secs(120), reader.wait_until_ready())
        .await
        .context("first list not in within 120 s")??;
    emit(json!({
        "event": "ready",
        "pods": reader.state().len(),
        "sync_ms": started.elapsed().as_millis() as u64,
    }));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim() == "quit" {
            break;
        }
        emit(json!({"event": "error", "error": "this variant answers only quit"}));
    }
    task.abort();
    Ok(0)
}
