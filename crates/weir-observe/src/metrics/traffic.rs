//! Handles for a virtual server's traffic rules and limits (issue 14): how often each rule
//! decided a request, and how often each limit refused one. Kept apart from the rest of
//! `metrics.rs` so the families live in one place.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{Metrics, register};
use crate::names;

/// The `limit` label of the per-client connection limit.
pub const CLIENT_CONNECTIONS_LIMIT: &str = "client_connections";

/// The rule and limit handles of one virtual server, indexed like its configured rules,
/// rate limits and concurrency limits. `Default` gives no handles (tests, benchmarks).
#[derive(Debug, Clone, Default)]
pub struct TrafficMetrics {
    /// Requests each rule decided (the rule whose terminal action applied).
    pub rules: Box<[Counter]>,
    /// Requests each rate limit refused (429), in the order of the configured limits.
    pub rate_limit_refusals: Box<[Counter]>,
    /// Requests each concurrency limit refused (503), in the order of the configured limits.
    pub concurrency_limit_refusals: Box<[Counter]>,
    /// Connections refused by `client_connections` (an unregistered counter when the
    /// virtual server sets no such limit).
    pub client_connection_refusals: Counter,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    virtual_server: String,
    rule: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    virtual_server: String,
    limit: String,
}

/// The traffic families, registered by [`Metrics::new`].
#[derive(Debug, Default)]
pub(crate) struct TrafficFamilies {
    rule_matches: Family<RuleLabels, Counter>,
    limit_refusals: Family<LimitLabels, Counter>,
    /// The series made for each virtual server (rule names, limit names), to drop them
    /// when a reload removes it.
    made: Mutex<HashMap<String, Made>>,
}

/// The rule names and limit names a virtual server has series for.
type Made = (Vec<String>, Vec<String>);

impl TrafficFamilies {
    pub(crate) fn register(&self, r: &mut Registry) {
        register(r, names::RULE_MATCHES, self.rule_matches.clone());
        register(r, names::LIMIT_REFUSALS, self.limit_refusals.clone());
    }

    /// Drops every series of `virtual_server` (a reload removed it).
    pub(crate) fn remove(&self, virtual_server: &str) {
        let made = self
            .made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(virtual_server);
        let Some((rules, limits)) = made else {
            return;
        };
        for rule in rules {
            self.rule_matches.remove(&RuleLabels {
                virtual_server: virtual_server.to_owned(),
                rule,
            });
        }
        for limit in limits {
            self.limit_refusals.remove(&LimitLabels {
                virtual_server: virtual_server.to_owned(),
                limit,
            });
        }
    }

    /// Notes the series made for `virtual_server`, and drops those of rules and limits
    /// it no longer has (a reload removed or renamed them): the model being built
    /// replaces the running one, whose requests in flight keep their handles, unexported.
    fn note(&self, virtual_server: &str, rules: &[&str], limits: &[&str]) {
        let owned = |names: &[&str]| {
            let mut names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
            names.sort_unstable();
            names.dedup();
            names
        };
        let (rules, limits) = (owned(rules), owned(limits));
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let (old_rules, old_limits) = made
            .insert(virtual_server.to_owned(), (rules.clone(), limits.clone()))
            .unwrap_or_default();
        drop(made);
        for rule in old_rules
            .into_iter()
            .filter(|r| rules.binary_search(r).is_err())
        {
            self.rule_matches.remove(&RuleLabels {
                virtual_server: virtual_server.to_owned(),
                rule,
            });
        }
        for limit in (old_limits.into_iter()).filter(|l| limits.binary_search(l).is_err()) {
            self.limit_refusals.remove(&LimitLabels {
                virtual_server: virtual_server.to_owned(),
                limit,
            });
        }
    }
}

