//! A step process (uid 65534, the shim as root, as SECURITY.md recommends) cannot make its shim
//! archive a file it cannot read. The step owns a tree `T` holding `sub/a-big`, `sub/shadow` and
//! `sub/zz-tail`; root owns `secret/shadow` (mode 0600) and `secret/zz-tail` (`common/escape.rs`).
//! While the shim's walk is held inside `sub/a-big` (the reader, or the proxy in front of it,
//! takes nothing until the swap is done), the step renames `sub` away and puts `sub -> secret` in
//! its place: a walk that reached `sub/shadow` by path would
//! now read `secret/shadow`. Checked on every way out of the shim: `GET /v1/files` with the pod's
//! token and with a grant's, a `rootfs/` image layer from `/v2/`, and a shim-to-shim pull.
//! Whatever each returns must not hold the secret. A symlink in the path a download or grant names
//! is refused outright, and a spawn's working directory is never created through one.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::os::unix::fs::symlink;

use common::artifacts::{grant, pull_spec, scratch};
use common::escape::{STEP, Scene, files_below, root, swapped_download};
use common::images::basic;
use common::{Shim, gated_proxy, random_hex};
use protocol::artifacts::PullState;

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
    let (proxy, gate) = gated_proxy(src.addr.clone()).await.unwrap();
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
