//! Which trailer fields may cross weir (RFC 9110 §6.5.1). A trailer must not
//! change how a message is framed, routed or authenticated: a
//! `Content-Length`, `Transfer-Encoding` or `Host` arriving after the body
//! would mean one thing to weir and another to a peer that merges trailers
//! into the header section. Those fields are dropped both ways, under any
//! spelling (`Content_Length` included); the rest pass unchanged.

use bytes::BytesMut;

use crate::syntax::same_field_name;

/// Fields never forwarded in a trailer section: framing, routing, hop-by-hop
/// connection fields, content format, authentication and session state,
/// request modifiers and response control data.
const DROPPED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "trailer",
    "te",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "expect",
    "max-forwards",
    "range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    "content-encoding",
    "content-type",
    "content-range",
    "authorization",
    "proxy-authorization",
    "www-authenticate",
    "proxy-authenticate",
    "cookie",
    "set-cookie",
    "cache-control",
    "age",
    "expires",
    "date",
    "location",
    "retry-after",
    "vary",
    "x-forwarded-for",
    "x-forwarded-proto",
    "forwarded",
    "via",
];

/// Whether a trailer field of this name may be forwarded.
pub fn is_forwardable_trailer(name: &[u8]) -> bool {
    !DROPPED
        .iter()
        .any(|dropped| same_field_name(name, dropped.as_bytes()))
}

/// Appends the forwardable lines of a validated trailer section (as
/// [`crate::Decoded::Done`] returns it: lines ending in CRLF) to `out`, and
/// returns how many lines were dropped.
pub fn filter_trailers(trailers: &[u8], out: &mut BytesMut) -> usize {
    filter_trailers_but(trailers, out, &[] as &[&[u8]])
}

/// [`filter_trailers`], dropping too the fields named in `also`, in any spelling (fields weir
/// manages in the header section, such as the client-certificate subject's or the request
/// id's, which a client must not send in a trailer to a node that merges trailers into it).
pub fn filter_trailers_but(
    trailers: &[u8],
    out: &mut BytesMut,
    also: &[impl AsRef<[u8]>],
) -> usize {
    let mut dropped = 0;
    for line in trailers.split_inclusive(|&b| b == b'\n') {
        let name_end = memchr::memchr(b':', line).unwrap_or(line.len());
        let name = &line[..name_end];
        let managed = also.iter().any(|also| same_field_name(name, also.as_ref()));
        if is_forwardable_trailer(name) && !managed {
            out.extend_from_slice(line);
        } else {
            dropped += 1;
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_routing_and_hop_by_hop_fields_are_dropped_in_any_spelling() {
        let mut out = BytesMut::new();
        let dropped = filter_trailers(
            b"X-Checksum: 42\r\nContent-Length: 5\r\ntransfer_encoding: chunked\r\n\
              HOST: evil\r\nConnection: close\r\nServer-Timing: db;dur=5\r\n",
            &mut out,
        );
        assert_eq!(dropped, 4);
        assert_eq!(&out[..], b"X-Checksum: 42\r\nServer-Timing: db;dur=5\r\n");
    }

    #[test]
    fn empty_sections_stay_empty() {
        let mut out = BytesMut::new();
        assert_eq!(filter_trailers(b"", &mut out), 0);
        assert!(out.is_empty());
    }

    /// A field weir manages in the header section is dropped too, in any spelling.
    #[test]
    fn a_managed_field_is_no_trailer_either() {
        let mut out = BytesMut::new();
        let lines = b"X-Client-Subject: CN=admin\r\nx_client_subject: CN=admin\r\nX-Sum: 1\r\n\
                      X-Request-Id: forged\r\n";
        let managed = ["X-Client-Subject", "x-request-id"];
        assert_eq!(filter_trailers_but(lines, &mut out, &managed), 3);
        assert_eq!(&out[..], b"X-Sum: 1\r\n");
    }
}
