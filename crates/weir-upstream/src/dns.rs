//! Nodes by DNS name: resolved at start, re-resolved when their records expire.
//!
//! A node given as `host:port` stands for every address the name resolves to (A and AAAA, as
//! configured). [`NameState`] is the sans-IO part: it takes each answer (or failure) and says
//! whether the set of addresses changed and when to ask again — at the records' TTL, kept
//! within `[min_ttl, max_ttl]`; after a failure the last good set is kept and the next try
//! backs off from `min_ttl` up to `max_ttl`. [`watch`] is the driver: one task per name that
//! publishes each new set on a `tokio::sync::watch` channel, for the pool to apply the way a
//! reload would (connections to addresses still in the set are kept).
//!
//! Resolution uses hickory-resolver (the system's `/etc/resolv.conf`, or the servers the
//! config names), whose answers carry their records' expiry.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::rdata::SRV;
use hickory_resolver::proto::rr::{Name, RData};
use tokio::sync::watch as channel;
use tokio::task::JoinHandle;
use weir_core::ShutdownSignal;

/// How names are resolved and re-resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSettings {
    /// Name servers to ask (UDP, falling back to TCP); empty: the system's.
    pub servers: Vec<SocketAddr>,
    /// One query's timeout (per attempt).
    pub timeout: Duration,
    /// Re-resolve no sooner than this, whatever the TTL (and the first retry after a failure).
    pub min_ttl: Duration,
    /// Re-resolve no later than this, whatever the TTL (and the longest retry back-off).
    pub max_ttl: Duration,
    /// Which address records (A, AAAA or both) make nodes.
    pub families: Families,
}

/// Which address records make nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Families {
    /// A records only.
    Ipv4,
    /// AAAA records only.
    Ipv6,
    /// Both A and AAAA.
    Both,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            servers: Vec::new(),
            timeout: Duration::from_secs(2),
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(300),
            families: Families::Both,
        }
    }
}

impl From<&weir_config::PoolDns> for DnsSettings {
    fn from(dns: &weir_config::PoolDns) -> Self {
        DnsSettings {
            servers: dns.servers.clone(),
            timeout: dns.timeout,
            min_ttl: dns.min_ttl,
            max_ttl: dns.max_ttl,
            families: match dns.families {
                weir_config::AddressFamilies::Ipv4 => Families::Ipv4,
                weir_config::AddressFamilies::Ipv6 => Families::Ipv6,
                weir_config::AddressFamilies::Both => Families::Both,
            },
        }
    }
}

/// A node named by DNS: a host name and the port every address it resolves to gets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeName {
    /// The host name, as written; with `srv`, the service's name
    /// (`_http._tcp.api.internal`).
    pub host: String,
    /// The port of every node the name resolves to (0 with `srv`: each record's own).
    pub port: u16,
    /// The name is a service's: its SRV records give the targets and ports.
    pub srv: bool,
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.srv {
            true => write!(f, "srv:{}", self.host),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// The addresses a name resolved to, and for how long they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The nodes' addresses: sorted, without duplicates; empty only in a partial answer
    /// whose failed family may keep its last ones ([`NameState::on_answer`]).
    pub addresses: Vec<SocketAddr>,
    /// The shortest time to live of the records, as the resolver reported it.
    pub ttl: Duration,
    /// Some of the queries failed (one family, an SRV target): why. `addresses` are those
    /// of the queries answered. For a name with a last good set, the failed family's
    /// addresses are kept from it, or the whole set for a failed SRV target
    /// ([`NameState::on_answer`]).
    pub partial: Option<String>,
    /// The family whose query failed, when that made the answer partial.
    pub failed_family: Option<Families>,
    /// Addresses answered past [`MAX_ADDRESSES_PER_NAME`], left out of `addresses`.
    pub surplus: usize,
    /// SRV targets of the best priority not asked for their addresses: past
    /// `MAX_SRV_TARGETS`, or once the targets asked gave enough addresses.
    pub targets_left_out: usize,
}

/// The most nodes one name becomes (for a service, all its targets' addresses together):
/// the lowest addresses, so that the same answer keeps the same nodes. A DNS server that
/// answers with hundreds of thousands of addresses (hostile, or a wildcard gone wrong)
/// would otherwise hold weir's start or its reload in building a pool of them all.
pub const MAX_ADDRESSES_PER_NAME: usize = 1024;

