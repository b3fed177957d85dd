//! A node's shared runtime state: load (in-flight requests, EWMA response
//! time) for the balancers, and health (active monitor verdict, passive
//! ejection) for selection.
//!
//! A node that stays in its pool across a reload (same address, same TLS settings)
//! keeps its `NodeState`: the new pool holds the same `Arc`, so in-flight counts, EWMA
//! and health carry over. What the new configuration may change (weight, mode, passive
//! health settings) is set with [`NodeState::update`] when the new model is committed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_config::{NodeMode, PassiveHealth};
use weir_observe::NodeMetrics;

/// Weight of a new sample in the response-time EWMA.
const EWMA_ALPHA: f64 = 0.2;

/// The time constant of the response-time EWMA's decay while a node gets no samples
/// ([`NodeState::scored_response_time`]).
pub const EWMA_DECAY: Duration = Duration::from_secs(5);

/// One node of a pool, shared by every thread.
#[derive(Debug)]
pub struct NodeState {
    /// Where the node listens.
    pub address: SocketAddr,
    /// The node's metric handles.
    pub metrics: NodeMetrics,
    weight: AtomicU32,
    /// The operator's [`NodeMode`], as its `u8` code.
    mode: AtomicU8,
    in_flight: AtomicU32,
    /// Tunnels open to the node (WebSockets, CONNECT): not requests, but load.
    tunnels: AtomicU32,
    /// EWMA of response time in nanoseconds, as f64 bits; 0 until the first sample.
    ewma_nanos: AtomicU64,
    /// Nanoseconds after `epoch` of the last sample folded into `ewma_nanos`.
    ewma_at: AtomicU64,
    /// The active monitor's verdict (true when there is no monitor).
    active_up: AtomicBool,
    /// The active monitor's consecutive results against its verdict, kept here so
    /// that a monitor restarted by a reload of the pool counts on from them.
    check_streak: AtomicU32,
    /// Nanoseconds after `epoch` of the active monitor's last check; 0 before the first.
    /// A monitor restarted by a reload waits out the interval from it.
    last_checked: AtomicU64,
    /// Nanoseconds after `epoch` until which the node is ejected; 0 when not ejected.
    ejected_until: AtomicU64,
    epoch: Instant,
    passive: Mutex<PassiveState>,
    /// True while `passive` holds failures or ejections to forget on the next
    /// success: lets the common success path skip the lock.
    passive_dirty: AtomicBool,
    /// `passive_health.consecutive_failures`, readable without the lock (0 = off).
    failure_threshold: AtomicU32,
}

#[derive(Debug, Default)]
struct PassiveState {
    config: PassiveHealth,
    consecutive_failures: u32,
    /// Ejections in a row without a success in between; doubles the next ejection.
    ejections: u32,
    /// An ejection is being held back (the pool has its share out): said once.
    held: bool,
}

/// What a failure did to a node's passive health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passive {
    /// Counted (or not counted: passive health off, or the node ejected already).
    Counted,
    /// It reached the threshold and ejected the node.
    Ejected,
    /// It reached the threshold, and the ejection was held back.
    Held {
        /// The first time since the node's last success or ejection.
        first: bool,
    },
}

/// Counts one request in flight on a node until dropped.
#[derive(Debug)]
pub struct InFlight {
    node: Arc<NodeState>,
}

/// Counts one tunnel open on a node until dropped ([`InFlight::into_tunnel`]).
#[derive(Debug)]
pub struct TunnelLoad {
    node: Arc<NodeState>,
}

impl InFlight {
    /// The request became a tunnel (a WebSocket after `101`, a CONNECT after `2xx`): it
    /// no longer counts as a request in flight (the node's request slots and the pool's
    /// queue tiers are about requests), but as a tunnel, which `least_connections` and
    /// the admin API's `tunnels` see for as long as it lasts.
    pub fn into_tunnel(self) -> TunnelLoad {
        let node = Arc::clone(&self.node);
        node.tunnels.fetch_add(1, Ordering::Relaxed);
        node.metrics.tunnels_open.inc();
        drop(self);
        TunnelLoad { node }
    }
}

impl Drop for TunnelLoad {
    fn drop(&mut self) {
        self.node.tunnels.fetch_sub(1, Ordering::Relaxed);
        self.node.metrics.tunnels_open.dec();
    }
}

impl NodeState {
    /// A node that is active, up and idle, with `weight` and the pool's passive health settings.
    pub fn new(
        address: SocketAddr,
        weight: u32,
        passive_config: PassiveHealth,
        metrics: NodeMetrics,
    ) -> NodeState {
        metrics.healthy.set(1);
        NodeState {
            address,
            weight: AtomicU32::new(weight),
            mode: AtomicU8::new(mode_code(NodeMode::Active)),
            metrics,
            in_flight: AtomicU32::new(0),
            tunnels: AtomicU32::new(0),
            ewma_nanos: AtomicU64::new(0),
            ewma_at: AtomicU64::new(0),
            active_up: AtomicBool::new(true),
            check_streak: AtomicU32::new(0),
            last_checked: AtomicU64::new(0),
            ejected_until: AtomicU64::new(0),
            epoch: Instant::now(),
            failure_threshold: AtomicU32::new(passive_config.consecutive_failures),
            passive: Mutex::new(PassiveState {
                config: passive_config,
                ..PassiveState::default()
            }),
            passive_dirty: AtomicBool::new(false),
        }
    }

