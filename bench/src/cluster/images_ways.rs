//! One handoff of the `images` scenario (`images.rs`): the producing pod writes a new `rootfs/`
//! (its process exits: the clock starts), then a consuming pod runs in it, timed to its first line
//! of output, one of two ways:
//!
//! - through the shim, as `stepctl run --image-from` does: a grant on the producing pod's shim,
//!   the digest resolved with it, the pull Secret and the pod naming
//!   `127.0.0.1:<forwarder>/<ip>/<name>@<digest>`; the kubelet pulls through the node's forwarder
//!   from the producing pod. Measured besides: this process's bytes read and written
//!   (`/proc/self/io`), the source shim's CPU for the digest and for serving the pull, and, after
//!   the handoff, its CPU for a plain `GET /v1/files` of the same tree read by the bench;
//! - pushed, then pulled: crane (uploaded into the producing pod beforehand) pushes the tree as a
//!   one-layer image to the bench's registry on the pod bridge, and the pod names it on loopback.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use client::ShimClient;
use controller::image::{GRANT_TTL, ImageFrom};
use controller::image_source;
use controller::runtime::Runtime;
use http_body_util::BodyExt;
use serde::Serialize;

use super::artifacts_probe::sh;
use super::images_consumer::{consumer_spec, first_line, forget_image};
use super::images_registry::Registry;
use crate::args::ClusterArgs;
use crate::procfs::cpu_secs;

/// Where the producing pod keeps its trees, the template they are copied from, and crane.
pub const BUILD: &str = "/build";
/// crane in the producing pod.
pub const CRANE: &str = "/build/tools/crane";

/// How an image goes from the producing step to the consuming one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Way {
    /// Pulled through the forwarder from the producing pod's shim.
    Shim,
    /// Pushed by crane to a registry on the node, pulled from there.
    Registry,
}

impl Way {
    /// Both, the one going first in `round` first.
    pub fn order(round: usize) -> [Way; 2] {
        if round.is_multiple_of(2) {
            [Way::Shim, Way::Registry]
        } else {
            [Way::Registry, Way::Shim]
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Way::Shim => "shim",
            Way::Registry => "registry",
        }
    }
}

/// The producing pod.
pub struct Producer {
    /// Its name.
    pub name: String,
    /// Its shim, with the pod's token.
    pub shim: ShimClient,
    /// Its shim's host pid (the bench runs on the node).
    pub pid: u32,
}

impl Producer {
    /// Its shim's CPU seconds, from `/proc/PID/stat` (in ticks of 10 ms): unlike the sum over live
    /// threads, it keeps the time of threads that ended (a transfer's).
    fn cpu(&self) -> Result<f64> {
        cpu_secs(self.pid).context("the producing pod's shim is gone")
    }
}

/// What the scenario's handoffs share.
pub struct Ctx<'a> {
    /// The runtime (admin credentials), as stepctl's.
    pub rt: &'a Runtime,
    /// The flags.
    pub args: &'a ClusterArgs,
    /// The producing pod.
    pub producer: &'a Producer,
    /// The bench's registry.
    pub registry: &'a Registry,
}

/// What one handoff measured.
#[derive(Debug, Clone, Serialize)]
pub struct Handoff {
    /// Which way.
    pub way: Way,
    /// Which round.
    pub round: usize,
    /// Seconds the producing process took to write the tree (before the clock starts).
    pub make_secs: f64,
    /// The producer's exit to the consumer's first line of output, seconds.
    pub handoff_secs: f64,
    /// Of which: the grant and digest (shim), or crane's push (registry), seconds.
    pub prepare_secs: f64,
    /// Of which: creating the consuming pod until its shim answered (the pull), seconds.
    pub pull_secs: f64,
    /// Whether the consumer printed the round's marker.
    pub ok: bool,
    /// The consumer's image reference.
    pub image: String,
    /// Shim way: bytes this process read during the handoff (`rchar`).
    pub controller_rchar: Option<u64>,
    /// Shim way: bytes this process wrote during the handoff (`wchar`).
    pub controller_wchar: Option<u64>,
    /// Shim way: the source shim's CPU seconds for the grant and the digest (one pass of the tree).
    pub digest_cpu_secs: Option<f64>,
    /// Shim way: the source shim's CPU seconds while the consumer pulled.
    pub pull_cpu_secs: Option<f64>,
    /// Shim way: bytes of the layer (the tree's tar stream, as `GET /v1/files` counted them).
    pub layer_bytes: Option<u64>,
    /// Shim way: the source shim's CPU seconds for `GET /v1/files` of the same tree.
    pub files_get_cpu_secs: Option<f64>,
    /// Registry way: CPU seconds of the registry's two processes during the handoff.
    pub registry_cpu_secs: Option<f64>,
    /// Shim way: MB/s of the plain `GET /v1/files` (10^6 bytes per second).
    pub files_get_mb_per_s: Option<f64>,
    /// CPU seconds of the node's containerd while the consuming pod was created and pulled.
    pub containerd_cpu_secs: f64,
    /// CPU seconds of the node's forwarder meanwhile.
    pub forwarder_cpu_secs: f64,
}

