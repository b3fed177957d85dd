//! Request coalescing: concurrent misses for one key make one request to the
//! node. The first becomes the leader and holds a [`FlightGuard`]; the others
//! get a [`Waiter`] and wait, bounded in number and in time, for the leader to
//! say whether it stored the response; then they look up again (and find the
//! object, perhaps still filling), or go to the node themselves.
//!
//! A key whose response could not be stored is remembered for a while as a
//! *pass*: misses for it then go straight to the node instead of queueing
//! behind one another, one node round trip at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Flights in progress, sharded by key.
#[derive(Debug)]
pub struct Flights {
    shards: Box<[Mutex<Shard>]>,
    hasher: ahash::RandomState,
}

/// Entries by key.
type Shard = HashMap<Box<[u8]>, Entry>;

#[derive(Debug)]
enum Entry {
    Flying(Arc<Flight>),
    /// Not storable lately: no coalescing until then.
    Pass {
        until: Instant,
    },
}

#[derive(Debug)]
struct Flight {
    outcome: watch::Sender<Outcome>,
    waiters: AtomicU32,
}

/// How a flight ended, as its waiters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The leader has not finished yet.
    Pending,
    /// The leader stored the response: look up again.
    Stored,
    /// The leader could not store it: go to the node.
    NotStored,
    /// The node failed the leader's revalidation, and a stale object was served in its
    /// place (`stale-if-error`): so may the waiters be.
    NodeFailed,
}

/// What joining a flight gave.
#[derive(Debug)]
pub enum Join {
    /// First for this key: go to the node, then report through the guard.
    Leader(FlightGuard),
    /// Another request is fetching it: wait.
    Follower(Waiter),
    /// Go to the node without coalescing (too many waiters).
    Alone,
    /// A remembered pass: this key's last answer could not be stored, so the request goes
    /// to the node as the client sent it (its conditionals and `Range` with it).
    Pass,
}

/// The leader's duty to report; dropping it unreported counts as not stored.
#[derive(Debug)]
pub struct FlightGuard {
    flights: Arc<Flights>,
    key: Box<[u8]>,
    flight: Arc<Flight>,
    reported: bool,
}

/// A follower waiting for its leader.
#[derive(Debug)]
pub struct Waiter {
    outcome: watch::Receiver<Outcome>,
    timeout: Duration,
    /// Requests waiting now (`weir_cache_waiting`), while this one waits.
    waiting: Option<weir_observe::Gauge>,
}

/// What a waiter should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The object was stored: look it up again.
    LookUpAgain,
    /// Not stored, the leader gave up, or the wait timed out: go to the node.
    GoToNode,
    /// The node failed the leader, which served the stale object (`stale-if-error`): look
    /// up again, and serve it too where it is usable on error, without asking the node.
    NodeFailed,
}

/// Past this many entries a shard drops its expired pass markers.
const SHARD_TIDY_AT: usize = 16 * 1024;

impl Flights {
    /// An empty table of flights.
    pub fn new() -> Arc<Flights> {
        Arc::new(Flights {
            shards: (0..16).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: ahash::RandomState::new(),
        })
    }

    /// Joins the flight for `key`, or starts one.
    pub fn join(self: &Arc<Self>, key: &[u8], max_waiters: u32, timeout: Duration) -> Join {
        let now = Instant::now();
        let mut shard = self.shard(key);
        match shard.get(key) {
            Some(Entry::Pass { until }) if *until > now => return Join::Pass,
            Some(Entry::Flying(flight)) => {
                let waiting = flight.waiters.fetch_add(1, Ordering::Relaxed);
                if waiting >= max_waiters {
                    flight.waiters.fetch_sub(1, Ordering::Relaxed);
                    return Join::Alone;
                }
                return Join::Follower(Waiter {
                    outcome: flight.outcome.subscribe(),
                    timeout,
                    waiting: None,
                });
            }
            _ => {}
        }
        if shard.len() >= SHARD_TIDY_AT {
            shard.retain(|_, entry| match entry {
                Entry::Pass { until } => *until > now,
                Entry::Flying(_) => true,
            });
        }
        let (outcome, _) = watch::channel(Outcome::Pending);
        let flight = Arc::new(Flight {
            outcome,
            waiters: AtomicU32::new(0),
        });
        shard.insert(key.into(), Entry::Flying(Arc::clone(&flight)));
        Join::Leader(FlightGuard {
            flights: Arc::clone(self),
            key: key.into(),
            flight,
            reported: false,
        })
    }

    /// Drops pass markers that have expired; returns how many flights are in progress.
    pub fn tidy(&self) -> usize {
        let now = Instant::now();
        let mut flying = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            shard.retain(|_, entry| match entry {
                Entry::Pass { until } => *until > now,
                Entry::Flying(_) => {
                    flying += 1;
                    true
                }
            });
        }
        flying
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        let index = self.hasher.hash_one(key) as usize % self.shards.len();
        // Entries are replaced whole: a poisoned shard is still consistent.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl FlightGuard {
    /// The response is stored (or being filled): waiters look up again.
    pub fn stored(mut self) {
        self.finish(Outcome::Stored, None);
    }

