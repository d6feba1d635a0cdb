//! The soak's steps, one function per kind, each checking every byte and the exit status it gets
//! against what it asked for: short commands with a chosen exit status, long ones printing once a
//! second, a stream that spills to the shim's disk (read twice), stdin, files up and down, and a pull
//! from one pod into another by a grant. A step answers the bytes it checked, or what was wrong.

use std::time::Duration;

use bytes::Bytes;
use client::ShimClient;
use controller::transfer::{self, How};
use http_body_util::BodyExt;

use super::Soak;
use super::follow::{self, Step, forget, pattern_digest, retry, sh, spawn};
use crate::cluster::artifacts_probe::digest_of;
use crate::cluster::paths::{Digest, Pod2};
use crate::cluster::scenarios::ticker;

/// The kinds of step, in the order workers take them (short ones most often).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `echo`, a line on stderr and `exit N`, through the pod IP or the apiserver, in turn.
    Short,
    /// Twenty lines, one a second, through the pod IP or the apiserver, in turn.
    Long,
    /// `--stream-mib` of a known pattern: past the pods' memory budget, so it spills to disk; the
    /// process is kept until the next stream on its pod, which reads its log again whole.
    Stream,
    /// A MiB through `cat`'s stdin and back.
    Stdin,
    /// A tar uploaded into the pod and the file downloaded again.
    Files,
    /// A tree pulled into the next pod by a grant on the source.
    Pull,
}

/// What workers take, in turn.
pub const ROTATION: [Kind; 8] = [
    Kind::Short,
    Kind::Long,
    Kind::Stream,
    Kind::Short,
    Kind::Stdin,
    Kind::Files,
    Kind::Short,
    Kind::Pull,
];

impl Kind {
    /// The report's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Short => "short",
            Kind::Long => "long",
            Kind::Stream => "stream",
            Kind::Stdin => "stdin",
            Kind::Files => "files",
            Kind::Pull => "pull",
        }
    }
}

/// Checked bytes, or what was wrong.
pub type Verdict = Result<u64, String>;

/// Runs step `n` of `kind` on its pod (`n` modulo the pods).
pub async fn run(s: &Soak, kind: Kind, n: u64) -> Verdict {
    let pod = &s.env.pods[(n as usize) % s.env.pods.len()];
    // Steps that alternate go through the apiserver's pods/proxy every other time.
    let shim = if (n / ROTATION.len() as u64) % 2 == 1 {
        &pod.proxy
    } else {
        &pod.shim
    };
    match kind {
        Kind::Short => short(s, pod, shim, n).await,
        Kind::Long => long(s, pod, shim, n).await,
        Kind::Stream => stream(s, pod, n).await,
        Kind::Stdin => stdin(s, pod, n).await,
        Kind::Files => files(s, pod, n).await,
        Kind::Pull => {
            let dst = &s.env.pods[(n as usize + 1) % s.env.pods.len()];
            pull(s, pod, dst, n).await
        }
    }
}

/// Checks a followed step: no pod end, exit `status`, stdout of `bytes` with `digest`.
pub fn check(step: &Step, status: i32, bytes: u64, digest: u64) -> Verdict {
    if let Some(r) = &step.pod_end {
        return Err(format!("the pod ended: {r}"));
    }
    match &step.status {
        Ok(s) if *s == status => {}
        Ok(s) => return Err(format!("exit status {s}, want {status}")),
        Err(e) => return Err(format!("no exit status: {e}")),
    }
    if step.out.out_bytes != bytes || step.out.digest.digest() != digest {
        return Err(format!(
            "stdout {} bytes (digest {:x}), want {bytes} ({digest:x})",
            step.out.out_bytes,
            step.out.digest.digest()
        ));
    }
    Ok(bytes + step.out.err_bytes)
}

/// Starts `script` as `id` in `pod` by `shim`, follows it and forgets it.
async fn sh_step(
    s: &Soak,
    pod: &Pod2,
    shim: &ShimClient,
    id: &str,
    script: &str,
    limit: Duration,
) -> Result<Step, String> {
    spawn(shim, id, &sh(script, false))
        .await
        .map_err(|e| e.to_string())?;
    let step = follow::follow(&s.rt, &pod.name, shim, id, true, limit).await;
    forget(shim, id).await.map_err(|e| e.to_string())?;
    Ok(step)
}

