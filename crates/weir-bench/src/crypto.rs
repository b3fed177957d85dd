//! `weir bench crypto`: the cost of TLS's cryptography on one core, measured with aws-lc-rs
//! (the provider weir's TLS uses), printed like `openssl speed`, and the ceiling it puts on
//! full TLS 1.3 handshakes per core for each certificate type.
//!
//! Each item runs on the calling thread for the given duration: signatures (sign and verify,
//! the schemes TLS 1.3 uses), key agreement (key generation and derivation), AEAD sealing
//! at `openssl speed -evp`'s buffer sizes, and the TLS 1.3 key schedule. The ceiling counts
//! what a server computes for one full handshake: one signature (CertificateVerify), one
//! X25519 key generation and one derivation, and the key schedule ([`KEY_SCHEDULE_COUNTS`]).
//! It leaves out record encryption of the handshake messages, certificate and message
//! encoding, the TLS state machine, allocation and the network, so real servers stay below it.

use std::fmt::Write;
use std::hint::black_box;
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey};
use aws_lc_rs::digest;
use aws_lc_rs::error::Unspecified;
use aws_lc_rs::hkdf;
use aws_lc_rs::hmac;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use serde::Serialize;

/// The schema name and version of `weir bench crypto --json`.
pub const CRYPTO_SCHEMA: &str = "weir-bench-crypto/1";
/// Buffer sizes of the AEAD rows (bytes), as `openssl speed -evp` without 64.
pub const AEAD_SIZES: [usize; 5] = [16, 256, 1024, 8192, 16384];
/// What one key-schedule operation computes (see [`key_schedule`]).
pub const KEY_SCHEDULE_COUNTS: &str = "HKDF-SHA256: 3 extracts and 18 expands (handshake and \
     application traffic secrets, their keys and IVs, both finished keys, exporter and \
     resumption secrets, one ticket PSK), 2 HMACs (Finished), SHA-256 of a 2.5 KiB transcript \
     with 3 intermediate hashes";
/// What the server signs in TLS 1.3's CertificateVerify: 64 spaces, a context string, a zero
/// byte and a SHA-256 transcript hash (130 bytes).
const SIGNED_LENGTH: usize = 130;
/// The transcript hashed by the key schedule: hellos, extensions, a certificate, verify.
const TRANSCRIPT_LENGTH: usize = 2560;

/// How long each item runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CryptoSettings {
    /// How long each algorithm and operation is measured.
    pub duration: Duration,
}

/// One signature algorithm: signs and verifies per second.
#[derive(Debug, Clone, Serialize)]
pub struct SignatureResult {
    /// `rsa2048`, `rsa3072`, `rsa4096`, `ecdsa-p256`, `ecdsa-p384`, `ed25519`.
    pub algorithm: &'static str,
    /// The TLS 1.3 signature scheme measured.
    pub scheme: &'static str,
    /// Signatures per second on one core.
    pub sign_per_s: f64,
    /// Verifications per second on one core.
    pub verify_per_s: f64,
}

/// One key-agreement group: key generations and derivations per second.
#[derive(Debug, Clone, Serialize)]
pub struct KeyAgreementResult {
    /// `x25519`, `p256`.
    pub algorithm: &'static str,
    /// An ephemeral private key and its public key.
    pub keygen_per_s: f64,
    /// The shared secret from a private key and the peer's public key.
    pub derive_per_s: f64,
}

/// One AEAD: sealing (encrypting and tagging in place) at each buffer size.
#[derive(Debug, Clone, Serialize)]
pub struct AeadResult {
    /// `aes-128-gcm`, `aes-256-gcm`, `chacha20-poly1305`.
    pub algorithm: &'static str,
    /// One result per buffer size, smallest first.
    pub sizes: Vec<AeadSize>,
}

