//! Counts live client connections so shutdown can wait for them to finish.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;

use tokio::sync::Notify;
use weir_core::shutdown::FlagWait;
use weir_rules::limits::ConnectionPermit;

use crate::client::IdleConnection;
use crate::crew::Crew;
use crate::route::VirtualServerRuntime;

/// Live client connections across all listeners.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    active: AtomicUsize,
    idle: Notify,
    /// Set when the drain timeout passed: connections still open end now.
    cut: AtomicBool,
    cut_notify: Notify,
    /// Where idle connections wait parked (`park.rs`): opened by the proxy's run,
    /// absent where connections are served without one (then none is parked).
    lot: OnceLock<Arc<dyn Parking>>,
}

/// `serving`'s output, or `None` if `cut` completes first (the drain's cut, or a future
/// that ends in it). Takes the (large) future pinned where it was built, so it is not moved.
pub(crate) async fn or_cut<F: Future>(
    mut serving: Pin<&mut F>,
    cut: impl Future<Output = ()>,
) -> Option<F::Output> {
    let mut cut = std::pin::pin!(cut);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = serving.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        cut.as_mut().poll(cx).map(|()| None)
    })
    .await
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

    /// Gives this proxy's connections a lot to be parked in (once). Without one they
    /// are never parked.
    pub(crate) fn open_lot(&self, lot: Arc<dyn Parking>) {
        let _ = self.lot.set(lot);
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
    ///
    /// Raced by a future polled many times between its waits (a TCP session's relay, once
    /// per exchange), so its waiter joins the list once, on the first poll, and keeps the
    /// task's waker; later polls read the flag. Polled as a `Notified` each time, it locked
    /// the list at every poll (`bench/insns --modes l4rr`: about 400 user-space
    /// instructions per exchange, with `select!`'s random branch order).
    pub(crate) async fn cut_off(&self) {
        // Only `cut` notifies, after setting the flag.
        let mut wait = std::pin::pin!(FlagWait::new(self.cut_notify.notified()));
        std::future::poll_fn(|cx| {
            wait.as_mut()
                .poll_set(|| self.cut.load(Ordering::Acquire), cx)
        })
        .await
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

    /// The lot where this connection may be parked, if the proxy opened one.
    pub(crate) fn lot(&self) -> Option<&Arc<dyn Parking>> {
        self.drain.lot.get()
    }
}

impl Drop for DrainGuard {
    fn drop(&mut self) {
        if self.drain.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.drain.idle.notify_waiters();
        }
    }
}

/// Where idle HTTP/1.1 connections rest and plain ones are parked (`park.rs`), as a
/// connection's task sees it.
pub(crate) trait Parking: std::fmt::Debug + Send + Sync {
    /// Takes over an idle connection and what its task held; the task then ends. One
    /// that cannot be parked is served by a task of its own again (or closed).
    fn park(&self, idle: IdleConnection, admission: Admission, shutdown: weir_core::ShutdownSignal);

    /// Takes over an idle connection to rest: its socket stays with the runtime, which
    /// hands it to the crew when the client sends again; the task that waited ends. One
    /// that cannot rest (it is readable already, or the lot has closed) is served by a
    /// task of its own again.
    fn rest(&self, idle: IdleConnection, admission: Admission, shutdown: weir_core::ShutdownSignal);

    /// The tasks that serve the connections roused from resting, one wake after
    /// another (`crew.rs`; closed with the lot).
    fn crew(&self) -> &Crew<Roused>;
}

/// A resting connection the runtime saw readable (or a drain ends), for a crew member to
/// serve (`pipeline::serve_roused`).
#[derive(Debug)]
pub(crate) struct Roused {
    pub(crate) idle: IdleConnection,
    pub(crate) admission: Admission,
    pub(crate) shutdown: weir_core::ShutdownSignal,
    /// Whether it had waited past its virtual server's `rest_idle` before it was
    /// roused: it then rests again as soon as its request is answered.
    pub(crate) long: bool,
}

/// An admitted client connection's place in its virtual server's count and in
/// the drain, held by its task and given back when the task ends.
#[derive(Debug)]
pub(crate) struct Admission {
    pub vs: Arc<VirtualServerRuntime>,
    pub(crate) drain: DrainGuard,
    /// The connection's place in its client's connection limit, when one is
    /// configured (boxed: in every connection's task, it costs a word).
    pub(crate) permit: Option<Box<ConnectionPermit>>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.vs.shared.open.fetch_sub(1, Ordering::AcqRel);
        self.vs.metrics.connections_open.dec();
    }
}
