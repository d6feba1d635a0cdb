//! `stepshim-bench cluster --only images`: a step's output directory handed to a later step as its
//! image, two ways in one run, alternating, on a new tree each round (`images_ways.rs`): pulled by
//! the kubelet through the node-local forwarder from the producing pod's shim, against pushed by
//! crane from the producing pod to a registry on the node and pulled from there. Runs in a
//! namespace of its own, deleted at the end; applies the forwarder's DaemonSet there unless a
//! forwarder already answers on the node's loopback (then that one serves the pulls). Writes
//! `cluster.md` and `cluster.json` into `--results` (default results/images).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

use super::images_registry::{self, Registry, http_status};
use super::images_report::{self, Report, Summary};
use super::images_ways::{BUILD, Ctx, Handoff, Producer, Way, handoff};
use crate::args::ClusterArgs;
use controller::manifests::forwarder::{self, Forwarder};
use controller::podspec::{Delivery, StepSpec};
use controller::runtime::{Runtime, TargetConfig, kube_client};
use controller::token::Key;

/// Runs the scenario; 1 when a consumer ran in the wrong image.
pub async fn run(args: &ClusterArgs) -> Result<i32> {
    if args.image_files == 0 || args.image_mib == 0 || args.image_rounds == 0 {
        bail!("--image-mib, --image-files and --image-rounds must be at least 1");
    }
    let crane = images_registry::crane(args)?;
    let registry_bin = images_registry::registry_bin(args)?;
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let run_id = format!("{:06x}", rand::random::<u32>() >> 8);
    let ns = format!("{}-images-{run_id}", args.namespace);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(ns.clone());
    namespaces.create(&PostParams::default(), &n).await?;
    let result = async {
        crate::access::wait_default_service_account(&client, &ns).await?;
        let forwarder = ensure_forwarder(&client, &ns, args).await?;
        eprintln!("bench: forwarder {forwarder}");
        let registry = Registry::start(&registry_bin, args).await?;
        let key = Key::from_bytes(rand::random::<[u8; 32]>().to_vec())
            .map_err(|_| anyhow::anyhow!("key"))?;
        let tc = TargetConfig {
            kubeconfig: args.kubeconfig.clone(),
            namespace: ns.clone(),
            worker: "stepctl-bench-images".into(),
        };
        let rt = Runtime::connect(&tc, key).await?;
        let producer = producer(&rt, args, crane).await?;
        let load_before = loadavg();
        let cx = Ctx {
            rt: &rt,
            args,
            producer: &producer,
            registry: &registry,
        };
        let handoffs = rounds(&cx).await?;
        Ok::<_, anyhow::Error>(Report {
            context: context(&rt, args, load_before).await,
            mib: args.image_mib,
            files: args.image_files,
            forwarder,
            summary: Summary::of(&handoffs),
            handoffs,
        })
    }
    .await;
    if let Err(e) = namespaces.delete(&ns, &DeleteParams::default()).await {
        eprintln!("bench: could not delete namespace {ns}: {e}");
    }
    let report = result?;
    let dir = args
        .results
        .clone()
        .unwrap_or_else(|| "results/images".into());
    images_report::write(&dir, &report)?;
    print!("{}", images_report::markdown(&report));
    eprintln!("bench: results in {}", dir.display());
    let wrong = report.handoffs.iter().filter(|h| !h.ok).count();
    if wrong > 0 {
        eprintln!("bench: FAIL: {wrong} consumers did not run in the image handed to them");
        return Ok(1);
    }
    Ok(0)
}

/// Every round, both ways, alternating which goes first.
async fn rounds(cx: &Ctx<'_>) -> Result<Vec<Handoff>> {
    let mut handoffs = Vec::new();
    for round in 0..cx.args.image_rounds {
        for way in Way::order(round) {
            let h = handoff(cx, round, way).await?;
            eprintln!(
                "bench: round {round} {way:?}: {:.2} s (prepare {:.2} s, pull {:.2} s){}",
                h.handoff_secs,
                h.prepare_secs,
                h.pull_secs,
                if h.ok { "" } else { ", WRONG IMAGE" }
            );
            handoffs.push(h);
        }
    }
    Ok(handoffs)
}

