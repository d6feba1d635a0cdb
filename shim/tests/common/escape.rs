//! The scene of the escape tests (`files_escape.rs`): a step (uid 65534) owning a tree, root owning
//! a secret beside it, the step's swapper run through the shim, and a download held inside the
//! tree's `sub/a-big` until the swap is done.
#![allow(dead_code)] // each test crate uses its own part

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use test_support::{Shim, random_hex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::artifacts::scratch;

/// The step's uid and gid.
pub const STEP: u32 = 65534;
/// The file that makes the walk stop inside `sub` while the reader waits: far more than the
/// shim's channel and both sockets' buffers hold.
const BIG: u64 = 64 << 20;
/// A file after the secret in name order.
const TAIL: u64 = 1 << 20;

/// Whether the test can run: the shim must be root to read what the step cannot.
pub fn root() -> bool {
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    if me.ok() != Some(0) {
        eprintln!("skipped: needs root (the shim as root, the step as uid {STEP})");
        return false;
    }
    true
}

/// The scene: `tree` is what is archived (owned by the step), `secret` root's own.
pub struct Scene {
    pub base: PathBuf,
    pub tree: PathBuf,
    pub secret: PathBuf,
    /// The secret's content: must never reach a client.
    marker: Vec<u8>,
}

impl Scene {
    /// `base/secret/shadow` (root, 0700/0600) and the step's tree at `base/<rel>`.
    pub fn new(name: &str, rel: &str) -> Scene {
        let base = scratch(name);
        let tree = base.join(rel);
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        let secret = base.join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
        let marker = format!("root-only-{}", random_hex(16)).into_bytes();
        std::fs::write(secret.join("shadow"), &marker).unwrap();
        // What follows the secret in the walk pushes it out of the shim's buffers before an
        // answer that is then cut short ends.
        for dir in [&secret, &tree.join("sub")] {
            let tail = std::fs::File::create(dir.join("zz-tail")).unwrap();
            tail.set_len(TAIL).unwrap();
        }
        std::fs::set_permissions(
            secret.join("shadow"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::File::create(tree.join("sub/a-big"))
            .unwrap()
            .set_len(BIG)
            .unwrap();
        std::fs::write(tree.join("sub/shadow"), b"the step's own decoy").unwrap();
        for p in [
            base.join(rel.split('/').next().unwrap()),
            tree.clone(),
            tree.join("sub"),
            tree.join("sub/a-big"),
            tree.join("sub/shadow"),
            tree.join("sub/zz-tail"),
        ] {
            chown(&p, Some(STEP), Some(STEP)).unwrap();
        }
        Scene {
            base,
            tree,
            secret,
            marker,
        }
    }

    /// Starts the step's swapper as uid 65534: it waits for a line on stdin, then swaps.
    pub async fn arm(&self, shim: &Shim, id: &str) {
        let t = self.tree.display();
        let s = self.secret.display();
        let mut spec = test_support::sh(&format!(
            "read go; mv {t}/sub {t}/sub.old && ln -s {s} {t}/sub && echo swapped"
        ));
        spec.user = Some(format!("{STEP}:{STEP}"));
        spec.stdin = true;
        shim.client.spawn(id, &spec).await.unwrap();
        // The step itself cannot read the secret: what it gets must come from the shim.
        let mut peek = test_support::sh(&format!("cat {s}/shadow"));
        peek.user = Some(format!("{STEP}:{STEP}"));
        let ran = test_support::run(&shim.client, &format!("{id}-peek"), &peek).await;
        assert_ne!(
            ran.exit.unwrap().code,
            Some(0),
            "the step can read the secret"
        );
    }

    /// Once `shim`'s walk holds `sub/a-big` open, lets the step swap, and waits until it did.
    pub async fn swap_while_held(&self, shim: &Shim, id: &str) {
        let want = self.tree.join("sub/a-big");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !holds(shim.pid(), &want) {
            assert!(Instant::now() < deadline, "the walk never opened {want:?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        shim.client
            .stdin(id, 0, Bytes::from_static(b"go\n"), true)
            .await
            .unwrap();
        let ran = test_support::follow(&shim.client, id).await;
        assert_eq!(ran.stdout, b"swapped\n", "{ran:?}");
        assert!(
            self.tree
                .join("sub")
                .symlink_metadata()
                .unwrap()
                .is_symlink()
        );
    }

    /// Whether `bytes` hold the secret.
    pub fn leaked(&self, bytes: &[u8]) -> bool {
        bytes.windows(self.marker.len()).any(|w| w == self.marker)
    }

    /// Panics if `bytes` hold the secret.
    pub fn assert_clean(&self, what: &str, bytes: &[u8]) {
        assert!(
            !self.leaked(bytes),
            "{what}: the shim sent the root-only secret"
        );
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Whether process `pid` has `path` open.
fn holds(pid: u32, path: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == path))
}

/// Sends a GET and reads only the answer's head: the rest waits in the socket.
async fn held_get(addr: &str, path: &str, auth: &str) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: shim\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = vec![0u8; 4096];
    let n = s.read(&mut got).await.unwrap();
    got.truncate(n);
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    (s, got)
}

/// The rest of a held answer (a cut answer ends early; what arrived still counts).
async fn rest(mut s: TcpStream, mut got: Vec<u8>) -> Vec<u8> {
    let _ = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut got)).await;
    got
}

/// One download of the step's tree held while the step swaps; returns what the client received.
pub async fn swapped_download(scene: &Scene, shim: &Shim, path: &str, auth: &str) -> Vec<u8> {
    let id = format!("swapper-{}", random_hex(4));
    scene.arm(shim, &id).await;
    let (s, got) = held_get(&shim.addr, path, auth).await;
    scene.swap_while_held(shim, &id).await;
    rest(s, got).await
}

/// Every regular file below `root`, symlinks not followed.
pub fn files_below(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}
