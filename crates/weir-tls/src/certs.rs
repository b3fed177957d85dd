//! Certificates: reading PEM chains and keys (with errors that name the
//! config key), what a certificate says about itself (names, key type,
//! expiry), and generating test certificates (`weir cert`, self-signed
//! defaults, tests).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, RsaKeySize,
};
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{RootCertStore, SignatureAlgorithm};
use weir_config::FileRef;

/// A problem with a file named in the config; the caller adds file and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    /// The file the problem is in.
    pub file: FileRef,
    /// What is wrong, for the diagnostic.
    pub message: String,
}

impl FileProblem {
    fn new(file: &FileRef, message: impl Into<String>) -> FileProblem {
        FileProblem {
            file: file.clone(),
            message: message.into(),
        }
    }
}

/// The bytes of `file`, or why they cannot be read.
fn read_bytes(file: &FileRef) -> Result<Vec<u8>, FileProblem> {
    file.read().map_err(|error| {
        FileProblem::new(
            file,
            format!("cannot read {}: {error}", file.path.display()),
        )
    })
}

/// Reads every PEM block of one kind from `file` (`what` names the kind in errors, `empty`
/// what is missing when there is none).
fn read_pems<T: PemObject>(file: &FileRef, what: &str, empty: &str) -> Result<Vec<T>, FileProblem> {
    let bytes = read_bytes(file)?;
    let items = T::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            FileProblem::new(
                file,
                format!(
                    "{} is not a valid PEM {what} file: {error}",
                    file.path.display()
                ),
            )
        })?;
    if items.is_empty() {
        return Err(FileProblem::new(
            file,
            format!("{} holds no {empty}", file.path.display()),
        ));
    }
    Ok(items)
}

