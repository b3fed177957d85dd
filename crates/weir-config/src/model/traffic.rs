//! The validated model of traffic rules, request ids, limits, consistent hashing
//! and session persistence (issue 14). `weir-rules` compiles [`Traffic`] into
//! its evaluator; `weir-upstream` builds hashing and persistence from
//! [`HashSettings`] and [`Persistence`].

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use super::{Cidr, PoolId};

/// Everything issue 14 adds to a virtual server.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Traffic {
    /// Evaluated in order; see `docs/design/rules.md` for the semantics.
    pub rules: Vec<Rule>,
    pub request_id: RequestIdSettings,
    pub client_address: ClientAddressSource,
    /// Named rate limits; rules refer to them by index.
    pub rate_limits: Vec<RateLimit>,
    /// Named concurrency limits; rules refer to them by index.
    pub concurrency_limits: Vec<ConcurrencyLimit>,
    /// Connections one client address may hold open at once on this virtual server.
    pub client_connections: Option<ClientConnectionLimit>,
}

/// One rule: a condition and what to do when it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// As written, or `rules[N]`.
    pub name: String,
    pub condition: Condition,
    /// The regex whose capture groups `${1}`, `${name}` refer to: the match
    /// table's own `path_regex`, if it has one.
    pub captures: Option<Pattern>,
    pub actions: Actions,
}

/// A condition on a request and its connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// Every request (a rule without `match`).
    Always,
    All(Vec<Condition>),
    Any(Vec<Condition>),
    Not(Box<Condition>),
    /// Host without port, lower case; `*.example.com` matches subdomains. Any of these.
    Host(Vec<String>),
    /// The path equals one of these.
    Path(Vec<String>),
    /// The path starts with one of these.
    PathPrefix(Vec<String>),
    PathRegex(Pattern),
    /// One of these methods (case-sensitive tokens).
    Method(Vec<String>),
    Header(FieldCondition),
    Query(FieldCondition),
    Cookie(FieldCondition),
    /// The client address lies in one of these networks.
    ClientAddress(Vec<Cidr>),
    /// The TLS server name (lower case; `*.` wildcard allowed) is one of these.
    Sni(Vec<String>),
    /// The verified client-certificate subject equals one of these.
    ClientSubject(Vec<String>),
    ClientSubjectRegex(Pattern),
}

/// A test on a named header, query parameter or cookie.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCondition {
    /// Header names lower case; query parameter and cookie names as written.
    pub name: String,
    pub test: ValueTest,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ValueTest {
    Present,
    Absent,
    /// Equal to one of these (byte for byte).
    Equals(Vec<String>),
    Regex(Pattern),
}

/// A compiled regular expression over bytes, compared by its source.
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::bytes::Regex);

/// What a rule does when its condition holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Actions {
    /// Ends evaluation: the request goes to a pool or is answered by weir.
    pub terminal: Option<Terminal>,
    pub rewrite_path: Option<PathRewrite>,
    pub request_headers: HeaderEdits,
    pub response_headers: HeaderEdits,
    /// Indexes into [`Traffic::rate_limits`].
    pub rate_limits: Vec<usize>,
    /// Indexes into [`Traffic::concurrency_limits`].
    pub concurrency_limits: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Terminal {
    Pool(PoolId),
    Redirect {
        status: u16,
        location: Template,
    },
    Respond {
        status: u16,
        headers: Vec<(String, Template)>,
        body: Template,
    },
    Deny {
        status: u16,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum PathRewrite {
    StripPrefix(String),
    ReplacePrefix {
        prefix: String,
        with: Template,
    },
    /// `with` refers to this regex's own capture groups.
    Regex {
        pattern: Pattern,
        with: Template,
    },
}

/// Header edits of one rule, applied in this order: remove, set, add.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeaderEdits {
    /// Names as written (compared case-insensitively).
    pub remove: Vec<String>,
    pub set: Vec<(String, Template)>,
    pub add: Vec<(String, Template)>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }
}

/// Text with `${variable}` references, parsed at load.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    pub pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Literal(String),
    Variable(Variable),
}

