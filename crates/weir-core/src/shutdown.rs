//! Graceful shutdown: one [`Shutdown`] owner triggers, many [`ShutdownSignal`]s observe.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

/// The owner side: call [`Shutdown::trigger`] once to begin draining.
/// Dropping it counts as a trigger for [`ShutdownSignal::triggered`].
#[derive(Debug)]
pub struct Shutdown {
    shared: Arc<Shared>,
}

/// The observer side, cheap to clone into every task. Checking it is one
/// atomic load, and waiting on it is a small future (it sits in every idle
/// client connection's task).
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    triggered: AtomicBool,
    /// The owner was dropped without a trigger.
    owner_gone: AtomicBool,
    notify: Notify,
}

impl Shutdown {
    /// A trigger and the first signal that watches it.
    pub fn new() -> (Shutdown, ShutdownSignal) {
        let shared = Arc::new(Shared::default());
        let signal = ShutdownSignal {
            shared: Arc::clone(&shared),
        };
        (Shutdown { shared }, signal)
    }

    /// Begins the drain. Idempotent.
    pub fn trigger(&self) {
        self.shared.triggered.store(true, Ordering::Release);
        self.shared.notify.notify_waiters();
    }

    /// Another signal watching the same trigger, for another task.
    pub fn signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for Shutdown {
    fn drop(&mut self) {
        self.shared.owner_gone.store(true, Ordering::Release);
        self.shared.notify.notify_waiters();
    }
}

impl ShutdownSignal {
    /// True once shutdown has begun.
    pub fn is_triggered(&self) -> bool {
        self.shared.triggered.load(Ordering::Acquire)
    }

    /// True once shutdown has begun or its owner is gone (what [`Self::triggered`]
    /// waits for).
    pub fn has_ended(&self) -> bool {
        self.shared.ended()
    }

    /// Completes when shutdown begins (at once if it already has), or when
    /// the owner is gone, which we treat as shutdown too.
    pub async fn triggered(&self) {
        let shared = &*self.shared;
        // A `Notified` made before the check sees a trigger that lands between them.
        let notified = shared.notify.notified();
        if shared.triggered.load(Ordering::Acquire) || shared.owner_gone.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }

    /// A watch that one task keeps across many waits (a kept-alive
    /// connection between its requests): it joins the waiters once, on its
    /// first wait, and later waits cost one atomic load instead of joining
    /// and leaving the list each time. Pin it in the task that waits.
    pub fn watch(&self) -> ShutdownWatch<'_> {
        ShutdownWatch {
            shared: &self.shared,
            wait: FlagWait::new(self.shared.notify.notified()),
        }
    }

    /// A signal that triggers when `self` or `other` does (a reload that removes one
    /// part, or the shutdown of everything). Spawns a small task, so it must be called
    /// inside a tokio runtime; the task ends when the result triggers.
    pub fn either(&self, other: &ShutdownSignal) -> ShutdownSignal {
        let (owner, signal) = Shutdown::new();
        let (a, b) = (self.clone(), other.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = a.triggered() => {}
                () = b.triggered() => {}
            }
            owner.trigger();
        });
        signal
    }
}

impl Shared {
    fn ended(&self) -> bool {
        self.triggered.load(Ordering::Acquire) || self.owner_gone.load(Ordering::Acquire)
    }
}

pin_project_lite::pin_project! {
    /// A wait, polled many times by one task, on a flag that is set once and announced
    /// by a [`Notify`] (`notify_waiters`, after the flag is stored): its waiter joins
    /// the list once, on the first poll, and keeps that task's waker; later polls read
    /// the flag, with no lock taken. Made before the flag is first read, so a set
    /// between the two is not missed. Only the task that first polled it may poll it.
    #[derive(Debug)]
    pub struct FlagWait<'a> {
        #[pin]
        notified: Notified<'a>,
        joined: bool,
    }
}

