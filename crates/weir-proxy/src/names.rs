//! Nodes given by DNS name at run time (`docs/design/layer4.md`, "Nodes by DNS name").
//!
//! A name a configuration adds is resolved before the model that uses it is built: at start
//! (a name that does not resolve refuses the start, with its file, line and key, before
//! anything binds) and by the reload that adds it (refused the same way; the running model
//! keeps serving). From then on one watch task per name (`weir_upstream::dns::spawn_watch`)
//! re-resolves it within the pool's `[dns]` bounds and keeps the last good set through
//! failures. A new set wakes the live model's refresher, which rebuilds the pools whose
//! resolved nodes changed the way a reload does (`Live::apply_resolved`). A reload that keeps
//! a name (same pool, host, port and `[dns]` settings) keeps its watcher and set; a reload
//! that drops it stops its task.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use weir_config::{Config, ConfigError, Diagnostic, NamedNode, PoolDns};
use weir_core::{Shutdown, ShutdownSignal};
use weir_observe::Metrics;
use weir_upstream::dns::{self, DnsSettings, NameState, NodeName, Resolver};

/// What identifies a watched name: its pool, host, port and resolver settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct NameKey {
    pool: String,
    host: String,
    port: u16,
    srv: bool,
    dns: PoolDns,
}

impl NameKey {
    fn new(pool: &weir_config::Pool, named: &NamedNode) -> NameKey {
        NameKey {
            pool: pool.name.clone(),
            host: named.host.clone(),
            port: named.port,
            srv: named.srv,
            dns: pool.dns.clone(),
        }
    }
}

impl NameKey {
    /// The name the resolver asks for.
    fn node_name(&self) -> NodeName {
        NodeName {
            host: self.host.clone(),
            port: self.port,
            srv: self.srv,
        }
    }

    /// The name as logs and metrics show it (`NodeName`'s form: `host:port`, or `srv:host`).
    fn label(&self) -> String {
        self.node_name().to_string()
    }
}

/// A name resolved for a candidate, not yet watched.
#[derive(Debug)]
pub(crate) struct Resolved {
    key: NameKey,
    state: NameState,
    next: Duration,
}

/// One watched name.
#[derive(Debug)]
struct Watched {
    /// The last good set of addresses (the watch task publishes each new one).
    set: watch::Receiver<Arc<[SocketAddr]>>,
    /// Until the task starts: the state and the delay to hand it.
    pending: Option<(NameState, Duration)>,
    stop: Shutdown,
    tasks: Vec<JoinHandle<()>>,
}

/// Every name the current model's pools use, with their last good sets.
#[derive(Debug, Default)]
pub(crate) struct Names {
    watched: HashMap<NameKey, Watched>,
    /// One resolver per `[dns]` settings, made in the runtime when a task first needs it.
    resolvers: HashMap<PoolDns, Resolver>,
    /// Woken by any watched name's new set.
    changed: Arc<Notify>,
    /// Set once the proxy runs: watch tasks start at once from then on.
    shutdown: Option<ShutdownSignal>,
    /// Where each watched name's resolutions are counted (`weir_dns_*`), once the proxy runs.
    metrics: Option<Arc<Metrics>>,
}

impl Names {
    /// `pool` with the nodes its names resolve to now (see `weir_config::Pool::with_resolved`).
    pub(crate) fn expand(&self, pool: &weir_config::Pool) -> weir_config::Pool {
        let sets: HashMap<(String, u16), Arc<[SocketAddr]>> = pool
            .names
            .iter()
            .filter_map(|named| {
                let watched = self.watched.get(&NameKey::new(pool, named))?;
                Some((
                    (named.host.clone(), named.port),
                    Arc::clone(&*watched.set.borrow()),
                ))
            })
            .collect();
        pool.with_resolved(|named| {
            sets.get(&(named.host.clone(), named.port))
                .map_or(&[], |set| &set[..])
        })
    }

