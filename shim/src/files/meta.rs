//! The metadata an extracted entry keeps: read from its tar header, set on the created file or
//! directory through its open fd (never by path, so a symlink swapped in meanwhile is not followed).

use std::fs::{File, Permissions};
use std::io;
use std::os::unix::fs::{PermissionsExt, fchown};
use std::path::Path;
use std::time::{Duration, SystemTime};

use protocol::owner::Owner;
use tar::Header;

use super::FilesError;

/// Metadata to set on a file or directory once it exists.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meta {
    /// Permission bits including setuid, setgid and sticky.
    pub(crate) mode: u32,
    /// Modification time (whole seconds, as in a ustar header).
    pub(crate) mtime: SystemTime,
    /// `Some((uid, gid))` when owners are kept or given.
    pub(crate) owner: Option<(u32, u32)>,
    /// Whether `owner` is the upload's `owner`, not the tar's.
    pub(crate) given: bool,
}

impl Meta {
    /// Reads the metadata of an entry; owners only when `same_owner`. On a field that does not
    /// parse or fit, returns its name.
    pub(crate) fn read(header: &Header, same_owner: bool) -> Result<Meta, &'static str> {
        let mode = header.mode().map_err(|_| "mode")? & 0o7777;
        let secs = header.mtime().map_err(|_| "mtime")?;
        let mtime = i64::try_from(secs)
            .ok()
            .and_then(|_| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs)))
            .ok_or("mtime")?;
        let id = |v: io::Result<u64>, what| v.ok().and_then(|v| u32::try_from(v).ok()).ok_or(what);
        let owner = if same_owner {
            Some((id(header.uid(), "uid")?, id(header.gid(), "gid")?))
        } else {
            None
        };
        Ok(Meta {
            mode,
            mtime,
            owner,
            given: false,
        })
    }

    /// With an upload's `owner` (PROTOCOL.md 4.8.3), that owner instead of the tar's.
    pub(crate) fn owned_by(self, owner: Option<Owner>) -> Meta {
        match owner {
            Some(o) => Meta {
                owner: Some((o.uid, o.gid)),
                given: true,
                ..self
            },
            None => self,
        }
    }

    /// The metadata a regular file gets: with an upload's `owner`, without set-user-ID and
    /// set-group-ID (one user's file must not run as another's for every user of the pod).
    pub(crate) fn for_file(self) -> Meta {
        if self.given {
            Meta {
                mode: self.mode & !0o6000,
                ..self
            }
        } else {
            self
        }
    }
}

/// Sets owner (first: `chown` clears setuid bits), mode (unless `set_mode` is false: the file has
/// it already) and mtime through an open file or directory; `path` only names it in errors.
pub(super) fn apply(
    file: &File,
    path: &Path,
    meta: &Meta,
    set_mode: bool,
) -> Result<(), FilesError> {
    if let Some((uid, gid)) = meta.owner {
        fchown(file, Some(uid), Some(gid))
            .map_err(|err| FilesError::io("changing the owner of", path, err))?;
    }
    if set_mode {
        file.set_permissions(Permissions::from_mode(meta.mode))
            .map_err(|err| FilesError::io("changing the mode of", path, err))?;
    }
    file.set_modified(meta.mtime)
        .map_err(|err| FilesError::io("setting the mtime of", path, err))
}