impl<'a> FlagWait<'a> {
    /// A wait through `notified`, made from the flag's [`Notify`].
    pub fn new(notified: Notified<'a>) -> FlagWait<'a> {
        FlagWait {
            notified,
            joined: false,
        }
    }

    /// Ready once `is_set` says the flag is set, or its announcement came.
    pub fn poll_set(
        self: Pin<&mut Self>,
        is_set: impl FnOnce() -> bool,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        let this = self.project();
        if is_set() {
            return Poll::Ready(());
        }
        if !*this.joined {
            if this.notified.poll(cx).is_ready() {
                return Poll::Ready(());
            }
            *this.joined = true;
        }
        // In the waiters list with this task's waker: the announcement wakes the
        // task, and the flag tells it.
        Poll::Pending
    }
}

pin_project_lite::pin_project! {
    /// See [`ShutdownSignal::watch`]. The waker it keeps is that of the task
    /// that first waited, so only that task may wait on it.
    #[derive(Debug)]
    pub struct ShutdownWatch<'a> {
        shared: &'a Shared,
        // Made with the watch, before any check of the flags, so a trigger
        // between the two is not missed.
        #[pin]
        wait: FlagWait<'a>,
    }
}

impl ShutdownWatch<'_> {
    /// Ready once shutdown has begun (or the owner is gone).
    pub fn poll_triggered(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let shared = *this.shared;
        this.wait.poll_set(|| shared.ended(), cx)
    }

    /// Completes once shutdown has begun.
    pub async fn triggered(mut self: Pin<&mut Self>) {
        std::future::poll_fn(|cx| self.as_mut().poll_triggered(cx)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits (5 s at most) for a task that waits on the shutdown to end, and
    /// fails if it is still waiting or it panicked.
    async fn woken(waiter: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
    }

    #[tokio::test]
    async fn signal_observes_trigger() {
        let (owner, signal) = Shutdown::new();
        assert!(!signal.is_triggered());
        owner.trigger();
        signal.triggered().await;
        assert!(signal.is_triggered());
    }

    #[tokio::test]
    async fn a_waiting_signal_wakes_on_trigger() {
        let (owner, signal) = Shutdown::new();
        let waiting = signal.clone();
        let waiter = tokio::spawn(async move { waiting.triggered().await });
        tokio::task::yield_now().await;
        owner.trigger();
        woken(waiter).await;
        assert!(signal.is_triggered());
    }

    #[tokio::test]
    async fn a_watch_kept_across_waits_wakes_on_trigger() {
        let (owner, signal) = Shutdown::new();
        let waiting = signal.clone();
        let (woke_tx, mut woke_rx) = tokio::sync::mpsc::unbounded_channel();
        let waiter = tokio::spawn(async move {
            let watch = waiting.watch();
            tokio::pin!(watch);
            // Many short waits that end for another reason, as a connection's
            // waits end with its requests; then one that only the trigger ends.
            for _ in 0..3 {
                tokio::select! {
                    () = watch.as_mut().triggered() => panic!("not triggered yet"),
                    () = tokio::task::yield_now() => {}
                }
            }
            woke_tx.send(()).unwrap();
            watch.as_mut().triggered().await;
            // Once triggered, it stays so.
            watch.as_mut().triggered().await;
        });
        woke_rx.recv().await.unwrap();
        tokio::task::yield_now().await;
        owner.trigger();
        woken(waiter).await;
    }

    #[tokio::test]
    async fn a_watch_made_after_the_trigger_is_ready() {
        let (owner, signal) = Shutdown::new();
        owner.trigger();
        let watch = signal.watch();
        tokio::pin!(watch);
        watch.as_mut().triggered().await;
        drop(owner);
    }

    #[tokio::test]
    async fn a_dropped_owner_ends_the_wait_without_a_trigger() {
        let (owner, signal) = Shutdown::new();
        let waiting = signal.clone();
        let waiter = tokio::spawn(async move { waiting.triggered().await });
        tokio::task::yield_now().await;
        drop(owner);
        woken(waiter).await;
        signal.triggered().await;
        assert!(!signal.is_triggered());
    }
}
