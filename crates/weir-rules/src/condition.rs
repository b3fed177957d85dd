//! Conditions compiled for matching: byte strings ready to compare, host
//! wildcards as suffixes, and every path regex of a virtual server in one
//! `RegexSet` that runs at most once per request.

use std::borrow::Cow;
use std::net::IpAddr;

use regex::bytes::{Regex, RegexSet};
use weir_config::{Cidr, Condition, FieldCondition, ValueTest};
use weir_http::RequestHead;

use crate::facts::Facts;
use crate::request;

/// A compiled condition.
#[derive(Debug)]
pub(crate) enum Cond {
    Always,
    All(Box<[Cond]>),
    Any(Box<[Cond]>),
    Not(Box<Cond>),
    Host(Box<[HostMatch]>),
    Path(Box<[Box<[u8]>]>),
    PathPrefix(Box<[Box<[u8]>]>),
    /// Index into the virtual server's path `RegexSet`.
    PathRegex(usize),
    /// An anchored path regex that starts with literal text: paths without
    /// that prefix are ruled out by a byte comparison, the rest run the regex.
    PathRegexWithPrefix {
        prefix: Box<[u8]>,
        regex: Regex,
    },
    Method(Box<[Box<[u8]>]>),
    Header(Field),
    Query(Field),
    Cookie(Field),
    ClientAddress(Box<[Cidr]>),
    Sni(Box<[HostMatch]>),
    ClientSubject(Box<[Box<str>]>),
    ClientSubjectRegex(Regex),
}

/// `example.com` exactly, or `*.example.com` as the suffix `.example.com`.
#[derive(Debug)]
pub(crate) enum HostMatch {
    Exact(Box<[u8]>),
    Suffix(Box<[u8]>),
}

#[derive(Debug)]
pub(crate) struct Field {
    name: Box<str>,
    test: Test,
    /// A header that may be a comma-separated list (not one of [`SINGLE_VALUE_FIELDS`]).
    list: bool,
}

/// Header fields defined as one value, in which a comma is part of that value (dates, a
/// user agent's comment, a URL); any other field may be a list (RFC 9110 §5.3).
const SINGLE_VALUE_FIELDS: &[&str] = &[
    "authorization",
    "content-disposition",
    "content-length",
    "content-location",
    "content-type",
    "cookie",
    "date",
    "expires",
    "from",
    "host",
    "if-modified-since",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "origin",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "set-cookie",
    "user-agent",
];

#[derive(Debug)]
enum Test {
    Present,
    Absent,
    Equals(Box<[Box<[u8]>]>),
    Regex(Regex),
}

/// What conditions look at, computed once per request.
pub(crate) struct Context<'a> {
    pub(crate) head: &'a RequestHead,
    pub(crate) facts: &'a Facts<'a>,
    pub(crate) host: &'a [u8],
    /// Normalised (see [`request::normalized_path`]).
    pub(crate) path: Cow<'a, [u8]>,
    pub(crate) regexes: Option<&'a RegexSet>,
    pub(crate) regex_hits: &'a mut Vec<bool>,
    pub(crate) regexes_ran: bool,
}

