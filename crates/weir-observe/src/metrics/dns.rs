//! Handles for nodes given by DNS name: each re-resolution by how it went, and how many
//! addresses the name has now, per pool and name. A name's handles are resolved once, when
//! its watch starts, so recording is one atomic operation.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Metrics, register};
use crate::names;

/// The `result` values of `weir_dns_resolutions_total`.
pub const RESOLUTION_RESULTS: [&str; 4] = ["changed", "unchanged", "partial", "failed"];

/// The handles of one watched name. `Default` gives unregistered handles.
#[derive(Debug, Clone, Default)]
pub struct DnsMetrics {
    resolutions: [Counter; RESOLUTION_RESULTS.len()],
    addresses: Gauge,
}

impl DnsMetrics {
    /// Counts a resolution that ended with `result` (one of [`RESOLUTION_RESULTS`]), the
    /// name now having `addresses` addresses (the last good set after a failure).
    pub fn resolved(&self, result: &str, addresses: usize) {
        match RESOLUTION_RESULTS.iter().position(|name| *name == result) {
            Some(index) => {
                self.resolutions[index].inc();
            }
            None => debug_assert!(false, "unknown label value {result}"),
        }
        self.set_addresses(addresses);
    }

    /// Sets how many addresses the name has now (the set its watch starts from).
    pub fn set_addresses(&self, addresses: usize) {
        self.addresses
            .set(i64::try_from(addresses).unwrap_or(i64::MAX));
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    pool: String,
    name: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    pool: String,
    name: String,
    result: &'static str,
}

/// The DNS families, registered by [`Metrics::new`].
#[derive(Debug, Default)]
pub(crate) struct DnsFamilies {
    resolutions: Family<ResultLabels, Counter>,
    addresses: Family<NameLabels, Gauge>,
}

impl DnsFamilies {
    pub(crate) fn register(&self, r: &mut Registry) {
        register(r, names::DNS_RESOLUTIONS, self.resolutions.clone());
        register(r, names::DNS_ADDRESSES, self.addresses.clone());
    }
}

impl Metrics {
    /// The handles of the node name `name` (`host:port`) of `pool`; the same pair always
    /// gives the same series.
    pub fn dns(&self, pool: &str, name: &str) -> DnsMetrics {
        let f = &self.dns;
        let labels = NameLabels {
            pool: pool.to_owned(),
            name: name.to_owned(),
        };
        DnsMetrics {
            resolutions: RESOLUTION_RESULTS.map(|result| {
                f.resolutions.get_or_create_owned(&ResultLabels {
                    pool: pool.to_owned(),
                    name: name.to_owned(),
                    result,
                })
            }),
            addresses: f.addresses.get_or_create_owned(&labels),
        }
    }

    /// Drops a name's series (a reload stopped watching it).
    pub fn remove_dns(&self, pool: &str, name: &str) {
        let f = &self.dns;
        for result in RESOLUTION_RESULTS {
            f.resolutions.remove(&ResultLabels {
                pool: pool.to_owned(),
                name: name.to_owned(),
                result,
            });
        }
        f.addresses.remove(&NameLabels {
            pool: pool.to_owned(),
            name: name.to_owned(),
        });
    }
}
