//! The node side's direct paths give what the `http` crate paths give
//! (`request_to_h2`, `response_from_h2_within`) for the same messages.

use bytes::BytesMut;

use super::*;
use crate::head::{Parsed, parse_request};
use crate::hpack::{Decoder, Encoder};
use crate::http2::tests::forward_request as forward;
use crate::http2::{request_to_h2, response_from_h2_within};
use crate::message::BodyFraming;
use crate::write::write_request_head;

/// The fields of a request as the `h2` crate would send them: its
/// pseudo-header fields from the URI, then the map's fields.
/// (A URI without a scheme is a request without `Host`, for which the
/// `h2` crate sends `:scheme` `http` whatever the connection; the direct
/// path names the connection's scheme, as `scheme` here.)
fn through_http_crate(request: &http::Request<()>, scheme: &str) -> Fields {
    let uri = request.uri();
    let mut fields = vec![(":method".to_owned(), request.method().to_string())];
    if request.method() == http::Method::CONNECT {
        fields.push((
            ":authority".to_owned(),
            uri.authority().unwrap().to_string(),
        ));
    } else {
        fields.push((
            ":scheme".to_owned(),
            uri.scheme_str().unwrap_or(scheme).to_owned(),
        ));
        if let Some(authority) = uri.authority() {
            fields.push((":authority".to_owned(), authority.to_string()));
        }
        let path = uri
            .path_and_query()
            .map_or("/".to_owned(), |p| p.to_string());
        fields.push((":path".to_owned(), path));
    }
    for (name, value) in request.headers() {
        fields.push((name.to_string(), value.to_str().unwrap().to_owned()));
    }
    fields
}

fn directly(written: &[u8], scheme: &[u8], te_trailers: bool) -> Fields {
    let mut encoder = Encoder::new();
    let mut block = Vec::new();
    let request = NodeRequest {
        written,
        scheme,
        te_trailers,
        protocol: None,
    };
    encode_request_head(&request, &mut encoder.block(&mut block)).expect("encodes");
    let mut fields = Vec::new();
    Decoder::new()
        .decode(&block, |field| {
            fields.push((
                String::from_utf8_lossy(field.name).into_owned(),
                String::from_utf8_lossy(field.value).into_owned(),
            ));
        })
        .expect("decodes");
    fields
}

type Fields = Vec<(String, String)>;

/// The pseudo-header fields in order, and the regular fields sorted.
fn split(fields: Fields) -> (Fields, Fields) {
    let (pseudo, mut regular): (Fields, Fields) = fields
        .into_iter()
        .partition(|(name, _)| name.starts_with(':'));
    regular.sort();
    (pseudo, regular)
}

#[test]
fn requests_match_the_http_crate_path() {
    let cases: &[(&str, BodyFraming)] = &[
        (
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
            BodyFraming::None,
        ),
        (
            "POST /rpc HTTP/1.1\r\nHost: grpc.test:8080\r\nContent-Type: application/grpc\r\n\
             TE: trailers\r\nTransfer-Encoding: chunked\r\n\r\n",
            BodyFraming::Chunked,
        ),
        (
            "PUT /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\nConnection: keep-alive, x-hop\r\n\
             X-Hop: 1\r\nKeep-Alive: timeout=5\r\nCookie: a=1\r\n\r\n",
            BodyFraming::Length(3),
        ),
        (
            "GET /old HTTP/1.0\r\nUser-Agent: old\r\n\r\n",
            BodyFraming::None,
        ),
        (
            "CONNECT db.test:5432 HTTP/1.1\r\nHost: db.test:5432\r\n\r\n",
            BodyFraming::None,
        ),
        (
            "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n",
            BodyFraming::None,
        ),
    ];
    for (raw, framing) in cases {
        let head = match parse_request(raw.as_bytes(), &Limits::default()).expect("valid") {
            Parsed::Complete(head, _) => head,
            Parsed::Partial => panic!("incomplete"),
        };
        let forward = forward(*framing);
        let te_trailers = raw.contains("TE: trailers");
        for scheme in ["http", "https"] {
            let expected = request_to_h2(&head, &forward, scheme).expect("the http crate path");
            let mut written = BytesMut::new();
            write_request_head(&head, &forward, &mut written);
            let (got_pseudo, got) = split(directly(&written, scheme.as_bytes(), te_trailers));
            let (want_pseudo, want) = split(through_http_crate(&expected, scheme));
            // Pseudo-header fields in the same order; regular fields the same
            // (the map path sets `te` where the direct path appends it).
            assert_eq!(got_pseudo, want_pseudo, "{raw:?} over {scheme}");
            assert_eq!(got, want, "{raw:?} over {scheme}");
        }
    }
}

