//! Read grants (PROTOCOL.md 4.9): a token the pod's controller chose, known here only by its SHA-256,
//! that may `GET /v1/files` under one path prefix until it expires or is used up. A grant token
//! authenticates nothing else: the router answers every other route 403.
//!
//! Paths are compared by whole components as written (no `..`). That is the whole check because
//! a download opens the path it names without following any symlink (`files/open.rs`) and walks
//! the tree below by descriptor: what it reads is below the grant's path as written, whatever a
//! process of the pod renames or swaps between this check and the last byte. A symlink in the
//! grant's own path is refused when the grant is made (such a grant could never be used).

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use protocol::artifacts::{Grant, GrantRequest};

use crate::error::Error;

/// Longest lifetime of a grant.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The grants of this shim.
#[derive(Debug)]
pub(crate) struct Grants {
    max: usize,
    inner: Mutex<Inner>,
    /// Requests with a grant's token refused since boot (expired, used up, another route or path),
    /// for `/metrics`.
    pub(crate) refused: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    list: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    id: String,
    path: String,
    hash: [u8; 32],
    expires: Instant,
    uses_left: Option<u64>,
    used: u64,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        now < self.expires && self.uses_left != Some(0)
    }

    fn report(&self, now: Instant) -> Grant {
        Grant {
            id: self.id.clone(),
            path: self.path.clone(),
            expires_in_seconds: self.expires.saturating_duration_since(now).as_secs(),
            uses_left: self.uses_left,
            used: self.used,
        }
    }
}

/// A request authenticated by a grant: what it may read.
#[derive(Debug, Clone)]
pub(crate) struct Granted {
    id: String,
    path: String,
}

impl Granted {
    /// The path the grant opens.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }
}

