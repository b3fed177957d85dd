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
    /// How the request id is made, trusted and echoed.
    pub request_id: RequestIdSettings,
    /// Where the client address that rules and limits see comes from.
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
    /// When the rule applies.
    pub condition: Condition,
    /// The regex whose capture groups `${1}`, `${name}` refer to: the match
    /// table's own `path_regex`, if it has one.
    pub captures: Option<Pattern>,
    /// What the rule does when its condition holds.
    pub actions: Actions,
}

/// A condition on a request and its connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// Every request (a rule without `match`).
    Always,
    /// Every one of these holds (`all`).
    All(Vec<Condition>),
    /// At least one of these holds (`any`).
    Any(Vec<Condition>),
    /// This does not hold (`not`).
    Not(Box<Condition>),
    /// Host without port, lower case; `*.example.com` matches subdomains. Any of these.
    Host(Vec<String>),
    /// The path equals one of these.
    Path(Vec<String>),
    /// The path starts with one of these.
    PathPrefix(Vec<String>),
    /// The path matches this regex.
    PathRegex(Pattern),
    /// One of these methods (case-sensitive tokens).
    Method(Vec<String>),
    /// A test on a request header.
    Header(FieldCondition),
    /// A test on a query parameter.
    Query(FieldCondition),
    /// A test on a request cookie.
    Cookie(FieldCondition),
    /// The client address lies in one of these networks.
    ClientAddress(Vec<Cidr>),
    /// The TLS server name (lower case; `*.` wildcard allowed) is one of these.
    Sni(Vec<String>),
    /// The verified client-certificate subject equals one of these.
    ClientSubject(Vec<String>),
    /// The verified client-certificate subject matches this regex.
    ClientSubjectRegex(Pattern),
}

/// A test on a named header, query parameter or cookie.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCondition {
    /// Header names lower case; query parameter and cookie names as written.
    pub name: String,
    /// What the value must satisfy.
    pub test: ValueTest,
}

/// A test on the value of a header, query parameter or cookie.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueTest {
    /// The field is there, whatever its value.
    Present,
    /// The field is not there.
    Absent,
    /// Equal to one of these (byte for byte).
    Equals(Vec<String>),
    /// The value matches this regex.
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
    /// How the path is rewritten before forwarding; `None`: unchanged.
    pub rewrite_path: Option<PathRewrite>,
    /// Edits to the request's header fields before forwarding.
    pub request_headers: HeaderEdits,
    /// Edits to the response's header fields before relaying.
    pub response_headers: HeaderEdits,
    /// Indexes into [`Traffic::rate_limits`].
    pub rate_limits: Vec<usize>,
    /// Indexes into [`Traffic::concurrency_limits`].
    pub concurrency_limits: Vec<usize>,
}

/// The action that ends rule evaluation for a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Terminal {
    /// Send the request to this pool.
    Pool(PoolId),
    /// Answer with a redirect.
    Redirect {
        /// 301, 302, 303, 307 or 308 (302 by default).
        status: u16,
        /// The `Location` value.
        location: Template,
    },
    /// Answer with a response made by weir.
    Respond {
        /// The status (200 by default).
        status: u16,
        /// Header fields of the answer, in order.
        headers: Vec<(String, Template)>,
        /// The body of the answer.
        body: Template,
    },
    /// Refuse the request.
    Deny {
        /// The status of the refusal (403 by default).
        status: u16,
    },
}

/// How a rule rewrites the request path; a path the rewrite does not apply to goes on unchanged.
#[derive(Debug, Clone, PartialEq)]
pub enum PathRewrite {
    /// Remove this prefix (a `/` is put back in front if none is left).
    StripPrefix(String),
    /// Replace a leading prefix.
    ReplacePrefix {
        /// The prefix replaced.
        prefix: String,
        /// What replaces it.
        with: Template,
    },
    /// `with` refers to this regex's own capture groups.
    Regex {
        /// The regex matched against the path.
        pattern: Pattern,
        /// The new path.
        with: Template,
    },
}

/// Header edits of one rule, applied in this order: remove, set, add.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeaderEdits {
    /// Names as written (compared case-insensitively).
    pub remove: Vec<String>,
    /// Fields set, replacing any of the same name.
    pub set: Vec<(String, Template)>,
    /// Fields added beside any of the same name.
    pub add: Vec<(String, Template)>,
}

