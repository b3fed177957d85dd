//! The admin connections waiting for a request, oldest first: when every slot of the
//! listener is taken, the oldest of them that have waited a while are asked to close (as
//! nginx closes its oldest reusable connections when it runs out), so connections held
//! open cannot keep a new client, or a load balancer's `/healthz`, out. A connection just
//! accepted has not waited long enough to be asked: a client whose request is on its way
//! is answered, not closed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long a connection waits for a request before it may be asked to close: longer than
/// a client takes to send the request it connected for (milliseconds), short enough that
/// a flood of silent connections turns over quickly, so a new client waits a fraction of a
/// second for its turn.
pub(crate) const MIN_WAIT: Duration = Duration::from_millis(250);

/// How many are asked at once.
pub(crate) const AT_ONCE: usize = 32;

/// The connections waiting for a request now.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// By when each began to wait (and a number, for ties).
    entries: BTreeMap<(Instant, u64), Arc<Notify>>,
}

/// One connection's place among those waiting; it leaves when dropped.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    waiting: &'a Waiting,
    key: (Instant, u64),
    asked: Arc<Notify>,
}

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection begins to wait for a request.
    pub(crate) fn enter(&self) -> Entry<'_> {
        let asked = Arc::new(Notify::new());
        let mut inner = self.lock();
        let key = (Instant::now(), inner.next);
        inner.next += 1;
        inner.entries.insert(key, Arc::clone(&asked));
        Entry {
            waiting: self,
            key,
            asked,
        }
    }

    /// Asks the oldest connections that have waited at least [`MIN_WAIT`] to close, at
    /// most [`AT_ONCE`]; how many were asked.
    pub(crate) fn reclaim(&self) -> usize {
        let Some(before) = Instant::now().checked_sub(MIN_WAIT) else {
            return 0;
        };
        let mut inner = self.lock();
        let mut asked = 0;
        while asked < AT_ONCE {
            let Some(entry) = inner.entries.first_entry() else {
                break;
            };
            if entry.key().0 > before {
                break;
            }
            // A stored permit: the connection sees it at its next poll.
            entry.remove().notify_one();
            asked += 1;
        }
        asked
    }
}

impl Entry<'_> {
    /// Completes when the listener asks this connection to close.
    pub(crate) async fn asked(&self) {
        self.asked.notified().await;
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.waiting.lock().entries.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_oldest_that_waited_long_enough_are_asked() {
        let waiting = Waiting::default();
        let old = waiting.enter();
        // Made older than it is: it began to wait before MIN_WAIT.
        let aged = |entry: &Entry<'_>| {
            let mut inner = waiting.lock();
            let notify = inner.entries.remove(&entry.key).unwrap();
            let key = (entry.key.0 - MIN_WAIT * 2, entry.key.1);
            inner.entries.insert(key, notify);
            key
        };
        let old_key = aged(&old);
        let fresh = waiting.enter();
        assert_eq!(waiting.reclaim(), 1);
        assert!(!waiting.lock().entries.contains_key(&old_key));
        assert!(waiting.lock().entries.contains_key(&fresh.key));
        assert_eq!(waiting.reclaim(), 0, "the fresh one was asked");
        drop(fresh);
        assert!(waiting.lock().entries.is_empty());
        drop(old);
    }
}