impl Metrics {
    /// The rule and limit handles of one virtual server: `rules`, `rate_limits` and
    /// `concurrency_limits` are the configured names, in order; `client_connections`
    /// says whether it limits connections per client. The same names always give the
    /// same series; the series of names the previous call for `virtual_server` had and
    /// this one lacks are dropped (each model calls it once per virtual server), and
    /// [`Metrics::remove_virtual_server`] drops them all.
    pub fn traffic(
        &self,
        virtual_server: &str,
        rules: &[&str],
        (rate_limits, concurrency_limits): (&[&str], &[&str]),
        client_connections: bool,
    ) -> TrafficMetrics {
        let f = &self.traffic;
        let limits: Vec<&str> = (rate_limits.iter().chain(concurrency_limits))
            .copied()
            .chain(client_connections.then_some(CLIENT_CONNECTIONS_LIMIT))
            .collect();
        f.note(virtual_server, rules, &limits);
        let limit = |name: &str| {
            f.limit_refusals.get_or_create_owned(&LimitLabels {
                virtual_server: virtual_server.to_owned(),
                limit: name.to_owned(),
            })
        };
        TrafficMetrics {
            rules: rules
                .iter()
                .map(|rule| {
                    f.rule_matches.get_or_create_owned(&RuleLabels {
                        virtual_server: virtual_server.to_owned(),
                        rule: (*rule).to_owned(),
                    })
                })
                .collect(),
            rate_limit_refusals: rate_limits.iter().map(|name| limit(name)).collect(),
            concurrency_limit_refusals: concurrency_limits.iter().map(|name| limit(name)).collect(),
            client_connection_refusals: match client_connections {
                true => limit(CLIENT_CONNECTIONS_LIMIT),
                false => Counter::default(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Metrics;

    #[test]
    fn rules_and_limits_count_under_their_names() {
        let metrics = Metrics::new();
        let traffic = metrics.traffic("web", &["old-blog", "rules[1]"], (&["per-ip"], &[]), true);
        traffic.rules[0].inc();
        traffic.rate_limit_refusals[0].inc_by(3);
        traffic.client_connection_refusals.inc();
        let text = metrics.encode();
        assert!(
            text.contains("weir_rule_matches_total{virtual_server=\"web\",rule=\"old-blog\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("weir_limit_refusals_total{virtual_server=\"web\",limit=\"per-ip\"} 3\n"),
            "{text}"
        );
        assert!(text.contains(
            "weir_limit_refusals_total{virtual_server=\"web\",limit=\"client_connections\"} 1\n"
        ));
        metrics.virtual_server("web");
        metrics.remove_virtual_server("web");
        assert!(!metrics.encode().contains("virtual_server=\"web\""));
    }

    /// A reload that renames a rule and drops a limit: the old names' series go, the
    /// kept names keep their counts, other virtual servers are untouched.
    #[test]
    fn a_new_model_drops_the_series_of_rules_and_limits_it_no_longer_has() {
        let metrics = Metrics::new();
        let old = metrics.traffic("web", &["blog", "api"], (&["per-ip"], &["slots"]), false);
        old.rules[0].inc();
        old.rules[1].inc_by(2);
        old.rate_limit_refusals[0].inc();
        old.concurrency_limit_refusals[0].inc();
        let other = metrics.traffic("shop", &["blog"], (&["per-ip"], &[]), false);
        other.rules[0].inc();
        let new = metrics.traffic("web", &["api", "weblog"], (&[], &["slots"]), false);
        new.rules[0].inc();
        let text = metrics.encode();
        for gone in ["rule=\"blog\"} 1", "limit=\"per-ip\"} 1"] {
            let line = format!("{{virtual_server=\"web\",{gone}");
            assert!(!text.contains(&line), "{line} still in\n{text}");
        }
        for kept in [
            "weir_rule_matches_total{virtual_server=\"web\",rule=\"api\"} 3\n",
            "weir_rule_matches_total{virtual_server=\"web\",rule=\"weblog\"} 0\n",
            "weir_limit_refusals_total{virtual_server=\"web\",limit=\"slots\"} 1\n",
            "weir_rule_matches_total{virtual_server=\"shop\",rule=\"blog\"} 1\n",
            "weir_limit_refusals_total{virtual_server=\"shop\",limit=\"per-ip\"} 0\n",
        ] {
            assert!(text.contains(kept), "{kept} missing from\n{text}");
        }
        // the old model's handles still count, unexported
        old.rules[0].inc();
        assert!(!metrics.encode().contains("rule=\"blog\"} 2"));
    }
}