/// A side command whose stdout is wanted (exit 0 required), e.g. a digest.
async fn output_of(s: &Soak, pod: &Pod2, id: &str, script: &str) -> Result<String, String> {
    let step = sh_step(s, pod, &pod.shim, id, script, Duration::from_secs(120)).await?;
    match step.status {
        Ok(0) if step.pod_end.is_none() => {}
        other => {
            return Err(format!(
                "`{script}` ended {other:?}, pod {:?}",
                step.pod_end
            ));
        }
    }
    let text = step.out.text.unwrap_or_default();
    Ok(String::from_utf8_lossy(&text).trim().to_owned())
}

fn digest_of_bytes(b: &[u8]) -> u64 {
    let mut d = Digest::new();
    d.update(b);
    d.digest()
}

async fn short(s: &Soak, pod: &Pod2, shim: &ShimClient, n: u64) -> Verdict {
    let code = (n % 4) as i32;
    let script = format!("echo short {n}; echo on stderr >&2; exit {code}");
    let id = format!("soak-short-{n}");
    let step = sh_step(s, pod, shim, &id, &script, Duration::from_secs(120)).await?;
    let want = format!("short {n}\n");
    check(
        &step,
        code,
        want.len() as u64,
        digest_of_bytes(want.as_bytes()),
    )
}

async fn long(s: &Soak, pod: &Pod2, shim: &ShimClient, n: u64) -> Verdict {
    let lines = 20;
    let (cmd, digest) = ticker(lines, &format!("long{n}"));
    let bytes: u64 = (0..lines)
        .map(|i| format!("line {i} of long{n}\n").len() as u64)
        .sum();
    let id = format!("soak-long-{n}");
    let step = sh_step(s, pod, shim, &id, &cmd[2], Duration::from_secs(180)).await?;
    check(&step, 0, bytes, digest)
}

async fn stream(s: &Soak, pod: &Pod2, n: u64) -> Verdict {
    let bytes = s.stream_mib << 20;
    let id = format!("soak-stream-{n}");
    let shim = &pod.shim;
    let script = format!("yes {} | head -c {bytes}", stream_word(n));
    spawn(shim, &id, &sh(&script, false))
        .await
        .map_err(|e| e.to_string())?;
    let first = follow::follow(&s.rt, &pod.name, shim, &id, false, Duration::from_secs(600)).await;
    let checked = check(&first, 0, bytes, pattern_digest(&stream_word(n), bytes));
    // The log stays (spilled) until the next stream on this pod, then is read again whole.
    let slot = (n as usize) % s.env.pods.len();
    let previous = s.held.lock().unwrap_or_else(|e| e.into_inner())[slot].replace(n);
    if let Some(p) = previous {
        let again = read_again(s, pod, p).await;
        s.record("stream read again", &again, 0.0);
    }
    checked
}

fn stream_word(n: u64) -> String {
    format!("soak-{n}")
}

/// Reads held stream `n`'s whole log again from offset 0, checks it and forgets the process.
pub async fn read_again(s: &Soak, pod: &Pod2, n: u64) -> Verdict {
    let id = format!("soak-stream-{n}");
    let bytes = s.stream_mib << 20;
    let again = follow::follow(
        &s.rt,
        &pod.name,
        &pod.shim,
        &id,
        false,
        Duration::from_secs(600),
    )
    .await;
    forget(&pod.shim, &id).await.map_err(|e| e.to_string())?;
    check(&again, 0, bytes, pattern_digest(&stream_word(n), bytes))
}

async fn stdin(s: &Soak, pod: &Pod2, n: u64) -> Verdict {
    let id = format!("soak-stdin-{n}");
    let shim = &pod.shim;
    spawn(shim, &id, &sh("exec cat", true))
        .await
        .map_err(|e| e.to_string())?;
    let data = Bytes::from(test_support::noise(1 << 20, n));
    let chunk = 256 << 10;
    let mut offset = 0usize;
    while offset < data.len() {
        let end = (offset + chunk).min(data.len());
        let body = data.slice(offset..end);
        let last = end == data.len();
        let ack = retry("stdin", || {
            shim.stdin(&id, offset as u64, body.clone(), last)
        })
        .await
        .map_err(|e| e.to_string())?;
        if ack.stdin_offset != end as u64 {
            return Err(format!("stdin at {}, want {end}", ack.stdin_offset));
        }
        offset = end;
    }
    let step = follow::follow(&s.rt, &pod.name, shim, &id, false, Duration::from_secs(120)).await;
    forget(shim, &id).await.map_err(|e| e.to_string())?;
    check(&step, 0, data.len() as u64, digest_of_bytes(&data))
}