impl Handoff {
    /// The source shim's CPU seconds per GiB served for the pull, and for the plain files GET.
    pub fn cpu_per_gib(&self) -> Option<(f64, f64)> {
        let gib = self.layer_bytes? as f64 / f64::from(1u32 << 30);
        Some((self.pull_cpu_secs? / gib, self.files_get_cpu_secs? / gib))
    }
}

/// One handoff: a new tree for `round`, handed over `way`; the consuming pod is deleted and the
/// tree removed afterwards.
pub async fn handoff(cx: &Ctx<'_>, round: usize, way: Way) -> Result<Handoff> {
    let name = format!("img-{round}-{}", way.tag());
    let dir = format!("{BUILD}/{name}");
    let consumer = format!("use-{round}-{}", way.tag());
    let t = Instant::now();
    sh(&cx.producer.shim, &make_tree(&dir, &name)).await?;
    let make_secs = t.elapsed().as_secs_f64();
    let result = match way {
        Way::Shim => shim_way(cx, &dir, &consumer).await,
        Way::Registry => registry_way(cx, &dir, &name, &consumer).await,
    };
    let _ = cx.rt.delete(&consumer).await;
    let _ = sh(&cx.producer.shim, &format!("rm -rf {dir}")).await;
    let mut h = result.with_context(|| format!("{way:?} way, round {round}"))?;
    forget_image(cx.args, &h.image).await;
    h.round = round;
    h.make_secs = make_secs;
    if !h.ok {
        eprintln!("bench: {consumer} did not print {name}");
    }
    Ok(h)
}

/// The producing step's work: a `rootfs/` of the template's files, busybox's `cat`, and a marker
/// naming the tree (so every tree is new), synced to disk.
fn make_tree(dir: &str, name: &str) -> String {
    format!(
        "set -e; mkdir -p {dir}/rootfs/bin {dir}/rootfs/etc {dir}/rootfs/tmp; chmod 1777 {dir}/rootfs/tmp
         cp -a {BUILD}/template {dir}/rootfs/data
         cp /bin/busybox {dir}/rootfs/bin/busybox; ln -s busybox {dir}/rootfs/bin/cat
         echo {name} > {dir}/rootfs/etc/marker
         sync"
    )
}

async fn shim_way(cx: &Ctx<'_>, dir: &str, consumer: &str) -> Result<Handoff> {
    let p = cx.producer;
    let t0 = Instant::now();
    let io0 = own_io()?;
    let cpu0 = p.cpu()?;
    let from = ImageFrom {
        pod: p.name.clone(),
        path: dir.to_owned(),
    };
    let source = image_source::prepare(cx.rt, &from, cx.args.forwarder_port, GRANT_TTL).await?;
    let (prepared, cpu1) = (Instant::now(), p.cpu()?);
    let spec = consumer_spec(cx.args, consumer, &source.reference);
    let node0 = node_cpu();
    let seen = async {
        let images = image_source::StepImages {
            image: Some(source.clone()),
            volumes: Vec::new(),
        };
        image_source::create_pod(cx.rt, &spec, &images).await?;
        first_line(cx.rt, consumer).await
    }
    .await;
    let (cpu2, io1, node1) = (p.cpu()?, own_io()?, node_cpu());
    let _ = source.revoke().await;
    let seen = seen?;
    let t = Instant::now();
    let (layer_bytes, get_cpu) = files_get(p, &format!("{dir}/rootfs/")).await?;
    let get_secs = t.elapsed().as_secs_f64();
    Ok(Handoff {
        way: Way::Shim,
        round: 0,
        make_secs: 0.0,
        handoff_secs: (seen.first - t0).as_secs_f64(),
        prepare_secs: (prepared - t0).as_secs_f64(),
        pull_secs: (seen.answered - prepared).as_secs_f64(),
        ok: seen.line == dir.rsplit('/').next().unwrap_or_default(),
        image: source.reference.clone(),
        controller_rchar: Some(io1.0 - io0.0),
        controller_wchar: Some(io1.1 - io0.1),
        digest_cpu_secs: Some(cpu1 - cpu0),
        pull_cpu_secs: Some(cpu2 - cpu1),
        layer_bytes: Some(layer_bytes),
        files_get_cpu_secs: Some(get_cpu),
        registry_cpu_secs: None,
        files_get_mb_per_s: Some(layer_bytes as f64 / get_secs / 1e6),
        containerd_cpu_secs: node1.0 - node0.0,
        forwarder_cpu_secs: node1.1 - node0.1,
    })
}

