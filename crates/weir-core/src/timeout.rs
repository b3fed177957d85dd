//! A timeout that costs nothing when it is not needed.
//!
//! `tokio::time::timeout` reads the clock when it is made, and arms a timer
//! when its future has to wait. Most writes of the data path finish on their
//! first poll (the socket has room), so [`timeout`] polls the future first
//! and starts the clock only when it has to wait: the bound is the same,
//! measured from the first time the future could not go on.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::Sleep;

/// The future did not complete within its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// Runs `future` to completion within `duration` of its first wait:
/// `Err(Elapsed)` if it is still waiting then.
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        duration,
        sleep: None,
    }
}

pin_project_lite::pin_project! {
    /// See [`timeout`]. A plain struct rather than an `async fn`, so that it
    /// holds its future once (an `async fn` keeps its argument and the
    /// pinned copy apart).
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        duration: Duration,
        #[pin]
        sleep: Option<Sleep>,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep(*this.duration)));
        }
        let sleep = this.sleep.as_pin_mut().expect("set above");
        ready!(sleep.poll(cx));
        Poll::Ready(Err(Elapsed))
    }
}

/// Runs `future` until `deadline`, as `tokio::time::timeout_at` does, except that a deadline
/// that passes is final only once the runtime has polled its I/O driver again: a process
/// stopped past the deadline (SIGSTOP, a paused VM, a frozen cgroup) sees its timers fire
/// before it reads the readiness of sockets that became readable while it was stopped (its
/// `epoll_wait` is interrupted and returns nothing), and an answer that came in time would
/// be taken for a timeout. The extra poll costs only when the deadline passes.
pub async fn timeout_at_settled<F: Future>(
    deadline: tokio::time::Instant,
    future: F,
) -> Result<F::Output, Elapsed> {
    let mut future = std::pin::pin!(future);
    if let Ok(output) = tokio::time::timeout_at(deadline, future.as_mut()).await {
        return Ok(output);
    }
    settle(future).await.ok_or(Elapsed)
}

/// How many times a future whose time ran out is polled again, each after the runtime has
/// polled its driver and run the tasks that woke: what it waits for may come through
/// another task (an HTTP/2 connection's, which reads the frames its streams wait for).
const SETTLE_ROUNDS: u32 = 3;

/// Polls `future` again after the runtime has run its driver and its ready tasks, up to
/// [`SETTLE_ROUNDS`] times; its output if it completed.
async fn settle<F: Future>(mut future: Pin<&mut F>) -> Option<F::Output> {
    for _ in 0..SETTLE_ROUNDS {
        // Woken only after the runtime has run out of ready tasks and polled its driver.
        tokio::task::yield_now().await;
        let polled = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
        if let Poll::Ready(output) = polled {
            return Some(output);
        }
    }
    None
}

/// Runs `work` until it completes (`Some` of its output) or the relay is idle (`None`):
/// `idle()` makes the caller's idle timer (made again each time it is waited on), and
/// `activity()` reads what moves when `work` transfers anything. As with
/// [`timeout_at_settled`], an idle timer that fires is final only once the runtime has
/// polled its I/O driver and `work`, polled again, moved nothing: bytes that came while the
/// process was stopped past the timer are relayed, not cut.
pub async fn until_idle_settled<F, I, T, A>(
    work: F,
    mut idle: I,
    activity: impl Fn() -> A,
) -> Option<F::Output>
where
    F: Future,
    I: FnMut() -> T,
    T: Future<Output = ()>,
    A: PartialEq,
{
    let mut work = std::pin::pin!(work);
    loop {
        let finished = {
            let mut timer = std::pin::pin!(idle());
            std::future::poll_fn(|cx| {
                if let Poll::Ready(output) = work.as_mut().poll(cx) {
                    return Poll::Ready(Some(output));
                }
                timer.as_mut().poll(cx).map(|()| None)
            })
            .await
        };
        if finished.is_some() {
            return finished;
        }
        let before = activity();
        if let Some(output) = settle(work.as_mut()).await {
            return Some(output);
        }
        if activity() == before {
            return None;
        }
    }
}

/// [`timeout_at_settled`] with a deadline `duration` from now.
pub async fn timeout_settled<F: Future>(
    duration: Duration,
    future: F,
) -> Result<F::Output, Elapsed> {
    timeout_at_settled(tokio::time::Instant::now() + duration, future).await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    /// Pending on its first `pending` polls (without asking to be woken: as a socket whose
    /// readiness the runtime has not read yet), then ready.
    fn ready_after(pending: u32) -> impl Future<Output = &'static str> {
        let mut left = pending;
        std::future::poll_fn(move |_| {
            if left == 0 {
                return Poll::Ready("answer");
            }
            left -= 1;
            Poll::Pending
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_gives_the_future_a_few_more_polls() {
        let now = tokio::time::Instant::now();
        // Pending when the deadline is seen, ready once the runtime has run its driver and
        // its tasks once or a few times.
        assert_eq!(timeout_at_settled(now, ready_after(1)).await, Ok("answer"));
        let rounds = SETTLE_ROUNDS as usize;
        assert_eq!(
            timeout_at_settled(now, ready_after(rounds as u32)).await,
            Ok("answer")
        );
        assert_eq!(
            timeout_at_settled(now, ready_after(rounds as u32 + 1)).await,
            Err(Elapsed)
        );
        assert_eq!(
            timeout_settled(Duration::from_secs(1), std::future::pending::<()>()).await,
            Err(Elapsed)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_relay_gets_more_polls_and_goes_on_if_it_moved() {
        let idle = || tokio::time::sleep(Duration::from_secs(2));
        // Nothing moves: idle, after the timer.
        let started = tokio::time::Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(until_idle_settled(never, idle, || 0).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // It finishes on the poll after the timer fired: its output.
        let now = std::sync::atomic::AtomicU32::new(0);
        let late = until_idle_settled(ready_after(2), idle, || now.load(Ordering::Relaxed));
        assert_eq!(late.await, Some("answer"));
        // It moved on that poll (bytes read; its first two polls are the first and the one
        // when the timer fired): the relay goes on, and ends when it is idle again.
        let moved = std::sync::atomic::AtomicU32::new(0);
        let mut polls = 0;
        let moving = std::future::poll_fn(|_| {
            polls += 1;
            if polls == 3 {
                moved.fetch_add(1, Ordering::Relaxed);
            }
            Poll::<()>::Pending
        });
        let started = tokio::time::Instant::now();
        let ended = until_idle_settled(moving, idle, || moved.load(Ordering::Relaxed)).await;
        assert_eq!(ended, None);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(4),
            "a second idle period"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_future_ready_at_once_is_never_timed() {
        assert_eq!(timeout(Duration::ZERO, async { 7 }).await, Ok(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_future_is_bounded() {
        let never = std::future::pending::<()>();
        let started = tokio::time::Instant::now();
        assert_eq!(timeout(Duration::from_secs(3), never).await, Err(Elapsed));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_future_that_waits_less_than_the_bound_completes() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            "done"
        };
        assert_eq!(timeout(Duration::from_secs(3), slow).await, Ok("done"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_counts_from_the_first_wait_not_from_each_wake() {
        // Woken every second for five seconds: a bound of three still ends it at three.
        let ticking = async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        let started = tokio::time::Instant::now();
        assert_eq!(timeout(Duration::from_secs(3), ticking).await, Err(Elapsed));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }
}
