//! TLS for weir, on rustls with the aws-lc-rs provider.
//!
//! - [`Acceptor`]: termination on a virtual server — certificates chosen by
//!   SNI and by what the client can verify, session tickets with rotating
//!   keys and a bounded session cache, client certificates, a handshake
//!   timeout and a cap on handshakes in progress, hot reload.
//! - [`Connector`]: TLS to nodes — verification, SNI, client certificates,
//!   resumption.
//! - [`Stream`]: plain or TLS, one type for the proxy's pipeline.
//! - [`client_hello`]: the SNI and ALPN of a ClientHello read without terminating TLS
//!   (passthrough routing).
//! - [`hold`]: one wake-up fewer per TLS 1.3 handshake where the client speaks first.
//! - [`certs`]: reading PEM files, and generating test certificates.
//! - [`ocsp`]: OCSP responses stapled to certificates, checked against them.

pub mod acceptor;
pub mod certs;
pub mod client_hello;
pub mod connector;
pub mod hold;
pub mod ocsp;
pub mod provider;
pub mod session_cache;
pub mod store;
mod stream;
mod ticketer;

pub use acceptor::{
    Acceptor, FailureReason, HandshakeFailure, HandshakeInfo, Served, StagedReload,
};
pub use certs::{CertificateInfo, KeyType, TestCa};
pub use connector::Connector;
pub use hold::FirstSpeaker;
pub use stream::{ClientStream, ServerStream, Stream};
pub use tokio_rustls::rustls;

/// The TLS error an I/O error carries (how tokio-rustls reports a peer's alert, a failed
/// verification...), if it is one.
pub fn tls_error(error: &std::io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}
