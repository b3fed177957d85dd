//! Shared building blocks for every weir crate: the data-path error shape, the
//! shutdown signal, and the child processes of a command with their stopping.
//!
//! ```
//! use weir_core::{Error, ErrorKind, Side};
//! let e = Error::new(ErrorKind::ConnectFailed, Side::Upstream).retry_safe(true);
//! assert!(e.is_retry_safe());
//! ```

pub mod children;
pub mod error;
pub mod shutdown;

pub use children::Children;
pub use error::{Error, ErrorKind, Side};
pub use shutdown::{Shutdown, ShutdownSignal};