/// Reads a PEM certificate chain, leaf first.
pub fn read_chain(file: &FileRef) -> Result<Vec<CertificateDer<'static>>, FileProblem> {
    let chain: Vec<CertificateDer<'static>> = read_pems(
        file,
        "certificate",
        "PEM certificate (\"-----BEGIN CERTIFICATE-----\")",
    )?;
    for (index, der) in chain.iter().enumerate() {
        if let Err(error) = x509_parser::parse_x509_certificate(der) {
            return Err(FileProblem::new(
                file,
                format!(
                    "certificate {} in {} does not parse: {error}",
                    index + 1,
                    file.path.display()
                ),
            ));
        }
    }
    Ok(chain)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn read_key(file: &FileRef) -> Result<PrivateKeyDer<'static>, FileProblem> {
    let bytes = read_bytes(file)?;
    let encrypted = |text: &[u8]| {
        text.windows(29)
            .any(|window| window == b"BEGIN ENCRYPTED PRIVATE KEY--")
            || text
                .windows(19)
                .any(|window| window == b"Proc-Type: 4,ENCRYP")
    };
    if encrypted(&bytes) {
        return Err(FileProblem::new(
            file,
            format!(
                "{} is encrypted (a passphrase protects it), and weir reads unencrypted keys: \
                 write one with `openssl pkey -in KEY -out PLAIN.key` and keep it readable \
                 by weir only",
                file.path.display()
            ),
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| {
        FileProblem::new(
            file,
            format!(
                "{} holds no usable PEM private key: {error}",
                file.path.display()
            ),
        )
    })
}

/// A chain and its key, checked to belong together.
pub fn load_certified_key(
    provider: &CryptoProvider,
    cert: &FileRef,
    key: &FileRef,
) -> Result<CertifiedKey, FileProblem> {
    let chain = read_chain(cert)?;
    let key_der = read_key(key)?;
    certified_key(provider, chain, key_der).map_err(|message| FileProblem::new(key, message))
}

/// Builds a [`CertifiedKey`] from DER, checking that the key matches the leaf.
pub fn certified_key(
    provider: &CryptoProvider,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|error| {
            format!(
                "unsupported private key ({error}): weir takes RSA keys of 2048 bits or more, \
                 ECDSA keys on P-256, P-384 or P-521, and Ed25519 keys"
            )
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    certified.keys_match().map_err(|error| {
        // A key that belongs to a later certificate of the chain: the chain is out of order.
        let later = certified.cert.iter().skip(1).position(|der| {
            CertifiedKey::new(vec![der.clone()], Arc::clone(&certified.key))
                .keys_match()
                .is_ok()
        });
        match later {
            Some(index) => format!(
                "the private key belongs to certificate {} of the chain, not to the first: \
             the chain must start with the server's own certificate (the leaf)",
                index + 2
            ),
            None => format!("the private key does not belong to the certificate: {error}"),
        }
    })?;
    Ok(certified)
}

/// Where `chain` (leaf first) breaks, if it does: the place (the leaf is 1) and subject of
/// the first certificate after the leaf that is not the issuer of the one before it (its
/// subject is not that one's issuer). RFC 8446 §4.4.2 asks each to certify the one before
/// it, and TLS 1.2 (RFC 5246 §7.4.2) requires it; a certificate out of order or unrelated
/// there also hides the leaf's issuer from the OCSP check ([`load_staple`]).
pub fn chain_break(chain: &[CertificateDer<'_>]) -> Option<(usize, String)> {
    let parsed: Vec<_> = chain
        .iter()
        .map(|der| {
            x509_parser::parse_x509_certificate(der)
                .ok()
                .map(|(_, cert)| cert)
        })
        .collect();
    parsed
        .windows(2)
        .enumerate()
        .find_map(|(index, pair)| match pair {
            [Some(child), Some(parent)] if child.issuer().as_raw() != parent.subject().as_raw() => {
                Some((index + 2, subject_text(parent.subject())))
            }
            _ => None,
        })
}

/// Reads the DER OCSP response in `file` and checks it is about the leaf of `chain` and
/// says it is good (see [`crate::ocsp`]).
pub fn load_staple(
    file: &FileRef,
    chain: &[CertificateDer<'_>],
) -> Result<crate::ocsp::Staple, FileProblem> {
    let bytes = read_bytes(file)?;
    crate::ocsp::check(&bytes, chain)
        .map_err(|message| FileProblem::new(file, format!("{}: {message}", file.path.display())))
}

/// Reads a PEM file of trusted CA certificates.
pub fn load_roots(file: &FileRef) -> Result<RootCertStore, FileProblem> {
    let chain = read_chain(file)?;
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(chain);
    if added == 0 {
        return Err(FileProblem::new(
            file,
            format!(
                "{} holds no usable CA certificate ({ignored} rejected)",
                file.path.display()
            ),
        ));
    }
    Ok(roots)
}

/// Reads a PEM file of certificate revocation lists (one or more `X509 CRL` blocks).
pub fn load_crls(
    file: &FileRef,
) -> Result<Vec<rustls::pki_types::CertificateRevocationListDer<'static>>, FileProblem> {
    read_pems(file, "CRL", "certificate revocation list")
}

/// What a certificate says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateInfo {
    /// Lower-cased DNS names (and `*.` wildcards) it is valid for; the subject
    /// common name when it has no DNS names.
    pub names: Vec<String>,
    /// IP addresses it is valid for.
    pub addresses: Vec<IpAddr>,
    /// `ecdsa`, `rsa`, `ed25519` or `other`.
    pub key_type: &'static str,
    /// The certificate's subject, as text.
    pub subject: String,
    /// When the certificate becomes valid.
    pub not_before: SystemTime,
    /// When the certificate expires.
    pub not_after: SystemTime,
    /// Whether it says it is a CA (basic constraints `CA:TRUE`): clients refuse one as a
    /// server's certificate.
    pub is_ca: bool,
}

impl CertificateInfo {
    /// Reads the leaf of a chain.
    pub fn of(
        leaf: &CertificateDer<'_>,
        algorithm: SignatureAlgorithm,
    ) -> Result<CertificateInfo, String> {
        let (_, cert) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|error| format!("certificate does not parse: {error}"))?;
        let mut names = Vec::new();
        let mut addresses = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => {
                        names.push(dns.to_ascii_lowercase());
                    }
                    x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                        let address = match bytes.len() {
                            4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                            16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                            _ => None,
                        };
                        addresses.extend(address);
                    }
                    _ => {}
                }
            }
        }
        if names.is_empty() && addresses.is_empty() {
            names.extend(
                cert.subject()
                    .iter_common_name()
                    .filter_map(|cn| cn.as_str().ok())
                    .map(str::to_ascii_lowercase),
            );
        }
        let time =
            |seconds: i64| UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
        let not_before = time(cert.validity().not_before.timestamp());
        let not_after = time(cert.validity().not_after.timestamp());
        let is_ca =
            matches!(cert.basic_constraints(), Ok(Some(constraints)) if constraints.value.ca);
        let key_type = match algorithm {
            SignatureAlgorithm::ECDSA => "ecdsa",
            SignatureAlgorithm::RSA => "rsa",
            SignatureAlgorithm::ED25519 => "ed25519",
            _ => "other",
        };
        Ok(CertificateInfo {
            names,
            addresses,
            key_type,
            subject: subject_text(cert.subject()),
            not_before,
            not_after,
            is_ca,
        })
    }

    /// Whether it is valid for exactly the names and addresses `other` is, in any order.
    pub fn same_names(&self, other: &CertificateInfo) -> bool {
        self.covers(other) && other.covers(self)
    }

    /// Whether it is valid for every name and address `other` is (a `*.` name counts as
    /// that same wildcard, as the store looks names up).
    pub fn covers(&self, other: &CertificateInfo) -> bool {
        other.names.iter().all(|name| self.names.contains(name))
            && other
                .addresses
                .iter()
                .all(|address| self.addresses.contains(address))
    }

    /// Days until it expires (negative once it has).
    pub fn days_left(&self, now: SystemTime) -> f64 {
        match self.not_after.duration_since(now) {
            Ok(left) => left.as_secs_f64() / 86_400.0,
            Err(past) => -past.duration().as_secs_f64() / 86_400.0,
        }
    }
}

