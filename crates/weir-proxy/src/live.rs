//! The running proxy's handle: the current model, and reload in place.
//!
//! A reload runs in two steps. **Stage** does everything that can fail, without touching
//! what serves: it reads every certificate, key and CA the candidate names (building the
//! TLS configs) and binds the listen addresses the candidate adds. Any problem refuses the
//! candidate with the file, line and key, and the running model keeps serving. **Commit**
//! cannot fail: it builds the next model (carrying over nodes, connections and TLS
//! sessions by identity), swaps it in, diffs the listeners, restarts the background work
//! of the pools that changed and lets removed nodes and virtual servers drain.
//!
//! Reloads are serialised; each is counted in `weir_config_reloads_total{result}`. The
//! stage is `crate::stage`.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use tokio::task::JoinHandle;
use weir_config::diff::ConfigDiff;
use weir_config::{Config, ConfigError};
use weir_core::{Shutdown, ShutdownSignal};
use weir_observe::{AccessLog, Metrics};
use weir_upstream::Pool;

use crate::drain::Drain;
use crate::listener::{AcceptContext, Bound, Listeners};
use crate::model::{Model, ModelCell, ModelParts, VirtualServerShared, front_stages};
use crate::names::Names;
use crate::stage::{Purpose, Staged, StagedTls, bind_added, check_files, stage};

/// The running proxy: its current model, and everything a reload changes.
#[derive(Debug)]
pub struct Live {
    cell: Arc<ModelCell>,
    metrics: Arc<Metrics>,
    /// Held for the whole of a reload, which may wait on files and name lookups: only
    /// reloads and blocking threads take it, never what serves or answers the admin API.
    control: Mutex<Control>,
    /// The outcome of the last reload tried (its own lock, held for a copy).
    last: Mutex<Option<ReloadRecord>>,
    /// The current model's access log, for the flusher and SIGUSR1's reopen.
    access_log: ArcSwapOption<AccessLog>,
    /// The bound listening addresses, by virtual server, as of the last start or reload.
    addrs: Mutex<Vec<(String, SocketAddr)>>,
    /// The config the process started with: what the settings a reload cannot change
    /// (`needs_restart`) still run with.
    started: Arc<Config>,
}

/// What reloads change besides the model; one reload at a time holds it.
#[derive(Debug, Default)]
struct Control {
    listeners: Listeners,
    /// Background tasks of each pool of the current model, by pool name.
    pool_tasks: HashMap<String, PoolTasks>,
    shared: HashMap<String, Arc<VirtualServerShared>>,
    running: Option<Running>,
    /// The access log of the current model (`None` when off).
    access_log: Option<Arc<AccessLog>>,
    /// The caches' background upkeep (bans, gauges), once started.
    upkeep: Option<JoinHandle<()>>,
    /// The nodes given by DNS name: their watchers and last good sets.
    names: Names,
    /// Applies new sets of resolved addresses, once started.
    refresher: Option<JoinHandle<()>>,
    /// The address the admin listener is bound to, once it is: a reload cannot move it.
    admin_listen: Option<SocketAddr>,
}

#[derive(Debug)]
struct PoolTasks {
    pool: Arc<Pool>,
    stop: Shutdown,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Running {
    accept: AcceptContext,
}

/// A reload that was applied.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The generation now serving.
    pub generation: u64,
    /// What changed from the previous generation.
    pub diff: ConfigDiff,
    /// From the start of the reload (before the file was read, for a reload of the file)
    /// to the new model serving.
    pub duration: Duration,
    /// Virtual servers and pools whose TLS files were re-read with their settings unchanged
    /// (every reload re-reads them: a renewed certificate needs no change in the file).
    pub certificates_reread: usize,
}

impl Applied {
    /// The diff's summary, and the TLS files re-read: a reload that only picked up renewed
    /// certificates says so rather than "no changes".
    pub fn summary(&self) -> String {
        let summary = self.diff.summary();
        match self.certificates_reread {
            0 => summary,
            n => format!(
                "{summary}; TLS certificates and keys re-read for {n} virtual servers and pools"
            ),
        }
    }
}