/// Sealing one buffer size with one AEAD.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AeadSize {
    /// The buffer size, bytes.
    pub bytes: usize,
    /// Buffers sealed per second on one core.
    pub ops_per_s: f64,
    /// Bytes sealed per second on one core.
    pub bytes_per_s: f64,
}

/// The TLS 1.3 key schedule of one handshake.
#[derive(Debug, Clone, Serialize)]
pub struct KeyScheduleResult {
    /// Key schedules per second on one core.
    pub ops_per_s: f64,
    /// What one operation computes.
    pub counts: &'static str,
}

/// The ceiling on full TLS 1.3 handshakes per core for one certificate type.
#[derive(Debug, Clone, Serialize)]
pub struct HandshakeCeiling {
    /// The certificate's key: an `algorithm` of `signatures`.
    pub certificate: &'static str,
    /// Server CPU per handshake: 1/sign + 1/keygen + 1/derive (X25519) + 1/key schedule, µs.
    pub server_us: f64,
    /// 1 / `server_us`: full handshakes per second per core, at most.
    pub handshakes_per_s: f64,
}

/// The whole measurement; `serde_json::to_string` gives the `weir-bench-crypto/1` document.
#[derive(Debug, Clone, Serialize)]
pub struct CryptoReport {
    /// Always `weir-bench-crypto/1`.
    pub schema: &'static str,
    /// The crypto library measured.
    pub provider: &'static str,
    /// Always 1: every figure is per core.
    pub threads: usize,
    /// Time per item.
    pub duration_s: f64,
    /// One result per signature algorithm.
    pub signatures: Vec<SignatureResult>,
    /// One result per key-agreement group.
    pub key_agreement: Vec<KeyAgreementResult>,
    /// One result per AEAD.
    pub aead: Vec<AeadResult>,
    /// The TLS 1.3 key schedule.
    pub key_schedule: KeyScheduleResult,
    /// What the ceiling counts.
    pub ceiling_counts: &'static str,
    /// One ceiling per certificate type.
    pub handshake_ceiling: Vec<HandshakeCeiling>,
}

