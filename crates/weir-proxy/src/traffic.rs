//! What the rules stage (`crate::rules`) works with that outlives a request or crosses
//! stages: a virtual server's rules and limiters in one model ([`VirtualServerTraffic`],
//! built per model, its unchanged limiters carried over from the previous model's
//! virtual server of the same name so buckets and counts survive a reload), and the
//! header edits the forward and respond stages apply ([`Edits`], [`Upstream`]).

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use bytes::BytesMut;
use weir_config::VirtualServer;
use weir_http::HeaderEdit;
use weir_observe::Metrics;
use weir_observe::metrics::TrafficMetrics;
use weir_rules::{Answer, HeaderEdits, RuleSet, TrafficLimits};
use weir_upstream::{Flow, Pool};

/// A virtual server's rules and limits in one model.
#[derive(Debug)]
pub(crate) struct VirtualServerTraffic {
    pub(crate) rules: RuleSet,
    pub(crate) limits: TrafficLimits,
    /// Every pool of the model, by `PoolId` (a rule may name any of them).
    pub(crate) pools: Box<[Arc<Pool>]>,
    pub(crate) metrics: TrafficMetrics,
}

impl VirtualServerTraffic {
    /// `rules` were compiled while the model was staged; `previous` is this virtual
    /// server in the running model, whose unchanged limiters are kept.
    pub(crate) fn new(
        config: &VirtualServer,
        rules: RuleSet,
        pools: &[Arc<Pool>],
        previous: Option<&VirtualServerTraffic>,
        metrics: &Metrics,
    ) -> VirtualServerTraffic {
        let traffic = &config.traffic;
        let limits = TrafficLimits::new(traffic, previous.map(|p| &p.limits), epoch());
        let rule_names: Vec<&str> = (0..rules.len())
            .filter_map(|index| rules.rule_name(index))
            .collect();
        let rates: Vec<&str> = traffic
            .rate_limits
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        let concurrency: Vec<&str> = (traffic.concurrency_limits.iter())
            .map(|l| l.name.as_str())
            .collect();
        let metrics = metrics.traffic(
            &config.name,
            &rule_names,
            (&rates, &concurrency),
            traffic.client_connections.is_some(),
        );
        VirtualServerTraffic {
            rules,
            limits,
            pools: pools.iter().cloned().collect(),
            metrics,
        }
    }
}

/// The rate limiters' clock zero: one for the process, as `TrafficLimits::new` asks.
fn epoch() -> std::time::Instant {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

/// What the select and forward stages need from the rules stage: the client address
/// (persistence, hash keys, the node queue's flow), the rewritten path and the request's
/// header edits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upstream<'a> {
    pub(crate) client: IpAddr,
    pub(crate) path: Option<&'a [u8]>,
    pub(crate) edits: Edits<'a>,
}

impl Upstream<'_> {
    /// The flow the request waits in at a node's queue: its client's as the rules see it
    /// (a trusted proxy's client, not the proxy).
    pub(crate) fn flow(&self) -> Flow {
        Flow::client(self.client)
    }
}

/// Header edits of one request's head or response: the rules' edits, the request id
/// header, and (responses) the persistence cookie or (weir's answers) the answer's own
/// fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edits<'a> {
    pub(crate) edits: &'a HeaderEdits,
    /// The request id header and value, replacing any received.
    pub(crate) id: Option<(&'a str, &'a str)>,
    pub(crate) answer: Option<&'a Answer>,
    pub(crate) set_cookie: Option<&'a [u8]>,
}

impl HeaderEdit for Edits<'_> {
    fn drops(&self, name: &[u8]) -> bool {
        self.edits.removes(name)
            || self
                .id
                .is_some_and(|(header, _)| name.eq_ignore_ascii_case(header.as_bytes()))
            || self.answer.is_some_and(|answer| {
                answer
                    .headers
                    .iter()
                    .any(|(field, _)| field.eq_ignore_ascii_case(name))
            })
    }

    fn write_added(&self, out: &mut BytesMut) {
        self.write_fields(out, |_| true);
    }
}

impl Edits<'_> {
    /// These edits as a [`HeaderEdit`], or `None` when they change nothing (so a head can
    /// be written as it is).
    pub(crate) fn as_edit(&self) -> Option<&(dyn HeaderEdit + Sync)> {
        let nothing = self.edits.is_empty()
            && self.id.is_none()
            && self.answer.is_none()
            && self.set_cookie.is_none();
        (!nothing).then_some(self as &(dyn HeaderEdit + Sync))
    }

    /// Writes the added fields whose names `keep` accepts, each as `Name: value\r\n`.
    pub(crate) fn write_fields(&self, out: &mut BytesMut, keep: impl Fn(&[u8]) -> bool) {
        let mut field = |name: &[u8], value: &[u8]| {
            if !keep(name) {
                return;
            }
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        };
        if let Some(answer) = self.answer {
            for (name, value) in &answer.headers {
                field(name, value);
            }
        }
        for (name, value) in self.edits.appended() {
            field(name, value);
        }
        // A rule that sets or removes the request id's field has the last word on it.
        if let Some((header, id)) = self.id.filter(|(h, _)| !self.edits.removes(h.as_bytes())) {
            field(header.as_bytes(), id.as_bytes());
        }
        if let Some(cookie) = self.set_cookie {
            field(b"Set-Cookie", cookie);
        }
    }
}
