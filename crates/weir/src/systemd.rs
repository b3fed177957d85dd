//! What `weir serve` tells systemd when it runs as a `Type=notify` or `Type=notify-reload`
//! service (`examples/weir.service`): ready once every listener is bound, reloading and
//! ready again around a SIGHUP reload, stopping at a drain, the successor's process id
//! after a binary upgrade, and watchdog keep-alives when the unit sets `WatchdogSec=`. Each
//! message carries a `STATUS=` line for `systemctl status`. Once weir stops (or has handed
//! over to a successor) it says nothing more about reloads. Outside systemd
//! (`NOTIFY_SOCKET` unset) every call here does nothing.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};

use sd_notify::NotifyState;

/// Set once a stop began or a successor took over: what systemd hears of this process
/// ends there, but for the keep-alives of a stopping process, still the main one.
static DONE: AtomicBool = AtomicBool::new(false);

/// Set once a successor took over: the keep-alives are its to send from then on.
static SUCCEEDED: AtomicBool = AtomicBool::new(false);

/// Every listener is bound and serving.
pub fn ready(virtual_servers: usize) {
    let status = format!("serving {virtual_servers} virtual servers");
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// A SIGHUP reload begins. systemd 253 and later want the monotonic time with it
/// (`Type=notify-reload`).
pub fn reloading() {
    if DONE.load(Ordering::Relaxed) {
        return;
    }
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
    if DONE.load(Ordering::Relaxed) {
        return;
    }
    send(&[NotifyState::Ready, NotifyState::Status(outcome)]);
}

/// A stop signal came: weir drains and exits.
pub fn stopping() {
    DONE.store(true, Ordering::Relaxed);
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("draining open connections"),
    ]);
}

/// A binary upgrade handed the listeners to process `pid`, which serves now: it is the
/// service's main process from here on (systemd takes this from the process it knows as
/// main, this one, while it drains).
pub fn handed_over(pid: u32) {
    DONE.store(true, Ordering::Relaxed);
    SUCCEEDED.store(true, Ordering::Relaxed);
    let status = format!("binary upgrade: process {pid} serves; draining open connections");
    send(&[NotifyState::MainPid(pid), NotifyState::Status(&status)]);
}

/// Sends a keep-alive every half of the unit's `WatchdogSec=` until `stop` (the drain's
/// end) or a successor took over ([`handed_over`]: a successor that hangs must not be
/// covered by its predecessor's keep-alives), from a task of the runtime that serves
/// traffic: a runtime that stops making progress stops the keep-alives, and systemd
/// restarts weir. Nothing when the unit sets no watchdog (or a
/// period of zero, which `sd_watchdog_enabled(3)` takes for none), or sets it for another
/// process (`WATCHDOG_PID`).
pub fn spawn_watchdog(stop: weir_core::ShutdownSignal) {
    let Some(period) = sd_notify::watchdog_enabled().filter(|period| !period.is_zero()) else {
        return;
    };
    let every = (period / 2).max(std::time::Duration::from_millis(10));
    tracing::info!(every = ?every, "systemd watchdog: keep-alives sent");
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            tokio::select! {
                () = stop.triggered() => return,
                _ = ticks.tick() => {
                    if SUCCEEDED.load(Ordering::Relaxed) {
                        return;
                    }
                    send(&[NotifyState::Watchdog]);
                }
            }
        }
    });
}

/// Sends `states`; a failure is logged once (the service manager then acts on its own
/// timeouts), never fatal.
fn send(states: &[NotifyState]) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let mut message = String::new();
    for state in states {
        message.push_str(&state.to_string());
        message.push('\n');
    }
    if let Err(error) = send_to(&socket, message.as_bytes())
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(%error, socket = %socket.to_string_lossy(), "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// One datagram to the service manager's socket: an absolute path, or a Linux abstract name
/// written with a leading `@` (sd_notify(3)), which `sd-notify` takes for a path.
fn send_to(socket: &std::ffi::OsStr, message: &[u8]) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    let datagram = UnixDatagram::unbound()?;
    let sent = match socket.as_bytes().strip_prefix(b"@") {
        Some(name) => {
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            datagram.send_to_addr(message, &address)?
        }
        None if socket.as_bytes().starts_with(b"/") => datagram.send_to(message, socket)?,
        // sd_notify(3) refuses a relative path too: the service manager never sets one, and
        // it would name a different socket after a change of working directory.
        None => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "NOTIFY_SOCKET is neither an absolute path nor an abstract name (@name)",
            ));
        }
    };
    if sent != message.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "the message was cut",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::send_to;
    use std::ffi::OsStr;
    use std::os::unix::net::UnixDatagram;

    /// A relative `NOTIFY_SOCKET` is refused as sd_notify(3) refuses it, even where a
    /// socket of that name exists in the working directory.
    #[test]
    fn the_socket_is_an_absolute_path_or_an_abstract_name() {
        let dir = std::env::temp_dir().join(format!("weir-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let socket = UnixDatagram::bind(&path).unwrap();
        send_to(path.as_os_str(), b"READY=1\n").unwrap();
        let mut buffer = [0u8; 16];
        let n = socket.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1\n");
        let relative = std::env::current_dir()
            .ok()
            .and_then(|cwd| pathdiff(&path, &cwd))
            .unwrap_or_else(|| "notify.sock".into());
        let refused = send_to(OsStr::new(&relative), b"READY=1\n").unwrap_err();
        assert_eq!(
            refused.kind(),
            std::io::ErrorKind::InvalidInput,
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `path` relative to `base`, through `..` steps: the same socket named relatively.
    fn pathdiff(path: &std::path::Path, base: &std::path::Path) -> Option<String> {
        let ups = base.components().count().checked_sub(1)?;
        let mut relative = "../".repeat(ups);
        relative.push_str(path.strip_prefix("/").ok()?.to_str()?);
        Some(relative)
    }
}