/// The most SRV targets of a service resolved, of its best priority (3 in unit tests,
/// whose DNS server answers over UDP only, too small for 257 records).
const MAX_SRV_TARGETS: usize = if cfg!(test) { 3 } else { 256 };

/// Sorts `addresses`, drops duplicates and keeps the lowest
/// [`MAX_ADDRESSES_PER_NAME`]; returns how many were left out (of a service, of the
/// targets asked: past the bound the others are not).
fn bounded(addresses: &mut Vec<SocketAddr>) -> usize {
    addresses.sort_unstable();
    addresses.dedup();
    let surplus = addresses.len().saturating_sub(MAX_ADDRESSES_PER_NAME);
    addresses.truncate(MAX_ADDRESSES_PER_NAME);
    surplus
}

/// Why a name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The name exists in no record of the families asked for (NXDOMAIN, or no A/AAAA).
    NoRecords,
    /// No usable answer (timeout, SERVFAIL, refused, network).
    Failed(String),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::NoRecords => f.write_str("no address records"),
            ResolveError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ResolveError {}

/// The resolver shared by every name of a process.
#[derive(Clone)]
pub struct Resolver {
    /// Address lookups of one family, or of both as separate queries (`Families::Both`):
    /// an answer counts only when every query asked was answered, so a lost AAAA reply or
    /// a SERVFAIL for one family fails the resolution (the last good set stays) instead of
    /// shrinking the pool to the other family's nodes. Never empty; the first also asks
    /// for SRV records.
    families: Vec<TokioResolver>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolver")
    }
}

impl Resolver {
    /// A resolver for `settings`: the named servers, or the system's configuration. Must be
    /// called inside a tokio runtime.
    pub fn new(settings: &DnsSettings) -> Result<Resolver, ResolveError> {
        let build = |strategy| Resolver::build(settings, strategy);
        let families = match settings.families {
            Families::Ipv4 => vec![build(LookupIpStrategy::Ipv4Only)?],
            Families::Ipv6 => vec![build(LookupIpStrategy::Ipv6Only)?],
            Families::Both => vec![
                build(LookupIpStrategy::Ipv4Only)?,
                build(LookupIpStrategy::Ipv6Only)?,
            ],
        };
        Ok(Resolver { families })
    }

    /// One hickory resolver for `settings`, looking up addresses as `strategy` says.
    fn build(
        settings: &DnsSettings,
        strategy: LookupIpStrategy,
    ) -> Result<TokioResolver, ResolveError> {
        let provider = TokioRuntimeProvider::default();
        let mut builder = if settings.servers.is_empty() {
            TokioResolver::builder(provider)
                .map_err(|e| ResolveError::Failed(format!("system DNS configuration: {e}")))?
        } else {
            let servers = settings
                .servers
                .iter()
                .map(|server| {
                    let mut config = NameServerConfig::udp_and_tcp(server.ip());
                    for connection in &mut config.connections {
                        connection.port = server.port();
                    }
                    config
                })
                .collect();
            TokioResolver::builder_with_config(ResolverConfig::from_name_servers(servers), provider)
        };
        let options = builder.options_mut();
        options.timeout = settings.timeout;
        // Servers named in the configuration are the only source: the hosts file is the
        // system resolver's, read only when the system's configuration is used.
        if !settings.servers.is_empty() {
            options.use_hosts_file = hickory_resolver::config::ResolveHosts::Never;
        }
        // The resolver's cache may answer a re-resolution, but never past our bounds.
        options.positive_max_ttl = Some(settings.max_ttl);
        options.negative_max_ttl = Some(settings.min_ttl);
        options.ip_strategy = strategy;
        builder
            .build()
            .map_err(|e| ResolveError::Failed(format!("DNS resolver: {e}")))
    }

