//! Shared building blocks of the data path: the error shape, the shutdown signal and a
//! timeout that arms its timer only when the future has to wait.
//!
//! ```
//! use weir_core::{Error, ErrorKind, Side};
//! let e = Error::new(ErrorKind::ConnectFailed, Side::Upstream).retry_safe(true);
//! assert!(e.is_retry_safe());
//! ```

pub mod error;
pub mod shutdown;
pub mod timeout;

pub use error::{Error, ErrorKind, Side};
pub use shutdown::{Shutdown, ShutdownSignal};