    /// Applies what a new configuration says about this node (at commit time).
    pub fn update(&self, weight: u32, mode: NodeMode, passive_config: &PassiveHealth) {
        self.weight.store(weight, Ordering::Relaxed);
        self.set_mode(mode);
        let mut state = self.passive.lock().unwrap_or_else(|e| e.into_inner());
        if state.config != *passive_config {
            state.config = passive_config.clone();
            self.failure_threshold
                .store(passive_config.consecutive_failures, Ordering::Relaxed);
        }
    }

    /// The node's weight for the balancers (never 0 from a validated config).
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// The operator's choice: active, draining or disabled.
    pub fn mode(&self) -> NodeMode {
        match self.mode.load(Ordering::Relaxed) {
            0 => NodeMode::Active,
            1 => NodeMode::Draining,
            _ => NodeMode::Disabled,
        }
    }

    /// Sets the operator's choice (a reload or the admin API).
    pub fn set_mode(&self, mode: NodeMode) {
        self.mode.store(mode_code(mode), Ordering::Relaxed);
        self.refresh_healthy_gauge(Instant::now());
    }

    /// Whether the operator lets the node take new requests (`state = "active"`).
    pub fn is_active(&self) -> bool {
        self.mode.load(Ordering::Relaxed) == 0
    }

    /// Whether the node may be picked now: active, up by its monitor and not ejected.
    pub fn is_available(&self, now: Instant) -> bool {
        self.is_active() && self.is_healthy(now)
    }

    /// Up by its monitor and not ejected, whatever the operator's mode.
    pub fn is_healthy(&self, now: Instant) -> bool {
        self.active_up.load(Ordering::Relaxed) && !self.is_ejected(now)
    }

