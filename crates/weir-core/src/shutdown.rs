//! Graceful shutdown: one [`Shutdown`] owner triggers, many [`ShutdownSignal`]s observe.

use tokio::sync::watch;

/// The owner side: call [`Shutdown::trigger`] once to begin draining.
#[derive(Debug)]
pub struct Shutdown {
    sender: watch::Sender<bool>,
}

/// The observer side, cheap to clone into every task.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    receiver: watch::Receiver<bool>,
}

impl Shutdown {
    pub fn new() -> (Shutdown, ShutdownSignal) {
        let (sender, receiver) = watch::channel(false);
        (Shutdown { sender }, ShutdownSignal { receiver })
    }

    /// Begins the drain. Idempotent.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    pub fn signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            receiver: self.sender.subscribe(),
        }
    }
}

impl ShutdownSignal {
    /// True once shutdown has begun.
    pub fn is_triggered(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Completes when shutdown begins (at once if it already has).
    pub async fn triggered(&mut self) {
        // An error means the owner is gone, which we treat as shutdown too.
        let _ = self.receiver.wait_for(|triggered| *triggered).await;
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
}
