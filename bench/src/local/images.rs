//! What serving images costs the source shim (PROTOCOL.md 4.12), against a plain `GET /v1/files`
//! of the same bytes from the same shim, alternating so machine noise hits both alike:
//!
//! - a `rootfs/` of many files: its layer (`/v2/<name>/blobs/<digest>`, the tree's deterministic
//!   tar, digest already known) against `GET /v1/files?path=<dir>/rootfs/`;
//! - one large blob of an OCI layout, hashed as it is sent, against `GET /v1/files` of that file;
//! - the digest of the `rootfs/` (the first manifest request after the tree changed: the whole
//!   tree read and hashed once).
//!
//! Each request is a raw HTTP/1.1 GET over loopback whose answer is read and dropped; the shim's CPU
//! time is read from `/proc` around it.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use client::local::LocalShim;
use protocol::artifacts::GrantRequest;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Report, median};
use crate::procfs::fine_cpu_secs;

/// Files of the `rootfs/`.
const FILES: usize = 5000;

/// Runs the part: `mib` MiB in the tree and in the blob, `runs` alternating rounds.
pub(super) async fn run(shim: &LocalShim, mib: u64, runs: usize, r: &mut Report) -> Result<()> {
    let root = std::env::temp_dir().join(format!("stepshim-bench-images-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let result = measure(shim, &root, mib, runs.max(1), r).await;
    let _ = std::fs::remove_dir_all(&root);
    result
}

async fn measure(
    shim: &LocalShim,
    root: &Path,
    mib: u64,
    runs: usize,
    r: &mut Report,
) -> Result<()> {
    let (img, lay) = (root.join("img"), root.join("lay"));
    let bytes = mib << 20;
    rootfs(&img, bytes)?;
    let blob = layout(&lay, bytes)?;
    let (img_token, lay_token) = (grant(shim, &img).await?, grant(shim, &lay).await?);
    let pid = shim.pid();
    let files = |p: &Path| format!("/v1/files?path={}", p.display());
    let tree_path = files(&img.join("rootfs/")) + "/";
    let file_path = files(&lay.join("blobs/sha256").join(&blob[7..]));
    let pod = ("Authorization", format!("Bearer {}", shim.token));

    // The digest, cold: the first manifest request after the tree changed.
    let mut digest_ms = Vec::new();
    let mut digest_cpu = Vec::new();
    let manifest = "/v2/img/manifests/latest";
    let img_auth = ("X-Stepshim-Token", img_token.clone());
    for i in 0..runs {
        std::fs::write(img.join("rootfs/etc/round"), i.to_string())?;
        let (t, cpu, _) = timed(shim, pid, manifest, &img_auth).await?;
        digest_ms.push(t * 1e3);
        digest_cpu.push(cpu);
    }
    let layer = layer_digest(shim, manifest, &img_auth).await?;
    let layer_path = format!("/v2/img/blobs/{layer}");
    let blob_path = format!("/v2/lay/blobs/{blob}");
    let lay_auth = ("X-Stepshim-Token", lay_token);
    let cases: [(&str, &str, &(&str, String)); 4] = [
        ("tree", &tree_path, &pod),
        ("layer", &layer_path, &img_auth),
        ("file", &file_path, &pod),
        ("blob", &blob_path, &lay_auth),
    ];
    let mut cpu_gib: [Vec<f64>; 4] = Default::default();
    let mut mbps: [Vec<f64>; 4] = Default::default();
    for _ in 0..runs {
        for (i, (_, path, auth)) in cases.iter().enumerate() {
            let (t, cpu, n) = timed(shim, pid, path, auth).await?;
            if n < bytes {
                bail!("{path}: {n} bytes, fewer than the {bytes} put there");
            }
            cpu_gib[i].push(cpu / (n as f64 / f64::from(1u32 << 30)));
            mbps[i].push(n as f64 / t / 1e6);
        }
    }
    report(
        r,
        mib,
        runs,
        &mut cpu_gib,
        &mut mbps,
        &mut digest_ms,
        &mut digest_cpu,
    );
    Ok(())
}

fn report(
    r: &mut Report,
    mib: u64,
    runs: usize,
    cpu: &mut [Vec<f64>; 4],
    mbps: &mut [Vec<f64>; 4],
    digest_ms: &mut [f64],
    digest_cpu: &mut [f64],
) {
    let m: Vec<(f64, f64)> = (0..4)
        .map(|i| (median(&mut cpu[i]).0, median(&mut mbps[i]).0))
        .collect();
    let row = |name: &str, (c, s): (f64, f64), base: (f64, f64)| {
        format!(
            "{name}: {c:.2} CPU s/GiB ({:.2}x GET /v1/files {:.2}), {s:.0} MB/s",
            c / base.0,
            base.0
        )
    };
    r.row(
        format!("image layer of a {mib} MiB rootfs/ of {FILES} files (median of {runs})"),
        row("layer", m[1], m[0]),
        "CPU <= 1.5x GET /v1/files",
    );
    r.row(
        format!("{mib} MiB OCI layout blob, hashed as sent (median of {runs})"),
        row("blob", m[3], m[2]),
        "CPU <= 1.5x GET /v1/files",
    );
    let (ms, lo, hi) = median(digest_ms);
    let (dc, _, _) = median(digest_cpu);
    r.row(
        format!("digest of the {mib} MiB rootfs/ (first manifest request after a change)"),
        format!("{ms:.0} ms ({lo:.0}-{hi:.0}), {dc:.2} CPU s"),
        "once per tree",
    );
    r.set(
        "images",
        json!({"mib": mib, "files": FILES, "runs": runs,
            "cpu_s_per_gib": {"files_tree": m[0].0, "layer": m[1].0, "files_file": m[2].0, "blob": m[3].0},
            "mb_per_s": {"files_tree": m[0].1, "layer": m[1].1, "files_file": m[2].1, "blob": m[3].1},
            "digest_ms": ms, "digest_cpu_s": dc}),
    );
}

/// A `rootfs/` of [`FILES`] files holding `bytes` together, and a `metadata.json`.
fn rootfs(dir: &Path, bytes: u64) -> Result<()> {
    let each = (bytes / FILES as u64) as usize;
    for i in 0..FILES {
        let d = dir.join(format!("rootfs/usr/lib/d{}", i % 50));
        std::fs::create_dir_all(&d)?;
        std::fs::write(
            d.join(format!("f{i}")),
            test_support::noise(each, i as u64 + 1),
        )?;
    }
    std::fs::create_dir_all(dir.join("rootfs/etc"))?;
    std::fs::write(
        dir.join("metadata.json"),
        br#"{"env":["A=b"],"user":"1000"}"#,
    )?;
    Ok(())
}

/// An OCI layout whose one layer is a `bytes`-byte blob; returns that blob's digest.
fn layout(dir: &Path, bytes: u64) -> Result<String> {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let put = |data: &[u8]| -> Result<String> {
        let digest = protocol::registry::digest_string(&protocol::token::sha256(data));
        std::fs::write(blobs.join(&digest[7..]), data)?;
        Ok(digest)
    };
    let layer = put(&test_support::noise(bytes as usize, 99))?;
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let config_digest = put(config)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": bytes}],
    }))?;
    let m = put(&manifest)?;
    let index = json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m, "size": manifest.len()}]});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    Ok(layer)
}

