//! Upstream side of weir: pools of nodes, load balancing, health, and the
//! shared per-node connection pools that carry TCP connection offload.
//!
//! A [`Pool`] is built once from the validated config and shared by every
//! thread. For each request the proxy asks it to [`Pool::select`] a node,
//! then checks a connection out of that node's [`NodeConnections`].

pub mod balancer;
pub mod connection;
pub mod dns;
pub mod health;
pub mod http2;
pub mod node;
pub mod persistence;
pub mod pool;
pub mod queue;

pub use balancer::Balancer;
pub use connection::{
    ConnectionSettings, Lease, NodeConnections, Tunnel, TunnelPermit, UpstreamTls,
};
pub use http2::{H2Node, H2Settings, StreamLease};
pub use node::NodeState;
pub use persistence::{Persistence, PersistenceKey};
pub use pool::{Pool, Tried};
pub use queue::Flow;
