//! The soak's faults, one at a time in turn while the steps run: the host's connections to the
//! pods' shims killed by `ss -K` (steps resume by offset), a stream through a loopback proxy that
//! cuts its connections again and again (straight to the shim, or in front of the apiserver for
//! `pods/proxy`), kube-apiserver restarted by `--restart-cmd`, and a pod deleted under a running
//! step (which must end, within bounds, with the pod's reason and only whole lines before).

use std::time::{Duration, Instant};

use super::Soak;
use super::follow::{self, spawn};
use super::report::FaultRow;
use crate::cluster::paths;
use crate::cluster::scenarios::ticker;

/// The faults, in turn.
const ORDER: [&str; 4] = [
    "ss -K",
    "pod deleted mid-step",
    "cut stream",
    "apiserver restart",
];

/// Causes a fault every `every` until the deadline, in the order of [`ORDER`].
pub async fn run(s: &Soak, every: Duration) -> Vec<FaultRow> {
    let mut rows = Vec::new();
    for k in 0u64.. {
        let at = s.start + every * (k as u32 + 1);
        if at >= s.deadline {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let fault = ORDER[(k as usize) % ORDER.len()];
        let result = match fault {
            "ss -K" => kill_connections(s).await,
            "pod deleted mid-step" => victim(s, k).await,
            "cut stream" => cut_stream(s, k).await,
            _ => restart(s).await,
        };
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        eprintln!("soak: {fault}: {}{detail}", if ok { "" } else { "WRONG: " });
        rows.push(FaultRow {
            at_secs: at.duration_since(s.start).as_secs_f64(),
            fault: fault.to_owned(),
            detail,
            ok,
        });
    }
    rows
}

/// Kills every established connection from this host to the soak pods' shims.
async fn kill_connections(s: &Soak) -> Result<String, String> {
    let dsts: Vec<String> = s
        .env
        .pods
        .iter()
        .filter_map(|p| {
            let base = p.shim.base();
            let host = base.split_once("://").map_or(base, |(_, h)| h);
            Some(format!("dst {}", host.rsplit_once(':')?.0))
        })
        .collect();
    let filter = format!("( dport = :7777 and ( {} ) )", dsts.join(" or "));
    let out = tokio::process::Command::new("ss")
        .args(["-tnK", "state", "established", &filter])
        .output()
        .await
        .map_err(|e| format!("ss: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ss: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let killed = String::from_utf8_lossy(&out.stdout)
        .lines()
        .count()
        .saturating_sub(1);
    Ok(format!("{killed} connections killed"))
}

/// Runs the restart command, if there is one.
async fn restart(s: &Soak) -> Result<String, String> {
    let Some(cmd) = &s.args.restart_cmd else {
        return Ok("skipped: no --restart-cmd".into());
    };
    let t = Instant::now();
    // Its output goes to stderr: stdout carries the report.
    let run = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} >&2"))
        .kill_on_drop(true)
        .status();
    let status = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .map_err(|_| format!("{cmd} still running after 300 s"))?
        .map_err(|e| format!("running {cmd}: {e}"))?;
    if !status.success() {
        return Err(format!("{cmd}: {status}"));
    }
    Ok(format!("restarted in {:.1} s", t.elapsed().as_secs_f64()))
}

/// A stream through one of the cutting proxies, straight to the shim or through the apiserver in
/// turn: every byte and the exit status must arrive.
async fn cut_stream(s: &Soak, k: u64) -> Result<String, String> {
    let (path, pod, cuts) = &s.cut[(k as usize / ORDER.len()) % s.cut.len()];
    let bytes = s.stream_mib << 20;
    let before = cuts.load(std::sync::atomic::Ordering::Relaxed);
    let id = format!("soak-cut-{k}");
    let cmd = paths::zeros(s.stream_mib);
    let o = paths::run(
        *path,
        &s.env.pods_api,
        pod,
        &id,
        &cmd,
        Duration::from_secs(600),
    )
    .await
    .map_err(|e| format!("{path:?}: {e:#}"))?;
    let cut = cuts.load(std::sync::atomic::Ordering::Relaxed) - before;
    let detail = format!(
        "{path:?}: {} of {bytes} bytes, exit {:?}, {cut} cuts",
        o.bytes, o.status
    );
    if o.bytes == bytes && o.status == Some(0) && o.digest == zeros_digest(bytes) {
        s.record_bytes("cut stream", bytes);
        Ok(detail)
    } else {
        Err(detail)
    }
}

fn zeros_digest(bytes: u64) -> u64 {
    let chunk = vec![0u8; 1 << 20];
    let mut d = paths::Digest::new();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        d.update(&chunk[..n]);
        left -= n as u64;
    }
    d.digest()
}

/// A pod of its own, a step printing a line a second in it, the pod deleted a few seconds in: the
/// step must end with the pod's reason within bounds, with whole lines only before, and the pod go.
async fn victim(s: &Soak, k: u64) -> Result<String, String> {
    let name = format!("soak-{}-v{k}", s.run_id);
    let mut created = Err(String::new());
    for _ in 0..10 {
        // The apiserver may be back from a restart only just.
        created = crate::cluster::create_pods(&s.rt, &s.args, std::slice::from_ref(&name), "soak")
            .await
            .map_err(|e| format!("{e:#}"));
        if created.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    created?;
    let result = victim_step(s, &name, k).await;
    let _ = s.rt.delete(&name).await;
    let gone = s.rt.wait_gone(&name, Duration::from_secs(180)).await;
    match (result, gone) {
        (Ok(d), true) => Ok(d),
        (Ok(d), false) => Err(format!("{d}; but the pod is still there after 180 s")),
        (Err(e), _) => Err(e),
    }
}

async fn victim_step(s: &Soak, name: &str, k: u64) -> Result<String, String> {
    let ip =
        s.rt.wait_ready(name, Duration::from_secs(300), |_| {})
            .await
            .map_err(|e| e.to_string())?;
    let shim = s.rt.shim_at(name, &ip).map_err(|e| e.to_string())?;
    let tag = format!("victim{k}");
    let (cmd, _) = ticker(600, &tag);
    let id = format!("soak-victim-{k}");
    spawn(&shim, &id, &follow::sh(&cmd[2], false))
        .await
        .map_err(|e| e.to_string())?;
    let limit = Duration::from_secs(300);
    let deleter = async {
        tokio::time::sleep(Duration::from_secs(3 + k % 5)).await;
        let _ = s.rt.delete(name).await;
        Instant::now()
    };
    let (step, deleted) = tokio::join!(
        follow::follow(&s.rt, name, &shim, &id, true, limit),
        deleter
    );
    let after = step.secs - deleted.elapsed().as_secs_f64().min(step.secs);
    let text = String::from_utf8_lossy(step.out.text.as_deref().unwrap_or_default()).into_owned();
    let lines = text.lines().count();
    let whole: String = (0..lines).map(|i| format!("line {i} of {tag}\n")).collect();
    let detail = format!(
        "ended {after:.1} s after the deletion, status {:?}, {lines} whole lines",
        step.status
    );
    match step.pod_end {
        _ if text != whole => Err(format!(
            "{detail}, but the output is not whole lines: {text:?}"
        )),
        Some(_) if matches!(step.status, Ok(0)) => {
            Err(format!("{detail}: exit 0 from a killed step"))
        }
        Some(reason) => {
            s.record_bytes("pod deleted mid-step", text.len() as u64);
            Ok(format!("{detail}; failed with the pod's reason: {reason}"))
        }
        None => Err(format!("{detail}, without the pod's reason")),
    }
}