/// Why a measurement could not run (a key could not be made: never on a working aws-lc).
#[derive(Debug, thiserror::Error)]
#[error("{0}: the crypto library refused")]
pub struct CryptoError(&'static str);

impl CryptoReport {
    /// The `weir-bench-crypto/1` JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Runs every item on the calling thread (blocking, about 32 × `duration` plus RSA key
/// generation).
pub fn run(settings: &CryptoSettings) -> Result<CryptoReport, CryptoError> {
    let duration = settings.duration;
    let signatures = vec![
        rsa("rsa2048", KeySize::Rsa2048, duration)?,
        rsa("rsa3072", KeySize::Rsa3072, duration)?,
        rsa("rsa4096", KeySize::Rsa4096, duration)?,
        ecdsa(
            "ecdsa-p256",
            "ecdsa_secp256r1_sha256",
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &signature::ECDSA_P256_SHA256_ASN1,
            duration,
        )?,
        ecdsa(
            "ecdsa-p384",
            "ecdsa_secp384r1_sha384",
            &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
            &signature::ECDSA_P384_SHA384_ASN1,
            duration,
        )?,
        ed25519(duration)?,
    ];
    let key_agreement = vec![
        key_agreement("x25519", &agreement::X25519, duration)?,
        key_agreement("p256", &agreement::ECDH_P256, duration)?,
    ];
    let aead = vec![
        aead_row("aes-128-gcm", &aead::AES_128_GCM, duration)?,
        aead_row("aes-256-gcm", &aead::AES_256_GCM, duration)?,
        aead_row("chacha20-poly1305", &aead::CHACHA20_POLY1305, duration)?,
    ];
    let schedule_secret = [7u8; 32];
    let transcript = [0x16u8; TRANSCRIPT_LENGTH];
    let schedule = measure(duration, || {
        black_box(key_schedule(&schedule_secret, &transcript));
    });
    let x25519 = &key_agreement[0];
    let handshake_ceiling = signatures
        .iter()
        .map(|signature| {
            let seconds = 1.0 / signature.sign_per_s
                + 1.0 / x25519.keygen_per_s
                + 1.0 / x25519.derive_per_s
                + 1.0 / schedule;
            HandshakeCeiling {
                certificate: signature.algorithm,
                server_us: seconds * 1e6,
                handshakes_per_s: 1.0 / seconds,
            }
        })
        .collect();
    Ok(CryptoReport {
        schema: CRYPTO_SCHEMA,
        provider: "aws-lc-rs",
        threads: 1,
        duration_s: duration.as_secs_f64(),
        signatures,
        key_agreement,
        aead,
        key_schedule: KeyScheduleResult {
            ops_per_s: schedule,
            counts: KEY_SCHEDULE_COUNTS,
        },
        ceiling_counts: "server side of one full TLS 1.3 handshake: one signature \
             (CertificateVerify) + one X25519 key generation + one X25519 derivation + one key \
             schedule; not counted: record encryption, encoding, the state machine, allocation, \
             syscalls and the network (an upper bound)",
        handshake_ceiling,
    })
}

/// Calls `operation` repeatedly for `duration` (in batches that grow until a batch takes a
/// millisecond, so the clock is read rarely); returns calls per second.
fn measure(duration: Duration, mut operation: impl FnMut()) -> f64 {
    operation();
    let start = Instant::now();
    let mut count = 0u64;
    let mut batch = 1u64;
    loop {
        let batch_start = Instant::now();
        for _ in 0..batch {
            operation();
        }
        count += batch;
        let now = Instant::now();
        let elapsed = now - start;
        if elapsed >= duration {
            return count as f64 / elapsed.as_secs_f64();
        }
        if now - batch_start < Duration::from_millis(1) {
            batch *= 2;
        }
    }
}

fn message() -> [u8; SIGNED_LENGTH] {
    let mut message = [b' '; SIGNED_LENGTH];
    message[64..97].copy_from_slice(b"TLS 1.3, server CertificateVerify");
    message[97] = 0;
    message
}

fn rsa(
    algorithm: &'static str,
    size: KeySize,
    duration: Duration,
) -> Result<SignatureResult, CryptoError> {
    let key = RsaKeyPair::generate(size).map_err(|_| CryptoError("RSA key generation"))?;
    let rng = SystemRandom::new();
    let message = message();
    let mut signed = vec![0; key.public_modulus_len()];
    key.sign(&signature::RSA_PSS_SHA256, &rng, &message, &mut signed)
        .map_err(|_| CryptoError("RSA signing"))?;
    let sign_per_s = measure(duration, || {
        let _ = black_box(key.sign(&signature::RSA_PSS_SHA256, &rng, &message, &mut signed));
    });
    let public = signature::UnparsedPublicKey::new(
        &signature::RSA_PSS_2048_8192_SHA256,
        key.public_key().as_ref().to_vec(),
    );
    verify_once(&public, &message, &signed)?;
    let verify_per_s = measure(duration, || {
        let _ = black_box(public.verify(&message, &signed));
    });
    Ok(SignatureResult {
        algorithm,
        scheme: "rsa_pss_rsae_sha256",
        sign_per_s,
        verify_per_s,
    })
}

fn ecdsa(
    algorithm: &'static str,
    scheme: &'static str,
    signing: &'static signature::EcdsaSigningAlgorithm,
    verifying: &'static signature::EcdsaVerificationAlgorithm,
    duration: Duration,
) -> Result<SignatureResult, CryptoError> {
    let key = EcdsaKeyPair::generate(signing).map_err(|_| CryptoError("ECDSA key generation"))?;
    let rng = SystemRandom::new();
    let message = message();
    let signed = key
        .sign(&rng, &message)
        .map_err(|_| CryptoError("ECDSA signing"))?;
    let sign_per_s = measure(duration, || {
        let _ = black_box(key.sign(&rng, &message));
    });
    let public = signature::UnparsedPublicKey::new(verifying, key.public_key().as_ref().to_vec());
    verify_once(&public, &message, signed.as_ref())?;
    let verify_per_s = measure(duration, || {
        let _ = black_box(public.verify(&message, signed.as_ref()));
    });
    Ok(SignatureResult {
        algorithm,
        scheme,
        sign_per_s,
        verify_per_s,
    })
}

fn ed25519(duration: Duration) -> Result<SignatureResult, CryptoError> {
    let key = Ed25519KeyPair::generate().map_err(|_| CryptoError("Ed25519 key generation"))?;
    let message = message();
    let signed = key.sign(&message);
    let sign_per_s = measure(duration, || {
        black_box(key.sign(&message));
    });
    let public =
        signature::UnparsedPublicKey::new(&signature::ED25519, key.public_key().as_ref().to_vec());
    verify_once(&public, &message, signed.as_ref())?;
    let verify_per_s = measure(duration, || {
        let _ = black_box(public.verify(&message, signed.as_ref()));
    });
    Ok(SignatureResult {
        algorithm: "ed25519",
        scheme: "ed25519",
        sign_per_s,
        verify_per_s,
    })
}

/// A signature that does not verify would make the verify figure meaningless.
fn verify_once(
    public: &signature::UnparsedPublicKey<Vec<u8>>,
    message: &[u8],
    signed: &[u8],
) -> Result<(), CryptoError> {
    public
        .verify(message, signed)
        .map_err(|_| CryptoError("verifying a fresh signature"))
}

fn key_agreement(
    algorithm: &'static str,
    group: &'static agreement::Algorithm,
    duration: Duration,
) -> Result<KeyAgreementResult, CryptoError> {
    let keygen_per_s = measure(duration, || {
        let _ = black_box(PrivateKey::generate(group).and_then(|key| key.compute_public_key()));
    });
    let failed = || CryptoError("key agreement");
    let mine = PrivateKey::generate(group).map_err(|_| failed())?;
    let peer = PrivateKey::generate(group)
        .and_then(|key| key.compute_public_key())
        .map_err(|_| failed())?;
    let peer = UnparsedPublicKey::new(group, peer.as_ref().to_vec());
    let derive = || agreement::agree(&mine, &peer, Unspecified, |secret| Ok(secret[0]));
    derive().map_err(|_| failed())?;
    let derive_per_s = measure(duration, || {
        let _ = black_box(derive());
    });
    Ok(KeyAgreementResult {
        algorithm,
        keygen_per_s,
        derive_per_s,
    })
}

fn aead_row(
    algorithm: &'static str,
    cipher: &'static aead::Algorithm,
    duration: Duration,
) -> Result<AeadResult, CryptoError> {
    let key_bytes = vec![0x42; cipher.key_len()];
    let key =
        LessSafeKey::new(UnboundKey::new(cipher, &key_bytes).map_err(|_| CryptoError("AEAD key"))?);
    // A TLS record header is the additional data.
    let header = [0x17, 0x03, 0x03, 0x40, 0x11];
    let mut buffer = vec![0u8; AEAD_SIZES[AEAD_SIZES.len() - 1]];
    let mut sizes = Vec::with_capacity(AEAD_SIZES.len());
    for bytes in AEAD_SIZES {
        let mut sequence = 0u64;
        let ops_per_s = measure(duration, || {
            // Record sequence number as the nonce, as TLS does (XORed with an IV there).
            sequence += 1;
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&sequence.to_be_bytes());
            let _ = black_box(key.seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                &mut buffer[..bytes],
            ));
        });
        sizes.push(AeadSize {
            bytes,
            ops_per_s,
            bytes_per_s: ops_per_s * bytes as f64,
        });
    }
    Ok(AeadResult { algorithm, sizes })
}