/// The outcome of the last reload tried, for the admin API.
#[derive(Debug, Clone)]
pub struct ReloadRecord {
    /// When the reload was tried (wall clock, for people).
    pub at: SystemTime,
    /// The generation serving after it.
    pub generation: u64,
    /// `None` when it was applied; else why it was refused.
    pub error: Option<String>,
    /// The changes applied (the diff's summary), or `refused`.
    pub summary: String,
}

/// Why a reload was refused. The running model keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The candidate is invalid, or a file or address it names is unusable.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// There is no file to re-read: weir runs the embedded default.
    #[error("no config file to re-read: weir was started without --config")]
    NoFile,
    /// The proxy is not serving (not started yet, or shutting down).
    #[error("weir is not serving (shutting down, or not started)")]
    NotRunning,
}

/// Refuses a candidate that would leave the admin API, still bound to `bound` (a reload does
/// not move it), on an address other than loopback without a bearer token. Validation
/// checks the same rule against the candidate's own `admin.listen`, which is not where the
/// listener is until a restart.
fn admin_kept_safe(bound: Option<SocketAddr>, candidate: &Config) -> Result<(), ConfigError> {
    let Some(bound) = bound.filter(|address| !address.ip().is_loopback()) else {
        return Ok(());
    };
    if candidate
        .admin
        .as_ref()
        .is_some_and(|admin| admin.token_file.is_some())
    {
        return Ok(());
    }
    let key = weir_config::KeyPath::root().key("admin").key("token_file");
    Err(candidate.key_error(
        &key,
        format!(
            "the admin API stays on {bound}, not a loopback address, until weir restarts \
             (a reload does not move admin.listen), so it keeps needing a bearer token: \
             keep admin.token_file"
        ),
    ))
}

/// A virtual server whose protocol changes (`http` to `tcp`, say) is a new one under the same
/// name: its connections close like a removed one's (an HTTP connection after its response),
/// since they cannot move to a model that speaks another protocol.
fn replace_changed_protocols(control: &mut Control, current: &Model, config: &Config) {
    for vs in &config.virtual_servers {
        let changed = current
            .virtual_server(&vs.name)
            .is_some_and(|old| old.config.protocol != vs.protocol);
        if changed && let Some(shared) = control.shared.remove(&vs.name) {
            shared.remove();
        }
    }
}

impl Live {
    /// The first model (generation 1), from a validated config: reads every file it names.
    /// A dry run creates no file (see [`Purpose`]).
    pub(crate) fn build(
        config: Config,
        metrics: &Arc<Metrics>,
        purpose: Purpose,
    ) -> Result<Arc<Live>, ConfigError> {
        let empty = Model::empty(config.clone());
        let mut staged = stage(&empty, &config, metrics, None, purpose)?;
        let mut names = Names::default();
        // Before anything binds: a node name that does not resolve refuses the start.
        let resolved = names.resolve_new(&config)?;
        names.commit(&config, resolved);
        let live = Arc::new(Live {
            cell: Arc::new(ModelCell::new(empty)),
            metrics: Arc::clone(metrics),
            last: Mutex::new(None),
            access_log: ArcSwapOption::empty(),
            addrs: Mutex::new(Vec::new()),
            started: Arc::new(config.clone()),
            control: Mutex::new(Control {
                names,
                ..Control::default()
            }),
        });
        let mut control = live.lock();
        let model = live.next_model(&mut control, &config, &mut staged);
        for termination in model.tls_terminations() {
            termination.refresh_expiry();
            termination.warn_about_certificates();
        }
        live.cell.swap(Arc::new(model));
        drop(control);
        Ok(live)
    }

    /// The model serving now.
    pub fn current(&self) -> Arc<Model> {
        self.cell.current()
    }

    /// The generation serving now.
    pub fn generation(&self) -> u64 {
        self.cell.generation()
    }

    /// Whether the proxy serves (between [`crate::BoundProxy::run`]'s start and shutdown):
    /// reloads are refused outside it.
    pub fn is_running(&self) -> bool {
        self.lock().running.is_some()
    }

