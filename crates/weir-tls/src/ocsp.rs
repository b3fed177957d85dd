//! OCSP stapling: a DER OCSP response an operator keeps fresh in a file (fetched from the
//! CA's responder, for example by `openssl ocsp` from cron) is sent with the certificate to
//! clients that ask for it (the `status_request` extension), so they need not ask the CA
//! themselves.
//!
//! The response is read when the certificates are (start, reload, certificate reload) and
//! checked against the certificate it is stapled to, so that a wrong file is refused with
//! its config key instead of breaking every handshake of strict clients: it must be a
//! successful basic response (RFC 6960 §4.2.1) with a `SingleResponse` whose `CertID`
//! names the leaf (its serial, its issuer's name hash and, when the chain holds the issuer,
//! its issuer's key hash), and that response must say `good`. The responder's signature is
//! not verified here; clients verify it, as they verify the certificate.
//!
//! A response past its `nextUpdate` is not stapled (clients refuse an expired one): the
//! certificate store stops sending it at that instant and warns about it on the next load.

use std::time::SystemTime;

use aws_lc_rs::digest;
use tokio_rustls::rustls::pki_types::CertificateDer;
use x509_parser::asn1_rs::{Any, Class, Enumerated, FromDer, GeneralizedTime, Oid, Tag};

/// `id-pkix-ocsp-basic` (RFC 6960 §4.2.1).
const BASIC: &str = "1.3.6.1.5.5.7.48.1.1";

/// A checked OCSP response, ready to staple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staple {
    /// The whole DER `OCSPResponse`, as sent to clients.
    pub der: Vec<u8>,
    /// The response's `thisUpdate`.
    pub this_update: SystemTime,
    /// The response's `nextUpdate`: past it the response is not sent. `None`: the responder
    /// gave none (RFC 6960 §2.4: newer information is always available); sent until replaced.
    pub next_update: Option<SystemTime>,
}

impl Staple {
    /// Whether the response may still be sent at `now`.
    pub fn is_current(&self, now: SystemTime) -> bool {
        self.next_update.is_none_or(|next| now < next)
    }
}

/// One DER element read from the front of `input`, and what follows it.
fn element(input: &[u8]) -> Result<(Any<'_>, &[u8]), String> {
    match Any::from_der(input) {
        Ok((rest, any)) => Ok((any, rest)),
        Err(error) => Err(format!("not DER: {error}")),
    }
}

/// The elements inside a constructed element, in order.
fn children<'a>(any: &Any<'a>) -> Result<Vec<Any<'a>>, String> {
    let mut items = Vec::new();
    let mut rest = any.data;
    while !rest.is_empty() {
        let (item, next) = element(rest)?;
        items.push(item);
        rest = next;
    }
    Ok(items)
}

fn expect_sequence<'a>(any: &Any<'a>, what: &str) -> Result<Vec<Any<'a>>, String> {
    if any.class() != Class::Universal || any.tag() != Tag::Sequence {
        return Err(format!("{what} is not a SEQUENCE"));
    }
    children(any)
}

fn is_context(any: &Any<'_>, tag: u32) -> bool {
    any.class() == Class::ContextSpecific && any.tag() == Tag(tag)
}

fn time(any: &Any<'_>, what: &str) -> Result<SystemTime, String> {
    GeneralizedTime::try_from(any)
        .and_then(|time| time.utc_datetime())
        .map(SystemTime::from)
        .map_err(|error| format!("{what} is not a valid time: {error}"))
}

/// The names RFC 6960 §4.2.1 gives the unsuccessful response statuses.
fn status_name(status: u32) -> &'static str {
    match status {
        1 => "malformedRequest",
        2 => "internalError",
        3 => "tryLater",
        5 => "sigRequired",
        6 => "unauthorized",
        _ => "an unknown status",
    }
}

/// The digest an OCSP `CertID` names by its algorithm's OID.
fn hash_algorithm(oid: &Oid<'_>) -> Option<&'static digest::Algorithm> {
    match oid.to_id_string().as_str() {
        "1.3.14.3.2.26" => Some(&digest::SHA1_FOR_LEGACY_USE_ONLY),
        "2.16.840.1.101.3.4.2.1" => Some(&digest::SHA256),
        "2.16.840.1.101.3.4.2.2" => Some(&digest::SHA384),
        "2.16.840.1.101.3.4.2.3" => Some(&digest::SHA512),
        _ => None,
    }
}

/// What identifies the leaf in a `CertID`.
struct Leaf<'a> {
    serial: &'a [u8],
    issuer_name: &'a [u8],
    /// The issuer's public key (the BIT STRING's content), when the chain holds the issuer.
    issuer_key: Option<&'a [u8]>,
}

