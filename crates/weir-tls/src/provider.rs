//! The crypto provider (aws-lc-rs) narrowed to the suites and groups a
//! virtual server or pool allows.

use std::sync::Arc;

use tokio_rustls::rustls::crypto::aws_lc_rs::{self, cipher_suite, kx_group};
use tokio_rustls::rustls::crypto::{CryptoProvider, SupportedKxGroup};
use tokio_rustls::rustls::{CipherSuite, SupportedCipherSuite, SupportedProtocolVersion, version};
use weir_config::{KeyExchangeGroup, TlsVersion};

/// Every suite weir may offer, in default preference order: AEAD only.
pub const SUITES: &[SupportedCipherSuite] = &[
    cipher_suite::TLS13_AES_128_GCM_SHA256,
    cipher_suite::TLS13_AES_256_GCM_SHA384,
    cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// The IANA name of a suite.
pub fn suite_name(suite: SupportedCipherSuite) -> &'static str {
    suite.suite().as_str().unwrap_or("unknown")
}

/// The IANA registry's name of a suite, as logged: rustls spells the TLS 1.3 suites
/// `TLS13_...`, the registry (and OpenSSL) `TLS_...`.
pub fn iana_name(suite: SupportedCipherSuite) -> &'static str {
    match suite.suite() {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        _ => suite_name(suite),
    }
}

fn group(group: KeyExchangeGroup) -> &'static dyn SupportedKxGroup {
    match group {
        KeyExchangeGroup::X25519 => kx_group::X25519,
        KeyExchangeGroup::Secp256r1 => kx_group::SECP256R1,
        KeyExchangeGroup::Secp384r1 => kx_group::SECP384R1,
        KeyExchangeGroup::X25519MlKem768 => kx_group::X25519MLKEM768,
    }
}

/// A provider limited to `suites` (IANA names; `None` = all of [`SUITES`]) and `groups`.
pub fn provider(suites: Option<&[String]>, groups: &[KeyExchangeGroup]) -> Arc<CryptoProvider> {
    let cipher_suites = match suites {
        None => SUITES.to_vec(),
        Some(names) => names
            .iter()
            .filter_map(|name| SUITES.iter().find(|suite| suite_name(**suite) == name))
            .copied()
            .collect(),
    };
    Arc::new(CryptoProvider {
        cipher_suites,
        kx_groups: groups.iter().map(|g| group(*g)).collect(),
        ..aws_lc_rs::default_provider()
    })
}

/// A TLS version as logged: `TLSv1.2`, `TLSv1.3` (OpenSSL's and nginx's spelling).
pub fn version_name(version: TlsVersion) -> &'static str {
    match version {
        TlsVersion::Tls12 => "TLSv1.2",
        TlsVersion::Tls13 => "TLSv1.3",
    }
}

/// rustls protocol versions for the configured ones.
pub fn versions(versions: &[TlsVersion]) -> Vec<&'static SupportedProtocolVersion> {
    versions
        .iter()
        .map(|version| match version {
            TlsVersion::Tls12 => &version::TLS12,
            TlsVersion::Tls13 => &version::TLS13,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_are_logged_by_their_iana_names() {
        let names: Vec<&str> = SUITES.iter().map(|suite| iana_name(*suite)).collect();
        assert_eq!(
            &names[..4],
            [
                "TLS_AES_128_GCM_SHA256",
                "TLS_AES_256_GCM_SHA384",
                "TLS_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            ]
        );
    }

    #[test]
    fn every_configurable_suite_exists_in_the_provider() {
        let names: Vec<&str> = SUITES.iter().map(|suite| suite_name(*suite)).collect();
        assert_eq!(names, weir_config::CIPHER_SUITES);
    }

    #[test]
    fn suites_and_groups_are_narrowed() {
        let only = provider(
            Some(&["TLS13_AES_256_GCM_SHA384".to_owned()]),
            &[KeyExchangeGroup::Secp256r1],
        );
        assert_eq!(only.cipher_suites.len(), 1);
        assert_eq!(only.kx_groups.len(), 1);
        assert_eq!(
            suite_name(only.cipher_suites[0]),
            "TLS13_AES_256_GCM_SHA384"
        );
    }
}