/// What a template may refer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Variable {
    /// Host without port, as sent.
    Host,
    /// The path as received (without the query).
    Path,
    /// The query string without `?`; empty when none.
    Query,
    /// Path and query as received (origin form).
    Uri,
    Method,
    /// `http` or `https`.
    Scheme,
    ClientAddress,
    RequestId,
    /// `1.2`, `1.3`, or empty on plain HTTP.
    TlsVersion,
    Sni,
    ClientSubject,
    /// The first header of this (lower-case) name.
    Header(String),
    Cookie(String),
    QueryParam(String),
    /// Capture group by number (0 is the whole match).
    Capture(usize),
}

impl Template {
    /// A template that is only this text.
    pub fn literal(text: &str) -> Template {
        Template {
            pieces: vec![Piece::Literal(text.to_owned())],
        }
    }

    /// The text, when the template has no variables.
    pub fn as_literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [] => Some(""),
            [Piece::Literal(text)] => Some(text),
            _ => None,
        }
    }
}

/// Where a per-request key comes from (rate limits, consistent hashing).
/// When the request lacks the header, cookie or parameter, the client
/// address is the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    ClientAddress,
    /// Path and query.
    Uri,
    Path,
    Header(String),
    Cookie(String),
    QueryParam(String),
    /// One key for every request (the limit counts the rules that name it).
    Route,
}

/// A token bucket per key: `rate` requests per `per`, bursts up to `burst`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    pub name: String,
    pub key: KeySource,
    pub rate: NonZeroU32,
    pub per: Duration,
    pub burst: NonZeroU32,
    /// Keys tracked at once; past it the least recently refilled are dropped.
    pub max_keys: NonZeroU32,
    /// Status of the answer past the limit (429 by default).
    pub status: u16,
}

/// Requests in progress at once through the rules that name this limit.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyLimit {
    pub name: String,
    pub max: NonZeroU32,
    pub status: u16,
    pub retry_after: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnectionLimit {
    pub max: NonZeroU32,
    /// Sent with the 503 that answers a connection past the limit.
    pub retry_after: Duration,
}

/// The request id: generated, or taken from the client when allowed and valid.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestIdSettings {
    pub enabled: bool,
    pub header: String,
    /// Keep a valid id the client (or a proxy in front) sent.
    pub trust_incoming: bool,
    /// Echo the id to the client in the same header.
    pub to_client: bool,
}

/// Where the client address comes from: the connection's peer (or its PROXY
/// protocol address), or a forwarding header set by a trusted proxy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClientAddressSource {
    /// `X-Forwarded-For`-style header, lower case; `None` means the peer.
    pub header: Option<String>,
    /// Peers (and hops in the header) whose word is taken.
    pub trusted_proxies: Vec<Cidr>,
}

/// `[pools.NAME.hash]`: consistent hashing with bounded loads.
#[derive(Debug, Clone, PartialEq)]
pub struct HashSettings {
    pub key: KeySource,
    /// A node takes at most this multiple of the average in-flight load.
    pub max_load: f64,
}

/// `[pools.NAME.persistence]`
#[derive(Debug, Clone, PartialEq)]
pub struct Persistence {
    pub mode: PersistenceMode,
    /// Secret for signing inserted cookies; `None`: generated at start and
    /// kept across reloads.
    pub key: Option<Vec<u8>>,
    /// Idle time after which a learned entry is forgotten.
    pub timeout: Duration,
    /// Entries in the learned table; past it the stalest are dropped.
    pub max_entries: NonZeroU32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PersistenceMode {
    /// weir inserts a signed cookie naming the node.
    Cookie(InsertedCookie),
    /// The client address sticks to a node.
    ClientAddress,
    /// The application's own cookie (this name), learned from responses.
    AppCookie(String),
    /// The application's own header (lower case), learned from responses.
    AppHeader(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct InsertedCookie {
    pub name: String,
    /// `None`: `Secure` on HTTPS virtual servers only.
    pub secure: Option<bool>,
    pub http_only: bool,
    pub path: String,
    pub domain: Option<String>,
    /// `None`: a session cookie.
    pub max_age: Option<Duration>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as IPv4; other addresses unchanged.
pub fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}