/// An output length for HKDF-Expand.
struct Length(usize);

impl hkdf::KeyType for Length {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) into `out`.
fn expand_label(secret: &hkdf::Prk, label: &[u8], context: &[u8], out: &mut [u8]) {
    let length = (out.len() as u16).to_be_bytes();
    let label_length = [(6 + label.len()) as u8];
    let context_length = [context.len() as u8];
    let info = [
        &length[..],
        &label_length[..],
        b"tls13 ",
        label,
        &context_length[..],
        context,
    ];
    // The lengths are those of SHA-256 secrets, keys and IVs: always valid for HKDF.
    if let Ok(okm) = secret.expand(&info, Length(out.len())) {
        let _ = okm.fill(out);
    }
}

/// Derive-Secret: expands `label` over a transcript hash into a new secret.
fn derive_secret(secret: &hkdf::Prk, label: &[u8], hash: &[u8]) -> hkdf::Prk {
    let mut out = [0u8; 32];
    expand_label(secret, label, hash, &mut out);
    hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &out)
}

/// Traffic key, IV and (for handshake secrets) the finished key of one traffic secret.
fn traffic_keys(secret: &hkdf::Prk, finished: bool) -> [u8; 32] {
    let mut key = [0u8; 16];
    let mut iv = [0u8; 12];
    let mut finished_key = [0u8; 32];
    expand_label(secret, b"key", &[], &mut key);
    expand_label(secret, b"iv", &[], &mut iv);
    if finished {
        expand_label(secret, b"finished", &[], &mut finished_key);
    }
    finished_key[0] ^= key[0] ^ iv[0];
    finished_key
}