impl Cond {
    /// Compiles `condition`; path regexes are appended to `set` and referred to by index.
    pub(crate) fn compile(condition: &Condition, set: &mut Vec<String>) -> Cond {
        let bytes = |list: &[String]| list.iter().map(|s| s.as_bytes().into()).collect();
        match condition {
            Condition::Always => Cond::Always,
            Condition::All(all) => Cond::All(all.iter().map(|c| Cond::compile(c, set)).collect()),
            Condition::Any(any) => Cond::Any(any.iter().map(|c| Cond::compile(c, set)).collect()),
            Condition::Not(inner) => Cond::Not(Box::new(Cond::compile(inner, set))),
            Condition::Host(hosts) => Cond::Host(hosts.iter().map(|h| HostMatch::new(h)).collect()),
            Condition::Path(paths) => Cond::Path(bytes(paths)),
            Condition::PathPrefix(prefixes) => Cond::PathPrefix(bytes(prefixes)),
            Condition::PathRegex(pattern) => match literal_prefix(pattern.0.as_str()) {
                Some(prefix) if prefix.len() > 1 => Cond::PathRegexWithPrefix {
                    prefix: prefix.into_bytes().into(),
                    regex: pattern.0.clone(),
                },
                _ => {
                    set.push(pattern.0.as_str().to_owned());
                    Cond::PathRegex(set.len() - 1)
                }
            },
            Condition::Method(methods) => Cond::Method(bytes(methods)),
            Condition::Header(field) => Cond::Header(Field::new(field)),
            Condition::Query(field) => Cond::Query(Field::new(field)),
            Condition::Cookie(field) => Cond::Cookie(Field::new(field)),
            Condition::ClientAddress(networks) => Cond::ClientAddress(networks.as_slice().into()),
            Condition::Sni(names) => Cond::Sni(names.iter().map(|h| HostMatch::new(h)).collect()),
            Condition::ClientSubject(subjects) => {
                Cond::ClientSubject(subjects.iter().map(|s| s.as_str().into()).collect())
            }
            Condition::ClientSubjectRegex(pattern) => Cond::ClientSubjectRegex(pattern.0.clone()),
        }
    }

    pub(crate) fn matches(&self, context: &mut Context<'_>) -> bool {
        match self {
            Cond::Always => true,
            Cond::All(all) => all.iter().all(|cond| cond.matches(context)),
            Cond::Any(any) => any.iter().any(|cond| cond.matches(context)),
            Cond::Not(inner) => !inner.matches(context),
            Cond::Host(hosts) => hosts.iter().any(|host| host.matches(context.host)),
            Cond::Path(paths) => paths.iter().any(|path| **path == *context.path),
            Cond::PathPrefix(prefixes) => prefixes
                .iter()
                .any(|prefix| context.path.starts_with(prefix)),
            Cond::PathRegex(index) => context.regex_hit(*index),
            Cond::PathRegexWithPrefix { prefix, regex } => {
                context.path.starts_with(prefix) && regex.is_match(&context.path)
            }
            // Any case: methods are case-sensitive (RFC 9110 §9.1) and weir forwards
            // `delete` as sent, but frameworks (Django, Werkzeug) upper-case it before they
            // route, so a rule for DELETE that let `delete` through would be stepped around.
            Cond::Method(methods) => {
                let method = context.head.method_bytes();
                methods.iter().any(|want| want.eq_ignore_ascii_case(method))
            }
            // Each line, and each element of a line of a list field: `X-Role: user, admin`
            // is `X-Role: user` and `X-Role: admin` (RFC 9110 §5.3), whichever form came.
            // Fields of one value (User-Agent, Origin, Referer...) are never split: a
            // comma there is part of the value, and an allow-list written with `not`
            // must see the whole of it.
            Cond::Header(field) => field.test_all(
                context
                    .head
                    .headers()
                    .filter(|(name, _)| name.eq_ignore_ascii_case(field.name.as_bytes()))
                    .flat_map(|(_, value)| {
                        let elements = (field.list && memchr::memchr(b',', value).is_some())
                            .then(|| value.split(|&b| b == b',').map(<[u8]>::trim_ascii));
                        std::iter::once(value).chain(elements.into_iter().flatten())
                    }),
            ),
            Cond::Query(field) => field.test_all(request::query_values(context.head, &field.name)),
            Cond::Cookie(field) => {
                field.test_all(request::cookie_values(context.head, &field.name))
            }
            Cond::ClientAddress(networks) => {
                let address: IpAddr = context.facts.client_address;
                networks.iter().any(|network| network.contains(address))
            }
            Cond::Sni(names) => context
                .facts
                .sni
                .is_some_and(|sni| names.iter().any(|name| name.matches(sni.as_bytes()))),
            Cond::ClientSubject(subjects) => context
                .facts
                .client_subject
                .is_some_and(|subject| subjects.iter().any(|want| **want == *subject)),
            Cond::ClientSubjectRegex(regex) => context
                .facts
                .client_subject
                .is_some_and(|subject| regex.is_match(subject.as_bytes())),
        }
    }
}

