//! The running model: one immutable value per generation of the configuration, behind an
//! atomic swap.
//!
//! A [`Model`] holds the validated [`Config`] it was built from, the pools and the virtual
//! servers. The [`ModelCell`] holds the current one; a request takes the virtual server of
//! the current model when it starts (before its head is read) and keeps that `Arc` to its
//! end, so a reload never changes a request half-way. Old models are freed when the last
//! request holding one ends.
//!
//! What must outlive a model is kept apart and carried over by identity: a virtual
//! server's [`VirtualServerShared`] (by name), a pool's nodes and their connections (by
//! pool name and node address, in `weir_upstream::Pool::build`), TLS ticket keys and
//! session caches (by virtual server, in `weir_tls::Acceptor::successor`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use weir_config::{Config, PassthroughRoute, PoolId, RelayMode, VirtualServer};
use weir_core::{Shutdown, ShutdownSignal};
use weir_http::Limits;
use weir_observe::{AccessLog, Layer4Metrics, Metrics, VirtualServerMetrics};
use weir_upstream::Pool;

use crate::content::Content;
use crate::tcp::{Relay, RelaySettings};
use crate::tls::TlsTermination;
use crate::traffic::VirtualServerTraffic;

/// One generation of the running configuration.
#[derive(Debug)]
pub struct Model {
    /// 1 for the configuration weir started with, then one more per applied reload.
    pub generation: u64,
    /// The validated configuration this generation was built from.
    pub config: Arc<Config>,
    /// In the order of `config.pools`.
    pub pools: Vec<Arc<Pool>>,
    /// In the order of `config.virtual_servers`.
    pub virtual_servers: Vec<Arc<VirtualServerRuntime>>,
    /// When this model began serving (or was built, before it did).
    pub loaded_at: SystemTime,
    /// Positions in `virtual_servers` and `pools`, by name.
    index: Index,
}

#[derive(Debug, Default)]
struct Index {
    virtual_servers: HashMap<String, usize>,
    pools: HashMap<String, usize>,
}

/// Holds the current model.
#[derive(Debug)]
pub(crate) struct ModelCell {
    current: ArcSwap<Model>,
    /// The current model's generation, readable with one atomic load; shared with every
    /// virtual server so that the check for a newer model touches nothing else.
    generation: Arc<AtomicU64>,
    /// Held (write) while a reload swaps the model and hands listeners to the virtual
    /// servers it names, and (read) while an accept loop reads its listener's virtual server
    /// name and the model: never the name from one reload with the model of another.
    switching: RwLock<()>,
}

/// The part of a virtual server that outlives models: shared by every generation of the
/// virtual server of the same name.
#[derive(Debug)]
pub(crate) struct VirtualServerShared {
    /// Client connections open now (for `limits.max_connections`).
    pub(crate) open: AtomicU32,
    /// Triggered when a reload removes the virtual server: its idle kept-alive
    /// connections close, busy ones close after their response.
    removed: Shutdown,
    /// The log lines of failed requests and sessions, a few per second (each is in the
    /// access log): a node down under load must not write a line per request.
    pub(crate) failure_log: weir_observe::LogBudget,
    /// The log lines of refused requests (a bad head, a body too large), on a budget of
    /// their own: any client can send them by the thousand, and they must neither fill
    /// the log nor crowd out the lines of failed requests.
    pub(crate) rejection_log: weir_observe::LogBudget,
}

