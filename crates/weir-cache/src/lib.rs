//! weir's HTTP cache and compression: RFC 9111 policy as pure functions over
//! borrowed views of requests and responses and a passed-in `now`; an
//! in-memory store bounded in bytes, sharded, with S3-FIFO eviction; request
//! coalescing; purge by URL, prefix, tag and ban; gzip, brotli and zstd.
//!
//! The pipeline calls it at two stages, whichever protocol carried the
//! request (it reads the heads through [`RequestView`] / [`ResponseView`]):
//!
//! - `cache_lookup` (after routing, before select): [`Cache::lookup_coalesced`]
//!   gives a [`Lookup`]: answer a [`Hit`], or forward an [`Exchange`] to the node.
//! - `filter_response` (after the response head): [`Cache::response`] gives a
//!   [`Reply`]: answer a [`Hit`] (304 merged, stale-if-error), stream the body
//!   into a [`Fill`], [`Forward`] it (compressed when eligible), or, for a 304
//!   about another representation, send the request again
//!   ([`Reply::Refetch`]).
//!
//! `docs/design/cache.md` describes the wiring, who owns what, and how
//! bodies flow.
//!
//! ```
//! use weir_cache::testing::{Req, Resp};
//! use weir_cache::{Cache, CachePolicy, Lookup, Reply, StoreSettings, UnixTime};
//!
//! let cache = Cache::new(
//!     StoreSettings { size: 1 << 20, max_object_size: 1 << 16 },
//!     Default::default(),
//!     Default::default(),
//! );
//! let policy = CachePolicy::default();
//! let now = UnixTime(1_700_000_000);
//! let request = Req::get("/hello");
//!
//! // A miss: forward to the node, then hand the response back.
//! let Lookup::Forward(exchange) = cache.lookup(&policy, None, &request, now) else { panic!() };
//! let response = Resp::new(200)
//!     .header("Cache-Control", "max-age=60")
//!     .header("Content-Length", "5");
//! let Reply::Fill(mut fill) = cache.response(exchange, &policy, None, &request, &response, now) else {
//!     panic!()
//! };
//! let _client = fill.take_hit(); // the client reads the body from the store as it fills
//! fill.push(bytes::Bytes::from_static(b"hello")).unwrap();
//! fill.finish().unwrap();
//!
//! // The next request is a hit, 10 s old.
//! let Lookup::Hit(hit) = cache.lookup(&policy, None, &request, UnixTime(now.0 + 10)) else { panic!() };
//! assert_eq!((hit.status(), hit.age(), hit.content_length()), (200, 10, Some(5)));
//! ```

mod cache;
pub mod compress;
pub mod date;
pub mod directives;
mod exchange;
mod fill;
pub mod flight;
mod hit;
pub mod key;
mod lookup;
pub mod object;
pub mod policy;
mod purge;
mod settings;
pub mod store;
pub mod testing;
mod view;

pub use cache::{Cache, StoreSettings};
pub use compress::{Coding, CompressionPolicy, Compressor, HeadEdits, Levels, Passed};
pub use date::UnixTime;
pub use exchange::{Exchange, Forward, Reply};
pub use fill::{Fill, OrphanWatch};
pub use flight::{WaitOutcome, Waiter};
pub use hit::{Answer, CacheStatus, Framing, Hit, HitBody};
pub use lookup::Lookup;
pub use object::{BodyAborted, BodyReader, Follower, Rope};
pub use policy::{CachePolicy, SetCookie};
pub use purge::{BanInfo, PurgeError, PurgeMethod, purge_method};
pub use view::{Http1Request, RequestView, ResponseView, Scheme};
