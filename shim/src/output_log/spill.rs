//! Opens the anonymous spill file of one output log in the data directory. The data directory is
//! shared with the step's own processes, so the file must have no name anyone can guess or take
//! first: `O_TMPFILE` gives an inode with no name at all; on a filesystem without it, a random
//! name created with `O_EXCL` (retried on a collision) and unlinked at once.

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Attempts at a fresh random name before giving up (each collides only if someone created that
/// very name, which they cannot predict).
const ATTEMPTS: usize = 16;

/// A new, empty, unlinked file in `dir`, readable and writable by the shim only.
pub(crate) fn open(dir: &Path) -> io::Result<File> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        // O_EXCL with O_TMPFILE: the file can never be linked into the directory later.
        .custom_flags(libc::O_TMPFILE | libc::O_EXCL)
        .mode(0o600)
        .open(dir)
    {
        Ok(f) => Ok(f),
        // The filesystem (or an old kernel) has no O_TMPFILE: fall back to a random name.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) =>
        {
            open_named(dir)
        }
        Err(e) => Err(e),
    }
}

/// The fallback: a random name created exclusively, then unlinked so the space is freed with the log
/// even if the shim is killed.
pub(crate) fn open_named(dir: &Path) -> io::Result<File> {
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..ATTEMPTS {
        let path = dir.join(format!("stepshim-spill-{:016x}{:016x}", random(), random()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => {
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// 64 bits another process cannot predict: std's per-process random hash keys (seeded from the
/// kernel's random source), mixed with a counter so two calls differ.
fn random() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}