/// A virtual server of one model (one generation of the configuration), with its pools
/// resolved and its metric handles taken. A request keeps the one it started with.
#[derive(Debug)]
pub struct VirtualServerRuntime {
    /// The virtual server's validated settings.
    pub config: VirtualServer,
    /// The pool requests go to when no route matches.
    pub default_pool: Arc<Pool>,
    /// The routes in order, each with its pool resolved.
    pub routes: Vec<(weir_config::Route, Arc<Pool>)>,
    /// The routes filed by host and first path segment (`route.rs`).
    pub(crate) route_index: crate::route::index::RouteIndex,
    /// The virtual server's metric handles.
    pub metrics: VirtualServerMetrics,
    /// Where this virtual server's access records go; `None` when `log.access_log` is off.
    pub access_log: Option<Arc<AccessLog>>,
    pub(crate) head_limits: Limits,
    /// The model this virtual server belongs to.
    pub generation: u64,
    /// What outlives a model: the count of open client connections, the stop signal.
    pub(crate) shared: Arc<VirtualServerShared>,
    /// Where newer models appear (weak: a model must not keep the cell alive).
    pub(crate) cell: Weak<ModelCell>,
    /// The generation serving now (the cell's counter).
    current_generation: Arc<AtomicU64>,
    /// TLS termination, on an HTTPS or TLS virtual server.
    pub tls: Option<Arc<TlsTermination>>,
    /// The fields weir sets in the header section of a forwarded request by name of its
    /// own (the client-certificate subject's, the request id's): a client's trailer by one
    /// of these names is dropped, since a node that merges trailers into the header
    /// section would take it for weir's. `None` when there are none.
    pub(crate) managed_fields: Option<Arc<[Box<[u8]>]>>,
    /// Rules and limits (issue 14).
    pub(crate) traffic: VirtualServerTraffic,
    /// The cache and compression; `None` when neither is configured.
    pub(crate) content: Option<Box<Content>>,
    /// TLS passthrough rules, in order, with their pools.
    pub(crate) passthrough: Vec<(PassthroughRoute, Arc<Pool>)>,
    /// How TCP sessions (tcp and tls virtual servers, passthrough) relay bytes.
    pub(crate) relay: (Relay, RelaySettings),
    pub(crate) layer4: Layer4Metrics,
}

/// [`VirtualServerRuntime::managed_fields`] of `config`.
fn managed_fields(
    config: &VirtualServer,
    tls: Option<&TlsTermination>,
) -> Option<Arc<[Box<[u8]>]>> {
    let subject = tls.and_then(|tls| tls.subject_header.as_deref());
    let request_id = &config.traffic.request_id;
    let id = request_id.enabled.then_some(request_id.header.as_str());
    let names: Vec<Box<[u8]>> = subject
        .into_iter()
        .chain(id)
        .map(|name| Box::from(name.as_bytes()))
        .collect();
    (!names.is_empty()).then(|| Arc::from(names))
}

impl VirtualServerRuntime {
    pub(crate) fn new(
        config: &VirtualServer,
        pools: &[Arc<Pool>],
        metrics: (VirtualServerMetrics, Layer4Metrics),
        access_log: Option<Arc<AccessLog>>,
        tls: Option<Arc<TlsTermination>>,
        (traffic, content): (VirtualServerTraffic, Option<Box<Content>>),
        link: ModelLink,
    ) -> VirtualServerRuntime {
        let pool = |PoolId(index): PoolId| Arc::clone(&pools[index]);
        VirtualServerRuntime {
            generation: link.generation,
            shared: link.shared,
            cell: link.cell,
            current_generation: link.current_generation,
            default_pool: pool(config.default_pool),
            route_index: crate::route::index::RouteIndex::new(&config.routes),
            routes: config
                .routes
                .iter()
                .map(|route| (route.clone(), pool(route.pool)))
                .collect(),
            metrics: metrics.0,
            access_log,
            head_limits: Limits {
                max_head_bytes: config.limits.max_header_bytes,
                max_headers: config.limits.max_headers,
            },
            managed_fields: managed_fields(config, tls.as_deref()),
            tls,
            traffic,
            content,
            passthrough: config
                .passthrough
                .iter()
                .map(|rule| (rule.clone(), pool(rule.pool)))
                .collect(),
            relay: relay_settings(config),
            layer4: metrics.1,
            config: config.clone(),
        }
    }

    /// The virtual server's cache (`[cache]`), shared by the models that keep its settings.
    pub fn cache(&self) -> Option<&Arc<weir_cache::Cache>> {
        self.content.as_ref()?.cache()
    }

    /// This virtual server in the model running now, when that is a newer one than this
    /// (`None` when this one is current, or when a reload removed or replaced it). A kept-alive
    /// connection calls it before each request; the check is one atomic load.
    pub(crate) fn newer(&self) -> Option<Arc<VirtualServerRuntime>> {
        if self.current_generation.load(Ordering::Acquire) == self.generation {
            return None;
        }
        let cell = self.cell.upgrade()?;
        // The same virtual server only: one replaced under its name (a new protocol) is not.
        cell.current()
            .virtual_server(&self.config.name)
            .filter(|vs| Arc::ptr_eq(&vs.shared, &self.shared))
            .cloned()
    }
}

/// Whether a virtual server's connections go through the front stages (a PROXY header,
/// passthrough rules, a TCP session) rather than straight to the HTTP pipeline.
pub(crate) fn front_stages(config: &VirtualServer) -> bool {
    config.accept_proxy.is_some() || !config.passthrough.is_empty() || config.protocol.is_layer4()
}

