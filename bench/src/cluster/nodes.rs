//! `stepshim-bench cluster --only nodes`: what crossing nodes costs a pull. One source pod on a node
//! and two destinations, one on the same node and one on another; the artifact of the artifact
//! scenario (one large file and small ones, `--artifacts-mib`, 256 MiB by default) pulled pod to
//! pod into each, `--node-rounds` times (5), alternating which goes first; MB/s of each with the
//! median, the range and n, and the cross-node median as a share of the same-node one. Every copy
//! is checked by a digest of its files. Needs two Ready nodes (`tests/cluster/up --nodes 2` or
//! more); results in `nodes.md` and `nodes.json` of `--results` (default results/nodes).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use controller::podspec::{Delivery, StepSpec};
use controller::runtime::{Runtime, kube_client};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use super::artifacts::{IN, Pod, make_artifacts, pull_input, worker_in_namespace};
use super::artifacts_probe::{digest_of, sh};
use crate::args::ClusterArgs;

/// One destination's pulls.
#[derive(serde::Serialize)]
struct Path {
    path: &'static str,
    node: String,
    mbps: Vec<f64>,
}

/// Runs the scenario; 1 when a copy differed from its source.
pub async fn run(args: &ClusterArgs) -> Result<i32> {
    let mib = if args.artifacts_mib == 0 {
        256
    } else {
        args.artifacts_mib
    };
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let nodes = ready_nodes(&Api::all(client.clone())).await?;
    if nodes.len() < 2 {
        bail!(
            "the nodes scenario needs two Ready nodes, the cluster has {}: {nodes:?}",
            nodes.len()
        );
    }
    let rt = worker_in_namespace(args, &client, "stepshim-bench-nodes").await?;
    let run_id = format!("{:06x}", rand::random::<u32>() >> 8);
    let placed = [
        ("src", &nodes[0]),
        ("same", &nodes[0]),
        ("cross", &nodes[1]),
    ];
    let names: Vec<String> = placed
        .iter()
        .map(|(r, _)| format!("nodes-{run_id}-{r}"))
        .collect();
    for (name, (_, node)) in names.iter().zip(&placed) {
        let mut spec = StepSpec::new(
            name,
            &args.step_image,
            Delivery::InitContainer {
                image: args.shim_image.clone(),
            },
        );
        spec.node_selector
            .insert("kubernetes.io/hostname".into(), (*node).clone());
        spec.cpu_request = args.cpu_request().map(str::to_owned);
        rt.create(&spec)
            .await
            .with_context(|| format!("creating {name}"))?;
    }
    let result = measure(&rt, args, &names, mib, &nodes).await;
    for n in &names {
        let _ = rt.delete(n).await;
    }
    let (paths, bad) = result?;
    write(args, mib, &paths)?;
    if bad > 0 {
        eprintln!("bench: FAIL: {bad} copies differ from their source");
        return Ok(1);
    }
    Ok(0)
}

/// The pulls, round by round; the paths and the number of copies that differed.
async fn measure(
    rt: &Runtime,
    args: &ClusterArgs,
    names: &[String],
    mib: u64,
    nodes: &[String],
) -> Result<(Vec<Path>, usize)> {
    let ips = super::wait_ready_all(rt, names).await?;
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
    let digest = make_artifacts(&pods[..1], mib).await?.remove(0);
    let mut paths = [
        Path {
            path: "same node",
            node: nodes[0].clone(),
            mbps: Vec::new(),
        },
        Path {
            path: "cross node",
            node: nodes[1].clone(),
            mbps: Vec::new(),
        },
    ];
    let mut bad = 0;
    for round in 0..args.node_rounds.max(1) {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let dst = &pods[1 + k];
            let pass = format!("r{round}");
            let started = Instant::now();
            let copied = pull_input(&pods[0], dst, &pass, 0).await?;
            let secs = started.elapsed().as_secs_f64();
            let got = sh(&dst.shim, &digest_of(&format!("{IN}/{pass}/in0"))).await?;
            if got.trim() != digest {
                bad += 1;
                eprintln!(
                    "bench: {} copy of round {round} differs from its source",
                    paths[k].path
                );
            }
            sh(&dst.shim, &format!("rm -rf {IN}/{pass}")).await?;
            paths[k].mbps.push(copied.bytes as f64 / 1e6 / secs);
            eprintln!(
                "bench: {} round {round}: {:.0} MB/s",
                paths[k].path,
                copied.bytes as f64 / 1e6 / secs
            );
        }
    }
    Ok((paths.into_iter().collect(), bad))
}

/// The Ready nodes' names, in name order.
async fn ready_nodes(api: &Api<Node>) -> Result<Vec<String>> {
    let mut names: Vec<String> = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// Median, minimum and maximum.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (median, s[0], s[s.len() - 1])
}

/// Writes nodes.md and nodes.json and prints the table.
fn write(args: &ClusterArgs, mib: u64, paths: &[Path]) -> Result<()> {
    let dir = args
        .results
        .clone()
        .unwrap_or_else(|| "results/nodes".into());
    std::fs::create_dir_all(&dir)?;
    let (same, _, _) = spread(&paths[0].mbps);
    let (cross, _, _) = spread(&paths[1].mbps);
    let mut md = format!(
        "| pull of {mib} MiB (one file and small ones) | MB/s, median (range) | n |\n|---|---|---|\n"
    );
    for p in paths {
        let (m, lo, hi) = spread(&p.mbps);
        md += &format!(
            "| {} ({}) | {m:.0} ({lo:.0}-{hi:.0}) | {} |\n",
            p.path,
            p.node,
            p.mbps.len()
        );
    }
    md += &format!("\ncross node / same node: {:.2}\n", cross / same);
    let json = serde_json::json!({
        "date": k8s_openapi::jiff::Timestamp::now().to_string(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "mib": mib,
        "paths": paths,
        "cross_over_same": cross / same,
    });
    std::fs::write(dir.join("nodes.md"), &md)?;
    std::fs::write(dir.join("nodes.json"), serde_json::to_string_pretty(&json)?)?;
    print!("{md}");
    Ok(())
}
