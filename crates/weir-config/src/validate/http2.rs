//! HTTP/2 (issue 11): a virtual server's `[http2]` table, a pool's
//! `protocol` and its `[http2]` table.

use super::{Checker, KIB, MIB, Zero};
use crate::defaults;
use crate::error::KeyPath;
use crate::http2::{Http2, Http2Codec, UpstreamHttp2, UpstreamHttp2Codec, UpstreamProtocol};
use crate::schema::{Http2Table, UpstreamHttp2Table};

/// RFC 9113 §6.5.2: the largest window and the frame-size range.
const MAX_WINDOW: u64 = (1 << 31) - 1;
const MIN_FRAME: u64 = 16 * KIB;
const MAX_FRAME: u64 = (1 << 24) - 1;

impl Checker {
    /// A virtual server's HTTP/2 settings. `https`: the virtual server
    /// terminates TLS (where h2c has no meaning).
    pub(super) fn http2(
        &mut self,
        path: &KeyPath,
        table: Option<&Http2Table>,
        https: bool,
    ) -> Http2 {
        let empty = Http2Table::default();
        let table = table.unwrap_or(&empty);
        let cleartext = table.cleartext.unwrap_or(defaults::H2_CLEARTEXT);
        if cleartext && https {
            self.report(
                &path.key("cleartext"),
                "h2c is for plain listeners; an https virtual server offers h2 through ALPN (tls.alpn)",
            );
        }
        Http2 {
            cleartext,
            max_concurrent_streams: self.count(
                &path.key("max_concurrent_streams"),
                table.max_concurrent_streams,
                defaults::H2_MAX_CONCURRENT_STREAMS,
                1..=10_000,
            ),
            max_header_list_size: self.size_u32(
                &path.key("max_header_list_size"),
                table.max_header_list_size.as_ref(),
                defaults::H2_MAX_HEADER_LIST_SIZE,
                KIB..=16 * MIB,
            ),
            header_table_size: self.size_u32(
                &path.key("header_table_size"),
                table.header_table_size.as_ref(),
                defaults::H2_HEADER_TABLE_SIZE,
                0..=MIB,
            ),
            initial_stream_window: self.size_u32(
                &path.key("initial_stream_window"),
                table.initial_stream_window.as_ref(),
                defaults::H2_INITIAL_STREAM_WINDOW,
                KIB..=MAX_WINDOW,
            ),
            initial_connection_window: self.size_u32(
                &path.key("initial_connection_window"),
                table.initial_connection_window.as_ref(),
                defaults::H2_INITIAL_CONNECTION_WINDOW,
                64 * KIB..=MAX_WINDOW,
            ),
            max_frame_size: self.size_u32(
                &path.key("max_frame_size"),
                table.max_frame_size.as_ref(),
                defaults::H2_MAX_FRAME_SIZE,
                MIN_FRAME..=MAX_FRAME,
            ),
            ping_interval: self.duration(
                &path.key("ping_interval"),
                table.ping_interval.as_ref(),
                defaults::H2_PING_INTERVAL,
                Zero::Rejected,
            ),
            ping_timeout: self.duration(
                &path.key("ping_timeout"),
                table.ping_timeout.as_ref(),
                defaults::H2_PING_TIMEOUT,
                Zero::Rejected,
            ),
            codec: self.choice(
                &path.key("codec"),
                table.codec.as_deref(),
                Http2Codec::default(),
                &[("h2", Http2Codec::H2), ("weir", Http2Codec::Weir)],
            ),
        }
    }

    /// A pool's `protocol`: `h2` needs the pool's `[tls]`, `h2c` must not have it.
    pub(super) fn upstream_protocol(
        &mut self,
        path: &KeyPath,
        value: Option<&str>,
        tls: bool,
    ) -> UpstreamProtocol {
        let protocol = self.choice(
            path,
            value,
            UpstreamProtocol::Http1,
            &[
                ("http1", UpstreamProtocol::Http1),
                ("h2", UpstreamProtocol::H2),
                ("h2c", UpstreamProtocol::H2c),
            ],
        );
        match protocol {
            UpstreamProtocol::H2 if !tls => self.report(
                path,
                "\"h2\" is HTTP/2 over TLS and needs the pool's [tls] table; use \"h2c\" for cleartext HTTP/2",
            ),
            UpstreamProtocol::H2c if tls => self.report(
                path,
                "\"h2c\" is cleartext HTTP/2; with the pool's [tls] table use \"h2\"",
            ),
            _ => {}
        }
        protocol
    }

    pub(super) fn upstream_http2(
        &mut self,
        path: &KeyPath,
        table: Option<&UpstreamHttp2Table>,
    ) -> UpstreamHttp2 {
        let empty = UpstreamHttp2Table::default();
        let table = table.unwrap_or(&empty);
        let max_concurrent_streams = self.count(
            &path.key("max_concurrent_streams"),
            table.max_concurrent_streams,
            defaults::UPSTREAM_H2_MAX_CONCURRENT_STREAMS,
            1..=10_000,
        );
        let initial_stream_window = self.size_u32(
            &path.key("initial_stream_window"),
            table.initial_stream_window.as_ref(),
            defaults::UPSTREAM_H2_INITIAL_STREAM_WINDOW,
            KIB..=MAX_WINDOW,
        );
        UpstreamHttp2 {
            max_concurrent_streams,
            initial_stream_window,
            initial_connection_window: self.size_u32(
                &path.key("initial_connection_window"),
                table.initial_connection_window.as_ref(),
                defaults::upstream_h2_connection_window(
                    max_concurrent_streams,
                    initial_stream_window,
                ),
                64 * KIB..=MAX_WINDOW,
            ),
            ping_interval: self.duration(
                &path.key("ping_interval"),
                table.ping_interval.as_ref(),
                defaults::UPSTREAM_H2_PING_INTERVAL,
                Zero::Allowed,
            ),
            ping_timeout: self.duration(
                &path.key("ping_timeout"),
                table.ping_timeout.as_ref(),
                defaults::UPSTREAM_H2_PING_TIMEOUT,
                Zero::Rejected,
            ),
            codec: self.choice(
                &path.key("codec"),
                table.codec.as_deref(),
                UpstreamHttp2Codec::default(),
                &[
                    ("h2", UpstreamHttp2Codec::H2),
                    ("weir", UpstreamHttp2Codec::Weir),
                ],
            ),
        }
    }