    /// Resolves `name` once: its addresses on its port, or for a service
    /// name the addresses of its SRV targets on their ports. An IP literal
    /// resolves to itself, with the longest TTL.
    pub async fn resolve(&self, name: &NodeName) -> Result<Answer, ResolveError> {
        let mut targets_left_out = 0;
        let (mut addresses, valid_until, partial, failed_family) = match name.srv {
            true => {
                let srv = self.resolve_srv(&name.host).await?;
                targets_left_out = srv.targets_left_out;
                (srv.addresses, srv.valid_until, srv.partial, None)
            }
            false => {
                let Ips {
                    ips,
                    valid_until,
                    partial,
                    failed_family,
                } = self.resolve_ips(&name.host).await?;
                let port = name.port;
                let addresses = ips.into_iter().map(|ip| SocketAddr::new(ip, port));
                (addresses.collect(), valid_until, partial, failed_family)
            }
        };
        let surplus = bounded(&mut addresses);
        // None at all is no answer, unless a family failed: its last addresses may stay.
        if addresses.is_empty() && failed_family.is_none() {
            return Err(match partial {
                Some(why) => ResolveError::Failed(why),
                None => ResolveError::NoRecords,
            });
        }
        let ttl = valid_until.saturating_duration_since(std::time::Instant::now());
        Ok(Answer {
            addresses,
            ttl,
            partial,
            failed_family,
            surplus,
            targets_left_out,
        })
    }

    /// A and AAAA records of `host` (as `families` says), when they expire, and why the
    /// answer is partial if it is. With both families, one without records is an answer
    /// (the other's); one whose query failed makes the answer partial, or the whole lookup
    /// fail when the other family has no addresses either.
    async fn resolve_ips(&self, host: &str) -> Result<Ips, ResolveError> {
        let lookup = |resolver: &TokioResolver| {
            let resolver = resolver.clone();
            async move {
                // An IP literal is its own answer; a name is read as DNS reads it, so labels
                // with `_` (`proj_web_1`, as container tools name hosts) are asked as written.
                let lookup = match host.parse::<IpAddr>() {
                    Ok(_) => resolver.lookup_ip(host).await,
                    Err(_) => {
                        let name = Name::from_str_relaxed(host)
                            .map_err(|e| ResolveError::Failed(format!("{host}: {e}")))?;
                        resolver.lookup_ip(name).await
                    }
                };
                match lookup.map_err(resolve_error) {
                    Ok(lookup) => Ok(Some((
                        owned_addresses(lookup.as_lookup()),
                        lookup.valid_until(),
                    ))),
                    Err(ResolveError::NoRecords) => Ok(None),
                    Err(error) => Err(error),
                }
            }
        };
        // Both families are asked at once.
        let answers = match self.families.as_slice() {
            [v4, v6] => {
                let (v4, v6) = tokio::join!(lookup(v4), lookup(v6));
                vec![v4, v6]
            }
            families => {
                let mut answers = Vec::with_capacity(families.len());
                for resolver in families {
                    answers.push(lookup(resolver).await);
                }
                answers
            }
        };
        let mut addresses = Vec::new();
        let mut valid_until: Option<std::time::Instant> = None;
        let mut failed = None;
        // With both families the answers are A's then AAAA's (`Resolver::new`).
        let families: &[Families] = match self.families.len() {
            2 => &[Families::Ipv4, Families::Ipv6],
            _ => &[],
        };
        let mut answered = false;
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(Some((ips, until))) => {
                    addresses.extend(ips);
                    valid_until = Some(valid_until.map_or(until, |earliest| earliest.min(until)));
                }
                Ok(None) => answered = true,
                Err(error) => failed = Some((error, families.get(index).copied())),
            }
        }
        // One family failed and the other has no records: an answer still (that family has
        // no nodes), partial, asked again soon.
        if valid_until.is_none() && answered && failed.as_ref().is_some_and(|(_, f)| f.is_some()) {
            valid_until = Some(std::time::Instant::now());
        }
        match (valid_until, failed) {
            (Some(valid_until), None) => Ok(Ips {
                ips: addresses,
                valid_until,
                partial: None,
                failed_family: None,
            }),
            (Some(valid_until), Some((error, family))) => Ok(Ips {
                ips: addresses,
                valid_until,
                partial: Some(format!("{host}: {error}")),
                failed_family: family,
            }),
            (None, Some((error, _))) => Err(error),
            (None, None) => Err(ResolveError::NoRecords),
        }
    }

    /// A service's nodes: the targets of its SRV records of the best (lowest)
    /// priority, each target's addresses on the record's port. Records of
    /// other priorities are backups weir does not use; SRV weights are not
    /// used either (every node takes the pool entry's weight). Expires with
    /// the first of the SRV and address records.
    async fn resolve_srv(&self, service: &str) -> Result<Services, ResolveError> {
        let lookup = self.families[0]
            .srv_lookup(service)
            .await
            .map_err(resolve_error)?;
        let records: Vec<&SRV> = lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::SRV(srv) => Some(srv),
                _ => None,
            })
            // A single "." target says the service is not offered here (RFC 2782);
            // port 0 cannot be connected to.
            .filter(|srv| !srv.target.is_root() && srv.port != 0)
            .collect();
        let Some(best) = records.iter().map(|srv| srv.priority).min() else {
            return Err(ResolveError::NoRecords);
        };
        let mut valid_until = lookup.valid_until();
        let mut addresses = Vec::new();
        let mut partial = None;
        // In the order of their names, so that a server that rotates its records does not
        // change which targets are asked when there are more than can be taken.
        let mut best: Vec<&SRV> = records
            .into_iter()
            .filter(|srv| srv.priority == best)
            .collect();
        best.sort_by(|a, b| (&a.target, a.port).cmp(&(&b.target, b.port)));
        let mut targets_left_out = best.len().saturating_sub(MAX_SRV_TARGETS);
        best.truncate(MAX_SRV_TARGETS);
        for (asked, srv) in best.iter().enumerate() {
            // Enough nodes already: the rest of the targets are not asked.
            if addresses.len() >= MAX_ADDRESSES_PER_NAME {
                addresses.sort_unstable();
                addresses.dedup();
                if addresses.len() >= MAX_ADDRESSES_PER_NAME {
                    targets_left_out += best.len() - asked;
                    break;
                }
            }
            // A target without address records leaves the others serving; one whose lookup
            // failed makes the answer partial: the last good set stays rather than losing
            // that target's nodes.
            let (ips, expires) = match self.resolve_ips(&srv.target.to_string()).await {
                Ok(Ips {
                    ips,
                    valid_until,
                    partial: failed,
                    ..
                }) => {
                    partial = partial.or(failed);
                    (ips, valid_until)
                }
                Err(ResolveError::NoRecords) => continue,
                Err(error) => {
                    partial = Some(format!("{}: {error}", srv.target));
                    continue;
                }
            };
            valid_until = valid_until.min(expires);
            addresses.extend(ips.into_iter().map(|ip| SocketAddr::new(ip, srv.port)));
        }
        if addresses.is_empty()
            && let Some(why) = partial
        {
            return Err(ResolveError::Failed(why));
        }
        Ok(Services {
            addresses,
            valid_until,
            partial,
            targets_left_out,
        })
    }
}

