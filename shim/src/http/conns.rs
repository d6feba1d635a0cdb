//! The connection cap. Anyone on the pod network can open connections without a token, so at
//! most `STEPSHIM_MAX_CONNECTIONS` are kept: when a new one arrives at the cap, the oldest
//! connection that has not presented a valid token is closed to make room (a flood of idle or
//! slow connections then evicts itself, and a health probe or an authenticated client still gets
//! in); only when every open connection has authenticated is the new one closed instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// One open connection's shared flags.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// Set once a request on the connection passed authentication.
    pub(crate) authed: AtomicBool,
    /// Notified when the connection is evicted; its task then drops it.
    pub(crate) evict: Notify,
}

/// The open connections, oldest first.
#[derive(Debug)]
pub(crate) struct Conns {
    max: usize,
    open: Mutex<(u64, HashMap<u64, Arc<Slot>>)>,
}

/// A connection's place under the cap, released when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    conns: Arc<Conns>,
    id: u64,
    /// The connection's flags.
    pub(crate) slot: Arc<Slot>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.conns.lock().1.remove(&self.id);
    }
}

impl Conns {
    /// Room for `max` connections.
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Conns {
            max,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().1.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<u64, Arc<Slot>>)> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection, evicting the oldest unauthenticated one at the cap; `None`
    /// when every open connection is authenticated and the cap is reached.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut guard = self.lock();
        let (next, open) = &mut *guard;
        if open.len() >= self.max {
            // The oldest: ids only grow.
            let victim = open
                .iter()
                .filter(|(_, s)| !s.authed.load(Ordering::Acquire))
                .map(|(id, _)| *id)
                .min()?;
            if let Some(slot) = open.remove(&victim) {
                slot.evict.notify_one();
            }
        }
        let id = *next;
        *next += 1;
        let slot = Arc::new(Slot::default());
        open.insert(id, slot.clone());
        Some(Ticket {
            conns: self.clone(),
            id,
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_unauthenticated_is_evicted_and_authenticated_are_kept() {
        let conns = Conns::new(2);
        let a = conns.admit().unwrap();
        let b = conns.admit().unwrap();
        a.slot.authed.store(true, Ordering::Release);
        let c = conns.admit().unwrap();
        assert_eq!(conns.len(), 2);
        // b was evicted: its notification is waiting for its task.
        {
            let evicted = b.slot.evict.notified();
            tokio::pin!(evicted);
            assert!(evicted.as_mut().enable());
        }
        c.slot.authed.store(true, Ordering::Release);
        assert!(
            conns.admit().is_none(),
            "all authenticated: the newcomer is refused"
        );
        drop(a);
        assert!(conns.admit().is_some());
        drop(b);
        drop(c);
    }
}