/// The relay of a tcp or tls virtual server as configured; passthrough on an HTTPS virtual
/// server takes the defaults.
fn relay_settings(config: &VirtualServer) -> (Relay, RelaySettings) {
    let defaults = weir_config::TcpSettings::default();
    let tcp = config.tcp.as_ref().unwrap_or(&defaults);
    let relay = match tcp.relay {
        RelayMode::Copy => Relay::Copy,
        RelayMode::Splice => Relay::Splice,
        RelayMode::Auto => Relay::Adaptive,
    };
    (relay, RelaySettings::of(tcp))
}

impl Model {
    /// The virtual server called `name`.
    pub fn virtual_server(&self, name: &str) -> Option<&Arc<VirtualServerRuntime>> {
        self.virtual_servers
            .get(*self.index.virtual_servers.get(name)?)
    }

    /// The pool called `name`.
    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.get(*self.index.pools.get(name)?)
    }

    /// The model before the first: nothing serves, nothing to carry over.
    pub(crate) fn empty(config: Config) -> Model {
        Model {
            generation: 0,
            config: Arc::new(config),
            pools: Vec::new(),
            virtual_servers: Vec::new(),
            loaded_at: SystemTime::now(),
            index: Index::default(),
        }
    }

    /// At shutdown: says how many failed and refused requests each virtual server's log
    /// budget left out since its last line (each is in the access log), which no later
    /// line will say.
    pub(crate) fn report_left_out(&self) {
        for vs in &self.virtual_servers {
            let (failed, refused) = (
                vs.shared.failure_log.left_out(),
                vs.shared.rejection_log.left_out(),
            );
            if failed + refused > 0 {
                tracing::warn!(virtual_server = %vs.config.name, failed, refused, "failures and refusals not logged since the last line");
            }
        }
    }

    /// TLS termination of every HTTPS and TLS virtual server.
    pub fn tls_terminations(&self) -> Vec<Arc<TlsTermination>> {
        self.virtual_servers
            .iter()
            .filter_map(|vs| vs.tls.clone())
            .collect()
    }
}

impl ModelCell {
    pub(crate) fn new(model: Model) -> ModelCell {
        ModelCell {
            generation: Arc::new(AtomicU64::new(model.generation)),
            current: ArcSwap::from_pointee(model),
            switching: RwLock::new(()),
        }
    }

    pub(crate) fn current(&self) -> Arc<Model> {
        self.current.load_full()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The generation counter itself, for virtual servers to watch.
    pub(crate) fn generation_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.generation)
    }

    /// Makes `model` the current one. The generation is published after the model, so a
    /// reader that sees the new generation finds the new model.
    pub(crate) fn swap(&self, model: Arc<Model>) -> Arc<Model> {
        let generation = model.generation;
        let old = self.current.swap(model);
        self.generation.store(generation, Ordering::Release);
        old
    }

    /// [`ModelCell::swap`], and `rebind` (the listeners handed to the virtual servers the
    /// new model names) with it, as one step for [`ModelCell::read_with`].
    pub(crate) fn swap_and(&self, model: Arc<Model>, rebind: impl FnOnce()) -> Arc<Model> {
        let _switching = self
            .switching
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let old = self.swap(model);
        rebind();
        old
    }

    /// `read` given the current model, with no [`ModelCell::swap_and`] half done: what
    /// `read` looks up beside the model (a listener's virtual server) is of the same reload.
    pub(crate) fn read_with<T>(&self, read: impl FnOnce(Arc<Model>) -> T) -> T {
        let _switching = self
            .switching
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        read(self.current())
    }
}

impl VirtualServerShared {
    fn new() -> Arc<VirtualServerShared> {
        let (removed, _) = Shutdown::new();
        Arc::new(VirtualServerShared {
            open: AtomicU32::new(0),
            removed,
            failure_log: weir_observe::LogBudget::new(),
            rejection_log: weir_observe::LogBudget::new(),
        })
    }

    /// Triggers when the virtual server is removed by a reload.
    pub(crate) fn removed_signal(&self) -> ShutdownSignal {
        self.removed.signal()
    }

    pub(crate) fn remove(&self) {
        self.removed.trigger();
    }
}

/// How a virtual server knows its model and finds newer ones.
pub(crate) struct ModelLink {
    pub generation: u64,
    pub shared: Arc<VirtualServerShared>,
    pub cell: Weak<ModelCell>,
    pub current_generation: Arc<AtomicU64>,
}

