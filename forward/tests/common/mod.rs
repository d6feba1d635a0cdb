//! What the forwarder's tests share: the real `stepshim-forward` binary started as a child on a
//! loopback port (ready once it wrote its ready file), the real shim behind it (`test_support`'s
//! `Shim`, TLS-capable: `$STEPSHIM_BIN`, else `stepshim` beside the test executable, built with
//! `cargo build -p stepshim --features tls`), grants, Basic credentials and OCI error bodies.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use test_support::Shim;

/// The source pods' address in these tests: a loopback address that no interface holds (`lo`
/// holds 127.0.0.1, which the forwarder refuses as the node's own), reached through the allowed
/// network 127.0.0.0/8.
pub const SOURCE_IP: &str = "127.0.0.2";

/// A plain shim serving on [`SOURCE_IP`].
pub fn source_shim() -> Shim {
    Shim::start_with(&[(protocol::settings::LISTEN, "127.0.0.2:0")], None)
}

/// A TLS shim serving on [`SOURCE_IP`] (the binary must be built with TLS).
pub fn source_shim_tls() -> Shim {
    Shim::start_tls(&[(protocol::settings::LISTEN, "127.0.0.2:0")])
}

/// A running forwarder child. Killed when dropped.
pub struct Forwarder {
    pub child: Child,
    /// `host:port` it serves on.
    pub addr: String,
    /// Everything it logged so far.
    pub log: Arc<Mutex<String>>,
    _dir: Scratch,
}

impl Forwarder {
    /// Starts the forwarder allowing `allow`, its sources on `shim_port`, with extra `env`.
    pub fn start(allow: &str, shim_port: u16, env: &[(&str, &str)]) -> Forwarder {
        let dir = scratch("fwd-ready");
        let ready = dir.join("ready");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stepshim-forward"));
        cmd.env_clear()
            .env("STEPSHIM_FORWARD_LISTEN", "127.0.0.1:0")
            .env("STEPSHIM_FORWARD_ALLOW", allow)
            .env("STEPSHIM_FORWARD_SHIM_PORT", shim_port.to_string())
            .env("STEPSHIM_FORWARD_READY_FILE", &ready)
            .env("STEPSHIM_FORWARD_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log2.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                break text.trim().to_owned();
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "the forwarder exited with {status}: {}",
                    log.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the forwarder wrote no ready file"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Forwarder {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    /// The forwarder's resident memory now, from /proc (bytes).
    pub fn rss(&self) -> u64 {
        status_kib(self.child.id(), "VmRSS:") * 1024
    }

    /// The forwarder's peak resident memory so far (bytes).
    pub fn peak_rss(&self) -> u64 {
        status_kib(self.child.id(), "VmHWM:") * 1024
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap();
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// The port of a shim's `host:port`.
pub fn port(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// A fresh directory under the temporary directory, removed when dropped (tests write blobs of
/// hundreds of MiB into it).
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A new [`Scratch`] directory.
pub fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!(
        "stepshim-forward-{name}-{}",
        test_support::random_hex(4)
    ));
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// An OCI layout (the image `img`) holding one layer of `mib` MiB of random bytes, in a new
/// scratch directory `name`, granted on `shim`: (the scratch, the layer's digest, the grant's
/// token).
pub async fn granted_layout(shim: &Shim, name: &str, mib: u64) -> (Scratch, String, String) {
    let tmp = scratch(name);
    let dir = tmp.join("img");
    std::fs::create_dir_all(&dir).unwrap();
    let layer = tmp.join("layer");
    random_file(&layer, mib);
    let digest = layout_image(&dir, &layer);
    let token = granted(shim, &dir).await;
    (tmp, digest, token)
}

/// Registers a grant on `path` (no use limit) and returns its token.
pub async fn granted(shim: &Shim, path: &Path) -> String {
    let token = test_support::random_hex(16);
    let req = protocol::artifacts::GrantRequest {
        path: path.display().to_string(),
        token_sha256: protocol::token::sha256_hex(&token),
        ttl_seconds: 600,
        uses: None,
    };
    shim.client.grant(&req).await.unwrap();
    token
}

/// `Authorization: Basic base64(user:password)`.
pub fn basic(user: &str, password: &str) -> String {
    protocol::registry::basic_credentials(user, password)
}

/// The value of header `name` in a response head, if present.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `errors[0].code` and `.message` of an OCI error body.
pub fn oci_error(body: &[u8]) -> (String, String) {
    let v: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)));
    let e = &v["errors"][0];
    (
        e["code"].as_str().unwrap().to_owned(),
        e["message"].as_str().unwrap().to_owned(),
    )
}

/// A `rootfs/` image in `dir`: a few files and metadata.
pub fn rootfs_image(dir: &Path) {
    std::fs::create_dir_all(dir.join("rootfs/bin")).unwrap();
    std::fs::write(dir.join("rootfs/bin/hello"), b"#!/bin/sh\necho hello\n").unwrap();
    std::fs::write(dir.join("metadata.json"), br#"{"env":["PATH=/bin"]}"#).unwrap();
}

/// An OCI image layout in `dir` whose one layer is the file `layer` (moved in): returns the
/// layer's digest (`sha256:<hex>`, by `sha256sum`).
pub fn layout_image(dir: &Path, layer: &Path) -> String {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let out = Command::new("sha256sum").arg(layer).output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap()[..64].to_owned();
    let size = std::fs::metadata(layer).unwrap().len();
    std::fs::rename(layer, blobs.join(&hex)).unwrap();
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let config_hex = sha256_hex(config);
    std::fs::write(blobs.join(&config_hex), config).unwrap();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config_hex}"), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": format!("sha256:{hex}"), "size": size}],
    })
    .to_string();
    let manifest_hex = sha256_hex(manifest.as_bytes());
    std::fs::write(blobs.join(&manifest_hex), &manifest).unwrap();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": format!("sha256:{manifest_hex}"), "size": manifest.len()}],
    });
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    format!("sha256:{hex}")
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(data))
}

/// A file of `mib` MiB of random bytes (from /dev/urandom, by `head`).
pub fn random_file(path: &Path, mib: u64) {
    let ok = Command::new("head")
        .args(["-c", &format!("{}", mib << 20), "/dev/urandom"])
        .stdout(std::fs::File::create(path).unwrap())
        .status()
        .unwrap()
        .success();
    assert!(ok, "head -c {mib}M /dev/urandom");
}
