//! `stepctl cp SRC DST`: files between this machine and a step pod, or between two step pods, through
//! the shims' `/v1/files` (never `pods/exec`). `POD:PATH` names a pod's path, anything else a local
//! one. A path ending in `/` copies a directory's contents, otherwise the entry itself; `DST` is the
//! directory it lands in (created if missing). Pod to pod goes directly (a grant on the source and a
//! pull by the destination) unless `--through-controller`, or when the destination cannot connect
//! to the source.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use controller::transfer::{self, ChannelBody, How};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::args::{CpArgs, Output};
use super::{Target, random_suffix};

/// One side of a copy.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    Local(String),
    Pod { pod: String, path: String },
}

fn place(s: &str) -> Place {
    match s.split_once(':') {
        Some((pod, path)) if !pod.is_empty() && !pod.contains('/') && path.starts_with('/') => {
            Place::Pod {
                pod: pod.to_owned(),
                path: path.to_owned(),
            }
        }
        _ => Place::Local(s.to_owned()),
    }
}

/// Runs `cp`.
pub async fn cp(target: &Target, args: CpArgs, out: Output) -> Result<i32> {
    let how = if args.through_controller {
        How::Controller
    } else {
        How::Direct
    };
    let report = match (place(&args.src), place(&args.dst)) {
        (Place::Local(src), Place::Pod { pod, path }) => {
            let shim = target.shim(Some(&pod)).await?;
            let (tx, rx) = mpsc::channel(8);
            let src2 = src.clone();
            let packer = tokio::task::spawn_blocking(move || pack(&src2, tx));
            let upload = shim.files_in(&path, ChannelBody(rx).boxed()).await;
            let bytes = packer.await?.with_context(|| format!("archiving {src}"))?;
            upload.with_context(|| format!("uploading into {pod}:{path}"))?;
            serde_json::json!({"bytes": bytes, "route": "controller"})
        }
        (Place::Pod { pod, path }, Place::Local(dst)) => {
            let shim = target.shim(Some(&pod)).await?;
            let (tx, rx) = mpsc::channel(8);
            let dir = PathBuf::from(&dst);
            let unpacker = tokio::task::spawn_blocking(move || unpack(rx, &dir));
            let read = transfer::read_resumed(shim, path.clone(), tx).await;
            let unpacked = unpacker.await?;
            let (bytes, resumes) = read.with_context(|| format!("reading {pod}:{path}"))?;
            unpacked.with_context(|| format!("extracting into {dst}"))?;
            serde_json::json!({"bytes": bytes, "resumes": resumes, "route": "controller"})
        }
        (Place::Pod { pod: a, path: p }, Place::Pod { pod: b, path: d }) => {
            let (src, dst) = (target.shim(Some(&a)).await?, target.shim(Some(&b)).await?);
            let id = format!("cp-{}", random_suffix());
            let c = transfer::copy(&src, &p, &dst, &d, &id, how).await?;
            if let Some(why) = &c.fallback {
                eprintln!(
                    "stepctl: {b} could not reach {a} ({why}); copied through the controller"
                );
            }
            serde_json::json!({
                "bytes": c.bytes, "resumes": c.resumes, "sha256": c.sha256,
                "route": if c.direct { "direct" } else { "controller" },
            })
        }
        (Place::Local(_), Place::Local(_)) => bail!("one side of cp must be POD:/PATH"),
    };
    if out == Output::Json {
        println!("{report}");
    } else {
        eprintln!(
            "stepctl: copied {} bytes ({})",
            report["bytes"], report["route"]
        );
    }
    Ok(0)
}

/// Writes a tar stream of the local `src` into `tx`: its contents with a trailing `/`, else the
/// entry itself. Symlinks are stored, not followed.
fn pack(src: &str, tx: mpsc::Sender<io::Result<Bytes>>) -> io::Result<u64> {
    let path = Path::new(src);
    let w = io::BufWriter::with_capacity(64 << 10, ChannelWriter { tx, written: 0 });
    let mut b = tar::Builder::new(w);
    b.follow_symlinks(false);
    let meta = std::fs::symlink_metadata(path)?;
    if src.ends_with('/') {
        b.append_dir_all(".", path)?;
    } else {
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::other("the path has no last component"))?;
        if meta.is_dir() {
            b.append_dir_all(name, path)?;
        } else {
            b.append_path_with_name(path, name)?;
        }
    }
    let w = b.into_inner()?.into_inner().map_err(|e| e.into_error())?;
    Ok(w.written)
}

/// Extracts the stream arriving on `rx` under `dir` (created if missing).
fn unpack(rx: mpsc::Receiver<io::Result<Bytes>>, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut a = tar::Archive::new(ChannelReader {
        rx,
        current: Bytes::new(),
    });
    a.set_preserve_permissions(true);
    a.set_preserve_mtime(true);
    a.unpack(dir)
}

struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    written: u64,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx
            .blocking_send(Ok(Bytes::copy_from_slice(buf)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped"))?;
        self.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_paths_and_local_paths() {
        assert_eq!(
            place("step-1:/build/out/"),
            Place::Pod {
                pod: "step-1".into(),
                path: "/build/out/".into()
            }
        );
        assert_eq!(place("./a:b"), Place::Local("./a:b".into()));
        assert_eq!(place("dir/x"), Place::Local("dir/x".into()));
        assert_eq!(place("c:relative"), Place::Local("c:relative".into()));
    }
}
