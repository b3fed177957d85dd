//! The TCP (layer 4) data path. Its last stage, the relay, lives here: bytes both ways
//! between a client and a node until both directions have ended, with half-close passed
//! through, an idle timeout across both directions and byte counts for the log.
//!
//! Two relays with one contract: [`relay`] copies through a buffer per direction and works on
//! any stream (TLS on either side included); [`splice`] moves bytes between two plain TCP
//! sockets through a kernel pipe with `splice(2)`, never copying them into user space.
//! [`Relay`] picks between them.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod copy;
pub(crate) mod peek;
pub(crate) mod session;
mod splice;
mod tcp_copy;

pub use copy::relay;
pub use splice::splice;
pub use tcp_copy::relay_tcp;

/// Which relay a TCP virtual server uses when both ends are plain TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relay {
    /// Read into a buffer, write from it (the only choice when either end is TLS).
    Copy,
    /// `splice(2)` through a pipe per direction: no copy through user space (Linux).
    Splice,
    /// Read and write for messages; a direction moves to `splice(2)` once a read fills its
    /// whole buffer (a bulk flow).
    Adaptive,
}

/// How a relay ended, and what it carried.
#[derive(Debug)]
pub struct Relayed {
    /// Bytes read from the client and written to the node.
    pub client_to_node: u64,
    /// Bytes read from the node and written to the client.
    pub node_to_client: u64,
    /// Why it ended.
    pub ended: Ended,
}

/// The bytes a relay has moved each way so far: the relay counts into it, so what a session
/// carried can be read after its relay was dropped (a session cut at the drain timeout is
/// logged with its bytes), and the virtual server's byte counters follow a long session as it
/// goes rather than at its end.
#[derive(Debug, Default)]
pub struct Tally {
    client_to_node: Moved,
    node_to_client: Moved,
}

/// One direction's bytes, and the metric they also count in. An atomic only so the relay's
/// future is `Send`: one task updates it.
#[derive(Debug, Default)]
pub(crate) struct Moved {
    total: AtomicU64,
    metric: Option<weir_observe::Counter>,
}

impl Moved {
    /// `n` more bytes moved.
    pub(crate) fn add(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
        if let Some(metric) = &self.metric {
            metric.inc_by(n);
        }
    }

    fn get(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

impl Tally {
    /// A tally whose bytes also count in `received` (from the client) and `sent` (to it).
    pub fn counting(received: weir_observe::Counter, sent: weir_observe::Counter) -> Tally {
        Tally {
            client_to_node: Moved {
                total: AtomicU64::new(0),
                metric: Some(received),
            },
            node_to_client: Moved {
                total: AtomicU64::new(0),
                metric: Some(sent),
            },
        }
    }

    /// Bytes read from the client and written to the node, and the other way.
    pub fn bytes(&self) -> (u64, u64) {
        (self.client_to_node.get(), self.node_to_client.get())
    }

    /// The counter of one direction: the one whose reading end is `from`.
    fn from(&self, from: End) -> &Moved {
        match from {
            End::Client => &self.client_to_node,
            End::Node => &self.node_to_client,
        }
    }

    /// The relay's outcome, with what it moved.
    fn relayed(&self, ended: Ended) -> Relayed {
        let (client_to_node, node_to_client) = self.bytes();
        Relayed {
            client_to_node,
            node_to_client,
            ended,
        }
    }
}

/// Why a relay ended.
#[derive(Debug)]
pub enum Ended {
    /// Both directions finished: each side sent its FIN and it was passed on.
    Closed,
    /// Nothing moved either way for the idle timeout.
    IdleTimeout,
    /// Reading from or writing to the client failed (a reset, most often).
    Client(io::Error),
    /// Reading from or writing to the node failed.
    Node(io::Error),
}

impl Ended {
    /// A stable, lower-case name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Ended::Closed => "closed",
            Ended::IdleTimeout => "idle_timeout",
            Ended::Client(_) => "client_error",
            Ended::Node(_) => "node_error",
        }
    }
}

/// What both relays are given.
#[derive(Debug, Clone, Copy)]
pub struct RelaySettings {
    /// The session ends when nothing moved either way for this long.
    pub idle_timeout: Duration,
    /// Per-direction buffer of the copy relays, bytes.
    pub buffer: usize,
    /// Capacity asked of each pipe of the splice relay, bytes: the most one `splice(2)`
    /// moves (`splice.rs`).
    pub pipe: usize,
}

impl RelaySettings {
    /// A virtual server's `[tcp]` settings, as the relays take them.
    pub fn of(tcp: &weir_config::TcpSettings) -> RelaySettings {
        RelaySettings {
            idle_timeout: tcp.idle_timeout,
            buffer: tcp.buffer,
            pipe: tcp.pipe,
        }
    }
}

impl Default for RelaySettings {
    /// Those of a `[tcp]` table with no keys: weir-config's defaults, not a copy of them.
    fn default() -> Self {
        RelaySettings::of(&weir_config::TcpSettings::default())
    }
}

/// Which end of the session an I/O error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Client,
    Node,
}

impl End {
    fn ended(self, error: io::Error) -> Ended {
        match self {
            End::Client => Ended::Client(error),
            End::Node => Ended::Node(error),
        }
    }
}

#[cfg(test)]
mod tests;
