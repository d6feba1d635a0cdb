//! The archive walk never leaves the tree: a directory swapped for a symlink while it is archived
//! is read through the descriptor opened before the swap; a symlink in the named path is refused;
//! depth is bounded; a spawn's working directory is never created through a symlink.

use super::*;
use crate::files::make_dirs;

/// A writer that, once the archive has written `after` bytes, swaps `dir/sub` for a symlink to
/// `target`, as a step process racing the shim would.
struct Swapper {
    out: Vec<u8>,
    after: usize,
    dir: PathBuf,
    target: PathBuf,
    swapped: bool,
}

impl Write for Swapper {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.extend_from_slice(buf);
        if !self.swapped && self.out.len() >= self.after {
            fs::rename(self.dir.join("sub"), self.dir.join("sub.old"))?;
            symlink(&self.target, self.dir.join("sub"))?;
            self.swapped = true;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_directory_swapped_for_a_symlink_mid_walk_is_read_as_it_was_opened() {
    let t = Scratch::new("swap-walk");
    let (tree, secret) = (t.join("tree"), t.join("secret"));
    fs::create_dir_all(tree.join("sub")).unwrap();
    fs::create_dir_all(&secret).unwrap();
    fs::write(tree.join("sub/a"), vec![b'a'; 4096]).unwrap();
    fs::write(tree.join("sub/shadow"), "decoy").unwrap();
    fs::write(secret.join("shadow"), "SECRET").unwrap();
    let source = crate::files::prepare_archive(&format!("{}/", tree.display())).unwrap();
    // The swap comes while `./sub/a` is written: `./sub/` is listed, `./sub/shadow` is not read.
    let swapper = Swapper {
        out: Vec::new(),
        after: 3 * 512,
        dir: tree.clone(),
        target: secret,
        swapped: false,
    };
    let out = source.write_from(swapper, 0, None).unwrap();
    assert!(out.swapped, "the swap happened mid-walk");
    let mut archive = tar::Archive::new(&out.out[..]);
    let mut seen = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let body = io::read_to_string(&mut entry).unwrap();
        assert_ne!(body, "SECRET", "{name} came from outside the tree");
        seen.push((name, body.len()));
    }
    assert!(seen.contains(&("./sub/shadow".into(), 5)), "{seen:?}");
}

#[test]
fn a_symlink_in_the_named_path_is_refused_and_the_last_one_stored_as_itself() {
    let t = Scratch::new("named-symlink");
    fs::create_dir_all(t.join("real/d")).unwrap();
    fs::write(t.join("real/d/f"), "f").unwrap();
    symlink(t.join("real"), t.join("link")).unwrap();
    for through in ["link/", "link/d", "link/d/", "link/d/f"] {
        let err = archive(&format!("{}/{through}", t.0.display()), Vec::new()).unwrap_err();
        assert!(
            matches!(err, FilesError::Symlinked(_)),
            "{through}: {err:?}"
        );
    }
    let tar = archive_to_vec(&t.join("link"), false).unwrap();
    let mut archive = tar::Archive::new(&tar[..]);
    let entry = archive.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(entry.header().entry_type(), EntryType::Symlink);
}

#[test]
fn a_tree_deeper_than_an_upload_may_be_is_refused_before_any_byte() {
    let t = Scratch::new("deep");
    let mut p = t.join("top");
    for _ in 0..=super::super::unpack::MAX_DEPTH {
        p.push("d");
    }
    fs::create_dir_all(&p).unwrap();
    let ok = t.0.join("top/d");
    // 512 levels below the named directory: archived; one more: refused.
    let source = crate::files::prepare_archive(&format!("{}/", ok.display())).unwrap();
    source.validator().unwrap();
    let source = crate::files::prepare_archive(&format!("{}/", t.join("top").display())).unwrap();
    let err = source.validator().unwrap_err();
    assert!(matches!(err, FilesError::InvalidPath(_)), "{err:?}");
}

#[test]
fn a_working_directory_is_made_only_without_symlinks() {
    let t = Scratch::new("make-dirs");
    fs::create_dir_all(t.join("elsewhere")).unwrap();
    symlink(t.join("elsewhere"), t.join("link")).unwrap();
    make_dirs(&t.join("a/b/c")).unwrap();
    assert!(t.join("a/b/c").is_dir());
    let err = make_dirs(&t.join("link/new/deeper")).unwrap_err();
    assert!(matches!(err, FilesError::Symlinked(_)), "{err:?}");
    assert!(
        !t.join("elsewhere/new").exists(),
        "created through the symlink"
    );
    // A directory that exists already, through a symlink or not, is used as it is.
    make_dirs(&t.join("link")).unwrap();
    make_dirs(&t.join("a/b")).unwrap();
}