/// The subject of a DER certificate as text (`CN=client, O=weir`; see `subject_text`).
pub fn subject_of(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(subject_text(cert.subject()))
}

/// A distinguished name as text: its attributes in certificate order as `TYPE=value`, an
/// RDN's parts joined by ` + `, RDNs by `, ` (`CN=client, O=weir`), with each value escaped
/// as RFC 4514 §2.4 says (`,` `+` `"` `\` `<` `>` `;`, a leading `#` or space, a trailing
/// space, NUL). Two different names never read the same: a common name `alice, O=Admins`
/// is `CN=alice\, O=Admins`, not the name with an organisation. A value that is not text
/// is `#` and its bytes in hex.
fn subject_text(name: &x509_parser::x509::X509Name<'_>) -> String {
    let registry = x509_parser::objects::oid_registry();
    let mut out = String::new();
    for (index, rdn) in name.iter_rdn().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        for (part, attribute) in rdn.iter().enumerate() {
            if part > 0 {
                out.push_str(" + ");
            }
            match x509_parser::objects::oid2abbrev(attribute.attr_type(), registry) {
                Ok(abbrev) => out.push_str(abbrev),
                Err(_) => out.push_str(&attribute.attr_type().to_id_string()),
            }
            out.push('=');
            let value = attribute
                .as_str()
                .ok()
                .or_else(|| std::str::from_utf8(attribute.as_slice()).ok());
            match value {
                Some(text) => escape_dn_value(text, &mut out),
                None => {
                    out.push('#');
                    for byte in attribute.as_slice() {
                        out.push_str(&format!("{byte:02X}"));
                    }
                }
            }
        }
    }
    out
}

/// Appends `value` escaped as an RFC 4514 attribute value.
fn escape_dn_value(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (index, c) in value.chars().enumerate() {
        match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' => {
                out.push('\\');
                out.push(c);
            }
            '#' | ' ' if index == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if index == last => out.push_str("\\ "),
            // Control characters as hex pairs (RFC 4514 §2.4): a header that carries the
            // subject cannot hold them, and two subjects must never read the same.
            c if c.is_control() => {
                let mut bytes = [0u8; 4];
                for byte in c.encode_utf8(&mut bytes).bytes() {
                    out.push_str(&format!("\\{byte:02x}"));
                }
            }
            _ => out.push(c),
        }
    }
}

/// Key types for generated certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// An ECDSA key on P-256.
    EcdsaP256,
    /// An RSA key of 2048 bits.
    Rsa2048,
}

