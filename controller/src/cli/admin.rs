//! `stepctl ps`, `gc`, `retire`, `check` and `manifests`: the worker's bookkeeping.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use controller::{gc, image_source, manifests};
use serde_json::json;

use super::Target;
use super::args::{GcArgs, ManifestArgs, Output, PsArgs, TargetArgs};

fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Lists the worker's pods, or one pod's processes.
pub async fn ps(target: &Target, args: PsArgs, out: Output) -> Result<i32> {
    if args.pod.is_some() || matches!(target, Target::Local(_)) {
        let shim = target.shim(args.pod.as_deref()).await?;
        let procs = shim.list().await?;
        // Shims from before grants and pulls answer 404: shown as none.
        let grants = shim.grants().await.unwrap_or_default();
        let pulls = shim.pulls().await.unwrap_or_default();
        if out == Output::Json {
            print_json(&json!({"processes": procs, "grants": grants, "pulls": pulls}));
        } else {
            print_artifacts(&grants, &pulls);
            println!(
                "{:<24} {:>8} {:<8} {:>6} {:>12}",
                "ID", "PID", "STATE", "STATUS", "OUTPUT"
            );
            for p in procs {
                let status = p.exit.map_or("-".to_owned(), |e| e.status.to_string());
                println!(
                    "{:<24} {:>8} {:<8} {:>6} {:>12}",
                    p.id,
                    p.pid,
                    format!("{:?}", p.state).to_lowercase(),
                    status,
                    p.output_end
                );
            }
        }
        return Ok(0);
    }
    let Target::Cluster(rt) = target else {
        bail!("no cluster target")
    };
    let mut rows: Vec<_> = rt
        .pods()
        .iter()
        .map(|p| {
            let st = p.status.clone().unwrap_or_default();
            json!({
                "name": p.metadata.name,
                "phase": st.phase,
                "ip": st.pod_ip,
                "build": p.metadata.annotations.as_ref().and_then(|a| a.get(controller::podspec::BUILD_LABEL)),
                "progress": controller::runtime::progress(Some(p)).to_string(),
            })
        })
        .collect();
    rows.sort_by_key(|r| r["name"].as_str().unwrap_or_default().to_owned());
    if out == Output::Json {
        print_json(&json!(rows));
    } else {
        println!("{:<32} {:<10} {:<16} PROGRESS", "POD", "PHASE", "IP");
        for r in rows {
            let s = |k: &str| r[k].as_str().unwrap_or("-").to_owned();
            println!(
                "{:<32} {:<10} {:<16} {}",
                s("name"),
                s("phase"),
                s("ip"),
                s("progress")
            );
        }
    }
    Ok(0)
}

/// Grants and pulls of one shim, when it has any.
fn print_artifacts(
    grants: &[protocol::artifacts::Grant],
    pulls: &[protocol::artifacts::PullStatus],
) {
    for g in grants {
        println!(
            "grant {:<8} {:<40} expires in {:>6} s, used {}{}",
            g.id,
            g.path,
            g.expires_in_seconds,
            g.used,
            g.uses_left
                .map(|n| format!(", {n} left"))
                .unwrap_or_default()
        );
    }
    for p in pulls {
        println!(
            "pull  {:<24} {:<8} {}{} -> {} {}/{} bytes {} B/s{}",
            p.id,
            format!("{:?}", p.state).to_lowercase(),
            p.source,
            p.path,
            p.target,
            p.bytes,
            p.total.unwrap_or(0),
            p.bytes_per_second,
            p.error
                .as_deref()
                .map(|e| format!(" error: {e}"))
                .unwrap_or_default()
        );
    }
    if !grants.is_empty() || !pulls.is_empty() {
        println!();
    }
}

fn cluster(target: &Target) -> Result<&controller::runtime::Runtime> {
    match target {
        Target::Cluster(rt) => Ok(rt),
        Target::Local(_) => bail!("this command needs a cluster target, not --local"),
    }
}

