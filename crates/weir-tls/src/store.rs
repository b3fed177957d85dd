//! The certificates of one virtual server and the choice among them: by SNI
//! (exact name, then wildcard, then the default), then by what the client can
//! verify (ECDSA before RSA).

use std::collections::HashMap;
use std::sync::Arc;

use tokio_rustls::rustls::SignatureAlgorithm;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

use crate::certs::CertificateInfo;

/// One certificate with what it says about itself.
#[derive(Debug)]
pub struct Entry {
    /// The certificate chain and key as rustls serves them.
    pub key: Arc<CertifiedKey>,
    /// What the certificate says about itself (names, key type, expiry).
    pub info: CertificateInfo,
}

/// An immutable set of certificates; a reload builds a new one.
#[derive(Debug)]
pub struct CertStore {
    entries: Vec<Entry>,
    /// Exact lower-cased name → entry indexes, ECDSA first.
    exact: HashMap<String, Vec<usize>>,
    /// Parent domain of a `*.` name → entry indexes, ECDSA first.
    wildcard: HashMap<String, Vec<usize>>,
    /// Entries for when nothing matches: the first certificate and any other
    /// with the same names (its RSA or ECDSA twin).
    default: Vec<usize>,
}

fn preference(algorithm: SignatureAlgorithm) -> u8 {
    match algorithm {
        SignatureAlgorithm::ECDSA => 0,
        SignatureAlgorithm::ED25519 => 1,
        SignatureAlgorithm::RSA => 2,
        _ => 3,
    }
}

impl CertStore {
    /// Builds the store; the first entry is the default. `entries` must not be empty.
    pub fn new(entries: Vec<Entry>) -> CertStore {
        let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
        let mut wildcard: HashMap<String, Vec<usize>> = HashMap::new();
        for (index, entry) in entries.iter().enumerate() {
            for name in &entry.info.names {
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_owned()).or_default().push(index),
                    None => exact.entry(name.clone()).or_default().push(index),
                }
            }
            for address in &entry.info.addresses {
                exact.entry(address.to_string()).or_default().push(index);
            }
        }
        let mut default: Vec<usize> = match entries.first() {
            Some(first) => entries
                .iter()
                .enumerate()
                .filter(|(_, entry)| entry.info.names == first.info.names)
                .map(|(index, _)| index)
                .collect(),
            None => Vec::new(),
        };
        let order = |list: &mut Vec<usize>| {
            list.sort_by_key(|&index| (preference(entries[index].key.key.algorithm()), index));
            list.dedup();
        };
        exact.values_mut().for_each(order);
        wildcard.values_mut().for_each(order);
        order(&mut default);
        CertStore {
            entries,
            exact,
            wildcard,
            default,
        }
    }

    /// Every certificate, in config order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn candidates(&self, server_name: Option<&str>) -> &[usize] {
        let Some(name) = server_name else {
            return &self.default;
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(list) = self.exact.get(&name) {
            return list;
        }
        if let Some((_, parent)) = name.split_once('.')
            && let Some(list) = self.wildcard.get(parent)
        {
            return list;
        }
        &self.default
    }

    /// The certificate for a client: by name, then the first whose key can
    /// sign with a scheme the client offered.
    pub fn choose(
        &self,
        server_name: Option<&str>,
        schemes: &[tokio_rustls::rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let candidates = self.candidates(server_name);
        candidates
            .iter()
            .map(|&index| &self.entries[index].key)
            .find(|key| key.key.choose_scheme(schemes).is_some())
            .or_else(|| candidates.first().map(|&index| &self.entries[index].key))
            .cloned()
    }
}

/// The resolver handed to rustls.
#[derive(Debug)]
pub struct Resolver(pub Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0
            .choose(client_hello.server_name(), client_hello.signature_schemes())
    }
}
