//! What the pipeline knows about a request besides its head: the connection's
//! facts, passed to every evaluation.

use std::net::IpAddr;

use weir_config::TlsVersion;

/// Facts about the connection and the request that the head does not carry.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The client address rules and limits see: the peer, its PROXY-protocol
    /// address, or the one [`crate::client_address`] took from a trusted
    /// proxy's header.
    pub client_address: IpAddr,
    /// The request came over TLS (for `${scheme}` and the cookie's `Secure`).
    pub https: bool,
    /// The TLS server name the client sent, lower case.
    pub sni: Option<&'a str>,
    /// The negotiated TLS version; `None` on plain HTTP.
    pub tls_version: Option<TlsVersion>,
    /// The verified client-certificate subject.
    pub client_subject: Option<&'a str>,
    /// From [`crate::request_id`].
    pub request_id: &'a str,
}

impl Facts<'_> {
    /// Plain HTTP from `client_address`, without a request id (tests, benches).
    pub fn plain(client_address: IpAddr) -> Facts<'static> {
        Facts {
            client_address,
            https: false,
            sni: None,
            tls_version: None,
            client_subject: None,
            request_id: "",
        }
    }
}

/// `1.2` / `1.3`, as `${tls_version}` renders it.
pub fn tls_version_text(version: Option<TlsVersion>) -> &'static str {
    match version {
        Some(TlsVersion::Tls12) => "1.2",
        Some(TlsVersion::Tls13) => "1.3",
        None => "",
    }
}