/// Whether a `CertID` names `leaf`.
fn names_leaf(cert_id: &Any<'_>, leaf: &Leaf<'_>) -> Result<bool, String> {
    let parts = expect_sequence(cert_id, "a CertID")?;
    let [algorithm, name_hash, key_hash, serial] = parts.as_slice() else {
        return Err("a CertID does not have its four fields".to_owned());
    };
    let algorithm = expect_sequence(algorithm, "a CertID's hash algorithm")?;
    let oid = algorithm
        .first()
        .and_then(|any| Oid::try_from(any).ok())
        .ok_or("a CertID's hash algorithm has no OID")?;
    let Some(hash) = hash_algorithm(&oid) else {
        return Err(format!("a CertID uses an unknown hash algorithm ({oid})"));
    };
    if serial.tag() != Tag::Integer || serial.data != leaf.serial {
        return Ok(false);
    }
    if digest::digest(hash, leaf.issuer_name).as_ref() != name_hash.data {
        return Ok(false);
    }
    Ok(leaf
        .issuer_key
        .is_none_or(|key| digest::digest(hash, key).as_ref() == key_hash.data))
}

/// Reads and checks `der` as the OCSP response to staple to the leaf of `chain` (leaf
/// first, then its issuer when the file holds it). The error says what is wrong, for the
/// config key that named the file.
pub fn check(der: &[u8], chain: &[CertificateDer<'_>]) -> Result<Staple, String> {
    let leaf_der = chain.first().ok_or("no certificate to staple it to")?;
    let (_, leaf) = x509_parser::parse_x509_certificate(leaf_der)
        .map_err(|error| format!("the certificate does not parse: {error}"))?;
    let issuer = chain
        .get(1)
        .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
        .map(|(_, cert)| cert)
        .filter(|issuer| issuer.subject().as_raw() == leaf.issuer().as_raw());
    let wanted = Leaf {
        serial: leaf.raw_serial(),
        issuer_name: leaf.issuer().as_raw(),
        issuer_key: issuer
            .as_ref()
            .map(|issuer| issuer.public_key().subject_public_key.data.as_ref()),
    };
    let responses = single_responses(der)?;
    for single in &responses {
        let single = expect_sequence(single, "a single response")?;
        let [cert_id, status, this_update, more @ ..] = single.as_slice() else {
            return Err("a single response does not have its fields".to_owned());
        };
        if !names_leaf(cert_id, &wanted)? {
            continue;
        }
        let this_update = time(this_update, "thisUpdate")?;
        let next_update = match more.first().filter(|any| is_context(any, 0)) {
            Some(next) => {
                let inner = children(next)?;
                Some(time(
                    inner.first().ok_or("an empty nextUpdate")?,
                    "nextUpdate",
                )?)
            }
            None => None,
        };
        good(status)?;
        return Ok(Staple {
            der: der.to_vec(),
            this_update,
            next_update,
        });
    }
    Err(format!(
        "the OCSP response is about another certificate (none of its {} names serial {} \
         of issuer {})",
        responses.len(),
        leaf.raw_serial_as_string(),
        leaf.issuer()
    ))
}

/// The `SingleResponse`s of a successful basic OCSP response.
fn single_responses(der: &[u8]) -> Result<Vec<Any<'_>>, String> {
    if der.trim_ascii_start().starts_with(b"-----BEGIN") {
        return Err(
            "the file is PEM; weir reads the DER response (what `openssl ocsp -respout` writes)"
                .to_owned(),
        );
    }
    let (response, rest) = element(der)?;
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes follow the OCSP response (is the file PEM or base64? weir reads DER)",
            rest.len()
        ));
    }
    let fields = expect_sequence(&response, "the OCSP response")
        .map_err(|error| format!("{error} (is the file PEM or base64? weir reads DER)"))?;
    let status = fields
        .first()
        .and_then(|any| Enumerated::try_from(any).ok())
        .ok_or("the OCSP response has no status")?;
    if status.0 != 0 {
        return Err(format!(
            "the responder answered {} ({}), not a response",
            status_name(status.0),
            status.0
        ));
    }
    let bytes = fields
        .get(1)
        .filter(|any| is_context(any, 0))
        .ok_or("a successful OCSP response without its responseBytes")?;
    let bytes = children(bytes)?;
    let bytes = expect_sequence(
        bytes.first().ok_or("empty responseBytes")?,
        "the responseBytes",
    )?;
    let kind = bytes
        .first()
        .and_then(|any| Oid::try_from(any).ok())
        .ok_or("the responseBytes have no type")?;
    if kind.to_id_string() != BASIC {
        return Err(format!(
            "the response is of type {kind}, not a basic OCSP response"
        ));
    }
    let basic = bytes
        .get(1)
        .filter(|any| any.tag() == Tag::OctetString)
        .ok_or("the responseBytes hold no response")?;
    let (basic, _) = element(basic.data)?;
    let basic = expect_sequence(&basic, "the basic OCSP response")?;
    let data = expect_sequence(
        basic.first().ok_or("an empty basic OCSP response")?,
        "the response data",
    )?;
    // version [0] (optional), responderID [1] or [2], producedAt, responses, extensions [1].
    let mut data = data.iter().skip_while(|any| is_context(any, 0)).skip(2);
    expect_sequence(
        data.next().ok_or("the response data hold no responses")?,
        "the responses",
    )
}