/// The forwarder that serves the pulls: one already answering on the node's loopback (named by
/// its DaemonSet, if one is found), else one applied in `ns` and waited for (up to 120 s).
async fn ensure_forwarder(client: &kube::Client, ns: &str, args: &ClusterArgs) -> Result<String> {
    let addr = format!("127.0.0.1:{}", args.forwarder_port);
    let daemon_sets: Api<DaemonSet> = Api::all(client.clone());
    let existing: Vec<String> = daemon_sets
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|d| {
            d.spec.as_ref().is_some_and(|s| {
                s.template.spec.as_ref().is_some_and(|p| {
                    p.containers
                        .iter()
                        .any(|c| c.command.iter().flatten().any(|a| a == forwarder::BINARY))
                })
            })
        })
        .map(|d| {
            format!(
                "{}/{}",
                d.metadata.namespace.as_deref().unwrap_or_default(),
                d.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    if http_status(&addr, "/healthz").await.ok() == Some(200) {
        return Ok(format!(
            "reused the one answering on {addr} ({})",
            if existing.is_empty() {
                "no DaemonSet of it found".to_owned()
            } else {
                existing.join(", ")
            }
        ));
    }
    if !existing.is_empty() {
        bail!(
            "forwarder DaemonSets exist ({}) but nothing answers on {addr}: wait for them to go",
            existing.join(", ")
        );
    }
    let ds = forwarder::daemon_set(&Forwarder {
        name: "stepshim-forward".into(),
        namespace: ns.to_owned(),
        image: args.shim_image.clone(),
        pod_cidrs: vec![args.pod_cidr.clone()],
    });
    Api::<DaemonSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &ds)
        .await
        .context("creating the forwarder's DaemonSet")?;
    for _ in 0..1200 {
        if http_status(&addr, "/healthz").await.ok() == Some(200) {
            return Ok(format!("applied in {ns}, answering on {addr}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the forwarder applied in {ns} does not answer on {addr} after 120 s")
}

/// The producing pod, ready, with crane and the template of every tree uploaded.
async fn producer(rt: &Runtime, args: &ClusterArgs, crane: Vec<u8>) -> Result<Producer> {
    let name = "make".to_owned();
    let mut spec = StepSpec::new(
        &name,
        &args.step_image,
        Delivery::InitContainer {
            image: args.shim_image.clone(),
        },
    );
    spec.build = Some("bench-images".into());
    spec.cpu_request = args.cpu_request().map(str::to_owned);
    spec.env.extend(args.pod_env.iter().cloned());
    let pod = rt.create_pod(&spec).await?;
    let ip = rt
        .wait_ready(&name, Duration::from_secs(300), |_| {})
        .await?;
    let shim = rt.shim_at(&name, &ip)?;
    let uid = pod.metadata.uid.context("the producing pod has no UID")?;
    let pid = super::podcpu::find_shim(&uid).context(
        "the producing pod's shim is not a process of this machine (run the bench on the node)",
    )?;
    let mut tools = tar::Builder::new(Vec::new());
    append(&mut tools, "tools/crane", 0o755, &crane)?;
    shim.files_in_bytes(BUILD, Bytes::from(tools.into_inner()?))
        .await
        .context("uploading crane")?;
    let t = std::time::Instant::now();
    shim.files_in_bytes(BUILD, Bytes::from(template(args)?))
        .await
        .context("uploading the template")?;
    eprintln!(
        "bench: producer {name} ready, {} MiB in {} files uploaded in {:.1} s",
        args.image_mib,
        args.image_files,
        t.elapsed().as_secs_f64()
    );
    Ok(Producer { name, shim, pid })
}

/// The tar of `template/`: `--image-files` files of noise, `--image-mib` MiB in all, 100 to a
/// directory.
fn template(args: &ClusterArgs) -> Result<Vec<u8>> {
    let each = ((args.image_mib << 20) / args.image_files) as usize;
    let mut b = tar::Builder::new(Vec::with_capacity((args.image_mib as usize + 8) << 20));
    for i in 0..args.image_files {
        let data = test_support::noise(each, i + 1);
        append(&mut b, &format!("template/d{}/f{i}", i / 100), 0o644, &data)?;
    }
    Ok(b.into_inner()?)
}

fn append(b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_mtime(1);
    h.set_uid(0);
    h.set_gid(0);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, path, data)?;
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Where and how the run happened.
async fn context(rt: &Runtime, args: &ClusterArgs, load_before: String) -> serde_json::Value {
    let version = rt
        .client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_default();
    serde_json::json!({
        "date": super::controller_now(),
        "kubernetes": version,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "rounds": args.image_rounds,
        "pod_cidr": args.pod_cidr,
        "cpu_request": args.cpu_request(),
        "load_before": load_before,
        "load_after": loadavg(),
    })
}
