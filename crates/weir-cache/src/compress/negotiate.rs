//! Choosing a content coding from `Accept-Encoding` (RFC 9110 §12.5.3):
//! q-values, `identity`, `*` and `q=0`, ties broken by the operator's order.

use crate::view::{list_elements, trim};

/// A content coding weir can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Coding {
    /// No coding: the body as the node sent it.
    Identity,
    /// `gzip`.
    Gzip,
    /// Brotli (`br`).
    Brotli,
    /// Zstandard (`zstd`).
    Zstd,
}

impl Coding {
    /// The compressed codings, in weir's default preference order.
    pub const COMPRESSED: [Coding; 3] = [Coding::Zstd, Coding::Brotli, Coding::Gzip];

    /// The token used in `Content-Encoding` and `Accept-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// The `algorithm` label of the compression metrics.
    pub fn label(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Brotli => "brotli",
            Coding::Zstd => "zstd",
        }
    }

    fn matches(self, token: &[u8]) -> bool {
        token.eq_ignore_ascii_case(self.token().as_bytes())
            || (self == Coding::Gzip && token.eq_ignore_ascii_case(b"x-gzip"))
    }
}

/// The codings a client's `Accept-Encoding` allows, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptEncoding {
    /// q-value ×1000 of each coding in [`Coding`] order (identity, gzip, br, zstd)
    /// and of `deflate`, or `None` when not listed.
    listed: [Option<u16>; 5],
    /// q-value of `*`.
    any: Option<u16>,
    /// The header was present.
    present: bool,
}

const DEFLATE: usize = 4;

impl AcceptEncoding {
    /// Parses every `Accept-Encoding` field value given.
    pub fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> AcceptEncoding {
        let mut found = AcceptEncoding {
            listed: [None; 5],
            any: None,
            present: false,
        };
        let mut values = values.peekable();
        found.present = values.peek().is_some();
        for element in list_elements(values) {
            let (token, q) = split_q(element);
            let slot = if token == b"*" {
                &mut found.any
            } else if token.eq_ignore_ascii_case(b"deflate") {
                &mut found.listed[DEFLATE]
            } else if let Some(coding) =
                [Coding::Identity, Coding::Gzip, Coding::Brotli, Coding::Zstd]
                    .into_iter()
                    .find(|coding| coding.matches(token))
            {
                &mut found.listed[coding as usize]
            } else {
                continue;
            };
            // The highest q wins when a coding is listed twice.
            *slot = Some(slot.map_or(q, |old| old.max(q)));
        }
        found
    }

    /// Whether the request had an `Accept-Encoding` field at all.
    pub fn present(&self) -> bool {
        self.present
    }

    /// The q-value ×1000 the client gives `coding` (listed, else `*`, else 0;
    /// identity is acceptable unless excluded, §12.5.3).
    pub fn quality(&self, coding: Coding) -> u16 {
        match (self.listed[coding as usize], coding) {
            (Some(q), _) => q,
            (None, Coding::Identity) => self.any.unwrap_or(1000),
            (None, _) => self.any.unwrap_or(0),
        }
    }

    /// The best of `offered` (in the operator's order of preference) for this
    /// client, or `Identity` when none is acceptable. Without an
    /// `Accept-Encoding` header at all, identity: any coding would be allowed,
    /// but clients that send none rarely decode one.
    pub fn choose(&self, offered: &[Coding]) -> Coding {
        if !self.present {
            return Coding::Identity;
        }
        let mut best = (0u16, Coding::Identity);
        for &coding in offered {
            let q = self.quality(coding);
            if coding != Coding::Identity && q > best.0 {
                best = (q, coding);
            }
        }
        // Identity is acceptable without a q-value of its own (§12.5.3); only
        // an explicit preference for it over the best coding wins.
        let identity = self.listed[Coding::Identity as usize].or(self.any);
        if best.0 > 0 && identity.is_none_or(|q| best.0 >= q) {
            best.1
        } else {
            Coding::Identity
        }
    }

    /// Which codings are acceptable, as a bit set (gzip, br, zstd, deflate):
    /// the normalised `Accept-Encoding` of a secondary cache key for
    /// responses that the node itself encodes.
    pub fn acceptable_set(&self) -> u8 {
        let mut set = 0u8;
        for (bit, coding) in [Coding::Gzip, Coding::Brotli, Coding::Zstd]
            .into_iter()
            .enumerate()
        {
            if self.quality(coding) > 0 {
                set |= 1 << bit;
            }
        }
        if self.listed[DEFLATE].or(self.any).is_some_and(|q| q > 0) {
            set |= 1 << 3;
        }
        set
    }
}