    fn size_u32(
        &mut self,
        path: &KeyPath,
        value: Option<&crate::schema::SizeValue>,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> u32 {
        let bytes = self.size(path, value, default, range);
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Http2Codec, UpstreamHttp2Codec, UpstreamProtocol, parse_str};

    const POOL: &str = "[pools.web]\nnodes = [{ address = \"127.0.0.1:8081\" }]\n";

    fn load(extra: &str) -> Result<crate::Config, String> {
        let text = format!(
            "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n{extra}\n{POOL}"
        );
        parse_str(&text, "weir.toml").map_err(|error| error.to_string())
    }

    #[test]
    fn defaults_and_values() {
        let config = load("").expect("valid");
        let vs = &config.virtual_servers[0];
        assert!(!vs.http2.cleartext, "h2c is opt-in");
        assert_eq!(vs.http2.max_concurrent_streams, 100);
        assert_eq!(vs.http2.codec, Http2Codec::Weir);
        assert_eq!(config.pools[0].protocol, UpstreamProtocol::Http1);
        let config = load(
            "[virtual_servers.web.http2]\ncleartext = true\nmax_concurrent_streams = 8\n\
             header_table_size = 0\ninitial_stream_window = \"1MiB\"\ncodec = \"h2\"",
        )
        .expect("valid");
        let http2 = &config.virtual_servers[0].http2;
        assert!(http2.cleartext);
        assert_eq!(http2.max_concurrent_streams, 8);
        assert_eq!(http2.header_table_size, 0);
        assert_eq!(http2.initial_stream_window, 1 << 20);
        assert_eq!(http2.codec, Http2Codec::H2);
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (
                "[virtual_servers.web.http2]\nmax_concurrent_streams = 0",
                "weir.toml:5: virtual_servers.web.http2.max_concurrent_streams",
            ),
            (
                "[virtual_servers.web.http2]\nmax_frame_size = \"1KiB\"",
                "virtual_servers.web.http2.max_frame_size: must be at least 16KiB",
            ),
            (
                "[virtual_servers.web.http2]\ninitial_stream_window = \"4GiB\"",
                "virtual_servers.web.http2.initial_stream_window: must be at most",
            ),
            (
                "[virtual_servers.web.http2]\nping_interval = \"0s\"",
                "virtual_servers.web.http2.ping_interval: must be longer than zero",
            ),
            (
                "[virtual_servers.web.http2]\nstreams = 5",
                "unknown key \"streams\"",
            ),
            (
                "[virtual_servers.web.http2]\ncodec = \"nghttp2\"",
                "weir.toml:5: virtual_servers.web.http2.codec",
            ),
        ];
        for (extra, expected) in cases {
            let error = load(extra).expect_err(extra);
            assert!(error.contains(expected), "{extra}: {error}");
        }
    }

    #[test]
    fn pool_protocols() {
        let pool = |extra: &str| {
            let text = format!(
                "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\n{POOL}{extra}"
            );
            parse_str(&text, "weir.toml").map_err(|error| error.to_string())
        };
        let config = pool("protocol = \"h2c\"\n[pools.web.http2]\nmax_concurrent_streams = 50")
            .expect("valid");
        assert_eq!(config.pools[0].protocol, UpstreamProtocol::H2c);
        assert_eq!(config.pools[0].http2.max_concurrent_streams, 50);
        assert_eq!(config.pools[0].http2.codec, UpstreamHttp2Codec::Weir);
        let config = pool("protocol = \"h2c\"\n[pools.web.http2]\ncodec = \"h2\"").expect("valid");
        assert_eq!(config.pools[0].http2.codec, UpstreamHttp2Codec::H2);
        let error = pool("protocol = \"h2c\"\n[pools.web.http2]\ncodec = \"hyper\"")
            .expect_err("unknown codec");
        assert!(error.contains("pools.web.http2.codec"), "{error}");
        let error = pool("protocol = \"h2\"").expect_err("h2 needs tls");
        assert!(
            error.contains("pools.web.protocol: \"h2\" is HTTP/2 over TLS"),
            "{error}"
        );
        let error = pool("protocol = \"h2c\"\n[pools.web.tls]\nverify = false").expect_err("h2c");
        assert!(
            error.contains("pools.web.protocol: \"h2c\" is cleartext"),
            "{error}"
        );
        let error = pool("protocol = \"http2\"").expect_err("unknown");
        assert!(error.contains("pools.web.protocol"), "{error}");
        let config = pool("protocol = \"h2\"\n[pools.web.tls]\nverify = false").expect("valid");
        assert_eq!(config.pools[0].protocol, UpstreamProtocol::H2);
    }
}
