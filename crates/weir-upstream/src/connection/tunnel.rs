//! Tunnels: upstream connections that left HTTP (a WebSocket after `101`, a
//! CONNECT tunnel after `2xx`). They are counted apart from the request
//! slots, under `max_tunnels`, so long-lived tunnels never take the slots
//! requests need.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use weir_core::{Error, ErrorKind, Side};
use weir_tls::ClientStream;

use super::{Lease, NodeConnections};

/// A place for one tunnel to the node, held from before the request that asks
/// for it is sent until the tunnel closes (or the node declines the switch).
#[derive(Debug)]
pub struct TunnelPermit {
    pool: Arc<NodeConnections>,
}

/// An upstream connection that left HTTP (a WebSocket after `101`, a CONNECT
/// tunnel after `2xx`). It no longer holds one of the node's request slots;
/// dropping it closes the connection and frees its tunnel place.
#[derive(Debug)]
pub struct Tunnel {
    stream: ClientStream,
    _permit: TunnelPermit,
}

impl NodeConnections {
    /// Reserves a place for a tunnel, before a request that may switch
    /// protocols is sent. Fails when `max_tunnels` are open or reserved.
    pub fn reserve_tunnel(self: &Arc<Self>) -> Result<TunnelPermit, Error> {
        let max = self.settings.load().max_tunnels;
        let reserved = self
            .tunnels
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            });
        match reserved {
            Ok(_) => Ok(TunnelPermit {
                pool: Arc::clone(self),
            }),
            Err(_) => {
                self.pool_metrics.queue_full.inc();
                Err(
                    Error::new(ErrorKind::QueueFull, Side::Internal).context(format!(
                        "node {} has {max} tunnels open (max_tunnels)",
                        self.address
                    )),
                )
            }
        }
    }

    /// Tunnels open or reserved now.
    pub fn tunnels(&self) -> u32 {
        self.tunnels.load(Ordering::Acquire)
    }
}

impl Drop for TunnelPermit {
    fn drop(&mut self) {
        self.pool.tunnels.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Tunnel {
    /// The connection, to splice with the client's.
    pub fn stream(&mut self) -> &mut ClientStream {
        &mut self.stream
    }
}

impl Lease {
    /// Turns the connection into a tunnel: its request slot goes to the next
    /// waiter at once, and the connection is counted under `permit` instead.
    pub fn into_tunnel(mut self, permit: TunnelPermit) -> Tunnel {
        let connection = self
            .connection
            .take()
            .expect("present until release or drop");
        // Still a connection, out of the slots: counted as one until the tunnel closes.
        self.pool.tunnel_connections.fetch_add(1, Ordering::Relaxed);
        self.pool.free_slot();
        Tunnel {
            stream: connection.stream,
            _permit: permit,
        }
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        let pool = &self._permit.pool;
        pool.tunnel_connections.fetch_sub(1, Ordering::Relaxed);
        let open = pool.lock().open;
        pool.publish_open(open);
    }
}
