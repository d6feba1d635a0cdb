//! A file that shrinks while it is archived: the stream must end without the end-of-archive marker,
//! so the client sees a truncated archive instead of a silently short one.

use super::*;

/// A writer that truncates `victim` once the archive's first header went out.
#[derive(Debug)]
struct Shrinker {
    out: Vec<u8>,
    victim: PathBuf,
}

impl Write for Shrinker {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.extend_from_slice(buf);
        if self.out.len() >= 512 {
            fs::write(&self.victim, "short")?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_file_that_shrinks_midway_ends_the_stream_without_end_marker() {
    let t = Scratch::new("shrink");
    let victim = t.join("victim");
    fs::write(&victim, big_contents()).unwrap();
    let mut out = Shrinker {
        out: Vec::new(),
        victim: victim.clone(),
    };
    let err = archive(&victim.display().to_string(), &mut out).unwrap_err();
    assert!(matches!(err, FilesError::Io { .. }), "{err:?}");
    assert_eq!(
        out.out.len(),
        512 + 5,
        "the header and what was read, no end marker"
    );
    let err = extract(&out.out[..], &t.join("dst"), false).unwrap_err();
    assert!(
        matches!(err, FilesError::InvalidTar(_)),
        "client sees a truncated archive: {err:?}"
    );
}
