//! weir's user-space link emulator, in the style of Mahimahi: two network namespaces joined
//! through two TUN devices, with this process in the middle applying, per direction, a rate
//! with exact per-packet serialisation timing, a one-way delay, jitter without reordering,
//! Bernoulli or Gilbert-Elliott loss, and a bounded drop-tail queue.
//!
//! - [`model`]: the sans-IO link model of one direction ([`DirectionModel::offer`] takes the
//!   arrival time and returns the packet's fate and delivery time).
//! - [`runtime`]: the threads that move packets between the TUN devices ([`Link`]).
//! - [`namespace`]: namespace and device set-up and teardown ([`Namespaces`]).
//! - [`probe`]: a TCP sender and goodput sink for measuring a link.
//! - [`parse`]: `tc`-style parameters (`1544kbit`, `250ms`, `1%`).
//!
//! Why the design is so is in `docs/design/netem.md`.
//!
//! ```
//! use std::time::Duration;
//! use weir_netem::{DirectionConfig, DirectionModel, Verdict, parse_rate};
//!
//! let config = DirectionConfig {
//!     rate: Some(parse_rate("10mbit").unwrap()),
//!     delay: Duration::from_millis(20),
//!     ..DirectionConfig::default()
//! };
//! let mut direction = DirectionModel::new(config, 1);
//! // 1,250 bytes take 1 ms at 10 Mbit/s, then 20 ms of delay.
//! assert_eq!(
//!     direction.offer(Duration::ZERO, 1250),
//!     Verdict::Deliver { at: Duration::from_millis(21) }
//! );
//! ```

pub mod loss;
pub mod model;
pub mod namespace;
pub mod parse;
pub mod probe;
pub mod runtime;

pub use loss::{GilbertElliott, Loss, Probability};
pub use model::{DirectionConfig, DirectionModel, QueueLimit, Rate, Verdict};
pub use namespace::{Namespaces, SetupError, Side, Topology};
pub use parse::{
    ParseError, parse_bytes, parse_duration, parse_gilbert_elliott, parse_probability, parse_rate,
};
pub use runtime::{DirectionStats, Link, LinkConfig, LinkStats};