/// A service's addresses ([`Resolver::resolve_srv`]), when they expire, why the answer is
/// partial if it is, and how many targets were not asked.
struct Services {
    addresses: Vec<SocketAddr>,
    valid_until: std::time::Instant,
    partial: Option<String>,
    targets_left_out: usize,
}

/// A host's addresses ([`Resolver::resolve_ips`]): when they expire, and why the answer is
/// partial (and of which family) if a query failed.
struct Ips {
    ips: Vec<IpAddr>,
    valid_until: std::time::Instant,
    partial: Option<String>,
    failed_family: Option<Families>,
}

/// The addresses of `lookup` that may be nodes.
///
/// Only records owned by the name asked, or by a name its CNAME chain in the answer leads
/// to, count (RFC 2181 §5.4.1: other data in an answer is not to be trusted); an
/// unspecified address (`0.0.0.0`, `::`, what a DNS sinkhole answers) is no node, as in
/// the configuration.
fn owned_addresses(lookup: &hickory_resolver::lookup::Lookup) -> Vec<IpAddr> {
    let key = |name: &Name| name.to_ascii().trim_end_matches('.').to_ascii_lowercase();
    let records = lookup.answers();
    let mut owners = vec![key(lookup.query().name())];
    // Each pass adds at least one target, so at most one pass per record.
    loop {
        let known = owners.len();
        for record in records {
            if let RData::CNAME(target) = &record.data
                && owners.contains(&key(&record.name))
            {
                let target = key(&target.0);
                if !owners.contains(&target) {
                    owners.push(target);
                }
            }
        }
        if owners.len() == known {
            break;
        }
    }
    let mut ips = Vec::new();
    for record in records {
        let Some(ip) = record.data.ip_addr() else {
            continue;
        };
        if !owners.contains(&key(&record.name)) {
            tracing::debug!(owner = %record.name, %ip, "DNS answer: an address record of another name, left out");
            continue;
        }
        if ip.is_unspecified() {
            tracing::warn!(owner = %record.name, %ip, "DNS answer: an unspecified address is no node, left out");
            continue;
        }
        ips.push(ip);
    }
    ips
}

