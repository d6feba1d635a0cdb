//! A step process (uid 65534, the shim as root, as SECURITY.md recommends) cannot make its shim
//! archive a file it cannot read. The step owns a tree `T` holding `sub/a-big`, `sub/shadow` and
//! `sub/zz-tail`; root owns `secret/shadow` (mode 0600) and `secret/zz-tail`. While the shim's walk is held inside `sub/a-big` (the
//! reader, or the proxy in front of it, takes nothing until the swap is done), the step renames
//! `sub` away and puts `sub -> secret` in its place: a walk that reached `sub/shadow` by path would
//! now read `secret/shadow`. Checked on every way out of the shim: `GET /v1/files` with the pod's
//! token and with a grant's, a `rootfs/` image layer from `/v2/`, and a shim-to-shim pull.
//! Whatever each returns must not hold the secret. A symlink in the path a download or grant names
//! is refused outright, and a spawn's working directory is never created through one.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::artifacts::{grant, pull_spec, scratch};
use common::images::basic;
use common::{Shim, random_hex};
use protocol::artifacts::PullState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The step's uid and gid.
const STEP: u32 = 65534;
/// The file that makes the walk stop inside `sub` while the reader waits: far more than the
/// shim's channel and both sockets' buffers hold.
const BIG: u64 = 64 << 20;
/// A file after the secret in name order.
const TAIL: u64 = 1 << 20;

/// Whether the test can run: the shim must be root to read what the step cannot.
fn root() -> bool {
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    if me.ok() != Some(0) {
        eprintln!("skipped: needs root (the shim as root, the step as uid {STEP})");
        return false;
    }
    true
}

/// The scene: `tree` is what is archived (owned by the step), `secret` root's own.
struct Scene {
    base: PathBuf,
    tree: PathBuf,
    secret: PathBuf,
    /// The secret's content: must never reach a client.
    marker: Vec<u8>,
}