/// A grant on `dir` for a new token; returns the token.
async fn grant(shim: &LocalShim, dir: &Path) -> Result<String> {
    let token = test_support::random_hex(16);
    let req = GrantRequest {
        path: dir.display().to_string(),
        token_sha256: protocol::token::sha256_hex(&token),
        ttl_seconds: 3600,
        uses: None,
    };
    shim.client.grant(&req).await?;
    Ok(token)
}

/// The layer's digest from the manifest.
async fn layer_digest(shim: &LocalShim, path: &str, auth: &(&str, String)) -> Result<String> {
    let (status, _, body) = get(&shim.addr, path, auth, true).await?;
    if status != 200 {
        bail!("{path}: {status} {}", String::from_utf8_lossy(&body));
    }
    let m: serde_json::Value = serde_json::from_slice(&body)?;
    m["layers"][0]["digest"]
        .as_str()
        .map(str::to_owned)
        .context("no layer in the manifest")
}

/// One GET: (seconds, the shim's CPU seconds, body bytes).
async fn timed(
    shim: &LocalShim,
    pid: u32,
    path: &str,
    auth: &(&str, String),
) -> Result<(f64, f64, u64)> {
    let cpu0 = fine_cpu_secs(pid).context("shim CPU")?;
    let t = Instant::now();
    let (status, len, _) = get(&shim.addr, path, auth, false).await?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = fine_cpu_secs(pid).context("shim CPU")? - cpu0;
    if status != 200 {
        bail!("{path}: {status}");
    }
    Ok((secs, cpu, len))
}

/// A raw GET over one connection to its close: (status, body length, the body when `keep`).
async fn get(
    addr: &str,
    path: &str,
    auth: &(&str, String),
    keep: bool,
) -> Result<(u16, u64, Vec<u8>)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: shim\r\n{}: {}\r\nConnection: close\r\n\r\n",
        auth.0, auth.1
    );
    s.write_all(head.as_bytes()).await?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut head_buf, mut len, mut kept) = (Vec::new(), 0u64, Vec::new());
    let mut in_body = false;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let chunk = if in_body {
            &buf[..n]
        } else {
            head_buf.extend_from_slice(&buf[..n]);
            let Some(at) = head_buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            in_body = true;
            let rest = head_buf.split_off(at + 4);
            len += rest.len() as u64;
            if keep {
                kept = rest;
            }
            continue;
        };
        len += chunk.len() as u64;
        if keep {
            kept.extend_from_slice(chunk);
        }
    }
    let status = std::str::from_utf8(head_buf.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .context("no HTTP status")?;
    Ok((status, len, kept))
}
