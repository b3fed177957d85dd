//! The certificates of one virtual server and the choice among them: by SNI
//! (exact name, then wildcard, then the default), then by what the client can
//! verify (ECDSA before RSA).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{SignatureAlgorithm, SignatureScheme};

use crate::certs::CertificateInfo;
use crate::ocsp::Staple;

/// One certificate with what it says about itself.
#[derive(Debug)]
pub struct Entry {
    /// The certificate chain and key as rustls serves them.
    pub key: Arc<CertifiedKey>,
    /// What the certificate says about itself (names, key type, expiry).
    pub info: CertificateInfo,
    /// The same chain and key with an OCSP response stapled, served while the response is
    /// current (`key` after it).
    pub stapled: Option<(Arc<CertifiedKey>, Staple)>,
}

impl Entry {
    /// A certificate with nothing stapled.
    pub fn new(key: Arc<CertifiedKey>, info: CertificateInfo) -> Entry {
        Entry {
            key,
            info,
            stapled: None,
        }
    }

    /// The same certificate with `staple` sent to clients that ask for it.
    pub fn with_staple(mut self, staple: Staple) -> Entry {
        let mut key = CertifiedKey::clone(&self.key);
        key.ocsp = Some(staple.der.clone());
        self.stapled = Some((Arc::new(key), staple));
        self
    }

    /// What a handshake at `now` is given: the stapled key while its response is current.
    fn served(&self, now: impl FnOnce() -> SystemTime) -> &Arc<CertifiedKey> {
        match &self.stapled {
            Some((stapled, staple)) if staple.is_current(now()) => stapled,
            _ => &self.key,
        }
    }
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
    /// By entry, the signature schemes its key can sign with ([`SCHEMES`], a bit each).
    schemes: Vec<u16>,
}

/// The signature schemes a client may offer, for telling which keys serve which clients.
const SCHEMES: [SignatureScheme; 13] = [
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::ECDSA_NISTP521_SHA512,
    SignatureScheme::ECDSA_SHA1_Legacy,
    SignatureScheme::ED25519,
    SignatureScheme::ED448,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
    SignatureScheme::RSA_PKCS1_SHA1,
];