/// Whether a `CertStatus` says good; what it says otherwise.
fn good(status: &Any<'_>) -> Result<(), String> {
    match status.tag().0 {
        0 if status.class() == Class::ContextSpecific => Ok(()),
        1 if status.class() == Class::ContextSpecific => {
            let revoked_at = children(status)?
                .first()
                .and_then(|any| time(any, "revocationTime").ok())
                .map_or_else(
                    || "at an unreadable time".to_owned(),
                    |at| format!("on {}", humantime::format_rfc3339_seconds(at)),
                );
            Err(format!(
                "the OCSP response says the certificate was revoked {revoked_at}: \
                 clients that check would refuse it"
            ))
        }
        _ => Err("the OCSP responder does not know the certificate (status unknown)".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_rustls::rustls::pki_types::pem::PemObject;

    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/testdata/ocsp/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"))
    }

    fn chain(name: &str) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_slice_iter(&fixture(name))
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_good_response_about_the_leaf_is_stapled_until_its_next_update() {
        for file in ["good.ocsp", "good-sha256.ocsp"] {
            let der = fixture(file);
            let staple = check(&der, &chain("good.test.pem")).expect(file);
            assert_eq!(staple.der, der);
            let next = staple.next_update.expect("the fixtures have a nextUpdate");
            assert!(staple.this_update < next);
            assert!(staple.is_current(next - Duration::from_secs(1)));
            assert!(!staple.is_current(next));
            // The leaf alone (no issuer in the file): matched by serial and issuer name.
            let leaf_only = &chain("good.test.pem")[..1];
            assert!(check(&der, leaf_only).is_ok(), "{file}");
        }
    }

    #[test]
    fn wrong_responses_are_refused_with_what_is_wrong() {
        let error = check(&fixture("revoked.ocsp"), &chain("revoked.test.pem")).unwrap_err();
        assert!(error.contains("was revoked on "), "{error}");
        let error = check(&fixture("good.ocsp"), &chain("revoked.test.pem")).unwrap_err();
        assert!(
            error.contains("about another certificate") && error.contains("serial 10:02"),
            "{error}"
        );
        let error = check(&fixture("trylater.ocsp"), &chain("good.test.pem")).unwrap_err();
        assert!(error.contains("answered tryLater (3)"), "{error}");
        let pem = b"-----BEGIN OCSP RESPONSE-----\nMAMKAQM=\n-----END OCSP RESPONSE-----\n";
        let error = check(pem, &chain("good.test.pem")).unwrap_err();
        assert!(error.contains("the file is PEM"), "{error}");
        let mut trailing = fixture("good.ocsp");
        trailing.push(0);
        let error = check(&trailing, &chain("good.test.pem")).unwrap_err();
        assert!(error.contains("1 bytes follow"), "{error}");
        // Cut anywhere, it never panics and never passes.
        let der = fixture("good.ocsp");
        for end in 0..der.len() {
            assert!(
                check(&der[..end], &chain("good.test.pem")).is_err(),
                "{end}"
            );
        }
    }

    #[test]
    fn a_different_issuer_key_with_the_same_name_is_not_the_leafs() {
        // The revoked.test chain's CA is the same CA: replace the issuer by a certificate
        // with the same subject name but another key, and the key hash no longer matches.
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            rcgen::DnValue::Utf8String("weir test OCSP CA".to_owned()),
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let impostor = params.self_signed(&key).unwrap();
        let mut chain = chain("good.test.pem");
        chain[1] = impostor.der().clone();
        let error = check(&fixture("good.ocsp"), &chain).unwrap_err();
        assert!(error.contains("about another certificate"), "{error}");
    }
}
