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
pub mod carry;
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
    Acceptor, FailureReason, HandshakeFailure, HandshakeInfo, HandshakeStart, Served, StagedReload,
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

/// Whether `error` is a fatal alert from a node about the handshake (its checks of weir's
/// client certificate, or the handshake as a whole; rustls as a node answers a client
/// certificate it cannot verify with `decrypt_error`): what a node sends before it reads
/// any request, never after. In TLS 1.3 it comes after weir's side of the handshake has
/// ended, so weir meets it reading the first answer.
///
/// The h2 crate keeps only the text of an I/O error's cause, so an error that went through
/// it is recognised by rustls' words for the alert.
pub fn is_handshake_refusal(error: &std::io::Error) -> bool {
    use rustls::{AlertDescription as A, Error as TlsError};
    const REFUSALS: [A; 10] = [
        A::HandshakeFailure,
        A::DecryptError,
        A::BadCertificate,
        A::UnsupportedCertificate,
        A::CertificateRevoked,
        A::CertificateExpired,
        A::CertificateUnknown,
        A::UnknownCA,
        A::AccessDenied,
        A::CertificateRequired,
    ];
    match tls_error(error) {
        Some(TlsError::AlertReceived(alert)) => REFUSALS.contains(alert),
        Some(_) => false,
        None => {
            let text = error.to_string();
            REFUSALS
                .iter()
                .any(|alert| text == TlsError::AlertReceived(*alert).to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn handshake_refusals_are_known_as_errors_and_as_text() {
        let alert = |description| rustls::Error::AlertReceived(description);
        let wrapped = |error: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, error);
        // As tokio-rustls reports it, and as the h2 crate passes it on (its text only).
        let refused = alert(rustls::AlertDescription::UnknownCA);
        assert!(is_handshake_refusal(&wrapped(refused.clone())));
        assert!(is_handshake_refusal(&io::Error::new(
            io::ErrorKind::InvalidData,
            refused.to_string()
        )));
        for other in [
            wrapped(alert(rustls::AlertDescription::CloseNotify)),
            wrapped(rustls::Error::DecryptError),
            io::Error::new(
                io::ErrorKind::InvalidData,
                "received fatal alert: CloseNotify",
            ),
            io::Error::from(io::ErrorKind::ConnectionReset),
        ] {
            assert!(!is_handshake_refusal(&other), "{other}");
        }
    }
}
