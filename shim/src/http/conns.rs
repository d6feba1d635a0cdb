//! The connection cap. Anyone on the pod network can open connections without a token, so at
//! most `STEPSHIM_MAX_CONNECTIONS` are kept: when a new one arrives at the cap, the oldest
//! connection that has not presented a valid token is closed to make room (a flood of idle or
//! slow connections then evicts itself, and a health probe or an authenticated client still gets
//! in); only when every open connection has authenticated is the new one closed instead.
//!
//! Grant holders (other pods pulling this pod's files and images) authenticate too, so they get a
//! share of the cap of their own: at most `STEPSHIM_GRANT_MAX_CONNECTIONS` connections, and never
//! more than half the cap, may have authenticated with a grant token and not with the pod's. A
//! connection moves only up, under the lock: new, then grant (its first grant request when the
//! share has room; when it is full the request is refused and the connection stays new, so it can
//! be evicted and its authentication deadline still runs), then pod (any request with the pod's
//! token, which frees its place in the share). The share is kept rather than taken back: a new
//! connection is admitted before it says who it is, so evicting a grant connection for it would
//! let anyone cut grant holders' pulls. Instead, since grant connections fill at most the share,
//! a newcomer at the cap always finds a new connection to evict unless the pod's own connections
//! fill the rest: the pod's token always gets a connection, and no connection that authenticated
//! is ever closed for another. The default share, 256 of 1,024, is 4 connections for each of the
//! 64 live grants `STEPSHIM_MAX_GRANTS` allows (containerd downloads 3 layers at once by default),
//! and leaves three quarters of the cap to the pod's token and to new connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Why a grant request is refused when the grants' share of connections is full.
pub(crate) const FULL: &str =
    "the grant tokens' share of connections is taken (STEPSHIM_GRANT_MAX_CONNECTIONS); retry later";

/// What a connection has shown, in [`Slot::shown`]: it only moves up.
const NEW: u8 = 0;
const GRANT: u8 = 1;
const POD: u8 = 2;

/// One open connection's shared state.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// `NEW`, `GRANT` or `POD`; written only under the lock of [`Conns`], so the grant count
    /// there always matches, and read without it by the connection's authentication deadline.
    shown: AtomicU8,
    /// Notified when the connection is evicted; its task then drops it.
    pub(crate) evict: Notify,
}

impl Slot {
    /// Whether a request on the connection passed authentication (with either token).
    pub(crate) fn authed(&self) -> bool {
        self.shown.load(Ordering::Acquire) != NEW
    }
}

/// The open connections and how many of them hold a place in the grant share.
#[derive(Debug, Default)]
struct Open {
    next: u64,
    slots: HashMap<u64, Arc<Slot>>,
    grants: usize,
}

/// The open connections, oldest first.
#[derive(Debug)]
pub(crate) struct Conns {
    max: usize,
    grant_max: usize,
    open: Mutex<Open>,
}

/// A connection's place under the cap, released when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    conns: Arc<Conns>,
    id: u64,
    /// The connection's state.
    pub(crate) slot: Arc<Slot>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.conns.lock();
        open.slots.remove(&self.id);
        if self.slot.shown.load(Ordering::Acquire) == GRANT {
            open.grants -= 1;
        }
    }
}

impl Conns {
    /// Room for `max` connections, of which at most `grant_max` (and at most half of `max`)
    /// authenticated with a grant token.
    pub(crate) fn new(max: usize, grant_max: usize) -> Arc<Self> {
        Arc::new(Conns {
            max,
            grant_max: grant_max.min(max / 2),
            open: Mutex::default(),
        })
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection, evicting the oldest unauthenticated one at the cap; `None`
    /// when every open connection is authenticated and the cap is reached.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut open = self.lock();
        if open.slots.len() >= self.max {
            // The oldest: ids only grow.
            let victim = open
                .slots
                .iter()
                .filter(|(_, s)| !s.authed())
                .map(|(id, _)| *id)
                .min()?;
            if let Some(slot) = open.slots.remove(&victim) {
                slot.evict.notify_one();
            }
        }
        let id = open.next;
        open.next += 1;
        let slot = Arc::new(Slot::default());
        open.slots.insert(id, slot.clone());
        Some(Ticket {
            conns: self.clone(),
            id,
            slot,
        })
    }

    /// Records that a request on `slot`'s connection passed authentication, with a grant token
    /// (`grant`) or the pod's. A grant request on a new connection takes a place in the grant
    /// share; when the share is full it is not recorded (`false`: the caller refuses the request
    /// with [`FULL`]) and the connection stays new.
    pub(crate) fn authenticated(&self, slot: &Slot, grant: bool) -> bool {
        let mut open = self.lock();
        let was = slot.shown.load(Ordering::Acquire);
        match (was, grant) {
            (NEW, true) if open.grants >= self.grant_max => return false,
            (NEW, true) => open.grants += 1,
            (GRANT, false) => open.grants -= 1,
            _ => {}
        }
        let now = if grant { GRANT } else { POD };
        slot.shown.store(was.max(now), Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evicted(t: &Ticket) -> bool {
        let n = t.slot.evict.notified();
        tokio::pin!(n);
        n.as_mut().enable()
    }

    #[test]
    fn oldest_unauthenticated_is_evicted_and_authenticated_are_kept() {
        let conns = Conns::new(4, 1);
        let a = conns.admit().unwrap();
        let b = conns.admit().unwrap();
        let g = conns.admit().unwrap();
        let d = conns.admit().unwrap();
        assert!(conns.authenticated(&a.slot, false));
        assert!(conns.authenticated(&g.slot, true));
        let c = conns.admit().unwrap();
        assert_eq!(conns.len(), 4);
        assert!(evicted(&b), "b is the oldest new connection");
        assert!(!evicted(&a) && !evicted(&g) && !evicted(&d));
        let e = conns.admit().unwrap();
        assert!(
            evicted(&d),
            "then d: a pod or grant connection is never evicted"
        );
        assert!(conns.authenticated(&c.slot, false));
        assert!(conns.authenticated(&e.slot, false));
        assert!(
            conns.admit().is_none(),
            "all authenticated: the newcomer is refused"
        );
        drop(a);
        assert!(conns.admit().is_some());
    }

    #[test]
    fn grant_connections_fill_only_their_share() {
        let conns = Conns::new(8, 100);
        let t: Vec<_> = (0..8).map(|_| conns.admit().unwrap()).collect();
        for (i, x) in t.iter().enumerate() {
            let r = conns.authenticated(&x.slot, true);
            assert_eq!(r, i < 4, "the share is half the cap: {i}");
        }
        assert!(!t[4].slot.authed(), "a refused grant connection stays new");
        // The pod's token gets a connection: a newcomer evicts the oldest refused one.
        let pod = conns.admit().unwrap();
        assert!(evicted(&t[4]));
        assert!(conns.authenticated(&pod.slot, false));
        // Grant, then pod on one connection: its place in the share is free again.
        assert!(conns.authenticated(&t[0].slot, false));
        assert!(conns.authenticated(&t[0].slot, true));
        assert!(conns.authenticated(&t[5].slot, true));
        assert!(!conns.authenticated(&t[6].slot, true));
        // A closed grant connection frees its place too.
        let mut t = t;
        drop(t.remove(1));
        assert!(conns.authenticated(&t[5].slot, true));
        assert_eq!(conns.lock().grants, 4);
    }
}