impl KeyType {
    /// `ecdsa` or `rsa`, as in `CertificateInfo::key_type`.
    pub fn label(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ecdsa",
            KeyType::Rsa2048 => "rsa",
        }
    }

    fn generate(self) -> Result<KeyPair, rcgen::Error> {
        match self {
            KeyType::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            KeyType::Rsa2048 => {
                KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, RsaKeySize::_2048)
            }
        }
    }
}

/// A generated certificate and key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PKCS #8 PEM.
    pub key_pem: String,
    /// The certificate, DER.
    pub cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Generated {
    /// The private key, PKCS #8 DER.
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key_der.clone().into())
    }
}

/// A certificate authority for tests and labs, kept in memory.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    cert: Generated,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// Whether `name` can be a server certificate's subject alternative name: an IP address,
/// a DNS name (RFC 5280 §4.2.1.6 forbids an empty one), or a wildcard `*.` before one.
pub fn is_certificate_name(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    tokio_rustls::rustls::pki_types::ServerName::try_from(name).is_ok()
}

/// Validity from a day ago (clock skew) for `days`, a positive random serial
/// (RFC 5280 §4.1.2.2), and the authority key identifier strict validators
/// require of issued certificates.
fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(i64::from(days));
    let mut serial = [0u8; 16];
    // Any failure leaves zeros, and the first byte is forced positive and non-zero.
    let _ = aws_lc_rs::rand::fill(&mut serial);
    serial[0] = (serial[0] & 0x7f) | 0x01;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    params.use_authority_key_identifier_extension = true;
}

fn generated(cert: &rcgen::Certificate, key: &KeyPair) -> Generated {
    Generated {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
        key_der: key.serialize_der(),
    }
}

impl TestCa {
    /// A new CA (ECDSA P-256) named `common_name`, valid for ten years.
    pub fn new(common_name: &str) -> Result<TestCa, rcgen::Error> {
        let key = KeyType::EcdsaP256.generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, common_name);
        name.push(DnType::OrganizationName, "weir test CA");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, 3650);
        let cert = params.self_signed(&key)?;
        let pem = generated(&cert, &key);
        Ok(TestCa {
            issuer: Issuer::new(params, key),
            cert: pem,
        })
    }

    /// A CA from its PEM certificate and key (as written by `weir cert`).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<TestCa, rcgen::Error> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
        Ok(TestCa {
            issuer,
            cert: Generated {
                cert_pem: cert_pem.to_owned(),
                key_pem: key_pem.to_owned(),
                cert_der,
                key_der: KeyPair::from_pem(key_pem)?.serialize_der(),
            },
        })
    }

    /// The CA certificate (what clients trust).
    pub fn certificate(&self) -> &Generated {
        &self.cert
    }

    /// A certificate revocation list (PEM) of this CA revoking `revoked` (certificates it
    /// issued, PEM), valid from a day ago for 30 days.
    pub fn crl(&self, revoked: &[&str]) -> Result<String, rcgen::Error> {
        let now = time::OffsetDateTime::now_utc();
        let mut revoked_certs = Vec::new();
        for pem in revoked {
            let der = CertificateDer::from_pem_slice(pem.as_bytes())
                .map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
            let (_, cert) = x509_parser::parse_x509_certificate(&der)
                .map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
            revoked_certs.push(rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from_slice(cert.raw_serial()),
                revocation_time: now - time::Duration::hours(1),
                reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                invalidity_date: None,
            });
        }
        let params = rcgen::CertificateRevocationListParams {
            this_update: now - time::Duration::days(1),
            next_update: now + time::Duration::days(30),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        params.signed_by(&self.issuer)?.pem()
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid for `days`.
    pub fn server(
        &self,
        names: &[String],
        key_type: KeyType,
        days: u32,
    ) -> Result<Generated, rcgen::Error> {
        let key = key_type.generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        let mut name = DistinguishedName::new();
        name.push(
            DnType::CommonName,
            names.first().map_or("weir", String::as_str),
        );
        params.distinguished_name = name;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if key_type == KeyType::Rsa2048 {
            params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        }
        validity(&mut params, days);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(generated(&cert, &key))
    }

    /// A client certificate with subject `CN=common_name`, valid for `days`.
    pub fn client(
        &self,
        common_name: &str,
        key_type: KeyType,
        days: u32,
    ) -> Result<Generated, rcgen::Error> {
        let key = key_type.generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, common_name);
        params.distinguished_name = name;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        validity(&mut params, days);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(generated(&cert, &key))
    }
}