/// What one answer changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// A new set of node addresses (the first one included).
    Changed(Arc<[SocketAddr]>),
    /// The same set as before.
    Unchanged,
    /// The name did not resolve; the last good set (if any) stays.
    Failed(ResolveError),
}

/// One name's resolution state (sans-IO): the last good set and the failures since.
#[derive(Debug, Clone)]
pub struct NameState {
    name: NodeName,
    min_ttl: Duration,
    max_ttl: Duration,
    current: Option<Arc<[SocketAddr]>>,
    failures: u32,
    /// Why the set taken last is partial (the first answer of a name, only), for the log.
    partial: Option<String>,
    /// How many addresses the set taken last left out ([`MAX_ADDRESSES_PER_NAME`]), and
    /// how many SRV targets were not asked, for the log.
    surplus: usize,
    targets_left_out: usize,
}

impl NameState {
    /// A name not yet resolved, re-resolved within `settings`' bounds.
    pub fn new(name: NodeName, settings: &DnsSettings) -> NameState {
        NameState {
            name,
            min_ttl: settings.min_ttl,
            max_ttl: settings.max_ttl.max(settings.min_ttl),
            current: None,
            failures: 0,
            partial: None,
            surplus: 0,
            targets_left_out: 0,
        }
    }

    /// The name this state follows.
    pub fn name(&self) -> &NodeName {
        &self.name
    }

    /// The last good set of addresses; `None` until the name first resolved.
    pub fn current(&self) -> Option<&Arc<[SocketAddr]>> {
        self.current.as_ref()
    }

    /// Takes one resolution's outcome: what changed, and how long until the next one.
    ///
    /// A partial answer is taken for a name not resolved yet (some nodes are better than
    /// none, and a resolver that always fails one family would otherwise never give any).
    /// For a name with a last good set, a family whose query failed keeps its addresses
    /// from that set while the other family's follow their answer (a resolver that always
    /// fails AAAA still moves the A nodes); an SRV target whose lookup failed makes it a
    /// failure, and the set stays whole.
    pub fn on_answer(&mut self, outcome: Result<Answer, ResolveError>) -> (Update, Duration) {
        let outcome = match (outcome, self.current.as_deref()) {
            (
                Ok(Answer {
                    partial: Some(why),
                    failed_family: None,
                    ..
                }),
                Some(_),
            ) => Err(ResolveError::Failed(why)),
            (Ok(mut answer), Some(current)) if answer.partial.is_some() => {
                let kept = current.iter().filter(|address| match answer.failed_family {
                    Some(Families::Ipv4) => address.is_ipv4(),
                    Some(Families::Ipv6) => address.is_ipv6(),
                    _ => false,
                });
                answer.addresses.extend(kept);
                answer.addresses.sort_unstable();
                answer.addresses.dedup();
                Ok(answer)
            }
            (outcome, _) => outcome,
        };
        // A partial answer that leaves no address (the family that answered has none, the
        // one that failed had none either) is a failure: a set is never empty.
        let outcome = match outcome {
            Ok(Answer {
                addresses,
                partial: Some(why),
                ..
            }) if addresses.is_empty() => Err(ResolveError::Failed(why)),
            outcome => outcome,
        };
        match outcome {
            Ok(answer) => {
                self.failures = 0;
                self.partial = answer.partial;
                self.surplus = answer.surplus;
                self.targets_left_out = answer.targets_left_out;
                let next = answer.ttl.clamp(self.min_ttl, self.max_ttl);
                let set: Arc<[SocketAddr]> = answer.addresses.into();
                if self.current.as_deref() == Some(&set[..]) {
                    return (Update::Unchanged, next);
                }
                self.current = Some(Arc::clone(&set));
                (Update::Changed(set), next)
            }
            Err(error) => {
                // min_ttl, doubling per failure in a row, at most max_ttl.
                let backoff = self
                    .min_ttl
                    .saturating_mul(1 << self.failures.min(16))
                    .min(self.max_ttl);
                self.failures = self.failures.saturating_add(1);
                (Update::Failed(error), backoff)
            }
        }
    }
}