async fn registry_way(cx: &Ctx<'_>, dir: &str, name: &str, consumer: &str) -> Result<Handoff> {
    let t0 = Instant::now();
    let reg0 = cx.registry.cpu_secs();
    let tag = format!("{}/bench/{name}:latest", cx.registry.push_addr);
    let out = sh(&cx.producer.shim, &push_script(dir, &tag)).await?;
    let digest = pushed_digest(&out)?;
    let pushed = Instant::now();
    let image = format!("{}/bench/{name}@{digest}", cx.registry.pull_addr);
    let node0 = node_cpu();
    cx.rt
        .create(&consumer_spec(cx.args, consumer, &image))
        .await?;
    let seen = first_line(cx.rt, consumer).await?;
    let node1 = node_cpu();
    Ok(Handoff {
        way: Way::Registry,
        round: 0,
        make_secs: 0.0,
        handoff_secs: (seen.first - t0).as_secs_f64(),
        prepare_secs: (pushed - t0).as_secs_f64(),
        pull_secs: (seen.answered - pushed).as_secs_f64(),
        ok: seen.line == name,
        image,
        controller_rchar: None,
        controller_wchar: None,
        digest_cpu_secs: None,
        pull_cpu_secs: None,
        layer_bytes: None,
        files_get_cpu_secs: None,
        registry_cpu_secs: Some(cx.registry.cpu_secs() - reg0),
        files_get_mb_per_s: None,
        containerd_cpu_secs: node1.0 - node0.0,
        forwarder_cpu_secs: node1.1 - node0.1,
    })
}

/// CPU seconds of this machine's containerd and forwarder daemons, found by their names in
/// `/proc`; a process whose parent has its name (a short-lived child) is left out, so one that
/// ends meanwhile cannot take its seconds away from the sum.
fn node_cpu() -> (f64, f64) {
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let (mut containerd, mut forwarder) = (0.0, 0.0);
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let name = comm(pid);
        if parent(pid).is_some_and(|pp| comm(pp) == name) {
            continue;
        }
        // The kernel keeps 15 bytes of a name: "stepshim-forward" is "stepshim-forwar".
        let slot = match name.trim_end() {
            "containerd" => &mut containerd,
            "stepshim-forwar" => &mut forwarder,
            _ => continue,
        };
        *slot += cpu_secs(pid).unwrap_or(0.0);
    }
    (containerd, forwarder)
}

/// What a build does today after writing its files: the tree as one layer on an empty OCI base,
/// pushed over plain HTTP, then given its platform (containerd unpacks only an image of its own).
fn push_script(dir: &str, tag: &str) -> String {
    format!(
        "set -eo pipefail; export HOME=/tmp
         tar -cf - -C {dir}/rootfs . | {CRANE} append --insecure --oci-empty-base -f - -t {tag} >/dev/null
         {CRANE} mutate --insecure --set-platform linux/$(uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/') -t {tag} {tag}"
    )
}

/// The digest in crane's last line, `REPO@sha256:<hex>`.
fn pushed_digest(out: &str) -> Result<String> {
    let last = out.lines().last().unwrap_or_default().trim();
    match last.rsplit_once('@') {
        Some((_, d)) if d.len() == 71 && d.starts_with("sha256:") => Ok(d.to_owned()),
        _ => bail!("crane printed no digest: {out:?}"),
    }
}

/// `GET /v1/files?path=P` from the producer's shim, read and dropped: (bytes, the shim's CPU).
async fn files_get(p: &Producer, path: &str) -> Result<(u64, f64)> {
    let cpu0 = p.cpu()?;
    let mut body = p.shim.files_out(path).await?;
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| anyhow::anyhow!("reading {path}: {e}"))?;
        n += frame.data_ref().map_or(0, |d| d.len() as u64);
    }
    Ok((n, p.cpu()? - cpu0))
}

/// This process's `rchar` and `wchar`: bytes it read and wrote through any descriptor.
pub fn own_io() -> Result<(u64, u64)> {
    parse_io(&std::fs::read_to_string("/proc/self/io")?).context("/proc/self/io")
}

fn parse_io(text: &str) -> Option<(u64, u64)> {
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
    };
    Some((field("rchar:")?, field("wchar:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_digest_crane_prints() {
        let d = format!("sha256:{}", "ab".repeat(32));
        let out = format!("10.244.0.1:5874/bench/img-0-registry@{d}\n");
        assert_eq!(pushed_digest(&out).unwrap(), d);
        assert!(pushed_digest("").is_err());
        assert!(pushed_digest("x@sha256:12").is_err());
    }

    #[test]
    fn reads_rchar_and_wchar() {
        let io = "rchar: 12\nwchar: 34\nsyscr: 5\nread_bytes: 0\n";
        assert_eq!(parse_io(io), Some((12, 34)));
        assert_eq!(parse_io("rchar: 1\n"), None);
        let (r0, _) = own_io().unwrap();
        let _ = std::fs::read("/proc/self/stat").unwrap();
        assert!(own_io().unwrap().0 > r0);
    }

    #[test]
    fn rounds_alternate_which_way_goes_first() {
        assert_eq!(Way::order(0), [Way::Shim, Way::Registry]);
        assert_eq!(Way::order(1), [Way::Registry, Way::Shim]);
    }
}
