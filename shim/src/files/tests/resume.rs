//! The archive is deterministic and resumable: for an unchanged tree every offset gives the rest of
//! the same bytes, the validator names the whole stream, and a change of the tree changes it.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};

use super::Scratch;
use crate::files::prepare_archive;

fn tree(t: &Scratch) -> String {
    let src = t.join("src");
    fs::create_dir_all(src.join("deep/er")).unwrap();
    let long = "n".repeat(150);
    fs::write(src.join(&long), b"long name").unwrap();
    fs::write(src.join("big"), vec![7u8; 200_000]).unwrap();
    fs::write(src.join("deep/er/x.sh"), b"#!/bin/sh\necho x\n").unwrap();
    fs::set_permissions(src.join("deep/er/x.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::hard_link(src.join("big"), src.join("big.link")).unwrap();
    symlink(
        "deep/er/".to_owned() + &"t".repeat(120),
        src.join("dangling"),
    )
    .unwrap();
    for i in 0..40 {
        fs::write(src.join(format!("f{i:02}")), format!("{i}").repeat(i)).unwrap();
    }
    format!("{}/", src.display())
}

fn stream(path: &str, offset: u64) -> Vec<u8> {
    let source = prepare_archive(path).unwrap();
    let v = source.validator().unwrap();
    source.write_from(Vec::new(), offset, Some(&v)).unwrap()
}

#[test]
fn every_offset_resumes_the_same_stream() {
    let t = Scratch::new("resume");
    let path = tree(&t);
    let full = stream(&path, 0);
    let v = prepare_archive(&path).unwrap().validator().unwrap();
    assert_eq!(v.len, full.len() as u64);
    assert_eq!(full.len() % 512, 0);
    assert_eq!(stream(&path, 0), full, "deterministic");
    let len = full.len() as u64;
    for offset in [
        1,
        511,
        512,
        513,
        1000,
        4096,
        100_000,
        len - 1024,
        len - 1,
        len,
    ] {
        assert_eq!(
            stream(&path, offset),
            &full[offset as usize..],
            "offset {offset}"
        );
    }
    // The stream still reads as the tree, names and modes included.
    let mut a = tar::Archive::new(&full[..]);
    let names: Vec<String> = a
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert!(
        names.contains(&format!("./{}", "n".repeat(150))),
        "{names:?}"
    );
    assert!(names.iter().position(|n| n == "./f00") < names.iter().position(|n| n == "./f39"));
}

#[test]
fn a_change_of_the_tree_changes_the_validator_and_cuts_a_resumed_stream() {
    let t = Scratch::new("resume-change");
    let path = tree(&t);
    let before = prepare_archive(&path).unwrap().validator().unwrap();
    assert_eq!(prepare_archive(&path).unwrap().validator().unwrap(), before);
    // Same size, same second: the inode's change time and mtime nanoseconds still tell.
    fs::write(t.join("src/f05"), b"55555").unwrap();
    let after = prepare_archive(&path).unwrap().validator().unwrap();
    assert_ne!(after.etag, before.etag);
    let source = prepare_archive(&path).unwrap();
    let mut out = Vec::new();
    assert!(source.write_from(&mut out, 0, Some(&before)).is_err());
    assert!(
        out.len() < after.len as usize - 1023,
        "cut before its end marker"
    );
}
