use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, ClientConnection, RootCertStore};

use super::*;

const MAX: usize = DEFAULT_MAX_CLIENT_HELLO;

/// The first flight of a real rustls client (aws-lc-rs, post-quantum key share included).
fn rustls_hello(name: &str, alpn: &[&[u8]]) -> Vec<u8> {
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("default versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from(name.to_owned()).expect("valid name");
    let mut connection = ClientConnection::new(Arc::new(config), name).expect("client");
    let mut out = Vec::new();
    while connection.wants_write() {
        connection.write_tls(&mut out).expect("write to a Vec");
    }
    out
}

/// The handshake bytes of `records`, re-cut into records of `size` bytes.
fn refragment(records: &[u8], size: usize) -> Vec<u8> {
    let mut message = Vec::new();
    let mut rest = records;
    while let Some((payload, next)) = next_record(rest).expect("valid records") {
        message.extend_from_slice(payload);
        rest = next;
    }
    records_of(&message, size)
}

fn records_of(message: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in message.chunks(size) {
        out.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1]);
        out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// A ClientHello message (handshake header included) with the given extensions.
fn hello_message(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
    body.extend_from_slice(&[1, 0]); // null compression
    let mut list = Vec::new();
    for (kind, data) in extensions {
        list.extend_from_slice(&kind.to_be_bytes());
        list.extend_from_slice(&(data.len() as u16).to_be_bytes());
        list.extend_from_slice(data);
    }
    body.extend_from_slice(&(list.len() as u16).to_be_bytes());
    body.extend_from_slice(&list);
    let mut message = vec![HANDSHAKE_CLIENT_HELLO];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend_from_slice(&body);
    message
}

fn sni(name: &[u8]) -> (u16, Vec<u8>) {
    let mut entry = vec![NAME_TYPE_HOST];
    entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
    entry.extend_from_slice(name);
    let mut data = (entry.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&entry);
    (EXTENSION_SERVER_NAME, data)
}

fn alpn_extension(names: &[&[u8]]) -> (u16, Vec<u8>) {
    let mut list = Vec::new();
    for name in names {
        list.push(name.len() as u8);
        list.extend_from_slice(name);
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&list);
    (EXTENSION_ALPN, data)
}

fn expect_complete(input: &[u8]) -> ClientHello {
    match read_client_hello(input, MAX) {
        Ok(Peek::Complete(hello)) => hello,
        other => panic!("{other:?}"),
    }
}

/// Every split point of `input`: each prefix is partial, the whole is `expected`.
fn assert_every_boundary(input: &[u8], expected: &ClientHello, step: usize) {
    for end in (0..input.len()).step_by(step) {
        assert_eq!(
            read_client_hello(&input[..end], MAX),
            Ok(Peek::Partial),
            "split at {end}"
        );
    }
    assert_eq!(&expect_complete(input), expected);
}

#[test]
fn rustls_hello_routes_at_every_byte_boundary() {
    let input = rustls_hello("API.example.com", &[b"h2", b"http/1.1"]);
    let expected = ClientHello {
        server_name: Some("api.example.com".into()),
        alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    assert_every_boundary(&input, &expected, 1);
    // Application data the client pipelines after its hello does not change the answer.
    let mut more = input.clone();
    more.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
    assert_eq!(expect_complete(&more), expected);
}

#[test]
fn hello_fragmented_over_many_records_routes_at_every_byte_boundary() {
    let one = rustls_hello("db.internal", &[]);
    let expected = ClientHello {
        server_name: Some("db.internal".into()),
        alpn: Vec::new(),
    };
    for size in [1000, 100, 33, 5] {
        let input = refragment(&one, size);
        assert!(input.len() >= one.len());
        assert_every_boundary(&input, &expected, 1);
    }
}

/// Up to [`MAX_RECORDS`] records route, however small; one more is refused as too many (a
/// valid hello weir will not read that far to route), never as a malformed one.
#[test]
fn hello_in_the_most_records_routes_and_one_more_is_refused_as_such() {
    let message = hello_message(&[sni(b"split.example"), (21, vec![0; 400])]);
    assert!(message.len() > MAX_RECORDS + 1);
    let cut = |ones: usize| {
        let mut input = records_of(&message[..ones], 1);
        input.extend_from_slice(&records_of(&message[ones..], MAX_RECORD_PAYLOAD));
        input
    };
    assert_eq!(
        expect_complete(&cut(MAX_RECORDS - 1))
            .server_name
            .as_deref(),
        Some("split.example")
    );
    assert_eq!(
        read_client_hello(&cut(MAX_RECORDS), MAX),
        Err(HelloError::TooManyRecords)
    );
}

#[test]
fn hello_larger_than_a_record_is_reassembled() {
    let padding = (21, vec![0; 20_000]);
    let message = hello_message(&[sni(b"big.example"), padding, alpn_extension(&[b"h2"])]);
    assert!(message.len() > MAX_RECORD_PAYLOAD);
    let input = records_of(&message, MAX_RECORD_PAYLOAD);
    let expected = ClientHello {
        server_name: Some("big.example".into()),
        alpn: vec![b"h2".to_vec()],
    };
    assert_every_boundary(&input, &expected, 61);
    // Around the record boundary, byte by byte.
    let boundary = RECORD_HEADER + MAX_RECORD_PAYLOAD;
    for end in boundary - 8..boundary + 8 {
        assert_eq!(read_client_hello(&input[..end], MAX), Ok(Peek::Partial));
    }
    assert_eq!(
        read_client_hello(&input, message.len() - 1),
        Err(HelloError::TooLarge)
    );
}

#[test]
fn no_server_name_and_other_name_types() {
    let hello = expect_complete(&records_of(&hello_message(&[]), 512));
    assert_eq!(hello, ClientHello::default());
    // rustls sends no SNI to an IP address.
    assert_eq!(
        expect_complete(&rustls_hello("192.0.2.1", &[])).server_name,
        None
    );
    let mut other_type = sni(b"x");
    other_type.1[2] = 7;
    assert_eq!(
        expect_complete(&records_of(&hello_message(&[other_type]), 512)).server_name,
        None
    );
}

/// A trailing dot is not part of the name (rustls, terminating, drops it too); upper case
/// is lower-cased.
#[test]
fn a_trailing_dot_and_case_do_not_change_the_name() {
    for sent in [&b"b.test."[..], b"B.Test.", b"b.test"] {
        let hello = expect_complete(&records_of(&hello_message(&[sni(sent)]), 512));
        assert_eq!(hello.server_name.as_deref(), Some("b.test"));
    }
    for malformed in [&b"."[..], b"b.test..", b".b.test", b"b..test"] {
        let records = records_of(&hello_message(&[sni(malformed)]), 512);
        assert!(
            matches!(
                read_client_hello(&records, MAX),
                Err(HelloError::Malformed(_))
            ),
            "{:?}",
            String::from_utf8_lossy(malformed)
        );
    }
}

#[test]
fn rejections() {
    let records = |extensions: &[(u16, Vec<u8>)]| records_of(&hello_message(extensions), 512);
    let mut not_hello = records(&[]);
    not_hello[5] = 2;
    let mut empty_record = records(&[]);
    empty_record[3..5].copy_from_slice(&[0, 0]);
    let mut long_record = records(&[]);
    long_record[3..5].copy_from_slice(&(MAX_RECORD_PAYLOAD as u16 + 1).to_be_bytes());
    let cases: Vec<(Vec<u8>, HelloError)> = vec![
        (b"GET / HTTP/1.1\r\n".to_vec(), HelloError::NotTls),
        (vec![22, 2], HelloError::NotTls),
        (vec![21, 3, 3, 0, 2, 2, 40], HelloError::NotTls),
        (not_hello, HelloError::NotClientHello),
        (
            empty_record,
            HelloError::Malformed("empty handshake record"),
        ),
        (
            long_record,
            HelloError::Malformed("record longer than 16 KiB"),
        ),
        (
            records(&[sni(b"a.example"), sni(b"b.example")]),
            HelloError::Malformed("repeated server_name"),
        ),
        (
            records(&[sni(b"bad name")]),
            HelloError::Malformed("bad host name"),
        ),
        (records(&[sni(b"")]), HelloError::Malformed("bad host name")),
        (
            records(&[alpn_extension(&[b"h2"]), alpn_extension(&[b"h2"])]),
            HelloError::Malformed("repeated ALPN"),
        ),
        (
            records(&[alpn_extension(&[b""])]),
            HelloError::Malformed("empty ALPN name"),
        ),
        (
            records(&[(EXTENSION_ALPN, vec![0, 0])]),
            HelloError::Malformed("bad ALPN list"),
        ),
        (
            records_of(&hello_message(&[sni(b"a.example"), (21, vec![0; 600])]), 2),
            HelloError::TooManyRecords,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(read_client_hello(&input, MAX), Err(expected), "{input:?}");
    }
}

/// Random bytes behind a handshake record header, and corrupted real hellos: an answer every
/// time, and one no longer input contradicts.
#[test]
fn random_and_corrupted_inputs_get_a_clean_answer() {
    let mut rng = SmallRng::seed_from_u64(13);
    let real = rustls_hello("fuzz.example", &[b"h2"]);
    for round in 0..3_000 {
        let input: Vec<u8> = if round % 2 == 0 {
            let mut input = real.clone();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..input.len());
                input[at] = rng.random();
            }
            input.truncate(rng.random_range(0..=input.len()));
            input
        } else {
            let length: u16 = rng.random_range(1..300);
            let mut input = vec![22, 3, 1];
            input.extend_from_slice(&length.to_be_bytes());
            input.push(1);
            input.extend((0..rng.random_range(0..320)).map(|_| rng.random::<u8>()));
            input
        };
        let outcome = read_client_hello(&input, 4096);
        for end in (0..input.len()).step_by(7) {
            let prefix = read_client_hello(&input[..end], 4096);
            assert!(
                prefix == Ok(Peek::Partial) || prefix == outcome,
                "{input:?}"
            );
        }
    }
}
