//! What `weir serve` tells systemd when it runs as a `Type=notify` or `Type=notify-reload`
//! service (`examples/weir.service`): ready once every listener is bound, reloading and
//! ready again around a SIGHUP reload, stopping at a drain, the successor's process id
//! after a binary upgrade, and watchdog keep-alives when the unit sets `WatchdogSec=`. Each
//! message carries a `STATUS=` line for `systemctl status`. Outside systemd
//! (`NOTIFY_SOCKET` unset) every call here does nothing.

use std::sync::atomic::{AtomicBool, Ordering};

use sd_notify::NotifyState;

/// Every listener is bound and serving.
pub fn ready(virtual_servers: usize) {
    let status = format!("serving {virtual_servers} virtual servers");
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// A SIGHUP reload begins. systemd 253 and later want the monotonic time with it
/// (`Type=notify-reload`).
pub fn reloading() {
    let mut states = vec![
        NotifyState::Reloading,
        NotifyState::Status("reloading the configuration"),
    ];
    if let Ok(now) = NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    send(&states);
}

/// The reload is over: applied, or refused with the previous configuration still serving.
pub fn reloaded(outcome: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(outcome)]);
}

/// A stop signal came: weir drains and exits.
pub fn stopping() {
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("draining open connections"),
    ]);
}

/// A binary upgrade handed the listeners to process `pid`, which serves now: it is the
/// service's main process from here on (systemd takes this from the process it knows as
/// main, this one, while it drains).
pub fn handed_over(pid: u32) {
    let status = format!("binary upgrade: process {pid} serves; draining open connections");
    send(&[NotifyState::MainPid(pid), NotifyState::Status(&status)]);
}

/// Sends a keep-alive every half of the unit's `WatchdogSec=` until `stop`, from a task of
/// the runtime that serves traffic: a runtime that stops making progress stops the
/// keep-alives, and systemd restarts weir. Nothing when the unit sets no watchdog.
pub fn spawn_watchdog(stop: weir_core::ShutdownSignal) {
    let Some(period) = sd_notify::watchdog_enabled() else {
        return;
    };
    let every = (period / 2).max(std::time::Duration::from_millis(10));
    tracing::info!(every = ?every, "systemd watchdog: keep-alives sent");
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            tokio::select! {
                () = stop.triggered() => return,
                _ = ticks.tick() => send(&[NotifyState::Watchdog]),
            }
        }
    });
}

/// Sends `states`; a failure is logged once (the service manager then acts on its own
/// timeouts), never fatal.
fn send(states: &[NotifyState]) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Err(error) = sd_notify::notify(states)
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(%error, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}