/// Deletes pods not kept.
pub async fn gc(target: &Target, args: GcArgs, out: Output) -> Result<i32> {
    let rt = cluster(target)?;
    let keep: HashSet<String> = args.keep.into_iter().collect();
    let grace = Duration::from_secs(args.grace);
    let deleted = gc::collect(rt, &keep, grace).await?;
    // Image-pull Secrets whose pod is gone (their controller died before the pod owned them).
    let secrets = match image_source::collect_secrets(rt, grace).await {
        Ok(s) => s,
        // Credentials from before --image-from, without rights on secrets: nothing to collect.
        Err(image_source::SourceError::Secret {
            source: kube::Error::Api(e),
            ..
        }) if e.code == 403 => {
            eprintln!("stepctl: image-pull secrets not collected: {}", e.message);
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    // Hermetic pods' NetworkPolicies whose pod is gone (a Role without networkpolicies: none).
    let policies = gc::collect_policies(rt, grace).await?;
    if out == Output::Json {
        print_json(&json!({ "deleted": deleted, "secrets": secrets, "networkPolicies": policies }));
        return Ok(0);
    }
    report_deleted(&deleted, out);
    for s in &secrets {
        println!("deleted secret {s}");
    }
    for p in &policies {
        println!("deleted network policy {p}");
    }
    Ok(0)
}

/// Deletes every pod of the worker.
pub async fn retire(target: &Target, out: Output) -> Result<i32> {
    let deleted = gc::retire(cluster(target)?).await?;
    report_deleted(&deleted, out);
    Ok(0)
}

fn report_deleted(deleted: &[String], out: Output) {
    if out == Output::Json {
        print_json(&json!({ "deleted": deleted }));
    } else {
        for d in deleted {
            println!("deleted {d}");
        }
        println!("{} pod(s) deleted", deleted.len());
    }
}

/// Checks apiserver and credentials; exit 1 when a needed verb is missing.
pub async fn check(target: &Target, out: Output) -> Result<i32> {
    let health = gc::check(cluster(target)?).await?;
    if out == Output::Json {
        print_json(&json!(health));
    } else {
        println!(
            "apiserver {} reachable; namespace {}",
            health.server_version, health.namespace
        );
        for a in &health.needed {
            println!(
                "  {:<8} {:<18} {}",
                a.verb,
                a.resource,
                if a.allowed { "allowed" } else { "MISSING" }
            );
        }
        let missing: Vec<_> = health
            .proxy
            .iter()
            .filter(|a| !a.allowed)
            .map(|a| a.verb.as_str())
            .collect();
        if missing.is_empty() {
            println!("  transports: direct (needs a route to pod IPs), proxy (pods/proxy allowed)");
        } else {
            println!(
                "  transports: direct only (needs a route to pod IPs); proxy needs pods/proxy {}",
                missing.join(", ")
            );
        }
        let missing: Vec<_> = health
            .secrets
            .iter()
            .filter(|a| !a.allowed)
            .map(|a| a.verb.as_str())
            .collect();
        if missing.is_empty() {
            println!("  images from step pods (run --image-from): secrets allowed");
        } else {
            println!(
                "  images from step pods (run --image-from) need secrets {}",
                missing.join(", ")
            );
        }
        let missing: Vec<_> = health
            .network_policies
            .iter()
            .filter(|a| !a.allowed)
            .map(|a| a.verb.as_str())
            .collect();
        if missing.is_empty() {
            println!("  hermetic steps (run --hermetic): networkpolicies allowed");
        } else {
            println!(
                "  hermetic steps (run --hermetic) need networkpolicies {}",
                missing.join(", ")
            );
        }
        for a in health.unneeded.iter().filter(|a| a.allowed) {
            println!(
                "  warning: {} {} is allowed but never needed",
                a.verb, a.resource
            );
        }
    }
    Ok(if health.ok { 0 } else { 1 })
}

/// Prints RBAC (and the shim ConfigMap) as YAML; `--via proxy` or `auto` adds the `pods/proxy` rule.
pub fn manifests(target: &TargetArgs, args: ManifestArgs) -> Result<i32> {
    let proxy = target.via != super::args::ViaArg::Direct;
    // Everything is checked before anything is printed, so a refusal leaves no half manifest.
    let policy = args.network_policy.then(|| shim_peers(&args)).transpose()?;
    let forwarder = args
        .forwarder
        .then(|| forwarder(&args, target))
        .transpose()?;
    let configmap = match args.shim_configmap {
        Some(bin) => {
            let bytes =
                std::fs::read(&bin).with_context(|| format!("reading {}", bin.display()))?;
            if bytes.len() > manifests::CONFIGMAP_MAX_BYTES {
                bail!(
                    "{} is {} bytes, over a ConfigMap's {} (the build with TLS does not fit: give \
                     the plain build, images/build-shim-binary without --tls)",
                    bin.display(),
                    bytes.len(),
                    manifests::CONFIGMAP_MAX_BYTES
                );
            }
            Some(manifests::shim_configmap(
                &args.configmap,
                &target.namespace,
                bytes,
            )?)
        }
        None => None,
    };
    print!(
        "{}",
        manifests::rbac_for(&args.name, &target.namespace, proxy)?
    );
    if let Some(cm) = configmap {
        // Which delivery gives which wire, where an operator reads the manifests.
        print!(
            "---\n# The shim for --delivery configmap: a build without TLS, so these pods speak plain\n\
             # HTTP. Pods of the shim image (--delivery init) serve TLS 1.3 (PROTOCOL.md 1.1).\n{cm}"
        );
    }
    if let Some(peers) = policy {
        print!(
            "---\n{}",
            manifests::network_policy_yaml(&args.name, &target.namespace, &target.worker, &peers)?
        );
    }
    if let Some(f) = forwarder {
        print!("---\n{}", manifests::forwarder_yaml(&f)?);
    }
    Ok(0)
}

/// The forwarder's DaemonSet from `--pod-cidr`, `--forwarder-image` and `--forwarder-name`,
/// checked as the forwarder checks them (a DaemonSet it would refuse to start is never printed).
fn forwarder(args: &ManifestArgs, target: &TargetArgs) -> Result<manifests::forwarder::Forwarder> {
    if args.pod_cidrs.is_empty() {
        bail!("--forwarder needs --pod-cidr CIDR (the pod network, e.g. 10.244.0.0/16)");
    }
    for cidr in &args.pod_cidrs {
        if let Err(e) = cidr.parse::<protocol::forward::Cidr>() {
            bail!("--pod-cidr {cidr:?}: {e}");
        }
    }
    let Some(image) = &args.forwarder_image else {
        bail!(
            "--forwarder needs the shim image: pass --forwarder-image REF or set STEPCTL_SHIM_IMAGE \
             (images/build-shim-image --push REPO prints one)"
        );
    };
    Ok(manifests::forwarder::Forwarder {
        name: args.forwarder_name.clone(),
        namespace: target.namespace.clone(),
        image: image.clone(),
        pod_cidrs: args.pod_cidrs.clone(),
    })
}

/// The NetworkPolicy's peers from `--controller-label`, `--controller-namespace` and
/// `--controller-cidr`, each checked.
fn shim_peers(args: &ManifestArgs) -> Result<manifests::ShimPeers> {
    let mut labels = std::collections::BTreeMap::new();
    for pair in &args.controller_labels {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => labels.insert(k.to_owned(), v.to_owned()),
            _ => bail!("--controller-label {pair:?}: want KEY=VALUE"),
        };
    }
    for cidr in &args.controller_cidrs {
        let ok = cidr.split_once('/').is_some_and(|(ip, bits)| {
            let max = match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => 32,
                Ok(std::net::IpAddr::V6(_)) => 128,
                Err(_) => return false,
            };
            bits.parse::<u8>().is_ok_and(|b| b <= max)
        });
        if !ok {
            bail!("--controller-cidr {cidr:?}: want an address block such as 203.0.113.7/32");
        }
    }
    let mut workers = Vec::new();
    for peer in &args.peer_workers {
        let (namespace, worker) = match peer.split_once('/') {
            Some((ns, w)) => (Some(ns), w),
            None => (None, peer.as_str()),
        };
        if worker.is_empty() || namespace.is_some_and(|ns| !dns_label(ns)) {
            bail!("--peer-worker {peer:?}: want WORKER or NAMESPACE/WORKER");
        }
        workers.push(manifests::PeerWorker {
            worker: worker.to_owned(),
            namespace: namespace.map(str::to_owned),
        });
    }
    Ok(manifests::ShimPeers {
        controller_labels: labels,
        controller_namespace: args.controller_namespace.clone(),
        cidrs: args.controller_cidrs.clone(),
        workers,
    })
}

/// Whether `s` is a DNS label, as namespace names are.
fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
