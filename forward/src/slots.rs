//! The connection cap. Any process in the host's network can open connections to the forwarder,
//! and they all come from 127.0.0.1 as containerd's do, so a peer's address tells nobody apart (a
//! per-peer limit would limit containerd with them). At most `max_connections` are kept: when a
//! new one arrives at the cap, the oldest connection that has not yet sent a complete request is
//! closed to make room, else the oldest with no request in flight (a keep-alive connection between
//! requests: its client opens another when it needs one). Only when every open connection has a
//! request in flight is the new one turned away. A flood of idle connections then evicts itself,
//! and a pull still gets in.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tokio::sync::{Notify, watch};

/// One open connection's state, shared by its task and the cap.
#[derive(Debug, Default)]
pub struct Slot {
    /// Set once a complete request head arrived on the connection.
    requested: AtomicBool,
    /// Requests whose answer is not yet written to the end (0 or 1: HTTP/1 takes one at a time).
    in_flight: AtomicUsize,
    /// Notified when the connection is evicted; its task then drops it.
    pub evict: Notify,
}

impl Slot {
    /// Marks a request begun; it is in flight until the returned guard (kept by its answer's
    /// body) is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.requested.store(true, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Whether a complete request head has arrived.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }
}

/// A request in flight on its connection, until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<Slot>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections, oldest first (ids only grow), and how many tasks still hold a ticket.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    open: Mutex<(u64, BTreeMap<u64, Arc<Slot>>)>,
    /// Tickets alive, evicted ones included until their task ends: the drain waits for 0.
    live: watch::Sender<usize>,
}

/// A connection's place under the cap, given back when dropped.
#[derive(Debug)]
pub struct Ticket {
    slots: Arc<Slots>,
    id: u64,
    /// The connection's state.
    pub slot: Arc<Slot>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.slots.lock().1.remove(&self.id);
        self.slots.live.send_modify(|n| *n -= 1);
    }
}

impl Slots {
    /// Room for `max` connections.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Slots {
            max,
            open: Mutex::new((0, BTreeMap::new())),
            live: watch::Sender::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Arc<Slot>>)> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection, evicting one at the cap (see the module's rule); `None` when
    /// every open connection has a request in flight. A connection evicted just as its next
    /// request arrives is closed before answering it, which HTTP clients retry on a new
    /// connection for the `GET` and `HEAD` the forwarder serves.
    pub fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut guard = self.lock();
        let (next, open) = &mut *guard;
        if open.len() >= self.max {
            let victim = open
                .iter()
                .find(|(_, s)| !s.requested())
                .or_else(|| open.iter().find(|(_, s)| !s.busy()))
                .map(|(id, _)| *id)?;
            if let Some(slot) = open.remove(&victim) {
                slot.evict.notify_one();
            }
        }
        let id = *next;
        *next += 1;
        let slot = Arc::new(Slot::default());
        open.insert(id, slot.clone());
        self.live.send_modify(|n| *n += 1);
        Some(Ticket {
            slots: self.clone(),
            id,
            slot,
        })
    }

    /// Completes once every ticket is dropped.
    pub async fn drained(&self) {
        let mut live = self.live.subscribe();
        let _ = live.wait_for(|n| *n == 0).await;
    }
}

/// An answer's body that keeps its request in flight until it is written to the end (or dropped).
#[derive(Debug)]
pub struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    /// `body`, its request in flight until it is dropped.
    pub fn new(body: B, in_flight: InFlight) -> Self {
        Tracked {
            body,
            _in_flight: in_flight,
        }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
    fn never_requested_go_first_then_idle_and_in_flight_stay() {
        let slots = Slots::new(3);
        let (a, b, c) = (
            slots.admit().unwrap(),
            slots.admit().unwrap(),
            slots.admit().unwrap(),
        );
        let a_busy = a.slot.begin();
        drop(b.slot.begin()); // b: one request answered, now idle
        let d = slots.admit().unwrap();
        assert!(evicted(&c) && !evicted(&b), "c never sent a request");
        let d_busy = d.slot.begin();
        let _e = slots.admit().unwrap();
        assert!(evicted(&b), "then the idle keep-alive connection");
        let _e_busy = _e.slot.begin();
        assert!(slots.admit().is_none(), "all in flight: turned away");
        assert!(!evicted(&a) && !evicted(&d));
        drop(a_busy);
        assert!(slots.admit().is_some(), "a finished its answer: evictable");
        drop(d_busy);
    }

    #[tokio::test]
    async fn the_drain_waits_for_every_ticket_evicted_ones_included() {
        let slots = Slots::new(1);
        let first = slots.admit().unwrap();
        let second = slots.admit().unwrap();
        assert!(evicted(&first));
        drop(second);
        let drained = slots.drained();
        tokio::pin!(drained);
        assert!(futures_poll_once(drained.as_mut()).await.is_pending());
        drop(first);
        drained.await;
    }

    async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Poll<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut f).poll(cx))).await
    }
}