/// What a model is built from, besides the config: the pools (already built, with their
/// carried-over nodes), each HTTPS virtual server's TLS termination, and the shared parts
/// of the virtual servers that stay.
pub(crate) struct ModelParts<'a> {
    pub config: Arc<Config>,
    pub generation: u64,
    pub pools: Vec<Arc<Pool>>,
    /// By virtual server name.
    pub tls: HashMap<String, Arc<TlsTermination>>,
    /// By virtual server name; updated with the shared parts of new virtual servers.
    pub shared: &'a mut HashMap<String, Arc<VirtualServerShared>>,
    pub cell: Weak<ModelCell>,
    pub current_generation: Arc<AtomicU64>,
    pub metrics: &'a Metrics,
    pub access_log: Option<Arc<AccessLog>>,
    /// Each virtual server's compiled rules, by name (built while staging).
    pub rules: HashMap<String, weir_rules::RuleSet>,
    /// The running model, whose virtual servers hand their limiters over and
    /// whose caches are kept where their settings stay.
    pub previous: &'a Model,
}

impl ModelParts<'_> {
    pub(crate) fn build(mut self) -> Model {
        let config = Arc::clone(&self.config);
        let virtual_servers = config
            .virtual_servers
            .iter()
            .map(|vs| {
                let shared = Arc::clone(
                    self.shared
                        .entry(vs.name.clone())
                        .or_insert_with(VirtualServerShared::new),
                );
                let previous = self.previous.virtual_server(&vs.name);
                let traffic = VirtualServerTraffic::new(
                    vs,
                    // Staging compiled every virtual server's rules; compiling again
                    // cannot fail where that succeeded.
                    self.rules.remove(&vs.name).unwrap_or_else(|| {
                        weir_rules::RuleSet::new(&vs.traffic).unwrap_or_default()
                    }),
                    &self.pools,
                    previous.map(|previous| &previous.traffic),
                    self.metrics,
                );
                let content = Content::build(
                    vs,
                    self.metrics,
                    previous.and_then(|p| p.content.as_deref()),
                );
                Arc::new(VirtualServerRuntime::new(
                    vs,
                    &self.pools,
                    (
                        self.metrics.virtual_server(&vs.name),
                        // Only virtual servers with front stages have layer 4 series.
                        if front_stages(vs) {
                            self.metrics.layer4(&vs.name)
                        } else {
                            Layer4Metrics::default()
                        },
                    ),
                    self.access_log.clone(),
                    self.tls.remove(&vs.name),
                    (traffic, content.map(Box::new)),
                    ModelLink {
                        generation: self.generation,
                        shared,
                        cell: self.cell.clone(),
                        current_generation: Arc::clone(&self.current_generation),
                    },
                ))
            })
            .collect();
        let virtual_servers: Vec<Arc<VirtualServerRuntime>> = virtual_servers;
        let index = Index {
            virtual_servers: virtual_servers
                .iter()
                .enumerate()
                .map(|(i, vs)| (vs.config.name.clone(), i))
                .collect(),
            pools: self
                .pools
                .iter()
                .enumerate()
                .map(|(i, pool)| (pool.name.clone(), i))
                .collect(),
        };
        Model {
            generation: self.generation,
            config,
            pools: self.pools,
            virtual_servers,
            loaded_at: SystemTime::now(),
            index,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::{Model, ModelCell};

    /// A reader sees a swap and what was done with it (the listeners' hand-over) together,
    /// or neither: never the new model beside a listener still named for the old one.
    #[test]
    fn a_reader_never_sees_a_swap_half_done() {
        let config = weir_config::parse_str(
            "[pools.p]\nnodes = [{ address = \"127.0.0.1:9\" }]\n\
             [virtual_servers.v]\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n",
            "t.toml",
        )
        .unwrap();
        let cell = Arc::new(ModelCell::new(Model::empty(config.clone())));
        let mut next = Model::empty(config);
        next.generation = 2;
        let target = Arc::new(Mutex::new("old"));
        let (swapped, told) = mpsc::channel();
        let writer = {
            let (cell, target) = (Arc::clone(&cell), Arc::clone(&target));
            std::thread::spawn(move || {
                cell.swap_and(Arc::new(next), || {
                    swapped.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                    *target.lock().unwrap() = "new";
                });
            })
        };
        told.recv().unwrap();
        let seen = cell.read_with(|model| (model.generation, *target.lock().unwrap()));
        assert_eq!(seen, (2, "new"));
        writer.join().unwrap();
    }
}