    /// The outcome of the last reload tried, if any.
    pub fn last_reload(&self) -> Option<ReloadRecord> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The bound listening addresses, by virtual server (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.addrs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A duplicate of each listening socket, by configured address, for a new process
    /// taking over (`weir serve --upgrade`).
    pub fn listener_duplicates(&self) -> io::Result<Vec<(SocketAddr, OwnedFd)>> {
        self.lock().listeners.duplicates()
    }

    /// The TLS ticket keys and cached sessions of every virtual server serving now,
    /// encoded for a new process taking over ([`weir_tls::carry`]), so clients resume
    /// across the upgrade.
    pub fn tls_resumption(&self) -> Vec<u8> {
        let terminations = self.current().tls_terminations();
        weir_tls::carry::export(
            terminations
                .iter()
                .map(|termination| termination.acceptor()),
        )
    }

    /// Validates `candidate` against the running model without applying it: reads every
    /// file it names and reports what would change. Binds nothing.
    pub fn check(&self, candidate: &Config) -> Result<ConfigDiff, ConfigError> {
        let current = self.current();
        let (access_log, admin_listen) = {
            let control = self.lock();
            (control.access_log.clone(), control.admin_listen)
        };
        admin_kept_safe(admin_listen, candidate)?;
        check_files(&current, candidate, &self.metrics, access_log.as_ref())?;
        // New node names must resolve; what they resolve to is dropped.
        self.lock().names.resolve_new(candidate)?;
        Ok(weir_config::diff::diff_running(
            &current.config,
            &self.started,
            candidate,
        ))
    }

    /// Records where the admin listener is bound. A reload does not move it (the address
    /// takes effect in a new process), so each candidate is checked against this address:
    /// one that would leave it off loopback without a token is refused.
    pub fn set_admin_listen(&self, address: SocketAddr) {
        self.lock().admin_listen = Some(address);
    }

    /// Re-reads the file the running config came from and applies it. The duration
    /// reported counts from before the file is read.
    pub fn reload_file(&self) -> Result<Applied, ReloadError> {
        let started = Instant::now();
        let path = self.current().config.source.clone();
        let Some(path) = path else {
            let error = ReloadError::NoFile;
            self.record(Err(&error));
            return Err(error);
        };
        match weir_config::load_file(&path) {
            Ok(config) => self.apply_started(config, started),
            Err(error) => {
                let error = ReloadError::Config(error);
                self.record(Err(&error));
                Err(error)
            }
        }
    }

    /// Records a change refused before it could be applied (a candidate the admin API
    /// was given that does not parse or validate): logged, counted and kept for
    /// [`Live::last_reload`] as any refused reload. The running model keeps serving.
    pub fn refused(&self, error: ConfigError) {
        self.record(Err(&ReloadError::Config(error)));
    }

    /// Applies a validated candidate: stage (may refuse it), then commit.
    pub fn apply(&self, candidate: Config) -> Result<Applied, ReloadError> {
        self.apply_started(candidate, Instant::now())
    }

    fn apply_started(&self, candidate: Config, started: Instant) -> Result<Applied, ReloadError> {
        let mut control = self.lock();
        let result = self.apply_locked(&mut control, candidate, started);
        self.record(result.as_ref().map_err(|e| &**e));
        result.map_err(|error| *error)
    }

    fn apply_locked(
        &self,
        control: &mut Control,
        candidate: Config,
        started: Instant,
    ) -> Result<Applied, Box<ReloadError>> {
        let Some(context) = control.running.as_ref().map(|r| r.accept.clone()) else {
            return Err(Box::new(ReloadError::NotRunning));
        };
        if context.shutdown.is_triggered() {
            return Err(Box::new(ReloadError::NotRunning));
        }
        let current = self.current();
        let diff = weir_config::diff::diff_running(&current.config, &self.started, &candidate);
        admin_kept_safe(control.admin_listen, &candidate).map_err(|e| Box::new(e.into()))?;
        let mut staged = stage(
            &current,
            &candidate,
            &self.metrics,
            control.access_log.as_ref(),
            Purpose::Serve,
        )
        .map_err(|e| Box::new(e.into()))?;
        let resolved = control
            .names
            .resolve_new(&candidate)
            .map_err(|e| Box::new(ReloadError::Config(e)))?;
        staged.bound = bind_added(&candidate, &control.listeners)
            .map_err(|e| Box::new(ReloadError::Config(e)))?;
        // Commit: nothing below fails.
        control.names.commit(&candidate, resolved);
        let certificates_reread = staged.connectors.len()
            + staged
                .tls
                .iter()
                .filter(|(_, tls)| matches!(tls, StagedTls::Reload(..)))
                .count();
        let model = Arc::new(self.next_model(control, &candidate, &mut staged));
        // A connection accepted meanwhile resolves its listener's virtual server before both
        // or after both: one resolved between them would stay with the virtual server that
        // listened there before, under the new generation, until the next reload.
        let listeners = &mut control.listeners;
        let old = self.cell.swap_and(Arc::clone(&model), || {
            listeners.retain_and_rebind(&candidate)
        });
        if let Err(error) = control
            .listeners
            .start(std::mem::take(&mut staged.bound), &context)
        {
            // Only a socket tokio cannot register; the rest of the reload stands.
            tracing::error!(%error, "a listener added by the reload cannot serve");
        }
        self.publish_addrs(control);
        self.retire(control, &old, &model);
        self.start_pool_tasks(control, &model, &context.shutdown);
        for termination in model.tls_terminations() {
            termination.refresh_expiry();
            termination.warn_about_certificates();
        }
        Ok(Applied {
            generation: model.generation,
            diff,
            duration: started.elapsed(),
            certificates_reread,
        })
    }

    /// Builds the next model from a staged candidate (the commit's first step).
    fn next_model(&self, control: &mut Control, config: &Config, staged: &mut Staged) -> Model {
        let current = self.current();
        let pools: Vec<Arc<Pool>> = config
            .pools
            .iter()
            .map(|pool| {
                let previous = current.pool(&pool.name);
                // The nodes given by name are those they resolve to now.
                let pool = control.names.expand(pool);
                // A reload re-reads a TLS pool's files (a new connector is staged); new
                // sets of resolved addresses re-read nothing.
                let reread = staged.connectors.contains_key(&pool.name);
                match previous {
                    // Unchanged and nothing re-read: the same pool, its tasks keep running.
                    Some(previous) if previous.config == pool && !reread => Arc::clone(previous),
                    _ => Pool::build(
                        &pool,
                        &self.metrics,
                        staged.connectors.remove(&pool.name).or_else(|| {
                            previous.and_then(|previous| previous.tls_connector().cloned())
                        }),
                        previous.map(|p| &**p),
                    ),
                }
            })
            .collect();
        let tls = std::mem::take(&mut staged.tls)
            .into_iter()
            .map(|(name, staged)| {
                let termination = match staged {
                    StagedTls::Reload(termination, certificates) => {
                        termination.commit(certificates);
                        termination
                    }
                    StagedTls::New(termination) => termination,
                };
                (name, termination)
            })
            .collect();
        control.access_log = staged.access_log.take();
        self.access_log.store(control.access_log.clone());
        replace_changed_protocols(control, &current, config);
        ModelParts {
            access_log: control.access_log.clone(),
            config: Arc::new(config.clone()),
            generation: current.generation + 1,
            pools,
            tls,
            shared: &mut control.shared,
            cell: Arc::downgrade(&self.cell),
            current_generation: self.cell.generation_counter(),
            metrics: &self.metrics,
            rules: std::mem::take(&mut staged.rules),
            previous: &current,
        }
        .build()
    }

    /// Lets what the new model dropped drain, and forgets its metric series.
    fn retire(&self, control: &mut Control, old: &Model, new: &Model) {
        for pool in &old.pools {
            let next = new.pool(&pool.name);
            if !next.is_some_and(|next| Arc::ptr_eq(next, pool)) {
                pool.retire_nodes_missing_from(next.map(|p| &**p));
                // The series of nodes gone (from the file, or from a name's addresses).
                for node in &pool.nodes {
                    if next.is_none_or(|next| next.node_index(node.address).is_none()) {
                        self.metrics
                            .remove_node(&pool.name, &node.address.to_string());
                    }
                }
            }
            if next.is_none() {
                self.metrics.remove_pool(&pool.name);
            }
        }
        for vs in &old.virtual_servers {
            // Layer 4 series go with the front stages that count them.
            let kept = new
                .virtual_server(&vs.config.name)
                .is_some_and(|next| front_stages(&next.config));
            if front_stages(&vs.config) && !kept {
                self.metrics.remove_layer4(&vs.config.name);
            }
            // TLS series go with the TLS: a virtual server kept as plain HTTP (or TCP)
            // serves no certificate, and a later one starts its counts from zero.
            let keeps_tls = new
                .virtual_server(&vs.config.name)
                .is_some_and(|next| next.tls.is_some());
            if vs.tls.is_some() && !keeps_tls {
                self.metrics.remove_tls(&vs.config.name);
            }
        }
        let removed = old
            .virtual_servers
            .iter()
            .filter(|vs| new.virtual_server(&vs.config.name).is_none());
        for vs in removed {
            let name = &vs.config.name;
            self.metrics.remove_virtual_server(name);
            if let Some(shared) = control.shared.remove(name) {
                shared.remove();
            }
        }
    }

    /// Applies the sets of addresses the node names resolve to now: the pools whose resolved
    /// nodes changed are rebuilt over their previous generation the way a reload rebuilds
    /// a pool whose nodes changed (nodes that stay keep their state and connections, those
    /// gone drain), as a new generation of the same configuration. Nothing is re-read.
    pub(crate) fn apply_resolved(&self) {
        let mut control = self.lock();
        let Some(shutdown) = control.running.as_ref().map(|r| r.accept.shutdown.clone()) else {
            return;
        };
        if shutdown.is_triggered() {
            return;
        }
        let current = self.current();
        let config = Arc::clone(&current.config);
        let changed: Vec<&str> = config
            .pools
            .iter()
            .filter(|pool| !pool.names.is_empty())
            .filter(|pool| {
                current
                    .pool(&pool.name)
                    .is_none_or(|running| running.config != control.names.expand(pool))
            })
            .map(|pool| pool.name.as_str())
            .collect();
        if changed.is_empty() {
            return;
        }
        let mut staged = Staged {
            connectors: HashMap::new(),
            tls: current
                .virtual_servers
                .iter()
                .filter_map(|vs| Some((vs.config.name.clone(), StagedTls::New(vs.tls.clone()?))))
                .collect(),
            bound: Vec::new(),
            access_log: control.access_log.clone(),
            rules: HashMap::new(),
        };
        let model = Arc::new(self.next_model(&mut control, &config, &mut staged));
        let old = self.cell.swap(Arc::clone(&model));
        self.retire(&mut control, &old, &model);
        self.start_pool_tasks(&mut control, &model, &shutdown);
        self.metrics
            .reloads()
            .generation
            .set(model.generation as i64);
        tracing::info!(generation = model.generation, pools = %changed.join(", "), "nodes given by DNS name changed");
    }

    /// Starts the background work of pools that are new in `model`, and stops that of
    /// pools it replaced or removed.
    fn start_pool_tasks(&self, control: &mut Control, model: &Model, shutdown: &ShutdownSignal) {
        let mut previous = std::mem::take(&mut control.pool_tasks);
        for pool in &model.pools {
            let tasks = match previous.remove(&pool.name) {
                Some(tasks) if Arc::ptr_eq(&tasks.pool, pool) => tasks,
                replaced => {
                    if let Some(replaced) = replaced {
                        replaced.stop.trigger();
                    }
                    let (stop, signal) = Shutdown::new();
                    PoolTasks {
                        pool: Arc::clone(pool),
                        tasks: pool.start(signal, shutdown.clone()),
                        stop,
                    }
                }
            };
            control.pool_tasks.insert(pool.name.clone(), tasks);
        }
        for (_, removed) in previous {
            removed.stop.trigger();
        }
    }

    /// Starts serving: accept loops on `bound`, and the pools' background work.
    pub(crate) fn start(
        self: &Arc<Self>,
        bound: Vec<Bound>,
        shutdown: ShutdownSignal,
        drain: Arc<Drain>,
    ) -> io::Result<()> {
        let mut control = self.lock();
        let context = AcceptContext {
            cell: Arc::clone(&self.cell),
            drain,
            shutdown: shutdown.clone(),
        };
        control.listeners.start(bound, &context)?;
        self.publish_addrs(&control);
        control.running = Some(Running { accept: context });
        let model = self.current();
        self.start_pool_tasks(&mut control, &model, &shutdown);
        control.upkeep = Some(cache_upkeep(Arc::downgrade(&self.cell), shutdown.clone()));
        let changed = control.names.start(&shutdown, &self.metrics);
        control.refresher = Some(refresher(Arc::downgrade(self), changed, shutdown.clone()));
        self.metrics
            .reloads()
            .generation
            .set(model.generation as i64);
        Ok(())
    }

    /// After shutdown: the accept loops and pool tasks to wait for. No reload runs after.
    pub(crate) fn stopped(&self) -> (Vec<JoinHandle<()>>, Vec<JoinHandle<()>>) {
        let mut control = self.lock();
        control.running = None;
        let accept = control.listeners.stop_all();
        let pools = control
            .pool_tasks
            .drain()
            .flat_map(|(_, tasks)| tasks.tasks)
            .collect::<Vec<_>>();
        let names = control.names.take_tasks();
        let pools = pools
            .into_iter()
            .chain(names)
            .chain(control.upkeep.take())
            .chain(control.refresher.take())
            .collect();
        (accept, pools)
    }

    /// Writes out the access log's buffered records, and waits (2 s at most) until they
    /// are written: at exit, and before a test reads the file.
    pub fn flush_access_log(&self) {
        if let Some(log) = &*self.access_log.load() {
            log.flush();
        }
    }

    /// Hands the access log's buffered records to its writer without waiting: the
    /// periodic write-out, on a worker that must not wait on the log's reader.
    pub fn hand_over_access_log(&self) {
        if let Some(log) = &*self.access_log.load() {
            log.hand_over();
        }
    }

    /// Reopens the access log file (SIGUSR1, after logrotate moved it).
    pub fn reopen_access_log(&self) -> io::Result<()> {
        match &*self.access_log.load() {
            Some(log) => log.reopen(),
            None => Ok(()),
        }
    }

    /// Re-reads the certificates of every HTTPS virtual server: all of them or, when one
    /// fails, none. Counted and logged as a reload (`weir_config_reloads_total`,
    /// `weir_config_last_reload_success`), so a certificate rotation that failed is seen
    /// where a failed reload is.
    pub fn reload_certificates(&self) -> Result<usize, ConfigError> {
        let _control = self.lock();
        let terminations = self.current().tls_terminations();
        let staged: Result<Vec<_>, ConfigError> = terminations
            .iter()
            .map(|termination| termination.stage())
            .collect();
        let reloads = self.metrics.reloads();
        let staged = match staged {
            Ok(staged) => staged,
            Err(error) => {
                reloads.refused.inc();
                reloads.last_reload_success.set(0);
                tracing::error!(error = %one_line(&error), "certificate reload refused; still serving the certificates loaded before");
                self.keep_record(ReloadRecord {
                    at: self.stamp_reload(),
                    generation: self.generation(),
                    error: Some(error.to_string()),
                    summary: "certificates: refused".to_owned(),
                });
                return Err(error);
            }
        };
        for (termination, staged) in terminations.iter().zip(staged) {
            termination.commit(staged);
            termination.warn_about_certificates();
        }
        reloads.applied.inc();
        reloads.last_reload_success.set(1);
        tracing::info!(
            virtual_servers = terminations.len(),
            "certificates reloaded"
        );
        self.keep_record(ReloadRecord {
            at: self.stamp_reload(),
            generation: self.generation(),
            error: None,
            summary: format!(
                "certificates re-read for {} virtual server(s)",
                terminations.len()
            ),
        });
        Ok(terminations.len())
    }

    /// Sets `weir_config_last_reload_timestamp_seconds` to now, and returns now.
    fn stamp_reload(&self) -> SystemTime {
        let now = SystemTime::now();
        self.metrics.reloads().last_reload_timestamp_seconds.set(
            now.duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
        );
        now
    }

    /// Keeps `record` as the last reload tried ([`Live::last_reload`]).
    fn keep_record(&self, record: ReloadRecord) {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(record);
    }

    fn record(&self, result: Result<&Applied, &ReloadError>) {
        let reloads = self.metrics.reloads();
        let now = self.stamp_reload();
        let generation = self.generation();
        let record = match result {
            Ok(applied) => {
                reloads.applied.inc();
                reloads.last_reload_success.set(1);
                reloads.generation.set(applied.generation as i64);
                let summary = applied.summary();
                tracing::info!(generation = applied.generation, duration_us = applied.duration.as_micros() as u64, changes = %summary, "configuration reloaded");
                if !applied.diff.needs_restart.is_empty() {
                    tracing::warn!(keys = %applied.diff.needs_restart.join(", "), "these changes take effect only in a new process (weir serve --upgrade)");
                }
                ReloadRecord {
                    at: now,
                    generation,
                    error: None,
                    summary,
                }
            }
            Err(error) => {
                reloads.refused.inc();
                reloads.last_reload_success.set(0);
                match error {
                    // Shutting down (or not started): nothing is refused, nothing runs on.
                    ReloadError::NotRunning => {
                        tracing::warn!(
                            generation,
                            "configuration reload not taken: weir is not serving (shutting down)"
                        );
                    }
                    _ => {
                        tracing::error!(generation, error = %one_line(&error), "configuration reload refused; still serving the running configuration");
                    }
                }
                ReloadRecord {
                    at: now,
                    generation,
                    error: Some(error.to_string()),
                    summary: "refused".to_owned(),
                }
            }
        };
        self.keep_record(record);
    }

    /// Copies the bound addresses out of `control` for [`Live::local_addrs`].
    fn publish_addrs(&self, control: &Control) {
        *self
            .addrs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = control.listeners.local_addrs();
    }

    fn lock(&self) -> MutexGuard<'_, Control> {
        // Control is consistent between statements; recover it after a panic elsewhere.
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Waits for new sets of resolved addresses and applies them (on a blocking thread, as
/// reloads run), until shutdown. Sets that arrive while one is applied are applied next.
fn refresher(
    live: std::sync::Weak<Live>,
    changed: Arc<tokio::sync::Notify>,
    shutdown: ShutdownSignal,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = changed.notified() => {}
                () = shutdown.triggered() => return,
            }
            let Some(live) = live.upgrade() else { return };
            let _ = tokio::task::spawn_blocking(move || live.apply_resolved()).await;
        }
    })
}

/// How often [`cache_upkeep`] runs.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The caches' background upkeep, every few seconds until shutdown: pending
/// bans applied to every object (then dropped), expired pass markers
/// forgotten, the bytes and objects gauges refreshed. It visits the caches
/// of whichever model is current.
fn cache_upkeep(
    cell: std::sync::Weak<ModelCell>,
    shutdown: ShutdownSignal,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.triggered() => return,
                _ = tick.tick() => {}
            }
            let Some(cell) = cell.upgrade() else { return };
            let model = cell.current();
            for vs in &model.virtual_servers {
                if let Some(cache) = vs.cache() {
                    let banned = cache.maintain();
                    if banned > 0 {
                        tracing::debug!(virtual_server = %vs.config.name, banned, "bans applied");
                    }
                }
            }
        }
    })
}

/// A refusal's problems (one per line in `weir check`'s output) on one line, `; `
/// between them: a log line is one line, whatever reads it (journald, a shipper).
fn one_line(error: &impl std::fmt::Display) -> String {
    error.to_string().replace('\n', "; ")
}
