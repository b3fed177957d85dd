//! Request coalescing: concurrent misses for one key make one request to the
//! node. The first becomes the leader and holds a [`FlightGuard`]; the others
//! get a [`Waiter`] and wait, bounded in number and in time, for the leader to
//! say whether it stored the response; then they look up again (and find the
//! object, perhaps still filling), or go to the node themselves. A leader whose client left
//! before the answer came ([`FlightGuard::abandoned`]) sends them to look up again too: the
//! first becomes the next leader and the others wait on it, so one client's cancelled miss
//! does not release every waiter to the node at once. A leader whose exchange failed (a node
//! that timed out or broke off) releases them to the node, as one that could not store: each
//! then has its own answer within its own timeout, where a chain of leaders would each wait
//! the node's timeout in turn.
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

/// Flights in progress and remembered passes, sharded by key.
#[derive(Debug)]
pub struct Flights {
    shards: Box<[Mutex<Shard>]>,
    /// A key's 64-bit digest (keyed at random per process, so no client can aim two keys at
    /// one digest) picks its shard and names its pass: a pass marker holds no key, and the
    /// table of them has a fixed bound ([`MAX_PASSES_PER_SHARD`]) whatever URLs clients ask
    /// for.
    hasher: ahash::RandomState,
}

#[derive(Debug, Default)]
struct Shard {
    /// Flights in progress by key: at most one per request in flight.
    flying: HashMap<Box<[u8]>, Arc<Flight>>,
    /// Keys not storable lately, by digest: no coalescing until then.
    passes: HashMap<u64, Instant>,
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
    /// The leader's client left before the answer came: look up again, one of the waiters
    /// leading the next flight.
    Abandoned,
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
    /// The leader's client left before the answer: look up again and coalesce again (the
    /// first to do so leads).
    Abandoned,
}

/// The most pass markers a shard holds (16 shards: 65,536 in all, about 2 MiB). A key not
/// remembered for lack of room is only coalesced again, one node round trip at a time, as
/// any miss is; no answer changes.
const MAX_PASSES_PER_SHARD: usize = 4096;

impl Flights {
    /// An empty table of flights.
    pub fn new() -> Arc<Flights> {
        Arc::new(Flights {
            shards: (0..16).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: ahash::RandomState::new(),
        })
    }

    /// Whether `key`'s last answer is remembered as not storable (a pass marker that has
    /// not expired): for a lookup that does not coalesce.
    pub fn is_pass(&self, key: &[u8]) -> bool {
        let (shard, digest) = self.shard(key);
        shard
            .passes
            .get(&digest)
            .is_some_and(|until| *until > Instant::now())
    }

    /// Joins the flight for `key`, or starts one.
    pub fn join(self: &Arc<Self>, key: &[u8], max_waiters: u32, timeout: Duration) -> Join {
        let now = Instant::now();
        let (mut shard, digest) = self.shard(key);
        match shard.passes.get(&digest) {
            Some(until) if *until > now => return Join::Pass,
            Some(_) => {
                shard.passes.remove(&digest);
            }
            None => {}
        }
        if let Some(flight) = shard.flying.get(key) {
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
        let (outcome, _) = watch::channel(Outcome::Pending);
        let flight = Arc::new(Flight {
            outcome,
            waiters: AtomicU32::new(0),
        });
        shard.flying.insert(key.into(), Arc::clone(&flight));
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
            shard.passes.retain(|_, until| *until > now);
            flying += shard.flying.len();
        }
        flying
    }

    /// Pass markers held now, expired ones not yet dropped included.
    pub fn passes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .passes
                    .len()
            })
            .sum()
    }

    /// The shard of `key`, locked, and the key's digest.
    fn shard(&self, key: &[u8]) -> (MutexGuard<'_, Shard>, u64) {
        let digest = self.hasher.hash_one(key);
        let index = digest as usize % self.shards.len();
        // Entries are replaced whole: a poisoned shard is still consistent.
        let shard = self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (shard, digest)
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

    /// The leader's client left before the node's answer came: waiters look up again, one
    /// of them leading the next flight.
    pub fn abandoned(mut self) {
        self.finish(Outcome::Abandoned, None);
    }

    /// How many requests are waiting on this one.
    pub fn waiters(&self) -> u32 {
        self.flight.waiters.load(Ordering::Relaxed)
    }

    fn finish(&mut self, outcome: Outcome, remember: Option<Duration>) {
        self.reported = true;
        {
            let flights = &self.flights;
            let (mut shard, digest) = flights.shard(&self.key);
            let ours = shard
                .flying
                .get(&self.key)
                .is_some_and(|flight| Arc::ptr_eq(flight, &self.flight));
            if ours {
                shard.flying.remove(&self.key);
                if let Some(duration) = remember.filter(|duration| !duration.is_zero()) {
                    let now = Instant::now();
                    if shard.passes.len() >= MAX_PASSES_PER_SHARD {
                        shard.passes.retain(|_, until| *until > now);
                    }
                    if shard.passes.len() < MAX_PASSES_PER_SHARD {
                        shard.passes.insert(digest, now + duration);
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
            Ok(Ok(outcome)) if *outcome == Outcome::Abandoned => WaitOutcome::Abandoned,
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
        let Join::Leader(guard) = flights.join(b"k", 10, Duration::from_secs(5)) else {
            panic!("the next to join leads");
        };
        let Join::Follower(waiter) = flights.join(b"k", 10, Duration::from_secs(5)) else {
            panic!("expected a follower");
        };
        guard.abandoned();
        assert_eq!(waiter.wait().await, WaitOutcome::Abandoned);
        // The flight is gone: the next to join leads a new one.
        assert!(matches!(
            flights.join(b"k", 10, Duration::from_secs(5)),
            Join::Leader(_)
        ));
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

    /// Pass markers hold no key and have a fixed bound: however many different keys are
    /// not storable, and however long, the table stays under it.
    #[tokio::test(start_paused = true)]
    async fn pass_markers_are_bounded_whatever_the_keys() {
        let flights = Flights::new();
        let long = vec![b'x'; 12 * 1024];
        for n in 0..100_000u32 {
            let mut key = long.clone();
            key.extend_from_slice(&n.to_be_bytes());
            let Join::Leader(guard) = flights.join(&key, 10, Duration::from_secs(1)) else {
                panic!("a new key leads");
            };
            guard.not_stored(Some(Duration::from_secs(60)));
        }
        let held = flights.passes();
        assert!(
            (8 * MAX_PASSES_PER_SHARD..=16 * MAX_PASSES_PER_SHARD).contains(&held),
            "{held}"
        );
        assert_eq!(flights.tidy(), 0, "no flight left in progress");
        // Past their time the markers make room for new ones again.
        tokio::time::advance(Duration::from_secs(61)).await;
        flights.tidy();
        assert_eq!(flights.passes(), 0);
    }
}
