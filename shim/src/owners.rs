//! Which owners an upload or a pull may give what it writes (PROTOCOL.md 4.8.3), decided before
//! anything is written: a shim with `CAP_CHOWN` in its effective set may give any owner; one
//! without may give only its own effective uid with its effective gid or one of its supplementary
//! groups, which `fchown(2)` allows an unprivileged owner of a file. The credentials are read once:
//! the shim never changes its own.

use std::sync::OnceLock;

use protocol::owner::Owner;

use crate::error::Error;
use crate::sys;

/// What the shim may give.
#[derive(Debug)]
struct Rights {
    /// `CAP_CHOWN` is effective: any owner.
    any: bool,
    uid: u32,
    /// The effective gid and the supplementary groups.
    gids: Vec<u32>,
}

fn rights() -> &'static Rights {
    static RIGHTS: OnceLock<Rights> = OnceLock::new();
    // A call that fails (it cannot, short of a seccomp filter) grants nothing: the refusal
    // then says which ids remain.
    RIGHTS.get_or_init(|| {
        let mut gids = sys::creds::groups().unwrap_or_default();
        gids.push(sys::creds::getegid());
        Rights {
            any: sys::creds::has_cap_chown().unwrap_or(false),
            uid: sys::geteuid(),
            gids,
        }
    })
}

/// The refusal of an owner that is not `UID:GID` with both ids below 4294967295 (which `chown`
/// reads as "unchanged").
const MALFORMED: &str = "owner must be UID:GID, decimal ids below 4294967295";

/// `Ok` when this shim may give `owner` (a valid one); 400 for an invalid id, 403
/// `owner_not_permitted` for one it may not give.
pub(crate) fn permit(owner: Owner) -> Result<(), Error> {
    if !owner.is_valid() {
        return Err(Error::BadRequest(MALFORMED.into()));
    }
    let r = rights();
    if r.any || owner.uid == r.uid && r.gids.contains(&owner.gid) {
        return Ok(());
    }
    Err(Error::OwnerNotPermitted(format!(
        "owner {owner}: without CAP_CHOWN only the shim's own uid and groups"
    )))
}

/// The `owner` query parameter of an upload, checked: `None` when absent.
pub(crate) fn from_query(value: Option<&str>) -> Result<Option<Owner>, Error> {
    let Some(v) = value else { return Ok(None) };
    let owner = Owner::parse(v).ok_or_else(|| Error::BadRequest(MALFORMED.into()))?;
    permit(owner).map(|()| Some(owner))
}