/// One TLS 1.3 server key schedule (TLS_AES_128_GCM_SHA256) from an ECDHE `shared` secret:
/// see [`KEY_SCHEDULE_COUNTS`]. Returns a byte of the result so nothing is optimised away.
pub fn key_schedule(shared: &[u8; 32], transcript: &[u8]) -> u8 {
    let mut hash = digest::Context::new(&digest::SHA256);
    let empty = digest::digest(&digest::SHA256, b"");
    let zeros = [0u8; 32];
    let early = hkdf::Salt::new(hkdf::HKDF_SHA256, &zeros).extract(&zeros);
    let mut derived = [0u8; 32];
    expand_label(&early, b"derived", empty.as_ref(), &mut derived);
    let handshake = hkdf::Salt::new(hkdf::HKDF_SHA256, &derived).extract(shared);
    // ClientHello and ServerHello.
    let hello_end = transcript.len().min(512);
    hash.update(&transcript[..hello_end]);
    let hello_hash = hash.clone().finish();
    let client_handshake = derive_secret(&handshake, b"c hs traffic", hello_hash.as_ref());
    let server_handshake = derive_secret(&handshake, b"s hs traffic", hello_hash.as_ref());
    let client_finished = traffic_keys(&client_handshake, true);
    let server_finished = traffic_keys(&server_handshake, true);
    // EncryptedExtensions, Certificate, CertificateVerify, then the server's Finished.
    hash.update(&transcript[hello_end..]);
    let verify_hash = hash.clone().finish();
    let server_tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &server_finished),
        verify_hash.as_ref(),
    );
    hash.update(server_tag.as_ref());
    let finished_hash = hash.clone().finish();
    expand_label(&handshake, b"derived", empty.as_ref(), &mut derived);
    let master = hkdf::Salt::new(hkdf::HKDF_SHA256, &derived).extract(&zeros);
    let client_application = derive_secret(&master, b"c ap traffic", finished_hash.as_ref());
    let server_application = derive_secret(&master, b"s ap traffic", finished_hash.as_ref());
    let exporter = derive_secret(&master, b"exp master", finished_hash.as_ref());
    let client_keys = traffic_keys(&client_application, false);
    let server_keys = traffic_keys(&server_application, false);
    // The client's Finished is checked, then a ticket's PSK derived.
    let client_tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &client_finished),
        finished_hash.as_ref(),
    );
    hash.update(client_tag.as_ref());
    let resumption = derive_secret(&master, b"res master", hash.finish().as_ref());
    let mut psk = [0u8; 32];
    expand_label(&resumption, b"resumption", &[0, 0], &mut psk);
    let mut exported = [0u8; 1];
    expand_label(&exporter, b"x", &[], &mut exported);
    psk[0] ^ client_keys[0] ^ server_keys[0] ^ exported[0]
}