    /// Whether passive health has the node ejected at `now`.
    pub fn is_ejected(&self, now: Instant) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && self.nanos_since_epoch(now) < until
    }

    /// Requests sent to the node and not finished.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Tunnels open to the node now.
    pub fn tunnels(&self) -> u32 {
        self.tunnels.load(Ordering::Relaxed)
    }

    /// Counts a request as in flight until the guard drops (the balancers'
    /// load signal).
    pub fn start_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight {
            node: Arc::clone(self),
        }
    }

    /// The EWMA of response times; `None` before the first sample.
    pub fn response_time(&self) -> Option<Duration> {
        let bits = self.ewma_nanos.load(Ordering::Relaxed);
        if bits == 0 {
            None
        } else {
            Some(Duration::from_nanos(f64::from_bits(bits) as u64))
        }
    }

    /// The response-time EWMA as the perceptive balancer scores it at `now`: decayed by
    /// `e^(-t/τ)` ([`EWMA_DECAY`]) for the time `t` since its last sample. A node that
    /// answered slowly once is picked rarely, so its average moves rarely: without the
    /// decay one slow answer kept it out for as long as traffic was light.
    pub fn scored_response_time(&self, now: Instant) -> Option<f64> {
        let bits = self.ewma_nanos.load(Ordering::Relaxed);
        if bits == 0 {
            return None;
        }
        let since = self
            .nanos_since_epoch(now)
            .saturating_sub(self.ewma_at.load(Ordering::Relaxed));
        let decay = (-(since as f64) / EWMA_DECAY.as_nanos() as f64).exp();
        Some((f64::from_bits(bits) * decay).max(1.0))
    }

    /// How long since the node's last response head arrived (for any request), at `now`;
    /// `None` before the first.
    pub fn since_last_answer(&self, now: Instant) -> Option<Duration> {
        let at = self.ewma_at.load(Ordering::Relaxed);
        (self.ewma_nanos.load(Ordering::Relaxed) != 0)
            .then(|| Duration::from_nanos(self.nanos_since_epoch(now).saturating_sub(at)))
    }

    /// Folds one response time into the EWMA.
    pub fn record_response_time(&self, elapsed: Duration) {
        self.record_response_time_at(elapsed, Instant::now());
    }

    /// [`NodeState::record_response_time`] for a response that came at `now`, read by the
    /// caller (who timed the response with it).
    pub fn record_response_time_at(&self, elapsed: Duration, now: Instant) {
        let sample = elapsed.as_nanos() as f64;
        // A lost update under contention only drops one sample: acceptable for a load signal.
        // The sample is folded into the average as decayed (what the balancer scored), so a
        // node back after a slow answer long ago is judged by its answers now.
        let new = match self.scored_response_time(now) {
            None => sample.max(1.0),
            Some(previous) => (previous + EWMA_ALPHA * (sample - previous)).max(1.0),
        };
        self.ewma_nanos.store(new.to_bits(), Ordering::Relaxed);
        self.ewma_at
            .store(self.nanos_since_epoch(now), Ordering::Relaxed);
        self.metrics.response_time_ewma_seconds.set(new / 1e9);
    }

    /// Sets the active monitor's verdict.
    pub fn set_active_up(&self, up: bool) {
        let was_up = self.active_up.swap(up, Ordering::Relaxed);
        let now = Instant::now();
        // Marked down by the monitor: counted with the passive ejections, once an outage
        // (a node that passive health ejected already was counted then).
        if was_up && !up && !self.is_ejected(now) {
            self.metrics.ejections.inc();
        }
        self.refresh_healthy_gauge(now);
    }

    /// The active health monitor's verdict (up when there is no monitor).
    pub fn is_active_up(&self) -> bool {
        self.active_up.load(Ordering::Relaxed)
    }

    /// The active monitor's consecutive check results against its verdict.
    pub fn check_streak(&self) -> u32 {
        self.check_streak.load(Ordering::Relaxed)
    }

    /// Keeps the active monitor's count of consecutive results against its verdict.
    pub fn set_check_streak(&self, streak: u32) {
        self.check_streak.store(streak, Ordering::Relaxed);
    }

    /// The active monitor checked the node at `now`.
    pub fn set_checked(&self, now: Instant) {
        let nanos = now.saturating_duration_since(self.epoch).as_nanos();
        self.last_checked.store(
            u64::try_from(nanos).unwrap_or(u64::MAX).max(1),
            Ordering::Relaxed,
        );
    }

    /// How long ago at `now` the active monitor last checked the node; `None` before
    /// its first check.
    pub fn since_checked(&self, now: Instant) -> Option<Duration> {
        match self.last_checked.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(
                now.saturating_duration_since(self.epoch)
                    .saturating_sub(Duration::from_nanos(nanos)),
            ),
        }
    }

    /// A request to this node succeeded: resets the passive failure count.
    ///
    /// Returns whether the success ends the node's ejections: it is the first since an
    /// ejection ran out (the caller logs the node's return).
    pub fn record_success(&self, now: Instant) -> bool {
        if !self.passive_dirty.load(Ordering::Relaxed) {
            return false;
        }
        // A success from a request sent before the ejection says nothing about now.
        if self.is_ejected(now) {
            return false;
        }
        let mut state = self.passive.lock().unwrap_or_else(|e| e.into_inner());
        let returned = state.ejections > 0;
        state.consecutive_failures = 0;
        state.ejections = 0;
        state.held = false;
        self.passive_dirty.store(false, Ordering::Relaxed);
        drop(state);
        if returned {
            // Back in service: the gauge says so now, not at the reaper's next tick.
            self.refresh_healthy_gauge(now);
        }
        returned
    }

    /// A connect failure or 5xx from this node. Returns true if it ejected the node.
    pub fn record_failure(&self, now: Instant) -> bool {
        self.record_failure_unless(now, || false) == Passive::Ejected
    }

    /// [`NodeState::record_failure`], where the ejection it would cause is held back
    /// while `held()` says so (the pool has its share of nodes out already); the count
    /// stays at the threshold, so the next failure asks again.
    pub fn record_failure_unless(&self, now: Instant, held: impl FnOnce() -> bool) -> Passive {
        if self.failure_threshold.load(Ordering::Relaxed) == 0 {
            return Passive::Counted;
        }
        // Failures of requests already in flight when the node was ejected are
        // not counted: after the ejection it starts from a clean count.
        if self.is_ejected(now) {
            return Passive::Counted;
        }
        let mut state = self.passive.lock().unwrap_or_else(|e| e.into_inner());
        self.passive_dirty.store(true, Ordering::Relaxed);
        let threshold = state.config.consecutive_failures.max(1);
        state.consecutive_failures = (state.consecutive_failures + 1).min(threshold);
        if state.consecutive_failures < threshold {
            return Passive::Counted;
        }
        if held() {
            let first = !state.held;
            state.held = true;
            return Passive::Held { first };
        }
        state.held = false;
        let doubling = state.ejections.min(20);
        let ejection = state
            .config
            .base_ejection
            .saturating_mul(1u32 << doubling)
            .min(state.config.max_ejection);
        state.ejections += 1;
        state.consecutive_failures = 0;
        let until = self.nanos_since_epoch(now) + ejection.as_nanos() as u64;
        self.ejected_until.store(until.max(1), Ordering::Relaxed);
        self.metrics.ejections.inc();
        self.metrics.healthy.set(0);
        Passive::Ejected
    }

    /// Updates the `healthy` gauge from the current state (called by monitors and the reaper):
    /// health only, so a draining node that is up reads 1.
    pub fn refresh_healthy_gauge(&self, now: Instant) {
        self.metrics.healthy.set(i64::from(self.is_healthy(now)));
    }

    fn nanos_since_epoch(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

fn mode_code(mode: NodeMode) -> u8 {
    match mode {
        NodeMode::Active => 0,
        NodeMode::Draining => 1,
        NodeMode::Disabled => 2,
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.node.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
