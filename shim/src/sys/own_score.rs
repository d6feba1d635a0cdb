//! A child's `oom_score_adj` by inheritance: the shim sets its own score to the child's just around
//! the `clone` and back right after it, two writes to a file it keeps open. The child writing
//! `/proc/self/oom_score_adj` itself cost it about 14 µs here (most of it instantiating the new
//! pid's `/proc` entries) while the shim waited suspended; the two writes cost under a microsecond.
//!
//! For that span (the child's set-up until its `execve` releases the shim, tens of µs) the shim has
//! its children's score. The OOM killer ranks by score plus memory, so among processes at that
//! score it still picks the one using most memory, which in an OOM is the step's, not the shim's.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

/// The shim's score, raised (or lowered) to a child's until this is dropped.
#[derive(Debug)]
pub struct Raised {
    file: &'static File,
    /// The shim's own score, written back on drop; `None` when it already was the child's.
    own: Option<i32>,
}

impl Drop for Raised {
    fn drop(&mut self) {
        if let Some(own) = self.own {
            restore(self.file, own);
        }
    }
}

/// Gives the shim the score `adj` for the coming `clone`, so the child inherits it; `None` when
/// that cannot be done (no `/proc`, or the shim cannot move its own score both ways, checked once):
/// the child then sets its own.
pub fn raise(adj: i32) -> Option<Raised> {
    let file = own_file()?;
    // Read each time: whatever set the shim's own score since is what is restored.
    let own = read(file)?;
    if own == adj {
        return Some(Raised { file, own: None });
    }
    write(file, adj).ok()?;
    Some(Raised {
        file,
        own: Some(own),
    })
}

/// `/proc/self/oom_score_adj`, opened at the first spawn once a step up and back succeeded: a
/// lowering needs `CAP_SYS_RESOURCE` below the floor the runtime set, and the shim must never be
/// left raised.
fn own_file() -> Option<&'static File> {
    static OWN: OnceLock<Option<File>> = OnceLock::new();
    OWN.get_or_init(|| {
        let file = File::options()
            .read(true)
            .write(true)
            .open("/proc/self/oom_score_adj")
            .ok()?;
        let own = read(&file)?;
        let step = if own < 1000 { own + 1 } else { own - 1 };
        write(&file, step).ok()?;
        restore(&file, own).then_some(file)
    })
    .as_ref()
}

/// Writes the shim's own score back; false (and an error logged) when that failed.
fn restore(file: &File, own: i32) -> bool {
    let ok = write(file, own).is_ok();
    if !ok {
        crate::error!(own, "cannot restore the shim's own oom_score_adj");
    }
    ok
}

fn read(file: &File) -> Option<i32> {
    let mut buf = [0u8; 16];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

fn write(file: &File, adj: i32) -> std::io::Result<()> {
    file.write_at(adj.to_string().as_bytes(), 0).map(drop)
}
