//! Fuzzes tar extraction with hostile streams: the input is either a raw tar stream or (first byte
//! odd) a list of entries built into one, so that symlinks, hard links, `..` and duplicate names
//! are tried far more often than random bytes would. Whatever happens, nothing may land outside
//! the target directory: a sibling sentinel directory (which symlinks already in the target point
//! at) must keep exactly its one file, contents and mode, and no staging directory may be left.
#![no_main]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stepshim::extract::{Limits, Options, Owner, Resolve, extract_with};

/// The prefix of the staging directories an upload makes inside its target.
const STAGING: &[u8] = b".stepshim-put-";

/// `base/dir` (the target, rebuilt per run) and `base/outside` (the sentinel).
fn base() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let b = std::env::temp_dir().join(format!("stepshim-fuzz-{}", std::process::id()));
        let _ = fs::remove_dir_all(&b);
        fs::create_dir_all(b.join("outside")).expect("outside");
        fs::write(b.join("outside/sentinel"), "sentinel").expect("sentinel");
        fs::set_permissions(b.join("outside"), fs::Permissions::from_mode(0o755)).expect("mode");
        b
    })
}

/// Builds a tar from records separated by 0xff: `[type][name] 0x00 [link] 0x00 [data]`.
fn entries(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in data.split(|b| *b == 0xff).take(64) {
        let Some((&kind, rest)) = record.split_first() else {
            continue;
        };
        let mut parts = rest.splitn(3, |b| *b == 0);
        let name = parts.next().unwrap_or_default();
        let link = parts.next().unwrap_or_default();
        let body = parts.next().unwrap_or_default();
        let kind = match kind % 6 {
            0 => tar::EntryType::Regular,
            1 => tar::EntryType::Directory,
            2 => tar::EntryType::Symlink,
            3 => tar::EntryType::Link,
            4 => tar::EntryType::GNULongName,
            _ => tar::EntryType::new(kind),
        };
        let mut h = tar::Header::new_gnu();
        let old = h.as_old_mut();
        let n = name.len().min(old.name.len());
        old.name[..n].copy_from_slice(&name[..n]);
        let l = link.len().min(old.linkname.len());
        old.linkname[..l].copy_from_slice(&link[..l]);
        h.set_entry_type(kind);
        h.set_mode(0o7777);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(body.len() as u64);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(body);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .map(|r| r.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()))
        .expect("list")
        .collect();
    n.sort();
    n
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let base = base();
    let dir = base.join("dir");
    let outside = base.join("outside");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir(&dir).expect("dir");
    symlink("../outside", dir.join("rel")).expect("symlink");
    symlink(&outside, dir.join("abs")).expect("symlink");
    let stream = if mode & 1 == 1 { entries(rest) } else { rest.to_vec() };
    // A stream may name its own entries `.stepshim-put-…` (the fuzzer finds the prefix in the
    // binary); those are content, not staging left behind, so such inputs prove nothing here.
    if stream.windows(STAGING.len()).any(|w| w == STAGING) {
        return;
    }
    let opts = Options {
        same_owner: false,
        // An upload's owner: as root, every entry is chowned through its fd (never by path).
        owner: (mode & 8 == 8).then_some(Owner {
            uid: 1000,
            gid: 1000,
        }),
        limits: Limits {
            max_bytes: 1 << 20,
            max_header_bytes: 4096,
            // Direct writes for files of a page or more (the aligned path and its tail), or none.
            direct_min: if mode & 4 == 4 { 4096 } else { 0 },
        },
        resolve: if mode & 2 == 2 { Resolve::Walk } else { Resolve::Auto },
    };
    let _ = extract_with(&stream[..], &dir, &opts);
    assert_eq!(names(&outside), ["sentinel"]);
    assert_eq!(fs::read(outside.join("sentinel")).expect("sentinel"), b"sentinel");
    let mode = fs::metadata(&outside).expect("outside").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    let own = |p: &Path| fs::symlink_metadata(p).map(|m| (m.uid(), m.gid())).expect("owner");
    assert_eq!(own(&outside), own(base));
    assert_eq!(own(&outside.join("sentinel")), own(base));
    assert_eq!(names(base), ["dir", "outside"]);
    let staging = std::str::from_utf8(STAGING).expect("ascii");
    assert!(!names(&dir).iter().any(|n| n.starts_with(staging)));
});
