//! Counts live client connections so shutdown can wait for them to finish.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::route::VirtualServerRuntime;

/// Live client connections across all listeners.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    active: AtomicUsize,
    idle: Notify,
    /// Set when the drain timeout passed: connections still open end now.
    cut: AtomicBool,
    cut_notify: Notify,
}

/// Held by each connection task; the last one dropped wakes the drainer.
#[derive(Debug)]
pub(crate) struct DrainGuard {
    drain: Arc<Drain>,
}

impl Drain {
    pub(crate) fn enter(self: &Arc<Self>) -> DrainGuard {
        self.active.fetch_add(1, Ordering::AcqRel);
        DrainGuard {
            drain: Arc::clone(self),
        }
    }

    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// The drain timeout passed: tells the connections still open to end (and log why).
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.cut_notify.notify_waiters();
    }

    /// Completes once [`Drain::cut`] was called.
    pub(crate) async fn cut_off(&self) {
        loop {
            let notified = self.cut_notify.notified();
            if self.cut.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Completes when no connection is left.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.active() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl DrainGuard {
    /// Completes when the drain timeout passed with this connection still open.
    pub(crate) async fn cut_off(&self) {
        self.drain.cut_off().await;
    }

    /// The drain this connection is counted in, for what runs in tasks of its own (the
    /// streams of an HTTP/2 connection) and must end at its cut too.
    pub(crate) fn shared(&self) -> Arc<Drain> {
        Arc::clone(&self.drain)
    }
}

impl Drop for DrainGuard {
    fn drop(&mut self) {
        if self.drain.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.drain.idle.notify_waiters();
        }
    }
}

/// An admitted client connection's place in its virtual server's count and in
/// the drain, held by its task and given back when the task ends.
#[derive(Debug)]
pub(crate) struct Admission {
    pub vs: Arc<VirtualServerRuntime>,
    pub(crate) drain: DrainGuard,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.vs.shared.open.fetch_sub(1, Ordering::AcqRel);
        self.vs.metrics.connections_open.dec();
    }
}