/// The literal text every match of `pattern` starts with, when the pattern
/// is anchored with `^` and begins with plain characters (`^/api/v[0-9]+`
/// gives `/api/v`); `None` otherwise. Conservative: stops at the first
/// character with a meaning in regex syntax, and drops a character that a
/// quantifier follows. A pattern with a top-level `|` (`^/a/|^/b/`) has
/// branches that need not share a start: its prefix is empty.
pub(crate) fn literal_prefix(pattern: &str) -> Option<String> {
    let rest = pattern.strip_prefix('^')?;
    if has_top_level_alternation(pattern) {
        return Some(String::new());
    }
    let mut prefix = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if "\\.+*?()|[]{}^$#".contains(c) || c.is_whitespace() {
            if matches!(c, '?' | '*' | '{') {
                prefix.pop();
            }
            break;
        }
        if matches!(chars.peek(), Some('?' | '*' | '{')) {
            break;
        }
        prefix.push(c);
    }
    Some(prefix)
}

/// Whether `pattern` has a `|` outside every group, class and escape.
fn has_top_level_alternation(pattern: &str) -> bool {
    let mut depth = 0_usize;
    let mut class = 0_usize;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            // An escaped character is literal, inside a class too.
            '\\' => {
                chars.next();
            }
            // Classes nest (`[a-z&&[^x]]`); `[` inside one opens another only as `[[`-style
            // set syntax, which counts the same way and closes with its own `]`.
            '[' => class += 1,
            ']' if class > 0 => class -= 1,
            _ if class > 0 => {}
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '|' if depth == 0 => return true,
            _ => {}
        }
    }
    false
}

impl Context<'_> {
    /// Runs the path regex set on first use, then answers from its hits.
    fn regex_hit(&mut self, index: usize) -> bool {
        self.run_regexes();
        self.regex_hits.get(index).copied().unwrap_or(false)
    }

    /// Runs the path regex set into `regex_hits`, once per request.
    pub(crate) fn run_regexes(&mut self) {
        let Some(set) = self.regexes else {
            return;
        };
        if !self.regexes_ran {
            self.regex_hits.clear();
            self.regex_hits.resize(set.len(), false);
            set.matches_read_at(self.regex_hits, &self.path, 0);
            self.regexes_ran = true;
        }
    }
}

impl HostMatch {
    /// The name, when this is not a wildcard.
    pub(crate) fn exact(&self) -> Option<&[u8]> {
        match self {
            HostMatch::Exact(name) => Some(name),
            HostMatch::Suffix(_) => None,
        }
    }

    fn new(pattern: &str) -> HostMatch {
        match pattern.strip_prefix('*') {
            Some(suffix) => HostMatch::Suffix(suffix.as_bytes().into()),
            None => HostMatch::Exact(pattern.as_bytes().into()),
        }
    }

    fn matches(&self, host: &[u8]) -> bool {
        match self {
            HostMatch::Exact(want) => host.eq_ignore_ascii_case(want),
            HostMatch::Suffix(suffix) => {
                host.len() > suffix.len()
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
        }
    }
}

impl Field {
    fn new(field: &FieldCondition) -> Field {
        let test = match &field.test {
            ValueTest::Present => Test::Present,
            ValueTest::Absent => Test::Absent,
            ValueTest::Equals(values) => {
                Test::Equals(values.iter().map(|v| v.as_bytes().into()).collect())
            }
            ValueTest::Regex(pattern) => Test::Regex(pattern.0.clone()),
        };
        let list = !SINGLE_VALUE_FIELDS
            .iter()
            .any(|single| single.eq_ignore_ascii_case(&field.name));
        Field {
            name: field.name.as_str().into(),
            test,
            list,
        }
    }

    /// The test over every value the field has (none when it is absent).
    fn test_all<V: AsRef<[u8]>>(&self, mut values: impl Iterator<Item = V>) -> bool {
        match &self.test {
            Test::Present => values.next().is_some(),
            Test::Absent => values.next().is_none(),
            Test::Equals(wanted) => {
                values.any(|value| wanted.iter().any(|want| **want == *value.as_ref()))
            }
            Test::Regex(regex) => values.any(|value| regex.is_match(value.as_ref())),
        }
    }
}
