//! `weir bench crypto` at a tiny duration: every algorithm reports a positive rate, the
//! ceiling follows from the measured costs, and the JSON validates against its schema.

mod common;

use std::time::Duration;

use weir_bench::crypto::{self, AEAD_SIZES, CryptoSettings};

#[test]
fn quick_crypto_reports_every_algorithm() {
    let report = crypto::run(&CryptoSettings {
        duration: Duration::from_millis(10),
    })
    .expect("crypto run");
    let signatures: Vec<&str> = report.signatures.iter().map(|row| row.algorithm).collect();
    assert_eq!(
        signatures,
        [
            "rsa2048",
            "rsa3072",
            "rsa4096",
            "ecdsa-p256",
            "ecdsa-p384",
            "ed25519"
        ]
    );
    for row in &report.signatures {
        assert!(row.sign_per_s > 0.0 && row.verify_per_s > 0.0, "{row:?}");
    }
    let groups: Vec<&str> = report
        .key_agreement
        .iter()
        .map(|row| row.algorithm)
        .collect();
    assert_eq!(groups, ["x25519", "p256"]);
    for row in &report.key_agreement {
        assert!(row.keygen_per_s > 0.0 && row.derive_per_s > 0.0, "{row:?}");
    }
    let ciphers: Vec<&str> = report.aead.iter().map(|row| row.algorithm).collect();
    assert_eq!(ciphers, ["aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"]);
    for row in &report.aead {
        let sizes: Vec<usize> = row.sizes.iter().map(|size| size.bytes).collect();
        assert_eq!(sizes, AEAD_SIZES);
        for size in &row.sizes {
            assert!(size.ops_per_s > 0.0, "{row:?}");
            let expected = size.ops_per_s * size.bytes as f64;
            assert!((size.bytes_per_s - expected).abs() <= 1e-6 * expected);
        }
    }
    assert!(report.key_schedule.ops_per_s > 0.0);
    // One ceiling per certificate type, each from its own costs.
    assert_eq!(report.handshake_ceiling.len(), report.signatures.len());
    let x25519 = &report.key_agreement[0];
    for (ceiling, signature) in report.handshake_ceiling.iter().zip(&report.signatures) {
        assert_eq!(ceiling.certificate, signature.algorithm);
        let seconds = 1.0 / signature.sign_per_s
            + 1.0 / x25519.keygen_per_s
            + 1.0 / x25519.derive_per_s
            + 1.0 / report.key_schedule.ops_per_s;
        assert!((ceiling.handshakes_per_s - 1.0 / seconds).abs() <= 1e-6 / seconds);
        assert!((ceiling.server_us - seconds * 1e6).abs() <= 1e-6 * seconds * 1e6);
        // Never above what the signature alone allows.
        assert!(ceiling.handshakes_per_s < signature.sign_per_s);
    }

    let text = crypto::text(&report);
    for name in signatures.iter().chain(&groups).chain(&ciphers) {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    assert!(text.contains("16384 bytes"), "{text}");
    assert!(text.contains("handshakes/s"), "{text}");

    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/weir-bench-crypto-1.json"))
            .expect("the schema is JSON");
    let document: serde_json::Value = serde_json::from_str(&report.to_json()).expect("JSON");
    assert_eq!(document["schema"], "weir-bench-crypto/1");
    let violations = common::schema::validate(&schema, &document);
    assert!(violations.is_empty(), "{violations:#?}");
    let mut broken = document.clone();
    broken["signatures"][0]["sign_per_s"] = serde_json::json!("fast");
    assert_eq!(common::schema::validate(&schema, &broken).len(), 1);
}
