//! Shared building blocks of the data path: the error shape, the shutdown signal, a
//! timeout that arms its timer only when the future has to wait, and a future boxed where
//! it is made.
//!
//! ```
//! use weir_core::{Error, ErrorKind, Side};
//! let e = Error::new(ErrorKind::ConnectFailed, Side::Upstream).retry_safe(true);
//! assert!(e.is_retry_safe());
//! ```

pub mod error;
pub mod shutdown;
pub mod timeout;
pub mod wait;

pub use error::{Error, ErrorKind, Side};
pub use shutdown::{Shutdown, ShutdownSignal};

/// weir's version, with the kind of build after a `+`: `0.1.0+pgo` for the profiled
/// production build of `scripts/build-pgo`, `0.1.0` for a plain one (`build.rs`).
pub const VERSION: &str = env!("WEIR_VERSION");

/// A future boxed where it is made: the box is allocated first and the future built in it.
/// `Box::pin(future)` builds the future on the stack and copies it whole into the box, and
/// the data path's futures are kilobytes (a request's whole state, sized by its largest
/// await) of which a new one holds only its arguments. In a release build `Box::pin` of
/// weir-proxy's `serve_requests` was a 5.3 KB `memcpy` for each wake of a connection, and
/// of a request's wait in a node's queue 2.2 KB; built in place, none.
#[inline(always)]
pub fn boxed<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    let place = Box::new_uninit();
    Box::into_pin(Box::write(place, make()))
}
