//! The bytes TLS carries, on both sides alternately: one stream of a process's stdout followed to
//! its end (MiB/s, the shim's and the client's CPU per GiB), and a pull of a tree (one large file
//! of noise and many small ones) from the side's shim to its second shim, `https://` with the
//! source's pin on the TLS side (MiB/s of the tar stream, each shim's CPU per GiB).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use protocol::artifacts::{GrantRequest, PullSpec, PullState};
use protocol::{Exit, FrameType};

use super::{Pair, SIDES, Side, Summary, order};
use crate::args::LocalArgs;
use crate::procfs::{cpu_secs, own_cpu_secs};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// Per side: MiB/s of each run and the CPU seconds per GiB of each process measured.
#[derive(Default)]
struct Runs {
    mib_s: Vec<f64>,
    cpu: [Vec<f64>; 2],
}

/// Several runs of `a.stream_mib` MiB of stdout per side, alternating.
pub(super) async fn stream(sides: &[Side; 2], a: &LocalArgs) -> Result<Vec<Pair>> {
    let bytes = a.stream_mib << 20;
    let mut runs: [Runs; 2] = Default::default();
    for run in 0..a.stream_runs.max(1) {
        for k in order(run) {
            let c = &sides[k].shim.client;
            let id = format!("stream{run}");
            c.spawn(
                &id,
                &super::super::sh(&format!("head -c {bytes} /dev/zero")),
            )
            .await?;
            let (shim0, own0) = (sides[k].cpu()?, own_cpu_secs(false));
            let t = Instant::now();
            let mut got = 0u64;
            let end = c
                .attach(&id, 0, 3, |kind, d| {
                    if kind == FrameType::Stdout {
                        got += d.len() as u64
                    }
                })
                .await?;
            let secs = t.elapsed().as_secs_f64();
            let gib = bytes as f64 / GIB;
            runs[k].cpu[0].push((sides[k].cpu()? - shim0) / gib);
            runs[k].cpu[1].push((own_cpu_secs(false) - own0) / gib);
            if got != bytes || end.exit != Exit::code(0) {
                bail!(
                    "{} stream got {got} of {bytes} bytes, exit {:?}",
                    SIDES[k],
                    end.exit
                );
            }
            runs[k].mib_s.push(bytes as f64 / MIB / secs);
            c.delete(&id, false).await?;
            eprintln!(
                "bench: {} stream {:.0} MiB/s",
                SIDES[k],
                bytes as f64 / MIB / secs
            );
        }
    }
    let n = a.stream_runs.max(1);
    Ok(pairs(
        runs,
        &format!(
            "one stream of stdout, {} MiB (median of {n}, range)",
            a.stream_mib
        ),
        [
            "shim CPU per GiB of that stream",
            "client CPU per GiB of that stream",
        ],
    ))
}

/// Turns both sides' runs into a throughput row and one CPU row per process measured.
fn pairs(runs: [Runs; 2], what: &str, cpu: [&str; 2]) -> Vec<Pair> {
    let [plain, tls] = runs;
    let [pc0, pc1] = plain.cpu;
    let [tc0, tc1] = tls.cpu;
    let r = |runs, unit| Summary::Runs { runs, unit };
    vec![
        Pair {
            measure: what.to_owned(),
            sides: [r(plain.mib_s, "MiB/s"), r(tls.mib_s, "MiB/s")],
        },
        Pair {
            measure: format!("{} (utime + stime)", cpu[0]),
            sides: [r(pc0, "s"), r(tc0, "s")],
        },
        Pair {
            measure: cpu[1].to_owned(),
            sides: [r(pc1, "s"), r(tc1, "s")],
        },
    ]
}

/// The tree a pull moves: `big.bin` of `mib` MiB of noise and 200 small files.
fn make_tree(root: &Path, mib: u64) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(root.join("small"))?;
    let mut big = std::io::BufWriter::new(std::fs::File::create(root.join("big.bin"))?);
    for i in 0..mib {
        big.write_all(&test_support::noise(1 << 20, i + 1))?;
    }
    big.flush()?;
    for i in 0..200 {
        std::fs::write(
            root.join(format!("small/f{i}.txt")),
            format!("small file {i}\n").repeat(i % 50 + 1),
        )?;
    }
    Ok(())
}

