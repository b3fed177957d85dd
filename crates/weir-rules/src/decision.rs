//! The value an evaluation returns and the pipeline applies: where the
//! request goes (or weir's own answer), the rewritten path, the header edits
//! for the request and the response, and the limits to check.
//!
//! A `Decision` is meant to be kept per connection and reused: evaluation
//! clears it and keeps the capacity of its lists, so a request whose rules
//! only use literal values allocates nothing.

use bytes::Bytes;
use weir_config::PoolId;

/// The result of evaluating a virtual server's rules for one request.
#[derive(Debug, Default)]
pub struct Decision {
    /// Where the request goes.
    pub outcome: Outcome,
    /// The rule that ended evaluation (index into the configured rules).
    pub rule: Option<usize>,
    /// The path to send to the node instead of the received one (without the
    /// query, which is kept as received).
    pub path: Option<Bytes>,
    /// Edits of the request head forwarded to the node.
    pub request_headers: HeaderEdits,
    /// Edits of the response head sent to the client (relayed or weir's own).
    pub response_headers: HeaderEdits,
    /// Rate limits to check, indexes into the configured `rate_limits`, once each.
    pub rate_limits: Vec<usize>,
    /// Concurrency limits to hold for the request, once each.
    pub concurrency_limits: Vec<usize>,
    /// Reused by the evaluator between requests.
    pub(crate) scratch: Scratch,
}

/// Where the request goes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No rule chose: the virtual server's routes and default pool decide.
    #[default]
    Default,
    /// A rule chose this pool.
    Pool(PoolId),
    /// weir answers the request itself (redirect, direct response, deny).
    Answer(Answer),
}

/// A response weir writes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// `Location` for redirects; the configured headers for direct responses.
    pub headers: Vec<(Bytes, Bytes)>,
    /// Empty for redirects and denials: the pipeline writes its usual short body.
    pub body: Bytes,
    /// A direct response's: its body is the rule's as written, empty included.
    pub written: bool,
}

/// Header edits in their final form: drop every received field named in
/// `removed`, keep the rest as they are, then append `appended` in order.
/// Rules' `remove`/`set`/`add` are folded into this as they are applied, so
/// a later rule's `remove` also takes away what an earlier rule added.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeaderEdits {
    removed: Vec<Bytes>,
    appended: Vec<(Bytes, Bytes)>,
}

/// Per-evaluation buffers kept between requests.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Which path regexes of the set matched.
    pub(crate) regex_hits: Vec<bool>,
    /// The rules filed under the regexes that matched, in rule order.
    pub(crate) regex_rules: Vec<u32>,
}

impl Decision {
    /// An empty decision, to be reused from request to request.
    pub fn new() -> Decision {
        Decision::default()
    }

    /// Forgets the last request's decision, keeping allocated capacity.
    pub fn clear(&mut self) {
        self.outcome = Outcome::Default;
        self.rule = None;
        self.path = None;
        self.request_headers.clear();
        self.response_headers.clear();
        self.rate_limits.clear();
        self.concurrency_limits.clear();
    }

    /// The answer weir gives itself, if a rule decided one.
    pub fn answer(&self) -> Option<&Answer> {
        match &self.outcome {
            Outcome::Answer(answer) => Some(answer),
            _ => None,
        }
    }
}

impl HeaderEdits {
    /// Whether the edits leave the fields as received.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.appended.is_empty()
    }

    /// Whether received fields called `name` are dropped.
    pub fn removes(&self, name: &[u8]) -> bool {
        self.removed
            .iter()
            .any(|removed| removed.eq_ignore_ascii_case(name))
    }

    /// Names whose received fields are dropped.
    pub fn removed(&self) -> impl Iterator<Item = &[u8]> {
        self.removed.iter().map(|name| &name[..])
    }

    /// Fields to append, in order.
    pub fn appended(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.appended
            .iter()
            .map(|(name, value)| (&name[..], &value[..]))
    }

    pub(crate) fn clear(&mut self) {
        self.removed.clear();
        self.appended.clear();
    }

    pub(crate) fn remove(&mut self, name: &Bytes) {
        self.appended
            .retain(|(appended, _)| !appended.eq_ignore_ascii_case(name));
        if !self.removes(name) {
            self.removed.push(name.clone());
        }
    }

    pub(crate) fn set(&mut self, name: &Bytes, value: Bytes) {
        self.remove(name);
        self.appended.push((name.clone(), value));
    }

    pub(crate) fn add(&mut self, name: &Bytes, value: Bytes) {
        self.appended.push((name.clone(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_fold_in_order() {
        let mut edits = HeaderEdits::default();
        let a = Bytes::from_static(b"X-A");
        let b = Bytes::from_static(b"X-B");
        edits.add(&a, Bytes::from_static(b"1"));
        edits.add(&b, Bytes::from_static(b"2"));
        edits.remove(&Bytes::from_static(b"x-a"));
        edits.set(&b, Bytes::from_static(b"3"));
        edits.add(&a, Bytes::from_static(b"4"));
        assert!(edits.removes(b"X-A") && edits.removes(b"x-b"));
        assert!(!edits.removes(b"X-C"));
        let appended: Vec<_> = edits.appended().collect();
        assert_eq!(
            appended,
            vec![(&b"X-B"[..], &b"3"[..]), (&b"X-A"[..], &b"4"[..])]
        );
        edits.clear();
        assert!(edits.is_empty());
    }
}
