//! What one spawn costs inside a step pod, timed by the pod itself: busybox `sh` runs `/bin/true`
//! in a loop and reads `/proc/uptime` before and after (10 ms ticks, so a loop of hundreds of
//! spawns makes the tick error small), started through the pod's shim. The same loop with the
//! builtin `:` gives the loop's own cost. Together with the `/healthz` round trip this splits the
//! direct path's exit latency into network and HTTP, the pod's own fork, exec and wait of the
//! command, and the rest, which is the shim's.

use anyhow::{Context, Result, bail};
use protocol::{FrameType, SpawnRequest};
use serde::Serialize;

use super::scenarios::Env;

/// The in-pod spawn loop's results.
#[derive(Debug, Clone, Serialize)]
pub struct PodSpawn {
    /// Spawns per run.
    pub spawns: u32,
    /// Microseconds per `/bin/true` (fork, exec, exit, wait by busybox `sh`), one per run.
    pub us_per_spawn: Vec<f64>,
    /// Microseconds per subshell `( : )`: fork, exit and wait, no exec; one per run.
    pub us_per_fork: Vec<f64>,
    /// Microseconds per iteration of the same loop running the builtin `:`, one per run.
    pub us_per_loop: Vec<f64>,
}

impl PodSpawn {
    /// Median of `/bin/true` runs minus the median of the empty loop.
    pub fn spawn_p50_us(&self) -> f64 {
        median(&self.us_per_spawn) - median(&self.us_per_loop)
    }
}

/// Median of `v` (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

fn script(body: &str, n: u32) -> String {
    format!(
        "read a x < /proc/uptime; i=0; while [ $i -lt {n} ]; do {body}; i=$((i+1)); done; \
         read b x < /proc/uptime; echo \"$a $b\""
    )
}

/// Runs the loop through the shim of a pod `runs` times (rotating pods), `spawns` each.
pub async fn measure(env: &Env, spawns: u32, runs: usize) -> Result<PodSpawn> {
    let mut out = PodSpawn {
        spawns,
        us_per_spawn: Vec::new(),
        us_per_fork: Vec::new(),
        us_per_loop: Vec::new(),
    };
    for r in 0..runs {
        let shim = &env.pods[r % env.pods.len()].shim;
        for (k, (body, n, into)) in [
            ("/bin/true", spawns, &mut out.us_per_spawn),
            ("( : )", spawns, &mut out.us_per_fork),
            // The empty loop runs 200x as often to get well above the 10 ms tick.
            (":", spawns * 200, &mut out.us_per_loop),
        ]
        .into_iter()
        .enumerate()
        {
            let id = format!("podspawn-{r}-{k}");
            let secs = timed_loop(shim, &id, &script(body, n)).await?;
            into.push(secs * 1e6 / f64::from(n));
        }
    }
    Ok(out)
}

async fn timed_loop(shim: &client::ShimClient, id: &str, script: &str) -> Result<f64> {
    let req = SpawnRequest {
        path: "sh".into(),
        args: vec!["-c".into(), script.into()],
        ..Default::default()
    };
    shim.spawn(id, &req).await.context("spawn")?;
    let mut stdout = Vec::new();
    let attached = shim
        .attach(id, 0, 20, |kind, data| {
            if kind == FrameType::Stdout {
                stdout.extend_from_slice(&data);
            }
        })
        .await
        .context("attach")?;
    let _ = shim.delete(id, true).await;
    if attached.exit.status != 0 {
        bail!("the spawn loop exited {}", attached.exit.status);
    }
    let text = String::from_utf8_lossy(&stdout);
    let t: Vec<f64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match t[..] {
        [a, b] => Ok(b - a),
        _ => bail!("the spawn loop printed {text:?}"),
    }
}
