//! A crew: tasks kept between jobs, each serving one job at a time.
//!
//! A resting connection (`park.rs`) has no task, and the client's next bytes used
//! to start one for it: a spawn, and the task's future (with its request's, about
//! 5 KiB) allocated, built and freed for every request of a connection that sends
//! one now and then. A crew member serves such wakes one after another in the same
//! task and the same memory (`pipeline::serve_roused`): a wake hands its job to an
//! idle member, or starts a new member when none is idle. Up to [`IDLE`] members
//! wait between jobs; one that finishes its job with as many waiting leaves.
//!
//! The crew knows nothing of what a job is; the proxy's lot keeps one for the
//! connections it rouses.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// How many members may wait between jobs. Each holds its task's memory (for the
/// lot's crew, a request's future and a little more: several KiB), so the crew grows
/// to the number of jobs served at once and keeps this many of its members through a
/// quiet spell.
pub(crate) const IDLE: usize = 16;

/// Jobs for the crew's members, and the members waiting for one.
pub(crate) struct Crew<J> {
    state: Mutex<State<J>>,
}

struct State<J> {
    /// Jobs handed to waiting members, taken by whichever member looks first.
    jobs: VecDeque<J>,
    /// The wakers of the members waiting for a job, each once.
    idle: Vec<Waker>,
    /// The crew takes no more jobs and keeps no member waiting (shutdown).
    closed: bool,
}

impl<J> Default for Crew<J> {
    fn default() -> Self {
        Crew {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                idle: Vec::new(),
                closed: false,
            }),
        }
    }
}

impl<J> std::fmt::Debug for Crew<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Crew")
            .field("jobs", &state.jobs.len())
            .field("idle", &state.idle.len())
            .field("closed", &state.closed)
            .finish()
    }
}

impl<J> Crew<J> {
    fn state(&self) -> MutexGuard<'_, State<J>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives `job` to a waiting member and wakes it. `Err` gives the job back when no
    /// member waits (or the crew has closed): the caller starts a member with it.
    pub(crate) fn hand(&self, job: J) -> Result<(), J> {
        let mut state = self.state();
        if state.closed {
            return Err(job);
        }
        let Some(member) = state.idle.pop() else {
            return Err(job);
        };
        state.jobs.push_back(job);
        drop(state);
        member.wake();
        Ok(())
    }

