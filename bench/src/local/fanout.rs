//! One artifact feeding many steps: N pulls of one tree at once from one source shim (PROTOCOL.md
//! 4.11), each by a destination shim of its own (each consumer is a step pod), against N times one
//! pull alone. The source serves
//! grant holders from `STEPSHIM_FILES_GRANT_MAX_CONCURRENT` slots (4 by default); pulls past them
//! meet 503 and wait their turn. Rounds alternate the order of N, so machine noise hits each alike.
//! Every pull must land whole (its SHA-256 as the first's); the row gives the median wall time, its
//! range, the 503s waited out, and the pulls that failed (a shim that counts 503s as failed attempts
//! fails some: the part then fails).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use client::local::{Launch, LocalShim};
use protocol::artifacts::{GrantRequest, PullSpec, PullState};
use serde_json::json;

use super::{Report, median};

/// Runs the part: a tree of `mib` MiB (one file and 200 small ones), `runs` rounds of each N.
pub(super) async fn run(
    bin: &Path,
    mib: u64,
    counts: &[usize],
    runs: usize,
    r: &mut Report,
) -> Result<()> {
    let root = std::env::temp_dir().join(format!("stepshim-bench-fanout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let result = measure(bin, &root, mib, counts, runs.max(2), r).await;
    let _ = std::fs::remove_dir_all(&root);
    result
}

fn start(bin: &Path) -> Result<LocalShim> {
    Ok(Launch::new(bin)
        .stop_with_starter()
        .env(protocol::settings::LOG, "error")
        .stderr(Stdio::null())
        .start()?)
}

async fn measure(
    bin: &Path,
    root: &Path,
    mib: u64,
    counts: &[usize],
    runs: usize,
    r: &mut Report,
) -> Result<()> {
    let src = root.join("src");
    std::fs::create_dir_all(src.join("small"))?;
    std::fs::write(
        src.join("big.bin"),
        (0..mib << 20)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<u8>>(),
    )?;
    for i in 0..200 {
        std::fs::write(src.join(format!("small/f{i}")), format!("file {i}\n"))?;
    }
    let source = start(bin)?;
    let most = counts.iter().copied().max().unwrap_or(1);
    let dsts: Vec<LocalShim> = (0..most).map(|_| start(bin)).collect::<Result<_>>()?;
    let token = client::local::random_token();
    source
        .client
        .grant(&GrantRequest {
            path: src.display().to_string(),
            token_sha256: protocol::token::sha256_hex(&token),
            ttl_seconds: 3600,
            uses: None,
        })
        .await?;
    let mut pulls = Pulls {
        source: &source,
        dsts: &dsts,
        src: &src,
        token: &token,
        out: root.join("out"),
        n: 0,
        sha: None,
    };
    let mut cases: Vec<usize> = std::iter::once(1).chain(counts.iter().copied()).collect();
    cases.dedup();
    let mut secs = vec![Vec::new(); cases.len()];
    let mut busy = vec![0u64; cases.len()];
    let mut failed = vec![0usize; cases.len()];
    for round in 0..runs {
        for k in 0..cases.len() {
            let i = (k + round) % cases.len();
            let (t, b, f) = pulls.many(cases[i]).await?;
            secs[i].push(t);
            busy[i] += b;
            failed[i] += f;
        }
    }
    let (one, _, _) = median(&mut secs[0].clone());
    let mut rows = Vec::new();
    for (i, &n) in cases.iter().enumerate().skip(1) {
        let (m, lo, hi) = median(&mut secs[i]);
        let ratio = m / (n as f64 * one);
        let landed = match failed[i] {
            0 => format!("all {n} whole"),
            f => format!("{f} of {} FAILED", n * runs),
        };
        let alone = n as f64 * one;
        eprintln!(
            "bench: fan-out {n}: {landed}, {m:.2} s ({lo:.2}-{hi:.2}), {ratio:.2}x of {n} pulls alone, {} 503s waited out",
            busy[i]
        );
        r.row(
            format!("{n} pulls of one {mib} MiB tree at once (median of {runs})"),
            format!(
                "{landed} in {m:.2} s ({lo:.2}-{hi:.2}); {n} x one pull alone: {alone:.2} s ({ratio:.2}x); {} 503s waited out",
                busy[i]
            ),
            "all land; <= N x one",
        );
        if ratio > 1.5 || failed[i] > 0 {
            r.bad += 1;
        }
        rows.push(
            json!({"pulls": n, "median_s": m, "min_s": lo, "max_s": hi, "one_pull_s": one,
            "ratio_to_n_alone": ratio, "busy_waited": busy[i], "failed": failed[i]}),
        );
    }
    r.set(
        "fanout",
        json!({"mib": mib, "runs": runs, "destination_shims": most, "cases": rows}),
    );
    Ok(())
}

/// The pulls of the part, numbered so that every one has its own id and target.
struct Pulls<'a> {
    source: &'a LocalShim,
    dsts: &'a [LocalShim],
    src: &'a Path,
    token: &'a str,
    out: std::path::PathBuf,
    n: usize,
    sha: Option<String>,
}

impl Pulls<'_> {
    /// Starts `count` pulls at once, waits for all, checks each and removes what they wrote:
    /// the wall time, the 503s they waited out, and how many failed.
    async fn many(&mut self, count: usize) -> Result<(f64, u64, usize)> {
        let t = Instant::now();
        let mut started = Vec::new();
        for k in 0..count {
            self.n += 1;
            let (shim, id) = (&self.dsts[k], format!("fan-{}", self.n));
            let spec = PullSpec {
                source: self.source.url(),
                source_pin: None,
                path: format!("{}/", self.src.display()),
                token: self.token.to_owned(),
                target: self.out.join(&id).display().to_string(),
                sha256: None,
                connect_retries: None,
                owner: None,
            };
            shim.client.pull(&id, &spec, None).await?;
            started.push((shim, id));
        }
        let (mut busy, mut failed) = (0, 0);
        for (shim, id) in &started {
            let st = loop {
                let st = shim.client.pull_status(id, Some(60)).await?;
                if st.state != PullState::Running {
                    break st;
                }
            };
            if st.state != PullState::Done {
                eprintln!(
                    "bench: pull {id} of {count} failed: {}",
                    st.error.unwrap_or_default()
                );
                failed += 1;
                continue;
            }
            let sha = st.sha256.context("a done pull without its digest")?;
            if self.sha.get_or_insert_with(|| sha.clone()) != &sha {
                bail!("pull {id} landed another stream ({sha})");
            }
            busy += u64::from(st.busy);
        }
        let secs = t.elapsed().as_secs_f64();
        for (shim, id) in &started {
            shim.client.delete_pull(id).await?;
        }
        let _ = std::fs::remove_dir_all(&self.out);
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok((secs, busy, failed))
    }
}