impl HeaderEdits {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }
}

/// Text with `${variable}` references, parsed at load.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    /// Literal text and variables, in order.
    pub pieces: Vec<Piece>,
}

/// One part of a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text copied as is.
    Literal(String),
    /// Replaced by the variable's value for the request (empty when it has none).
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
    /// The request method.
    Method,
    /// `http` or `https`.
    Scheme,
    /// The client address (see `Traffic::client_address`).
    ClientAddress,
    /// The request id.
    RequestId,
    /// `1.2`, `1.3`, or empty on plain HTTP.
    TlsVersion,
    /// The TLS server name; empty on plain HTTP or without SNI.
    Sni,
    /// The verified client-certificate subject; empty without one.
    ClientSubject,
    /// The first header of this (lower-case) name.
    Header(String),
    /// The value of the cookie of this name.
    Cookie(String),
    /// The value of the query parameter of this name.
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
    /// The client address (see `Traffic::client_address`).
    ClientAddress,
    /// Path and query.
    Uri,
    /// The path, without the query.
    Path,
    /// The first header of this (lower-case) name.
    Header(String),
    /// The cookie of this name.
    Cookie(String),
    /// The query parameter of this name.
    QueryParam(String),
    /// One key for every request (the limit counts the rules that name it).
    Route,
}

/// A token bucket per key: `rate` requests per `per`, bursts up to `burst`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// The name rules refer to it by.
    pub name: String,
    /// What requests are counted per: each key has its own bucket.
    pub key: KeySource,
    /// Requests let through per `per`, on average.
    pub rate: NonZeroU32,
    /// The period `rate` is counted over.
    pub per: Duration,
    /// The bucket's size: requests that may pass at once after a quiet spell.
    pub burst: NonZeroU32,
    /// Keys tracked at once; past it the least recently refilled are dropped.
    pub max_keys: NonZeroU32,
    /// Status of the answer past the limit (429 by default).
    pub status: u16,
}

/// Requests in progress at once through the rules that name this limit.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrencyLimit {
    /// The name rules refer to it by.
    pub name: String,
    /// What requests are counted per: each key has its own count of `max`
    /// (`route`, the default: one count for every request the rules send here).
    pub key: KeySource,
    /// Requests in progress at once per key; past it requests are answered `status`.
    pub max: NonZeroU32,
    /// Status of the answer past the limit (503 by default).
    pub status: u16,
    /// The `Retry-After` sent with that answer.
    pub retry_after: Duration,
}

/// Connections one client address may hold open at once on a virtual server.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnectionLimit {
    /// Connections per client address; past it new connections get a 503 and are closed.
    pub max: NonZeroU32,
    /// Sent with the 503 that answers a connection past the limit.
    pub retry_after: Duration,
}

/// The request id: generated, or taken from the client when allowed and valid.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestIdSettings {
    /// Whether requests carry an id at all.
    pub enabled: bool,
    /// The header that carries the id to nodes (and back, with `to_client`).
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
    /// What the ring hashes to choose a node.
    pub key: KeySource,
    /// A node takes at most this multiple of the average in-flight load.
    pub max_load: f64,
}

/// `[pools.NAME.persistence]`
#[derive(Debug, Clone, PartialEq)]
pub struct Persistence {
    /// How a client is tied to a node.
    pub mode: PersistenceMode,
    /// Secret for signing inserted cookies; `None`: generated at start and
    /// kept across reloads.
    pub key: Option<Vec<u8>>,
    /// Idle time after which a learned entry is forgotten.
    pub timeout: Duration,
    /// Entries in the learned table; past it the stalest are dropped.
    pub max_entries: NonZeroU32,
}

/// How session persistence ties a client to a node.
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

/// The cookie weir inserts to remember a client's node.
#[derive(Debug, Clone, PartialEq)]
pub struct InsertedCookie {
    /// The cookie's name (`WEIR_NODE` by default).
    pub name: String,
    /// `None`: `Secure` on HTTPS virtual servers only.
    pub secure: Option<bool>,
    /// Whether the cookie carries `HttpOnly`.
    pub http_only: bool,
    /// The cookie's `SameSite` attribute (`Lax`, `Strict` or `None`); `None`: absent.
    pub same_site: Option<&'static str>,
    /// The cookie's `Path` attribute.
    pub path: String,
    /// The cookie's `Domain` attribute; `None`: host-only.
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
