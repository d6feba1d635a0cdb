//! What the artifact tests share (`artifacts.rs`, `pulls.rs`): scratch directories, a tree with a
//! large file, many small ones, a symlink and an executable, a listing of every path, kind, mode and
//! content digest, grant and pull request bodies, and samples of `/metrics`.
#![allow(dead_code)] // each test crate uses its own part

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use protocol::artifacts::{GrantRequest, PullSpec};
use sha2::{Digest, Sha256};

/// The value of sample `name` (with its labels, e.g. `stepshim_pulls_total{state="done"}`) in a
/// `/metrics` text.
pub fn sample(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
}

/// A fresh directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "stepshim-art-{name}-{}",
        test_support::random_hex(4)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tree: one 3 MiB file of random bytes, 300 small files, a symlink, an executable.
pub fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    let big: Vec<u8> = (0..3 << 20).map(|_| rand::random::<u8>()).collect();
    std::fs::write(root.join("big.bin"), big).unwrap();
    for i in 0..300 {
        std::fs::write(
            root.join(format!("src/deep/f{i}.txt")),
            format!("file {i}\n"),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("src/deep/f1.txt", root.join("link")).unwrap();
    std::fs::write(root.join("run.sh"), b"#!/bin/sh\necho ok\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Every file's relative path, kind, mode and contents' digest.
pub fn listing(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let what = if m.is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", m.permissions().mode() & 0o7777)
            } else {
                let digest = Sha256::digest(std::fs::read(&p).unwrap());
                format!("{:o} {digest:x}", m.permissions().mode() & 0o7777)
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

/// A grant request for `token` on `path`.
pub fn grant(path: &Path, token: &str, ttl: u64, uses: Option<u64>) -> GrantRequest {
    GrantRequest {
        path: path.display().to_string(),
        token_sha256: protocol::token::sha256_hex(token),
        ttl_seconds: ttl,
        uses,
    }
}

/// A pull of `path`'s contents from `source` into `target`.
pub fn pull_spec(source: &str, path: &Path, token: &str, target: &Path) -> PullSpec {
    PullSpec {
        source: source.to_owned(),
        source_pin: None,
        path: format!("{}/", path.display()),
        token: token.to_owned(),
        target: target.display().to_string(),
        sha256: None,
        connect_retries: None,
        owner: None,
    }
}