impl Grants {
    /// At most `max` grants at once (`STEPSHIM_MAX_GRANTS`).
    pub(crate) fn new(max: usize) -> Self {
        Grants {
            max,
            inner: Mutex::new(Inner::default()),
            refused: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a grant; expired and used-up grants are pruned first to make room.
    pub(crate) fn add(&self, req: GrantRequest) -> Result<Grant, Error> {
        let hash = protocol::token::parse_sha256_hex(&req.token_sha256)
            .ok_or_else(|| Error::BadRequest("token_sha256 must be 64 hex digits".into()))?;
        lexical(&req.path)?;
        crate::files::check_no_symlink(Path::new(&req.path))?;
        if req.ttl_seconds == 0 || req.ttl_seconds > MAX_TTL.as_secs() {
            return Err(Error::BadRequest(format!(
                "ttl_seconds must be between 1 and {}",
                MAX_TTL.as_secs()
            )));
        }
        let now = Instant::now();
        let mut inner = self.lock();
        inner.list.retain(|g| g.live(now));
        if inner.list.len() >= self.max {
            return Err(Error::Unavailable(format!(
                "{} grants are already registered (STEPSHIM_MAX_GRANTS); revoke one first",
                self.max
            )));
        }
        if inner.list.iter().any(|g| g.hash == hash) {
            return Err(Error::BadRequest(
                "a grant with this token already exists; choose a new token".into(),
            ));
        }
        inner.next += 1;
        let entry = Entry {
            id: format!("g{}", inner.next),
            path: req.path,
            hash,
            expires: now + Duration::from_secs(req.ttl_seconds),
            uses_left: req.uses,
            used: 0,
        };
        let report = entry.report(now);
        inner.list.push(entry);
        Ok(report)
    }

    /// Grants neither expired, used up nor revoked.
    pub(crate) fn live(&self) -> usize {
        let now = Instant::now();
        self.lock().list.iter().filter(|g| g.live(now)).count()
    }

    /// Counts one refused request bearing a grant's token; returns `err`.
    pub(crate) fn refuse(&self, err: Error) -> Error {
        self.refused.fetch_add(1, Ordering::Relaxed);
        err
    }

    /// Every grant not revoked.
    pub(crate) fn list(&self) -> Vec<Grant> {
        let now = Instant::now();
        self.lock().list.iter().map(|g| g.report(now)).collect()
    }

    /// Revokes grant `id`.
    pub(crate) fn revoke(&self, id: &str) -> Result<(), Error> {
        let mut inner = self.lock();
        let before = inner.list.len();
        inner.list.retain(|g| g.id != id);
        if inner.list.len() == before {
            return Err(Error::NotFound(format!("no grant with id {id:?}")));
        }
        Ok(())
    }

    /// The grant a token names: `None` when no grant has it, an error when it is expired or used
    /// up (revoked grants are gone: `None`).
    pub(crate) fn authenticate(&self, token: &[u8]) -> Option<Result<Granted, Error>> {
        let token = token.trim_ascii();
        if token.is_empty() {
            return None;
        }
        let hash = protocol::token::sha256(token);
        let now = Instant::now();
        let inner = self.lock();
        let g = inner.list.iter().find(|g| g.hash == hash)?;
        Some(if g.live(now) {
            Ok(Granted {
                id: g.id.clone(),
                path: g.path.clone(),
            })
        } else {
            Err(self.refuse(Error::GrantInvalid(format!(
                "grant {} has expired or is used up",
                g.id
            ))))
        })
    }

    /// Checks that `granted` may read `path` and counts one use.
    pub(crate) fn use_for(&self, granted: &Granted, path: &str) -> Result<(), Error> {
        let outside = || {
            Error::Forbidden(format!(
                "{path} is outside the grant's path {}",
                granted.path
            ))
        };
        let want = lexical(path).map_err(|_| outside())?;
        let prefix = lexical(&granted.path)?;
        if !want.starts_with(&prefix) {
            return Err(outside());
        }
        let now = Instant::now();
        let mut inner = self.lock();
        let g = inner
            .list
            .iter_mut()
            .find(|g| g.id == granted.id)
            .ok_or_else(|| Error::GrantInvalid(format!("grant {} was revoked", granted.id)))?;
        if !g.live(now) {
            return Err(Error::GrantInvalid(format!(
                "grant {} has expired or is used up",
                g.id
            )));
        }
        if let Some(n) = &mut g.uses_left {
            *n -= 1;
        }
        g.used += 1;
        Ok(())
    }
}

/// An absolute path without `..` or NUL bytes, as components.
fn lexical(path: &str) -> Result<PathBuf, Error> {
    let p = Path::new(path);
    if !p.is_absolute() || path.contains('\0') {
        return Err(Error::BadRequest(format!(
            "{path:?} is not an absolute path"
        )));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(Error::BadRequest(format!("{path:?} contains `..`")));
    }
    Ok(p.components().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str, token: &str, uses: Option<u64>) -> GrantRequest {
        GrantRequest {
            path: path.into(),
            token_sha256: protocol::token::sha256_hex(token),
            ttl_seconds: 60,
            uses,
        }
    }

    #[test]
    fn a_grant_reads_only_below_its_prefix_and_only_its_uses() {
        let dir = std::env::temp_dir().join(format!("grants-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("out/sub")).unwrap();
        let _ = std::fs::remove_file(dir.join("out/escape"));
        std::os::unix::fs::symlink("/etc", dir.join("out/escape")).unwrap();
        let out = dir.join("out").display().to_string();
        let grants = Grants::new(2);
        grants.add(req(&out, "tok-a", Some(2))).unwrap();
        let g = grants.authenticate(b"tok-a").unwrap().unwrap();
        assert!(grants.authenticate(b"tok-b").is_none());
        for bad in [format!("{out}/../x"), format!("{out}x"), "/etc".into()] {
            assert!(
                matches!(grants.use_for(&g, &bad), Err(Error::Forbidden(_))),
                "{bad}"
            );
        }
        // Below the prefix as written: allowed here; the download then refuses the symlink
        // (`files/open.rs`), whatever it points at.
        grants.use_for(&g, &format!("{out}/sub/")).unwrap();
        grants.use_for(&g, &format!("{out}/escape/passwd")).unwrap();
        assert!(matches!(
            grants.use_for(&g, &format!("{out}/sub")),
            Err(Error::GrantInvalid(_))
        ));
        assert!(matches!(grants.authenticate(b"tok-a"), Some(Err(_))));
        // A grant through a symlink could never be used: refused when made.
        for through in [format!("{out}/escape"), format!("{out}/escape/ssl")] {
            assert!(
                matches!(
                    grants.add(req(&through, "tok-e", None)),
                    Err(Error::Files(crate::files::FilesError::Symlinked(_)))
                ),
                "{through}"
            );
        }
        grants.add(req(&out, "tok-b", None)).unwrap();
        grants.add(req(&out, "tok-c", None)).unwrap();
        assert!(matches!(
            grants.add(req(&out, "tok-d", None)),
            Err(Error::Unavailable(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