/// Resolves `name` now, then keeps re-resolving it in a task until `shutdown`. The channel
/// holds the last good set (empty until the name first resolves); a failure is logged once per
/// failed attempt and changes nothing.
pub async fn watch(
    resolver: Resolver,
    name: NodeName,
    settings: &DnsSettings,
    shutdown: ShutdownSignal,
) -> (channel::Receiver<Arc<[SocketAddr]>>, JoinHandle<()>) {
    let mut state = NameState::new(name, settings);
    let first = resolver.resolve(&state.name).await;
    let (update, delay) = state.on_answer(first);
    log(&state, &update);
    let metrics = weir_observe::DnsMetrics::default();
    spawn_watch(resolver, state, delay, (shutdown, metrics))
}

/// Keeps re-resolving the name of `state` (already resolved once, or not) in a task until
/// `shutdown`, the first time after `delay`. The channel starts with the state's last good
/// set (empty if none) and gets each new one.
pub fn spawn_watch(
    resolver: Resolver,
    mut state: NameState,
    mut delay: Duration,
    (shutdown, metrics): (ShutdownSignal, weir_observe::DnsMetrics),
) -> (channel::Receiver<Arc<[SocketAddr]>>, JoinHandle<()>) {
    let initial = state
        .current
        .clone()
        .unwrap_or_else(|| Arc::from(Vec::new()));
    // The gauge holds the set served from the start, not from the first re-resolution.
    metrics.set_addresses(initial.len());
    let (sender, receiver) = channel::channel(initial);
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.triggered() => return,
            }
            let outcome = resolver.resolve(&state.name).await;
            let update;
            (update, delay) = state.on_answer(outcome);
            log(&state, &update);
            let result = match (&update, &state.partial) {
                (Update::Failed(_), _) => "failed",
                (_, Some(_)) => "partial",
                (Update::Changed(_), None) => "changed",
                (Update::Unchanged, None) => "unchanged",
            };
            metrics.resolved(result, state.current().map_or(0, |set| set.len()));
            if let Update::Changed(set) = update {
                sender.send_replace(set);
            }
        }
    });
    (receiver, task)
}

/// Resolves `name` once for a start or a reload: the state to hand to [`spawn_watch`] with
/// the delay until the next resolution, or why the name did not resolve.
pub async fn resolve_first(
    resolver: &Resolver,
    name: NodeName,
    settings: &DnsSettings,
) -> Result<(NameState, Duration), ResolveError> {
    let mut state = NameState::new(name, settings);
    let outcome = resolver.resolve(&state.name).await;
    let error = outcome.as_ref().err().cloned();
    let (update, delay) = state.on_answer(outcome);
    match error {
        Some(error) => Err(error),
        None => {
            log(&state, &update);
            Ok((state, delay))
        }
    }
}

fn log(state: &NameState, update: &Update) {
    let name = state.name();
    if let Update::Changed(set) = update
        && (state.surplus > 0 || state.targets_left_out > 0)
    {
        tracing::warn!(node = %name, taken = set.len(), left_out = state.surplus, targets_not_asked = state.targets_left_out, "DNS name has more addresses (or SRV targets) than weir makes nodes of one name; the lowest addresses of the first targets by name are taken");
    }
    match update {
        Update::Changed(set) => match &state.partial {
            None => {
                tracing::info!(node = %name, addresses = ?set, "DNS name resolved to a new set of addresses");
            }
            Some(why) => {
                tracing::warn!(node = %name, addresses = ?set, failed = %why, "DNS name resolved in part (a query failed); serving the addresses answered");
            }
        },
        Update::Unchanged => {
            if let Some(why) = &state.partial {
                tracing::warn!(node = %name, failed = %why, "DNS name resolved in part (a query failed); the failed family keeps its last good addresses");
            }
        }
        Update::Failed(error) => {
            let kept = state.current().map_or(0, |set| set.len());
            tracing::warn!(node = %name, %error, kept, "DNS resolution failed; keeping the last good addresses");
        }
    }
}

/// A resolver error as weir reports it: no records, or a failure to ask.
fn resolve_error(error: hickory_resolver::net::NetError) -> ResolveError {
    if error.is_no_records_found() || error.is_nx_domain() {
        ResolveError::NoRecords
    } else {
        ResolveError::Failed(error.to_string())
    }
}

#[cfg(test)]
mod tests;
