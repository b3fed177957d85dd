//! RFC 9111 as pure functions over the views and a passed-in `now`: what may
//! be stored, for how long, whether a stored response answers a request, how
//! to validate it with the node, and how to answer a client's own conditional
//! and range requests from it.

pub mod conditional;
pub mod freshness;
pub mod invalidate;
pub mod range;
pub mod storable;

use std::time::Duration;

/// What a stored `Set-Cookie` would do in a shared cache: hand one user's
/// cookie to every user. So by default such responses are not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCookie {
    /// Do not store responses that set cookies.
    Pass,
    /// Store them without their `Set-Cookie` fields (this client still gets them).
    Strip,
}

/// The cache settings of one route (from `[cache]`), read by the policy
/// functions and the lookup. Values are in seconds where the RFC counts seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePolicy {
    /// Responses larger than this are not stored.
    pub max_object_size: u64,
    /// Heuristic freshness as a percentage of the time since `Last-Modified`
    /// (RFC 9111 §4.2.2); 0 turns heuristics off.
    pub heuristic_percent: u8,
    /// Upper bound on a heuristic lifetime, seconds.
    pub heuristic_max: u64,
    /// `stale-while-revalidate` for responses that carry none, seconds.
    pub stale_while_revalidate: u64,
    /// `stale-if-error` for responses that carry none, seconds.
    pub stale_if_error: u64,
    /// What happens to responses that set cookies.
    pub set_cookie: SetCookie,
    /// Honour the client's `Cache-Control` (`no-cache`, `max-age`, ...). A
    /// shared cache may choose not to, so that clients cannot force misses.
    pub request_directives: bool,
    /// Coalesce concurrent misses for one object into one node request.
    pub coalesce: bool,
    /// How long a coalesced request waits for the first one before going to the node itself.
    pub coalesce_timeout: Duration,
    /// Requests that may wait on one miss; past it they go to the node.
    pub coalesce_max_waiters: u32,
    /// Targeted cache-control fields this cache obeys (RFC 9213), most specific
    /// first, such as `CDN-Cache-Control`: the first a response carries, when valid,
    /// decides in place of `Cache-Control` and `Expires`. Empty: only `Cache-Control`.
    pub targeted: Vec<String>,
    /// How long a key whose response could not be stored is looked up
    /// without coalescing (so misses for it do not queue behind one another).
    pub pass_memory: Duration,
}

impl Default for CachePolicy {
    fn default() -> CachePolicy {
        CachePolicy {
            max_object_size: 8 * 1024 * 1024,
            heuristic_percent: 0,
            heuristic_max: 24 * 60 * 60,
            stale_while_revalidate: 0,
            stale_if_error: 0,
            set_cookie: SetCookie::Pass,
            request_directives: true,
            coalesce: true,
            coalesce_timeout: Duration::from_secs(10),
            coalesce_max_waiters: 4096,
            targeted: vec!["cdn-cache-control".to_owned()],
            pass_memory: Duration::from_secs(60),
        }
    }
}