    /// A member's next job, once it has finished its last one; `None` when it should
    /// leave instead: [`IDLE`] members wait already, or the crew has closed.
    ///
    /// A member waits here listed once, and leaves the list with the job it takes: a
    /// member in the list is always one that will take the next job it is woken for.
    pub(crate) fn next(&self) -> impl Future<Output = Option<J>> + '_ {
        // A member that has just finished a job is not in the list: only a later poll
        // looks for it there.
        let mut first = true;
        std::future::poll_fn(move |cx| {
            let mut state = self.state();
            let listed = match std::mem::take(&mut first) {
                true => None,
                false => state.idle.iter().position(|w| w.will_wake(cx.waker())),
            };
            if let Some(job) = state.jobs.pop_front() {
                if let Some(at) = listed {
                    state.idle.swap_remove(at);
                }
                return Poll::Ready(Some(job));
            }
            if listed.is_some() {
                // Woken by something else it had waited on during its last job.
                return Poll::Pending;
            }
            if state.closed || state.idle.len() >= IDLE {
                return Poll::Ready(None);
            }
            state.idle.push(cx.waker().clone());
            Poll::Pending
        })
    }

    /// Closes the crew: its waiting members leave, and each member leaves after its
    /// current job (shutdown).
    pub(crate) fn close(&self) {
        let waiting = {
            let mut state = self.state();
            state.closed = true;
            std::mem::take(&mut state.idle)
        };
        for member in waiting {
            member.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A member as the proxy runs one: its first job, then each next one.
    async fn member(crew: Arc<Crew<u32>>, first: u32, done: Arc<AtomicUsize>) {
        let mut job = first;
        loop {
            done.fetch_add(job as usize, Ordering::SeqCst);
            tokio::task::yield_now().await;
            match crew.next().await {
                Some(next) => job = next,
                None => return,
            }
        }
    }

    fn start(
        crew: &Arc<Crew<u32>>,
        job: u32,
        done: &Arc<AtomicUsize>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        match crew.hand(job) {
            Ok(()) => None,
            Err(job) => Some(tokio::spawn(member(
                Arc::clone(crew),
                job,
                Arc::clone(done),
            ))),
        }
    }

    /// Lets the members spawned so far run until they wait (or leave).
    async fn let_members_run() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_waiting_member_takes_the_next_job_and_no_more_than_idle_wait() {
        let crew = Arc::new(Crew::default());
        let done = Arc::new(AtomicUsize::new(0));
        // No member yet: the first job starts one.
        let first = start(&crew, 1, &done).expect("a member started");
        let_members_run().await;
        assert_eq!(crew.state().idle.len(), 1);
        // The waiting member takes the next: no new member.
        assert!(start(&crew, 2, &done).is_none());
        let_members_run().await;
        assert_eq!(done.load(Ordering::SeqCst), 3);
        assert_eq!(crew.state().idle.len(), 1);
        // Many at once: the crew grows, then keeps IDLE of its members.
        let mut members = vec![first];
        let mut sum = 0;
        for job in 10..60 {
            sum += job as usize;
            members.extend(start(&crew, job, &done));
        }
        let_members_run().await;
        assert_eq!(done.load(Ordering::SeqCst), 3 + sum);
        assert_eq!(crew.state().idle.len(), IDLE);
        assert!(crew.state().jobs.is_empty());
        // The first member and 49 new ones: all but IDLE of them left.
        assert_eq!(members.len(), 50);
        let left = members.iter().filter(|m| m.is_finished()).count();
        assert_eq!(left, 50 - IDLE);
    }

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A member is listed once however often it is polled, and leaves the list with the
    /// job it takes, even one handed while another member's waker was taken for it.
    #[test]
    fn a_member_is_listed_once_and_leaves_the_list_with_its_job() {
        use std::task::{Context, Poll};
        let crew = Crew::<u32>::default();
        let (a, b) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (wa, wb) = (Waker::from(Arc::clone(&a)), Waker::from(Arc::clone(&b)));
        let mut next_a = std::pin::pin!(crew.next());
        let mut next_b = std::pin::pin!(crew.next());
        let mut ca = Context::from_waker(&wa);
        let mut cb = Context::from_waker(&wb);
        assert_eq!(next_a.as_mut().poll(&mut ca), Poll::Pending);
        // Polled again with nothing to take (woken by something else): still once.
        assert_eq!(next_a.as_mut().poll(&mut ca), Poll::Pending);
        assert_eq!(crew.state().idle.len(), 1);
        assert_eq!(next_b.as_mut().poll(&mut cb), Poll::Pending);
        assert_eq!(crew.state().idle.len(), 2);
        // The job goes with b's waker (the latest listed), but a looks first and takes it.
        assert_eq!(crew.hand(7), Ok(()));
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (0, 1)
        );
        assert_eq!(next_a.as_mut().poll(&mut ca), Poll::Ready(Some(7)));
        assert_eq!(crew.state().idle.len(), 0, "a left the list with its job");
        // b finds nothing and lists itself again, so the next job wakes it.
        assert_eq!(next_b.as_mut().poll(&mut cb), Poll::Pending);
        assert_eq!(crew.state().idle.len(), 1);
        assert_eq!(crew.hand(8), Ok(()));
        assert_eq!(b.0.load(Ordering::SeqCst), 2);
        assert_eq!(next_b.as_mut().poll(&mut cb), Poll::Ready(Some(8)));
        // No member waits: the next job comes back, to start one.
        assert_eq!(crew.hand(9), Err(9));
    }

    #[tokio::test]
    async fn closing_lets_the_waiting_members_go_and_hands_nothing() {
        let crew = Arc::new(Crew::default());
        let done = Arc::new(AtomicUsize::new(0));
        let first = start(&crew, 1, &done).expect("a member started");
        let_members_run().await;
        assert!(!first.is_finished());
        crew.close();
        tokio::time::timeout(std::time::Duration::from_secs(5), first)
            .await
            .expect("the waiting member left")
            .expect("it ended well");
        assert_eq!(crew.hand(2), Err(2));
    }
}