/// A self-signed server certificate for `names`, valid for `days`.
pub fn self_signed(
    names: &[String],
    key_type: KeyType,
    days: u32,
) -> Result<Generated, rcgen::Error> {
    let key = key_type.generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        names.first().map_or("weir", String::as_str),
    );
    params.distinguished_name = name;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut params, days);
    let cert = params.self_signed(&key)?;
    Ok(generated(&cert, &key))
}

/// A generated certificate as a [`CertifiedKey`].
pub fn generated_key(
    provider: &CryptoProvider,
    generated: &Generated,
) -> Result<Arc<CertifiedKey>, String> {
    certified_key(
        provider,
        vec![generated.cert_der.clone()],
        generated.key_der(),
    )
    .map(Arc::new)
}

#[cfg(test)]
mod subject_tests {
    use super::*;

    fn subject(name: DistinguishedName) -> String {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = CertificateParams::default();
        params.distinguished_name = name;
        let cert = params.self_signed(&key).expect("a certificate");
        subject_of(cert.der()).expect("a subject")
    }

    #[test]
    fn subjects_that_differ_read_differently() {
        let mut plain = DistinguishedName::new();
        plain.push(DnType::CommonName, "client");
        plain.push(DnType::OrganizationName, "weir");
        assert_eq!(subject(plain), "CN=client, O=weir");
        // One common name with a comma, against a common name and an organisation.
        let mut comma = DistinguishedName::new();
        comma.push(DnType::CommonName, "alice, O=Admins");
        let mut two = DistinguishedName::new();
        two.push(DnType::CommonName, "alice");
        two.push(DnType::OrganizationName, "Admins");
        assert_eq!(subject(comma), "CN=alice\\, O=Admins");
        assert_eq!(subject(two), "CN=alice, O=Admins");
        let mut odd = DistinguishedName::new();
        odd.push(DnType::CommonName, "#1 \"x\" ");
        assert_eq!(subject(odd), "CN=\\#1 \\\"x\\\"\\ ");
        // Control characters as hex pairs: a tab is not a space, a line break not a blank.
        let mut tab = DistinguishedName::new();
        tab.push(DnType::CommonName, "a\tb");
        assert_eq!(subject(tab), "CN=a\\09b");
        let mut broken = DistinguishedName::new();
        broken.push(DnType::CommonName, "eve\r\nX: 1");
        assert_eq!(subject(broken), "CN=eve\\0d\\0aX: 1");
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    fn file_with(name: &str, bytes: &[u8]) -> FileRef {
        let path = std::env::temp_dir().join(format!("weir-key-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        FileRef {
            path,
            key: weir_config::KeyPath::root().key("key"),
            line: None,
        }
    }

    /// What an operator reads for a key weir cannot use says why, not "no items found".
    #[test]
    fn unusable_keys_are_refused_with_the_reason() {
        let encrypted = file_with(
            "encrypted",
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
        );
        let legacy = file_with(
            "legacy",
            b"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nMIIB\n-----END RSA PRIVATE KEY-----\n",
        );
        for file in [&encrypted, &legacy] {
            let problem = read_key(file).unwrap_err();
            assert!(
                problem.message.contains("is encrypted"),
                "{}",
                problem.message
            );
            let _ = std::fs::remove_file(&file.path);
        }
        // A key the provider refuses (a 1024-bit RSA key, say) names what it takes.
        let provider = tokio_rustls::rustls::crypto::aws_lc_rs::default_provider();
        let garbage = PrivateKeyDer::Pkcs8(vec![0x30, 0x03, 0x02, 0x01, 0x00].into());
        let message = certified_key(&provider, Vec::new(), garbage).unwrap_err();
        assert!(
            message.contains("RSA keys of 2048 bits or more"),
            "{message}"
        );
    }
}