/// Removes a directory when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Several pulls of the tree per side, alternating, each into a fresh target removed after it.
/// Every run must bring the same tar stream (its SHA-256) and the whole large file.
pub(super) async fn pull(sides: &[Side; 2], a: &LocalArgs) -> Result<Vec<Pair>> {
    let dir = Scratch(std::env::temp_dir().join(format!(
        "stepshim-bench-tls-{}",
        test_support::random_hex(4)
    )));
    let src = dir.0.join("src");
    make_tree(&src, a.pull_mib).context("writing the pulled tree")?;
    let grant_token = test_support::random_hex(16);
    for s in sides {
        s.shim
            .client
            .grant(&GrantRequest {
                path: src.display().to_string(),
                token_sha256: protocol::token::sha256_hex(&grant_token),
                ttl_seconds: 3600,
                uses: None,
            })
            .await?;
    }
    let mut runs: [Runs; 2] = Default::default();
    let mut digest: Option<String> = None;
    for run in 0..a.stream_runs.max(1) {
        for k in order(run) {
            let s = &sides[k];
            let target = dir.0.join(format!("in-{}-{run}", SIDES[k]));
            let spec = PullSpec {
                source: s.shim.url(),
                source_pin: s.shim.pin.map(|p| p.to_string()),
                path: format!("{}/", src.display()),
                token: grant_token.clone(),
                target: target.display().to_string(),
                sha256: None,
                connect_retries: None,
                owner: None,
            };
            let (mib_s, cpu, sha) = pull_once(s, &spec, &format!("pull{run}"))
                .await
                .with_context(|| format!("{} pull", SIDES[k]))?;
            let big = std::fs::metadata(target.join("big.bin"))?.len();
            let first = digest.get_or_insert_with(|| sha.clone());
            if big != a.pull_mib << 20 || *first != sha {
                bail!(
                    "{} pull brought {big} bytes of big.bin, stream {sha}",
                    SIDES[k]
                );
            }
            eprintln!("bench: {} pull {mib_s:.0} MiB/s", SIDES[k]);
            runs[k].mib_s.push(mib_s);
            for (all, one) in runs[k].cpu.iter_mut().zip(cpu) {
                all.push(one);
            }
            std::fs::remove_dir_all(&target)?;
        }
    }
    let n = a.stream_runs.max(1);
    Ok(pairs(
        runs,
        &format!(
            "pull of a tree between two shims, {} MiB + 200 small files (median of {n}, range)",
            a.pull_mib
        ),
        [
            "source shim CPU per GiB pulled",
            "destination shim CPU per GiB pulled",
        ],
    ))
}

/// One pull by side `s`'s second shim from its first, forgotten after it ends: MiB/s of the tar
/// stream, the source's and the destination's CPU seconds per GiB of it, and its SHA-256.
async fn pull_once(s: &Side, spec: &PullSpec, id: &str) -> Result<(f64, [f64; 2], String)> {
    let pids = [s.shim.pid(), s.dst.pid()];
    let cpu = || -> Result<[f64; 2]> {
        Ok([
            cpu_secs(pids[0]).context("the source shim is gone")?,
            cpu_secs(pids[1]).context("the destination shim is gone")?,
        ])
    };
    let cpu0 = cpu()?;
    let t = Instant::now();
    let done = s.dst.client.pull(id, spec, Some(300)).await?;
    let secs = t.elapsed().as_secs_f64();
    let cpu1 = cpu()?;
    if done.state != PullState::Done {
        bail!("ended {:?}: {:?}", done.state, done.error);
    }
    let sha = done
        .sha256
        .clone()
        .context("done without a stream digest")?;
    s.dst.client.delete_pull(id).await?;
    let gib = done.bytes as f64 / GIB;
    let per_gib = [(cpu1[0] - cpu0[0]) / gib, (cpu1[1] - cpu0[1]) / gib];
    Ok((done.bytes as f64 / MIB / secs, per_gib, sha))
}