/// Renders the report like `openssl speed`.
pub fn text(report: &CryptoReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "weir bench crypto: {}, one thread (per-core figures), {} s per item\n",
        report.provider, report.duration_s
    );
    let _ = writeln!(
        out,
        "{:<36} {:>10} {:>10} {:>10} {:>10}",
        "", "sign", "verify", "sign/s", "verify/s"
    );
    for row in &report.signatures {
        let _ = writeln!(
            out,
            "{:<36} {:>9.6}s {:>9.6}s {:>10.1} {:>10.1}",
            format!("{} ({})", row.algorithm, row.scheme),
            1.0 / row.sign_per_s,
            1.0 / row.verify_per_s,
            row.sign_per_s,
            row.verify_per_s
        );
    }
    let _ = writeln!(
        out,
        "\n{:<36} {:>10} {:>10} {:>10} {:>10}",
        "", "keygen", "derive", "keygen/s", "derive/s"
    );
    for row in &report.key_agreement {
        let _ = writeln!(
            out,
            "{:<36} {:>9.6}s {:>9.6}s {:>10.1} {:>10.1}",
            format!("ecdh ({})", row.algorithm),
            1.0 / row.keygen_per_s,
            1.0 / row.derive_per_s,
            row.keygen_per_s,
            row.derive_per_s
        );
    }
    let _ = writeln!(
        out,
        "\nThe 'numbers' are in 1000s of bytes per second processed (sealing: encrypt + tag)."
    );
    let _ = write!(out, "{:<18}", "type");
    for size in AEAD_SIZES {
        let _ = write!(out, " {:>12}", format!("{size} bytes"));
    }
    out.push('\n');
    for row in &report.aead {
        let _ = write!(out, "{:<18}", row.algorithm);
        for size in &row.sizes {
            let _ = write!(out, " {:>11.2}k", size.bytes_per_s / 1000.0);
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\nTLS 1.3 key schedule: {:.1}/s ({:.2} µs each)\n  counts: {}",
        report.key_schedule.ops_per_s,
        1e6 / report.key_schedule.ops_per_s,
        report.key_schedule.counts
    );
    let _ = writeln!(
        out,
        "\nFull TLS 1.3 handshakes per core, ceiling by certificate type\n  counts: {}",
        report.ceiling_counts
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>14} {:>12}",
        "certificate", "handshakes/s", "µs each"
    );
    for row in &report.handshake_ceiling {
        let _ = writeln!(
            out,
            "  {:<12} {:>14.1} {:>12.2}",
            row.certificate, row.handshakes_per_s, row.server_us
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_counts_calls() {
        let mut calls = 0u64;
        let rate = measure(Duration::from_millis(20), || calls += 1);
        assert!(rate > 0.0);
        // One warm-up call beyond those timed.
        assert!(calls >= 2);
    }

    #[test]
    fn key_schedule_depends_on_the_secret() {
        let transcript = [1u8; TRANSCRIPT_LENGTH];
        let outputs: std::collections::HashSet<u8> = (0..16u8)
            .map(|seed| key_schedule(&[seed; 32], &transcript))
            .collect();
        assert!(outputs.len() > 1, "{outputs:?}");
        assert_eq!(
            key_schedule(&[3; 32], &transcript),
            key_schedule(&[3; 32], &transcript)
        );
    }
}