/// The schemes of [`SCHEMES`] `key` can sign with, a bit each.
fn signs(key: &CertifiedKey) -> u16 {
    SCHEMES
        .iter()
        .enumerate()
        .filter(|(_, scheme)| key.key.choose_scheme(&[**scheme]).is_some())
        .fold(0, |bits, (bit, _)| bits | 1 << bit)
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
                .filter(|(_, entry)| entry.info.same_names(&first.info))
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
        let schemes = entries.iter().map(|entry| signs(&entry.key)).collect();
        CertStore {
            entries,
            exact,
            wildcard,
            default,
            schemes,
        }
    }

    /// Every certificate, in config order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// What an operator should hear when these certificates are loaded, one line per
    /// problem, each naming the certificate by its place in the config and its subject:
    /// expired or not yet valid at `now` (clients refuse it), a CA certificate served as a
    /// server's (strict clients refuse it: `openssl req -x509` makes one by default), a
    /// certificate never chosen because an earlier one has the same names and key type,
    /// and a chain out of order or holding a certificate that issued none of it.
    pub fn warnings(&self, now: SystemTime) -> Vec<String> {
        let mut warnings = Vec::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let info = &entry.info;
            let name = format!("certificate {} ({})", index + 1, info.subject);
            if info.not_after < now {
                warnings.push(format!(
                    "{name} expired on {}: clients will refuse it",
                    humantime::format_rfc3339_seconds(info.not_after)
                ));
            } else if info.not_before > now {
                warnings.push(format!(
                    "{name} is not valid before {}: clients will refuse it until then",
                    humantime::format_rfc3339_seconds(info.not_before)
                ));
            }
            if let Some((_, staple)) = &entry.stapled
                && !staple.is_current(now)
                && let Some(next) = staple.next_update
            {
                warnings.push(format!(
                    "{name}: its OCSP response expired on {} (its nextUpdate) and is no longer \
                     stapled; fetch a new one and reload",
                    humantime::format_rfc3339_seconds(next)
                ));
            }
            if info.is_ca {
                warnings.push(format!(
                    "{name} is a CA certificate (basic constraints CA:TRUE), not a server's: \
                     strict clients (rustls and other webpki-based ones) refuse it"
                ));
            }
            if let Some(shadowed) = self.shadowed(index) {
                warnings.push(format!("{name} is never served: {shadowed}"));
            }
            if let Some((place, subject)) = crate::certs::chain_break(&entry.key.cert) {
                warnings.push(format!(
                    "{name}: certificate {place} of its chain ({subject}) is not the issuer \
                     of the one before it: list the chain leaf first, each certificate \
                     followed by its issuer, or clients may refuse it"
                ));
            }
        }
        warnings
    }

    /// Why the certificate at `index` is never chosen, if it is not: every name and address
    /// it has is also an earlier certificate's whose key signs with every scheme its key
    /// does (a client that can use it gets that one first), and, when it is a default (a
    /// twin of the first certificate: what clients without SNI or with an unknown name
    /// get), an earlier default's key does so too.
    pub fn shadowed(&self, index: usize) -> Option<String> {
        let entry = &self.entries[index];
        let info = &entry.info;
        let mine = self.schemes[index];
        let serves_as_well = |other: usize| self.schemes[other] & mine == mine;
        if self.default.contains(&index)
            && !self
                .default
                .iter()
                .any(|&other| other < index && serves_as_well(other))
        {
            return None;
        }
        // Clients send no IP address as a server name (RFC 6066 §3; rustls drops one
        // sent anyway): a certificate that names only addresses is chosen by none, unless
        // it is a default (first or of the first one's names).
        if info.names.is_empty() && !info.addresses.is_empty() {
            return Some(
                "it names only IP addresses, which clients never send as a server name; \
                 only the first certificate serves clients that connect by address"
                    .to_owned(),
            );
        }
        let earlier: Vec<(usize, &Entry)> = self.entries[..index]
            .iter()
            .enumerate()
            .filter(|&(other, _)| serves_as_well(other))
            .collect();
        if (info.names.is_empty() && info.addresses.is_empty()) || earlier.is_empty() {
            return None;
        }
        if let Some((at, other)) = earlier.iter().find(|(_, other)| other.info.covers(info)) {
            let how = if other.info.same_names(info) {
                "has the same names and key type"
            } else {
                "has all its names, with the same key type"
            };
            return Some(format!("certificate {} {how}", at + 1));
        }
        let each_named = info
            .names
            .iter()
            .all(|name| earlier.iter().any(|(_, o)| o.info.names.contains(name)))
            && info.addresses.iter().all(|address| {
                earlier
                    .iter()
                    .any(|(_, o)| o.info.addresses.contains(address))
            });
        each_named.then(|| {
            "each of its names is an earlier certificate's, with the same key type".to_owned()
        })
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
    /// sign with a scheme the client offered; with its OCSP response while that is
    /// current at `now` (asked only when one is stapled).
    pub fn choose(
        &self,
        server_name: Option<&str>,
        schemes: &[tokio_rustls::rustls::SignatureScheme],
        now: impl FnOnce() -> SystemTime,
    ) -> Option<Arc<CertifiedKey>> {
        let candidates = self.candidates(server_name);
        candidates
            .iter()
            .map(|&index| &self.entries[index])
            .find(|entry| entry.key.key.choose_scheme(schemes).is_some())
            .or_else(|| candidates.first().map(|&index| &self.entries[index]))
            .map(|entry| Arc::clone(entry.served(now)))
    }
}