async fn files(s: &Soak, pod: &Pod2, n: u64) -> Verdict {
    let data = test_support::noise(512 << 10, n ^ 0x5eed);
    let tar = Bytes::from(tar_of("data.bin", &data).map_err(|e| e.to_string())?);
    let dir = format!("/build/files-{n}");
    let shim = &pod.shim;
    retry("upload", || shim.files_in_bytes(&dir, tar.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let path = format!("{dir}/data.bin");
    let mut got = None;
    for _ in 0..3 {
        // A download cut midway is fetched again whole; what arrives must be the file.
        if let Ok(body) = retry("download", || shim.files_out(&path)).await
            && let Ok(b) = body.collect().await
        {
            got = Some(b.to_bytes());
            break;
        }
    }
    let got = got.ok_or("the download broke three times")?;
    let file = file_in_tar(&got, "data.bin").map_err(|e| format!("the download: {e}"))?;
    output_of(
        s,
        pod,
        &format!("soak-files-rm-{n}"),
        &format!("rm -rf {dir}"),
    )
    .await?;
    if file != data {
        return Err(format!(
            "downloaded {} bytes differ from the {} uploaded",
            file.len(),
            data.len()
        ));
    }
    Ok((data.len() * 2) as u64)
}

/// A tar of one regular file.
fn tar_of(name: &str, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(data.len() as u64);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h.set_cksum();
    b.append_data(&mut h, name, data)?;
    b.into_inner()
}

/// The content of regular file `name` in a tar.
fn file_in_tar(tar: &[u8], name: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut a = tar::Archive::new(tar);
    for e in a.entries()? {
        let mut e = e?;
        if e.path()?.to_string_lossy().trim_start_matches("./") == name {
            let mut v = Vec::new();
            e.read_to_end(&mut v)?;
            return Ok(v);
        }
    }
    Err(std::io::Error::other(format!("no {name} in the tar")))
}

async fn pull(s: &Soak, src: &Pod2, dst: &Pod2, n: u64) -> Verdict {
    let from = format!("/build/pull-{n}");
    let to = format!("/build/pulled-{n}");
    let make = format!(
        "set -e; rm -rf {from}; mkdir -p {from}/small; head -c 2097152 /dev/urandom > {from}/big.bin
         i=0; while [ $i -lt 40 ]; do echo \"file $i of {n}\" > {from}/small/f$i; i=$((i+1)); done
         {}",
        digest_of(&from)
    );
    let want = output_of(s, src, &format!("soak-pull-make-{n}"), &make).await?;
    let mut copied = Err("not tried".to_owned());
    for attempt in 0..3 {
        let id = format!("soak-pull-{n}-{attempt}");
        copied = transfer::copy(
            &src.shim,
            &format!("{from}/"),
            &dst.shim,
            &to,
            &id,
            How::Direct,
        )
        .await
        .map_err(|e| e.to_string());
        if copied.is_ok() {
            break;
        }
    }
    let copied = copied?;
    let got = output_of(s, dst, &format!("soak-pull-sum-{n}"), &digest_of(&to)).await?;
    output_of(
        s,
        src,
        &format!("soak-pull-rm-{n}"),
        &format!("rm -rf {from}"),
    )
    .await?;
    output_of(
        s,
        dst,
        &format!("soak-pulled-rm-{n}"),
        &format!("rm -rf {to}"),
    )
    .await?;
    if !copied.direct {
        return Err(format!(
            "the pull fell back to the controller: {:?}",
            copied.fallback
        ));
    }
    if got != want {
        return Err(format!(
            "the pulled tree's digest {got} differs from the source's {want}"
        ));
    }
    Ok(copied.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tar_of_one_file_reads_back() {
        let data = test_support::noise(10_000, 3);
        let t = tar_of("data.bin", &data).unwrap();
        assert_eq!(file_in_tar(&t, "data.bin").unwrap(), data);
        assert!(file_in_tar(&t, "other").is_err());
    }

    #[test]
    fn every_kind_is_in_the_rotation() {
        for k in [
            Kind::Short,
            Kind::Long,
            Kind::Stream,
            Kind::Stdin,
            Kind::Files,
            Kind::Pull,
        ] {
            assert!(ROTATION.contains(&k), "{}", k.name());
        }
    }
}