    /// Resolves the names of `candidate` not watched yet, all at once. A name that does not
    /// resolve refuses the candidate: each error carries the node's file, line and key.
    /// Blocks the calling thread (up to the resolvers' timeouts); the resolution runs on a
    /// thread of its own, so this works inside or outside a tokio runtime.
    pub(crate) fn resolve_new(&self, candidate: &Config) -> Result<Vec<Resolved>, ConfigError> {
        let mut new: Vec<(NameKey, &NamedNode)> = Vec::new();
        for pool in &candidate.pools {
            for named in &pool.names {
                let key = NameKey::new(pool, named);
                if !self.watched.contains_key(&key) && !new.iter().any(|(k, _)| *k == key) {
                    new.push((key, named));
                }
            }
        }
        if new.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<NameKey> = new.iter().map(|(key, _)| key.clone()).collect();
        let outcomes = std::thread::scope(|scope| {
            scope
                .spawn(|| resolve_all(keys))
                .join()
                .unwrap_or_else(|_| Err("the resolver thread panicked".to_owned()))
        });
        let file = candidate.file_name();
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(why) => {
                let (_, named) = new[0];
                return Err(ConfigError::single(
                    &file,
                    named.line,
                    named.key.to_string(),
                    format!("cannot resolve node names: {why}"),
                ));
            }
        };
        let mut resolved = Vec::new();
        let mut errors = Vec::new();
        for ((key, named), outcome) in new.into_iter().zip(outcomes) {
            match outcome {
                Ok((state, next)) => resolved.push(Resolved { key, state, next }),
                Err(error) => errors.push(Diagnostic {
                    line: named.line,
                    path: named.key.to_string(),
                    message: format!("the node name \"{}\" does not resolve: {error}", named.host),
                }),
            }
        }
        if errors.is_empty() {
            Ok(resolved)
        } else {
            Err(ConfigError { file, errors })
        }
    }

    /// Makes the names of `config` the watched ones (part of a commit: cannot fail): the
    /// names kept keep their watchers, `resolved` ones are added (their tasks start now when
    /// the proxy runs, else with [`Names::start`]), the others stop.
    pub(crate) fn commit(&mut self, config: &Config, resolved: Vec<Resolved>) {
        let mut previous = std::mem::take(&mut self.watched);
        let mut resolved: HashMap<NameKey, Resolved> = resolved
            .into_iter()
            .map(|resolved| (resolved.key.clone(), resolved))
            .collect();
        for pool in &config.pools {
            for named in &pool.names {
                let key = NameKey::new(pool, named);
                if self.watched.contains_key(&key) {
                    continue;
                }
                let watched = match (previous.remove(&key), resolved.remove(&key)) {
                    (Some(watched), _) => watched,
                    (None, Some(new)) => {
                        let (stop, _) = Shutdown::new();
                        let current = new.state.current().cloned();
                        let (_, set) = watch::channel(current.unwrap_or_else(|| Arc::from([])));
                        Watched {
                            set,
                            pending: Some((new.state, new.next)),
                            stop,
                            tasks: Vec::new(),
                        }
                    }
                    // Staging resolved every new name; a name missing here is a bug, and
                    // the pool simply has no nodes for it.
                    (None, None) => {
                        tracing::error!(node = %named.label(), "a node name was not resolved before its model was built");
                        continue;
                    }
                };
                self.watched.insert(key, watched);
            }
        }
        for (key, removed) in previous {
            removed.stop.trigger();
            if let Some(metrics) = &self.metrics {
                metrics.remove_dns(&key.pool, &key.label());
            }
        }
        if let Some(shutdown) = self.shutdown.clone() {
            self.start_pending(&shutdown);
        }
    }

    /// Starts the watch task of every name not started yet, and from now on those of the
    /// names reloads add. Returns what wakes on a new set.
    pub(crate) fn start(
        &mut self,
        shutdown: &ShutdownSignal,
        metrics: &Arc<Metrics>,
    ) -> Arc<Notify> {
        self.shutdown = Some(shutdown.clone());
        self.metrics = Some(Arc::clone(metrics));
        self.start_pending(shutdown);
        Arc::clone(&self.changed)
    }

    fn start_pending(&mut self, shutdown: &ShutdownSignal) {
        for (key, watched) in &mut self.watched {
            let Some((state, next)) = watched.pending.take() else {
                continue;
            };
            let resolver = match self.resolvers.get(&key.dns) {
                Some(resolver) => resolver.clone(),
                None => match Resolver::new(&DnsSettings::from(&key.dns)) {
                    Ok(resolver) => {
                        self.resolvers.insert(key.dns.clone(), resolver.clone());
                        resolver
                    }
                    Err(error) => {
                        // The start resolved with the same settings; keep the set it found.
                        tracing::error!(pool = %key.pool, node = %state.name(), %error, "cannot re-resolve this node name");
                        continue;
                    }
                },
            };
            let signal = watched.stop.signal().either(shutdown);
            let handles = self
                .metrics
                .as_ref()
                .map_or_else(Default::default, |metrics| {
                    metrics.dns(&key.pool, &key.label())
                });
            let (mut set, task) = dns::spawn_watch(resolver, state, next, (signal, handles));
            watched.set = set.clone();
            let changed = Arc::clone(&self.changed);
            let forward = tokio::spawn(async move {
                // Ends when the watch task does (its sender drops).
                while set.changed().await.is_ok() {
                    changed.notify_one();
                }
            });
            watched.tasks = vec![task, forward];
        }
    }

    /// The tasks to wait for after shutdown.
    pub(crate) fn take_tasks(&mut self) -> Vec<JoinHandle<()>> {
        self.watched
            .values_mut()
            .flat_map(|watched| std::mem::take(&mut watched.tasks))
            .collect()
    }
}

/// One name's first resolution: its state and the delay until the next, or why it failed.
type Outcome = Result<(NameState, Duration), dns::ResolveError>;

/// Resolves every name of `keys` on a runtime of its own, concurrently; one outcome per key,
/// in order. `Err` only when no resolver could be made or the runtime failed.
fn resolve_all(keys: Vec<NameKey>) -> Result<Vec<Outcome>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start a resolver runtime: {error}"))?;
    runtime.block_on(async move {
        let mut resolvers: HashMap<PoolDns, Resolver> = HashMap::new();
        let mut tasks = Vec::with_capacity(keys.len());
        for key in keys {
            let resolver = match resolvers.get(&key.dns) {
                Some(resolver) => resolver.clone(),
                None => {
                    let resolver = Resolver::new(&DnsSettings::from(&key.dns))
                        .map_err(|error| error.to_string())?;
                    resolvers.insert(key.dns.clone(), resolver.clone());
                    resolver
                }
            };
            let settings = DnsSettings::from(&key.dns);
            let name = key.node_name();
            tasks.push(tokio::spawn(async move {
                dns::resolve_first(&resolver, name, &settings).await
            }));
        }
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.map_err(|error| error.to_string())?);
        }
        Ok(outcomes)
    })
}
