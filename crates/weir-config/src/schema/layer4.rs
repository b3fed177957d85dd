//! Layer 4 tables as written in the file (issue 13): `[tcp]`, `[proxy_protocol]` and
//! `[[passthrough]]` of a virtual server. Validated by `crate::validate::layer4`.

use serde::Deserialize;

use super::{DurationText, SizeValue};

/// `[virtual_servers.NAME.tcp]` (protocol "tcp" or "tls").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpTable {
    pub relay: Option<String>,
    pub buffer: Option<SizeValue>,
    pub pipe: Option<SizeValue>,
    pub idle_timeout: Option<DurationText>,
    pub hello_timeout: Option<DurationText>,
}

/// `[virtual_servers.NAME.proxy_protocol]`: accept a PROXY header from these clients.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyProtocolTable {
    pub trusted: Option<Vec<String>>,
    pub timeout: Option<DurationText>,
}

/// `[[virtual_servers.NAME.passthrough]]`: TLS passed through to a pool by server name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassthroughTable {
    pub server_names: Option<Vec<String>>,
    pub alpn: Option<Vec<String>>,
    pub pool: Option<String>,
}