fn response_fields(
    fields: &[(&str, &str)],
    end_of_stream: bool,
    method: Method,
) -> Result<NodeHead, ParseError> {
    let mut collected = ResponseFields::new(64 * 1024);
    for (name, value) in fields {
        collected.field(Field {
            name: name.as_bytes(),
            value: value.as_bytes(),
            never_indexed: false,
        });
    }
    collected.finish(end_of_stream, method, &LIMITS)
}

const LIMITS: Limits = Limits {
    max_head_bytes: 64 * 1024,
    max_headers: 100,
};

#[test]
fn responses_match_the_http_crate_path() {
    // (fields, end of stream, the request's method)
    type Case<'a> = (&'a [(&'a str, &'a str)], bool, Method);
    let cases: &[Case<'_>] = &[
        (
            &[(":status", "200"), ("content-length", "5"), ("server", "n")],
            false,
            Method::Get,
        ),
        (
            &[(":status", "200"), ("content-type", "application/grpc")],
            false,
            Method::Post,
        ),
        (&[(":status", "404")], true, Method::Get),
        (
            &[(":status", "200"), ("content-length", "9")],
            true,
            Method::Head,
        ),
        (&[(":status", "304"), ("etag", "\"a\"")], true, Method::Get),
        (&[(":status", "204")], true, Method::Delete),
        (
            &[
                (":status", "200"),
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2"),
            ],
            false,
            Method::Get,
        ),
    ];
    for (fields, end, method) in cases {
        let Ok(NodeHead::Final(direct)) = response_fields(fields, *end, *method) else {
            panic!("{fields:?}: not a final head");
        };
        let mut builder = http::Response::builder().status(fields[0].1);
        for (name, value) in &fields[1..] {
            builder = builder.header(*name, *value);
        }
        let (parts, ()) = builder.body(()).unwrap().into_parts();
        let expected = response_from_h2_within(&parts, *end, *method, &LIMITS).unwrap();
        assert_eq!(direct.raw(), expected.raw(), "{fields:?}");
        assert_eq!(direct.framing(), expected.framing(), "{fields:?}");
    }
}

#[test]
fn interim_responses_keep_their_fields_and_never_end_or_switch() {
    let interim = response_fields(
        &[(":status", "103"), ("link", "</s.css>")],
        false,
        Method::Get,
    );
    match interim {
        Ok(NodeHead::Interim { status, lines }) => {
            assert_eq!(status, 103);
            assert_eq!(lines, b"link: </s.css>\r\n");
        }
        other => panic!("{other:?}"),
    }
    for (status, end) in [("100", true), ("101", false)] {
        assert!(response_fields(&[(":status", status)], end, Method::Get).is_err());
    }
}

#[test]
fn a_response_past_the_header_list_size_is_refused_as_too_large() {
    let mut collected = ResponseFields::new(100);
    collected.field(Field {
        name: b":status",
        value: b"200",
        never_indexed: false,
    });
    for _ in 0..2 {
        collected.field(Field {
            name: b"x-filler",
            value: &[b'a'; 30],
            never_indexed: false,
        });
    }
    let error = collected.finish(false, Method::Get, &LIMITS).unwrap_err();
    assert_eq!(error.kind, ParseErrorKind::HeadTooLarge);
}