    /// The response was not stored: waiters go to the node, and for
    /// `remember` the key is looked up without coalescing.
    pub fn not_stored(mut self, remember: Option<Duration>) {
        self.finish(Outcome::NotStored, remember);
    }

    /// The node failed this revalidation and the stale object was served in its place:
    /// waiters may serve it too (`stale-if-error`) instead of each asking the failing node.
    pub fn node_failed(mut self) {
        self.finish(Outcome::NodeFailed, None);
    }

    /// How many requests are waiting on this one.
    pub fn waiters(&self) -> u32 {
        self.flight.waiters.load(Ordering::Relaxed)
    }

    fn finish(&mut self, outcome: Outcome, remember: Option<Duration>) {
        self.reported = true;
        {
            let mut shard = self.flights.shard(&self.key);
            let ours = matches!(shard.get(&self.key), Some(Entry::Flying(flight)) if Arc::ptr_eq(flight, &self.flight));
            if ours {
                match remember.filter(|duration| !duration.is_zero()) {
                    Some(duration) => {
                        shard.insert(
                            self.key.clone(),
                            Entry::Pass {
                                until: Instant::now() + duration,
                            },
                        );
                    }
                    None => {
                        shard.remove(&self.key);
                    }
                }
            }
        }
        self.flight.outcome.send_replace(outcome);
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        if !self.reported {
            self.finish(Outcome::NotStored, None);
        }
    }
}

impl Waiter {
    /// This waiter counted in `waiting` until it is done (waited, or dropped).
    pub(crate) fn counted(mut self, waiting: &weir_observe::Gauge) -> Waiter {
        waiting.inc();
        self.waiting = Some(waiting.clone());
        self
    }

    /// Waits for the leader, at most the coalescing timeout.
    pub async fn wait(mut self) -> WaitOutcome {
        let waited = tokio::time::timeout(
            self.timeout,
            self.outcome
                .wait_for(|outcome| *outcome != Outcome::Pending),
        )
        .await;
        match waited {
            Ok(Ok(outcome)) if *outcome == Outcome::Stored => WaitOutcome::LookUpAgain,
            Ok(Ok(outcome)) if *outcome == Outcome::NodeFailed => WaitOutcome::NodeFailed,
            _ => WaitOutcome::GoToNode,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(waiting) = &self.waiting {
            waiting.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_leader_many_followers() {
        let flights = Flights::new();
        let Join::Leader(guard) = flights.join(b"k", 10, Duration::from_secs(5)) else {
            panic!("the first is the leader");
        };
        let followers: Vec<Waiter> = (0..10)
            .map(|_| match flights.join(b"k", 10, Duration::from_secs(5)) {
                Join::Follower(waiter) => waiter,
                other => panic!("expected a follower, got {other:?}"),
            })
            .collect();
        assert!(matches!(
            flights.join(b"k", 10, Duration::from_secs(5)),
            Join::Alone
        ));
        assert_eq!(guard.waiters(), 10);
        let waiting = tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for waiter in followers {
                outcomes.push(waiter.wait().await);
            }
            outcomes
        });
        guard.stored();
        assert!(
            waiting
                .await
                .unwrap()
                .iter()
                .all(|o| *o == WaitOutcome::LookUpAgain)
        );
        assert!(matches!(
            flights.join(b"k", 10, Duration::from_secs(5)),
            Join::Leader(_)
        ));
    }

    #[tokio::test]
    async fn a_dropped_leader_releases_its_followers() {
        let flights = Flights::new();
        let guard = flights.join(b"k", 10, Duration::from_secs(5));
        let Join::Follower(waiter) = flights.join(b"k", 10, Duration::from_secs(5)) else {
            panic!("expected a follower");
        };
        drop(guard);
        assert_eq!(waiter.wait().await, WaitOutcome::GoToNode);
    }

    #[tokio::test(start_paused = true)]
    async fn followers_time_out() {
        let flights = Flights::new();
        let _guard = flights.join(b"k", 10, Duration::from_millis(100));
        let Join::Follower(waiter) = flights.join(b"k", 10, Duration::from_millis(100)) else {
            panic!("expected a follower");
        };
        assert_eq!(waiter.wait().await, WaitOutcome::GoToNode);
    }

    #[tokio::test(start_paused = true)]
    async fn passes_are_remembered_for_a_while() {
        let flights = Flights::new();
        let Join::Leader(guard) = flights.join(b"k", 10, Duration::from_secs(1)) else {
            panic!("expected the leader");
        };
        guard.not_stored(Some(Duration::from_secs(30)));
        assert!(matches!(
            flights.join(b"k", 10, Duration::from_secs(1)),
            Join::Pass
        ));
        tokio::time::advance(Duration::from_secs(31)).await;
        let leader = flights.join(b"k", 10, Duration::from_secs(1));
        assert!(matches!(leader, Join::Leader(_)));
        assert_eq!(flights.tidy(), 1);
    }
}