/// The resolver handed to rustls.
#[derive(Debug)]
pub struct Resolver(pub Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.choose(
            client_hello.server_name(),
            client_hello.signature_schemes(),
            SystemTime::now,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    use tokio_rustls::rustls::crypto::aws_lc_rs;
    use tokio_rustls::rustls::pki_types::PrivateKeyDer;

    use super::*;

    /// A self-signed ECDSA certificate for `names`, valid from `from` to `to` days from
    /// now, a CA when `ca`.
    fn entry(names: &[&str], from: i64, to: i64, ca: bool) -> Entry {
        signed(names, &rcgen::PKCS_ECDSA_P256_SHA256, |params| {
            let now = time::OffsetDateTime::now_utc();
            params.not_before = now + time::Duration::days(from);
            params.not_after = now + time::Duration::days(to);
            if ca {
                params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            }
        })
    }

    /// A self-signed certificate for `names` with a key made by `algorithm`, its
    /// parameters as `edit` leaves them.
    fn signed(
        names: &[&str],
        algorithm: &'static rcgen::SignatureAlgorithm,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Entry {
        let key = KeyPair::generate_for(algorithm).unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        edit(&mut params);
        let cert = params.self_signed(&key).unwrap();
        let signing = aws_lc_rs::default_provider()
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(key.serialize_der().into()))
            .unwrap();
        let key = CertifiedKey::new(vec![cert.der().clone()], signing);
        let info = CertificateInfo::of(cert.der(), key.key.algorithm()).unwrap();
        Entry::new(Arc::new(key), info)
    }

    /// A generated certificate of `key_type` for `names`.
    fn typed(names: &[&str], key_type: crate::KeyType) -> Entry {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let generated = crate::certs::self_signed(&names, key_type, 30).unwrap();
        let key = crate::certs::generated_key(&aws_lc_rs::default_provider(), &generated).unwrap();
        let info = CertificateInfo::of(&key.cert[0], key.key.algorithm()).unwrap();
        Entry::new(key, info)
    }

    #[test]
    fn names_in_another_order_are_the_same_names() {
        use crate::KeyType::{EcdsaP256, Rsa2048};
        use tokio_rustls::rustls::SignatureScheme;
        // The default's RSA twin lists the names in another order: an RSA-only client
        // without SNI still gets it.
        let store = CertStore::new(vec![
            typed(&["x.test", "y.test"], EcdsaP256),
            typed(&["y.test", "x.test"], Rsa2048),
            typed(&["y.test", "x.test"], EcdsaP256),
            typed(&["x.test"], EcdsaP256),
            typed(&["z.test"], EcdsaP256),
            typed(&["x.test", "z.test"], EcdsaP256),
            typed(&["w.test", "z.test"], EcdsaP256),
        ]);
        let rsa_only = [
            SignatureScheme::RSA_PSS_SHA256,
            SignatureScheme::RSA_PKCS1_SHA256,
        ];
        for name in [None, Some("unknown.test"), Some("y.test")] {
            let chosen = store.choose(name, &rsa_only, SystemTime::now).unwrap();
            assert_eq!(chosen.key.algorithm(), SignatureAlgorithm::RSA, "{name:?}");
        }
        let warnings = store.warnings(SystemTime::now());
        let expected = [
            "certificate 3 (CN=y.test) is never served: certificate 1 has the same names and key type",
            "certificate 4 (CN=x.test) is never served: certificate 1 has all its names, with the same key type",
            "certificate 6 (CN=x.test) is never served: each of its names is an earlier certificate's, with the same key type",
        ];
        assert_eq!(warnings, expected, "{warnings:#?}");
    }

    /// A self-signed certificate for `names` with a key made by `algorithm`.
    fn with_key(names: &[&str], algorithm: &'static rcgen::SignatureAlgorithm) -> Entry {
        signed(names, algorithm, |_| {})
    }

    /// Served certificates are not called never served: the default's twin of the other
    /// key type (what RSA-only clients without SNI get) behind a certificate with more
    /// names, and a P-384 key behind a P-256 one with the same names (a client that offers
    /// only P-384 gets it).
    #[test]
    fn a_certificate_some_clients_get_is_served() {
        use crate::KeyType::{EcdsaP256, Rsa2048};
        let store = CertStore::new(vec![
            typed(&["x.test"], EcdsaP256),
            typed(&["x.test", "y.test"], Rsa2048),
            typed(&["x.test"], Rsa2048),
            with_key(&["p.test"], &rcgen::PKCS_ECDSA_P256_SHA256),
            with_key(&["p.test"], &rcgen::PKCS_ECDSA_P384_SHA384),
            with_key(&["p.test"], &rcgen::PKCS_ECDSA_P384_SHA384),
        ]);
        let rsa_only = [SignatureScheme::RSA_PSS_SHA256];
        let chosen = store.choose(None, &rsa_only, SystemTime::now).unwrap();
        assert!(
            Arc::ptr_eq(&chosen, &store.entries()[2].key),
            "the default's twin"
        );
        let p384 = [SignatureScheme::ECDSA_NISTP384_SHA384];
        let chosen = store
            .choose(Some("p.test"), &p384, SystemTime::now)
            .unwrap();
        assert!(
            Arc::ptr_eq(&chosen, &store.entries()[4].key),
            "the P-384 key"
        );
        let warnings = store.warnings(SystemTime::now());
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].starts_with("certificate 6 ")
                && warnings[0].ends_with("certificate 5 has the same names and key type"),
            "{warnings:#?}"
        );
    }

    /// A certificate that names only IP addresses is never chosen past the default: clients
    /// send no address as a server name. As the default, it is served.
    #[test]
    fn a_certificate_of_addresses_only_is_served_only_as_the_default() {
        use crate::KeyType::EcdsaP256;
        let store = CertStore::new(vec![
            typed(&["default.test"], EcdsaP256),
            typed(&["127.0.0.1"], EcdsaP256),
            typed(&["both.test", "127.0.0.2"], EcdsaP256),
        ]);
        let warnings = store.warnings(SystemTime::now());
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].starts_with("certificate 2 ")
                && warnings[0].contains("names only IP addresses"),
            "{warnings:#?}"
        );
        let first = CertStore::new(vec![
            typed(&["127.0.0.1"], EcdsaP256),
            typed(&["other.test"], EcdsaP256),
        ]);
        assert!(first.warnings(SystemTime::now()).is_empty());
    }

    #[test]
    fn a_staple_is_sent_until_its_next_update_then_warned_about() {
        let next = SystemTime::now() + Duration::from_secs(3_600);
        let staple = Staple {
            der: vec![0x30, 0x00],
            this_update: SystemTime::now(),
            next_update: Some(next),
        };
        let store = CertStore::new(vec![
            entry(&["good.example"], -1, 90, false).with_staple(staple),
            entry(&["plain.example"], -1, 90, false),
        ]);
        let schemes = [tokio_rustls::rustls::SignatureScheme::ECDSA_NISTP256_SHA256];
        let at = |name: &str, now: SystemTime| {
            store
                .choose(Some(name), &schemes, || now)
                .unwrap()
                .ocsp
                .clone()
        };
        let before = next - Duration::from_secs(1);
        assert_eq!(at("good.example", before), Some(vec![0x30, 0x00]));
        assert_eq!(at("good.example", next), None);
        assert_eq!(at("plain.example", before), None);
        // The clock is read only for a certificate with a staple.
        let plain = store.choose(Some("plain.example"), &schemes, || {
            panic!("read the clock for a certificate with nothing stapled")
        });
        assert!(plain.is_some());
        assert!(store.warnings(before).is_empty());
        let warnings = store.warnings(next);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].starts_with("certificate 1 ")
                && warnings[0].contains("OCSP response expired"),
            "{warnings:#?}"
        );
    }

    #[test]
    fn certificates_clients_would_refuse_are_warned_about() {
        let store = CertStore::new(vec![
            entry(&["good.example"], -1, 90, false),
            entry(&["old.example"], -90, -1, false),
            entry(&["early.example"], 2, 90, false),
            entry(&["ca.example"], -1, 90, true),
            entry(&["good.example"], -1, 30, false),
        ]);
        let warnings = store.warnings(SystemTime::now());
        assert_eq!(warnings.len(), 4, "{warnings:#?}");
        assert!(
            warnings[0].starts_with("certificate 2 (CN=") && warnings[0].contains(" expired on "),
            "{warnings:#?}"
        );
        assert!(
            warnings[1].starts_with("certificate 3 ") && warnings[1].contains("not valid before"),
            "{warnings:#?}"
        );
        assert!(
            warnings[2].starts_with("certificate 4 ") && warnings[2].contains("CA certificate"),
            "{warnings:#?}"
        );
        assert!(
            warnings[3].starts_with("certificate 5 ")
                && warnings[3].ends_with("certificate 1 has the same names and key type"),
            "{warnings:#?}"
        );
        // Three days on, the early one is valid.
        let later = SystemTime::now() + Duration::from_secs(3 * 86_400);
        assert_eq!(store.warnings(later).len(), 3);
        let clean = CertStore::new(vec![entry(&["good.example"], -1, 90, false)]);
        assert!(clean.warnings(SystemTime::now()).is_empty());
    }

    /// A chain whose second certificate did not issue the leaf (out of order, or another
    /// CA's) is served as configured, with a warning; the leaf then its issuer is not.
    #[test]
    fn a_chain_out_of_order_is_warned_about() {
        use crate::certs::{TestCa, certified_key};
        use tokio_rustls::rustls::pki_types::CertificateDer;
        let provider = aws_lc_rs::default_provider();
        let (ca, other) = (
            TestCa::new("Chain CA").unwrap(),
            TestCa::new("Other CA").unwrap(),
        );
        let leaf = ca
            .server(&["chain.example".into()], crate::KeyType::EcdsaP256, 30)
            .unwrap();
        let chained = |rest: &[&CertificateDer<'static>]| {
            let mut chain = vec![leaf.cert_der.clone()];
            chain.extend(rest.iter().map(|der| (*der).clone()));
            let key = certified_key(&provider, chain, leaf.key_der()).unwrap();
            let info = CertificateInfo::of(&key.cert[0], key.key.algorithm()).unwrap();
            CertStore::new(vec![Entry::new(Arc::new(key), info)]).warnings(SystemTime::now())
        };
        let (issuer, stranger) = (&ca.certificate().cert_der, &other.certificate().cert_der);
        assert_eq!(chained(&[]), Vec::<String>::new());
        assert_eq!(chained(&[issuer]), Vec::<String>::new());
        for (rest, place) in [(vec![stranger], 2), (vec![issuer, stranger], 3)] {
            let warnings = chained(&rest);
            assert_eq!(warnings.len(), 1, "{warnings:#?}");
            let expected = format!(
                "certificate 1 (CN=chain.example): certificate {place} of its chain \
                 (CN=Other CA"
            );
            assert!(warnings[0].starts_with(&expected), "{warnings:#?}");
        }
        // A key that belongs to a later certificate: the chain starts with the issuer.
        let reversed = vec![issuer.clone(), leaf.cert_der.clone()];
        let error = certified_key(&provider, reversed, leaf.key_der()).unwrap_err();
        assert!(
            error.starts_with("the private key belongs to certificate 2"),
            "{error}"
        );
    }
}
