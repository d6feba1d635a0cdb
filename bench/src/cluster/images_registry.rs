//! The registry of the `images` scenario's push-then-pull way (`images.rs`): CNCF distribution's
//! `registry`, started by the bench as two processes over one storage directory, one listening on
//! the host's address on the pod bridge (where the producing pod pushes) and one on loopback
//! (where containerd pulls plain HTTP without any configuration), both on the same port, neither on
//! any other address. Also the crane binary the producing pod pushes with, which must be static:
//! the step image has no C library.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::args::ClusterArgs;

/// The two registry processes and their storage, stopped and removed on drop.
pub struct Registry {
    children: Vec<Child>,
    dir: PathBuf,
    /// `IP:PORT` on the pod bridge: where pods push.
    pub push_addr: String,
    /// `127.0.0.1:PORT`: what consuming pods' images name.
    pub pull_addr: String,
}

impl Registry {
    /// Starts both processes of `bin` and waits (up to 30 s) until each answers `GET /v2/`.
    pub async fn start(bin: &Path, args: &ClusterArgs) -> Result<Registry> {
        let dir =
            std::env::temp_dir().join(format!("stepshim-bench-registry-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("data"))?;
        let port = args.registry_port;
        let mut r = Registry {
            children: Vec::new(),
            dir,
            push_addr: format!("{}:{port}", args.bridge_ip),
            pull_addr: format!("127.0.0.1:{port}"),
        };
        for (i, addr) in [r.push_addr.clone(), r.pull_addr.clone()]
            .iter()
            .enumerate()
        {
            let config = r.dir.join(format!("config-{i}.yml"));
            std::fs::write(&config, config_yaml(&r.dir.join("data"), addr))?;
            let log = std::fs::File::create(r.dir.join(format!("registry-{i}.log")))?;
            let child = Command::new(bin)
                .arg("serve")
                .arg(&config)
                .env("OTEL_TRACES_EXPORTER", "none")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            r.children.push(child);
        }
        for addr in [r.push_addr.clone(), r.pull_addr.clone()] {
            r.wait_answering(&addr).await?;
        }
        Ok(r)
    }

    async fn wait_answering(&mut self, addr: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_status(addr, "/v2/").await.ok() == Some(200) {
                return Ok(());
            }
            for (i, c) in self.children.iter_mut().enumerate() {
                if let Some(s) = c.try_wait()? {
                    let log = std::fs::read_to_string(self.dir.join(format!("registry-{i}.log")))
                        .unwrap_or_default();
                    bail!("the bench's registry exited ({s}): {}", log.trim());
                }
            }
            if Instant::now() > deadline {
                bail!("the bench's registry does not answer GET http://{addr}/v2/ after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// CPU seconds both registry processes have used.
    pub fn cpu_secs(&self) -> f64 {
        self.children
            .iter()
            .filter_map(|c| crate::procfs::cpu_secs(c.id()))
            .sum()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The registry's configuration: storage in `data`, plain HTTP on `addr`, no access log.
fn config_yaml(data: &Path, addr: &str) -> String {
    format!(
        "version: 0.1\nlog:\n  level: warn\n  accesslog: {{disabled: true}}\nstorage:\n  \
         filesystem:\n    rootdirectory: {}\n  delete: {{enabled: true}}\nhttp:\n  addr: {addr}\n",
        data.display()
    )
}

/// The status of a plain HTTP/1.1 `GET path` to `addr`.
pub async fn http_status(addr: &str, path: &str) -> Result<u16> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .context("connect timeout")??;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut head))
        .await
        .context("read timeout")??;
    parse_status(&head).context("not an HTTP answer")
}

fn parse_status(head: &[u8]) -> Option<u16> {
    if !head.starts_with(b"HTTP/1.") {
        return None;
    }
    std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()
}

/// The registry binary: `--registry-bin`, else what `tests/cluster/build-registry` prints (it
/// builds the pinned version into its cache once).
pub fn registry_bin(args: &ClusterArgs) -> Result<PathBuf> {
    if let Some(p) = &args.registry_bin {
        return Ok(p.clone());
    }
    let out = Command::new("tests/cluster/build-registry")
        .stderr(Stdio::inherit())
        .output()
        .context("running tests/cluster/build-registry (run from the repository, or pass --registry-bin)")?;
    if !out.status.success() {
        bail!("tests/cluster/build-registry failed ({})", out.status);
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// The crane binary of `--crane`, read whole; refused unless it is a static ELF executable.
pub fn crane(args: &ClusterArgs) -> Result<Vec<u8>> {
    let Some(path) = &args.crane else {
        bail!(
            "--only images needs --crane PATH, a static crane: \
             CGO_ENABLED=0 GOBIN=DIR go install github.com/google/go-containerregistry/cmd/crane@v0.22.1"
        );
    };
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    match elf_interpreter(&bytes) {
        None => bail!("{} is not a 64-bit ELF executable", path.display()),
        Some(true) => bail!(
            "{} is dynamically linked; the step image has no C library: build it with CGO_ENABLED=0",
            path.display()
        ),
        Some(false) => Ok(bytes),
    }
}

/// Whether a 64-bit little-endian ELF file names a program interpreter (is dynamically linked);
/// None if it is not one.
fn elf_interpreter(elf: &[u8]) -> Option<bool> {
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let (phentsize, phnum) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    const PT_INTERP: u32 = 3;
    let mut interp = false;
    for i in 0..phnum {
        interp |= u32_at(phoff.checked_add(i.checked_mul(phentsize)?)?)? == PT_INTERP;
    }
    Some(interp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_static_from_dynamic_executables() {
        // This test binary is dynamically linked (it names ld.so); a non-ELF file is refused.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_interpreter(&me), Some(true));
        assert_eq!(elf_interpreter(b"#!/bin/sh\n"), None);
        // A minimal static ELF header: no program headers, so no interpreter.
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        assert_eq!(elf_interpreter(&elf), Some(false));
    }

    #[test]
    fn reads_a_status_line() {
        assert_eq!(parse_status(b"HTTP/1.1 200"), Some(200));
        assert_eq!(parse_status(b"HTTP/1.0 401"), Some(401));
        assert_eq!(parse_status(b"SSH-2.0-Open"), None);
    }

    #[test]
    fn the_config_names_storage_and_address() {
        let y = config_yaml(Path::new("/d"), "127.0.0.1:5874");
        assert!(y.contains("rootdirectory: /d\n"), "{y}");
        assert!(y.contains("addr: 127.0.0.1:5874\n"), "{y}");
    }
}
