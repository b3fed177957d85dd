//! Graceful shutdown: one [`Shutdown`] owner triggers, many [`ShutdownSignal`]s observe.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

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

    /// Completes when shutdown begins (at once if it already has), or when
    /// the owner is gone, which we treat as shutdown too.
    pub async fn triggered(&mut self) {
        let shared = &*self.shared;
        // A `Notified` made before the check sees a trigger that lands between them.
        let notified = shared.notify.notified();
        if shared.triggered.load(Ordering::Acquire) || shared.owner_gone.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }

    /// A signal that triggers when `self` or `other` does (a reload that removes one
    /// part, or the shutdown of everything). Spawns a small task, so it must be called
    /// inside a tokio runtime; the task ends when the result triggers.
    pub fn either(&self, other: &ShutdownSignal) -> ShutdownSignal {
        let (owner, signal) = Shutdown::new();
        let (mut a, mut b) = (self.clone(), other.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn signal_observes_trigger() {
        let (owner, mut signal) = Shutdown::new();
        assert!(!signal.is_triggered());
        owner.trigger();
        signal.triggered().await;
        assert!(signal.is_triggered());
    }

    #[tokio::test]
    async fn a_waiting_signal_wakes_on_trigger() {
        let (owner, signal) = Shutdown::new();
        let mut waiting = signal.clone();
        let waiter = tokio::spawn(async move { waiting.triggered().await });
        tokio::task::yield_now().await;
        owner.trigger();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
        assert!(signal.is_triggered());
    }

    #[tokio::test]
    async fn a_dropped_owner_ends_the_wait_without_a_trigger() {
        let (owner, mut signal) = Shutdown::new();
        let mut waiting = signal.clone();
        let waiter = tokio::spawn(async move { waiting.triggered().await });
        tokio::task::yield_now().await;
        drop(owner);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
        signal.triggered().await;
        assert!(!signal.is_triggered());
    }
}