/// `gzip;q=0.5` → (`gzip`, 500). No q parameter counts as 1; a q parameter whose
/// value is not a q-value counts as 0.
fn split_q(element: &[u8]) -> (&[u8], u16) {
    let mut parts = element.split(|b| *b == b';');
    let token = trim(parts.next().unwrap_or_default());
    let mut q = 1000;
    for parameter in parts {
        let parameter = trim(parameter);
        let (name, value) = match memchr::memchr(b'=', parameter) {
            Some(at) => (trim(&parameter[..at]), Some(trim(&parameter[at + 1..]))),
            None => (parameter, None),
        };
        if name.eq_ignore_ascii_case(b"q") {
            // A q parameter that is not a q-value (`q=2`, `q=bad`, `q=0.0005`, `q=`, a
            // bare `q`) excludes the coding: the client meant something other than
            // "fine", and identity is always safe.
            q = value.and_then(weir_http::qvalue).unwrap_or(0);
        }
    }
    (token, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[Coding] = &Coding::COMPRESSED;

    fn choose(header: Option<&str>) -> Coding {
        AcceptEncoding::parse(header.map(str::as_bytes).into_iter()).choose(ALL)
    }

    #[test]
    fn negotiation_table() {
        let cases: &[(Option<&str>, Coding)] = &[
            (None, Coding::Identity),
            (Some(""), Coding::Identity),
            (Some("gzip"), Coding::Gzip),
            (Some("x-gzip"), Coding::Gzip),
            (Some("GZIP, br"), Coding::Brotli),
            (Some("gzip, deflate, br, zstd"), Coding::Zstd),
            (Some("gzip;q=1.0, br;q=0.5"), Coding::Gzip),
            (Some("gzip;q=0, br;q=0"), Coding::Identity),
            (Some("zstd;q=0, *"), Coding::Brotli),
            (Some("*"), Coding::Zstd),
            (Some("*;q=0"), Coding::Identity),
            (Some("identity"), Coding::Identity),
            (Some("identity;q=0.5, gzip;q=0.4"), Coding::Identity),
            (Some("identity;q=0, gzip;q=0.1"), Coding::Gzip),
            (Some("compress, deflate"), Coding::Identity),
            (Some("unknown, foo;q=1"), Coding::Identity),
            // A q-value that is not one excludes its coding (RFC 9110 §12.4.2's grammar).
            (Some("gzip;q=bad"), Coding::Identity),
            (Some("gzip;q="), Coding::Identity),
            (Some("gzip;q =0"), Coding::Identity),
            (Some("gzip; Q = 0"), Coding::Identity),
            (Some("gzip;q"), Coding::Identity),
            (Some("gzip;level=1"), Coding::Gzip),
            (Some("gzip ; q = 0.5"), Coding::Gzip),
            (Some("gzip;q=2"), Coding::Identity),
            (Some("gzip;q=1.5"), Coding::Identity),
            (Some("gzip;q=1.000"), Coding::Gzip),
            (Some("br;q=-1, gzip;q=0.2"), Coding::Gzip),
            (Some("br;q=0.001, gzip;q=0"), Coding::Brotli),
            (Some("gzip;q=0.0005"), Coding::Identity),
            (Some("*;q=bad"), Coding::Identity),
            (Some("gzip ; q=0.7 , br;Q=0.8"), Coding::Brotli),
        ];
        for (header, expected) in cases {
            assert_eq!(choose(*header), *expected, "{header:?}");
        }
    }

    #[test]
    fn operator_order_breaks_ties() {
        let accept = AcceptEncoding::parse([&b"gzip, br, zstd"[..]].into_iter());
        assert_eq!(accept.choose(&[Coding::Gzip, Coding::Brotli]), Coding::Gzip);
        assert_eq!(
            accept.choose(&[Coding::Brotli, Coding::Gzip]),
            Coding::Brotli
        );
        assert_eq!(accept.choose(&[]), Coding::Identity);
    }

    #[test]
    fn acceptable_sets() {
        let set =
            |header: &str| AcceptEncoding::parse([header.as_bytes()].into_iter()).acceptable_set();
        assert_eq!(set("gzip"), 0b0001);
        assert_eq!(set("gzip, deflate, br"), 0b1011);
        assert_eq!(set("br, gzip, deflate"), set("gzip,deflate,br"));
        assert_eq!(set("*"), 0b1111);
        assert_eq!(set("*, br;q=0"), 0b1101);
        assert_eq!(set("identity"), 0);
    }
}