impl Scene {
    /// `base/secret/shadow` (root, 0700/0600) and the step's tree at `base/<rel>`.
    fn new(name: &str, rel: &str) -> Scene {
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
    async fn arm(&self, shim: &Shim, id: &str) {
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
    async fn swap_while_held(&self, shim: &Shim, id: &str) {
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
    fn leaked(&self, bytes: &[u8]) -> bool {
        bytes.windows(self.marker.len()).any(|w| w == self.marker)
    }

    /// Panics if `bytes` hold the secret.
    fn assert_clean(&self, what: &str, bytes: &[u8]) {
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
async fn swapped_download(scene: &Scene, shim: &Shim, path: &str, auth: &str) -> Vec<u8> {
    let id = format!("swapper-{}", random_hex(4));
    scene.arm(shim, &id).await;
    let (s, got) = held_get(&shim.addr, path, auth).await;
    scene.swap_while_held(shim, &id).await;
    rest(s, got).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_while_a_download_is_held_never_sends_a_root_only_file() {
    if !root() {
        return;
    }
    let shim = Shim::start();
    let mut leaks = Vec::new();
    for with_grant in [false, true] {
        let scene = Scene::new("escape-get", "t");
        let auth = if with_grant {
            let token = random_hex(16);
            shim.client
                .grant(&grant(&scene.tree, &token, 60, None))
                .await
                .unwrap();
            format!("Bearer {token}")
        } else {
            format!("Bearer {}", shim.token)
        };
        let path = format!("/v1/files?path={}/", scene.tree.display());
        let got = swapped_download(&scene, &shim, &path, &auth).await;
        if scene.leaked(&got) {
            leaks.push(if with_grant {
                "a grant"
            } else {
                "the pod token"
            });
        }
    }
    assert!(
        leaks.is_empty(),
        "the root-only secret was sent to {leaks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_while_an_image_layer_is_held_never_sends_a_root_only_file() {
    if !root() {
        return;
    }
    let shim = Shim::start();
    let scene = Scene::new("escape-img", "app/rootfs");
    let token = common::images::granted(&shim, &scene.base.join("app"), 60).await;
    let (status, _, manifest) =
        common::images::get(&shim, "GET", "/v2/app/manifests/latest", &token).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&manifest));
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_owned();
    let got = swapped_download(
        &scene,
        &shim,
        &format!("/v2/app/blobs/{layer}"),
        &basic(&token),
    )
    .await;
    scene.assert_clean("image layer", &got);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_while_a_pull_is_held_never_lands_a_root_only_file() {
    if !root() {
        return;
    }
    let src = Shim::start();
    let dst = Shim::start();
    let scene = Scene::new("escape-pull", "t");
    let token = random_hex(16);
    src.client
        .grant(&grant(&scene.tree, &token, 60, None))
        .await
        .unwrap();
    let (proxy, gate) = gated_proxy(src.addr.clone()).await;
    let id = format!("swapper-{}", random_hex(4));
    scene.arm(&src, &id).await;
    let target = scratch("escape-pull-dst").join("in");
    let spec = pull_spec(&format!("http://{proxy}"), &scene.tree, &token, &target);
    dst.client.pull("p", &spec, None).await.unwrap();
    scene.swap_while_held(&src, &id).await;
    gate.send(true).unwrap();
    let end = dst.client.pull_status("p", Some(60)).await.unwrap();
    assert_ne!(end.state, PullState::Running, "{end:?}");
    for file in files_below(&target) {
        scene.assert_clean(&file.display().to_string(), &std::fs::read(&file).unwrap());
    }
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_in_a_download_or_grant_path_is_refused() {
    if !root() {
        return;
    }
    let shim = Shim::start();
    let scene = Scene::new("escape-named", "t");
    std::fs::rename(scene.tree.join("sub"), scene.tree.join("sub.old")).unwrap();
    symlink(&scene.secret, scene.tree.join("sub")).unwrap();
    let through = [
        format!("{}/sub/", scene.tree.display()),
        format!("{}/sub/shadow", scene.tree.display()),
    ];
    for path in &through {
        let err = match shim.client.files_out(path).await {
            Ok(body) => {
                let got = http_body_util::BodyExt::collect(body).await;
                let got = got.map(|b| b.to_bytes()).unwrap_or_default();
                scene.assert_clean(path, &got);
                panic!("{path}: answered {} bytes", got.len());
            }
            Err(e) => e,
        };
        assert_eq!(
            err.code(),
            Some(protocol::ErrorCode::InvalidPath),
            "{path}: {err}"
        );
    }
    // The symlink itself (no trailing `/`) is archived as the symlink it is.
    let link = format!("{}/sub", scene.tree.display());
    let body = shim.client.files_out(&link).await.unwrap();
    let got = http_body_util::BodyExt::collect(body)
        .await
        .unwrap()
        .to_bytes();
    scene.assert_clean(&link, &got);
    // A grant on the tree: the same paths are forbidden; a grant through the symlink is refused.
    let token = random_hex(16);
    shim.client
        .grant(&grant(&scene.tree, &token, 60, None))
        .await
        .unwrap();
    for path in &through {
        let err = shim
            .client
            .with_grant_token(&token)
            .files_out(path)
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Some(protocol::ErrorCode::Forbidden),
            "{path}: {err}"
        );
    }
    let err = shim
        .client
        .grant(&grant(&scene.tree.join("sub"), &random_hex(16), 60, None))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::InvalidPath), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_directory_is_never_created_through_a_symlink() {
    if !root() {
        return;
    }
    let shim = Shim::start();
    let scene = Scene::new("escape-cwd", "t");
    let (t, s) = (scene.tree.display(), scene.secret.display());
    let mut plant = test_support::sh(&format!("ln -s {s} {t}/w"));
    plant.user = Some(format!("{STEP}:{STEP}"));
    let ran = test_support::run(&shim.client, "plant", &plant).await;
    assert_eq!(ran.exit.unwrap().code, Some(0), "{ran:?}");
    // The controller's next process works in a directory below the step's tree.
    let mut spec = test_support::sh("pwd");
    spec.dir = Some(format!("{t}/w/made"));
    let err = shim.client.spawn("cwd", &spec).await.unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::InvalidSpawn), "{err}");
    assert!(
        !scene.secret.join("made").exists(),
        "the shim created a directory through the step's symlink"
    );
    // A directory that exists is entered as before, through a symlink or not.
    spec.dir = Some(format!("{t}/sub"));
    let ran = test_support::run(&shim.client, "cwd-ok", &spec).await;
    assert_eq!(ran.exit.unwrap().code, Some(0), "{ran:?}");
}

/// Every regular file below `root`, symlinks not followed.
fn files_below(root: &Path) -> Vec<PathBuf> {
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

/// A loopback proxy in front of `target` that passes requests at once and holds every answer
/// until the gate is opened (`true`): a reader that takes nothing while the test acts.
async fn gated_proxy(target: String) -> (String, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (target, mut open) = (target.clone(), rx.clone());
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&target).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
                if open.wait_for(|o| *o).await.is_ok() {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                }
                up.abort();
            });
        }
    });
    (addr, tx)
}
