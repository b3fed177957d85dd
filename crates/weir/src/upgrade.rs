//! Binary upgrade without a dropped connection: `weir serve --upgrade` takes the listening
//! sockets (virtual servers, admin, and this upgrade socket itself) from the running weir
//! over its upgrade socket, starts accepting on them, then tells the old process, which
//! stops accepting and drains (up to `runtime.drain_timeout`). The socket protocol is in
//! `weir_proxy::handoff`. With the sockets go the key that signs persistence cookies and
//! the TLS ticket keys and cached sessions, so clients keep their node and resume their
//! TLS sessions across the upgrade.
//!
//! The upgrade socket is `runtime.upgrade_socket`, or by default an abstract Unix socket
//! named after the config file's absolute path, so each config file's weir has its own and
//! a second `weir serve` of the same file fails to start instead of serving beside it.
//! Only a process of the same user (or root) may take the sockets, and a new process takes
//! them only from a process of its own user (or root).

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use weir_config::Config;
use weir_proxy::handoff;

/// How long the old process waits for its successor to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a new process took over from the old one.
pub struct Inherited {
    pub listeners: HashMap<SocketAddr, OwnedFd>,
    pub admin: Option<(SocketAddr, OwnedFd)>,
    pub upgrade: Option<OwnedFd>,
    stream: UnixStream,
}

/// Where this config's upgrade socket is.
fn address(config: &Config) -> anyhow::Result<std::os::unix::net::SocketAddr> {
    if let Some(path) = &config.runtime.upgrade_socket {
        return std::os::unix::net::SocketAddr::from_pathname(path)
            .with_context(|| format!("runtime.upgrade_socket {}", path.display()));
    }
    let identity = match &config.source {
        Some(path) => std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .display()
            .to_string(),
        None => weir_config::EMBEDDED_DEFAULT_NAME.to_owned(),
    };
    let name = format!("weir/upgrade/{:016x}", fnv1a(identity.as_bytes()));
    Ok(std::os::unix::net::SocketAddr::from_abstract_name(name)?)
}

/// A stable hash (the name must be the same for every weir version).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Binds the upgrade socket of a weir that starts fresh. Fails when another weir already
/// serves this config (its socket answers); a stale socket file is replaced.
pub fn bind(config: &Config) -> anyhow::Result<UnixListener> {
    let address = address(config)?;
    match UnixListener::bind_addr(&address) {
        Ok(listener) => Ok(listener),
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => {
            if let Ok(answering) = UnixStream::connect_addr(&address) {
                // An abstract name has no permissions: another user's process may hold it.
                if let Some(uid) = stranger(&answering) {
                    anyhow::bail!(
                        "the upgrade socket of this configuration is held by a process of \
                         another user (uid {uid}), not by a weir of this one; set \
                         runtime.upgrade_socket to a path in a directory only weir's user \
                         can write"
                    );
                }
                anyhow::bail!(
                    "another weir already serves this configuration (its upgrade socket answers); \
                     to replace it, run weir serve --upgrade"
                );
            }
            let path = address.as_pathname().context("upgrade socket in use")?;
            // Only a socket left by a weir that is gone is replaced: a path that names
            // anything else (a config file, by a slip in `runtime.upgrade_socket`) is kept.
            let stale = std::fs::symlink_metadata(path)
                .is_ok_and(|meta| std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
            if !stale {
                anyhow::bail!(
                    "runtime.upgrade_socket: {} exists and is not a socket; weir will not \
                     replace it (name another path)",
                    path.display()
                );
            }
            std::fs::remove_file(path)?;
            Ok(UnixListener::bind_addr(&address)?)
        }
        Err(error) => Err(error).context("runtime.upgrade_socket: cannot bind the upgrade socket"),
    }
}

/// The name the persistence key is handed over by: a pipe holding its 32 bytes.
const PERSISTENCE_KEY: &str = "persistence-key";

/// A pipe holding this process's persistence key (what signs the cookies of pools with
/// no `persistence.key`): the new process signs with it too, so the clients' cookies
/// stay valid across the upgrade.
fn persistence_key() -> anyhow::Result<OwnedFd> {
    let (reader, mut writer) = std::io::pipe()?;
    writer.write_all(weir_upstream::PersistenceKey::process_secret())?;
    Ok(OwnedFd::from(reader))
}

/// Reads the persistence key the running weir handed over and makes it this process's,
/// before any pool is built.
fn adopt_persistence_key(fd: OwnedFd) -> anyhow::Result<()> {
    let mut secret = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::from(fd), &mut secret)
        .context("reading the handed-over persistence key")?;
    if !weir_upstream::PersistenceKey::adopt_process_secret(secret) {
        tracing::warn!(
            "binary upgrade: a persistence key was in use already; cookies signed by the old process will be re-issued"
        );
    }
    Ok(())
}

/// The name the TLS ticket keys and cached sessions are handed over by: a memory file
/// holding [`weir_proxy::Live::tls_resumption`]'s bytes (too many for a pipe to hold
/// before the new process reads it).
const TLS_RESUMPTION: &str = "tls-resumption";

/// A memory file holding the TLS resumption state of every virtual server, read from
/// its start.
fn tls_resumption(live: &weir_proxy::Live) -> anyhow::Result<OwnedFd> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use std::io::{Seek, SeekFrom};
    let fd = memfd_create(c"weir-tls-resumption", MFdFlags::MFD_CLOEXEC)
        .context("creating the memory file for the TLS resumption state")?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&live.tls_resumption())?;
    // The new process reads through the same open file: from the start.
    file.seek(SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

/// The most the new process reads of the TLS resumption state (a bound on what a broken
/// predecessor can make it allocate; a real one is far smaller).
const TLS_RESUMPTION_LIMIT: u64 = 256 << 20;

/// Takes over the running weir's TLS ticket keys and cached sessions, before any
/// acceptor is built. A state that cannot be read costs resumption, not the upgrade.
fn adopt_tls_resumption(fd: OwnedFd) {
    let mut bytes = Vec::new();
    let read = std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), TLS_RESUMPTION_LIMIT),
        &mut bytes,
    );
    match read
        .map_err(|error| error.to_string())
        .and_then(|_| weir_tls::carry::adopt(&bytes))
    {
        Ok(adopted) => tracing::info!(
            virtual_servers = adopted.virtual_servers,
            ticket_keys = adopted.ticket_keys,
            sessions = adopted.sessions,
            "binary upgrade: took over the TLS ticket keys and cached sessions"
        ),
        Err(error) => tracing::warn!(
            %error,
            "binary upgrade: the TLS ticket keys and cached sessions could not be taken over; \
             clients make full handshakes"
        ),
    }
}

/// Connects to the running weir of this config and takes its sockets (and its
/// persistence key and TLS resumption state: call it before any pool or acceptor is
/// built).
pub fn take_over(config: &Config) -> anyhow::Result<Inherited> {
    let address = address(config)?;
    let stream = UnixStream::connect_addr(&address)
        .context("no running weir answers on this configuration's upgrade socket")?;
    // The sockets, the admin listener and the persistence key are taken only from a
    // process of this user (or root): a default upgrade socket is an abstract name, which
    // any local user can bind first.
    if let Some(uid) = stranger(&stream) {
        anyhow::bail!(
            "the process on this configuration's upgrade socket belongs to another user \
             (uid {uid}); nothing was taken over from it"
        );
    }
    stream.set_read_timeout(Some(READY_TIMEOUT))?;
    (&stream).write_all(handoff::HELLO)?;
    let mut inherited = Inherited {
        listeners: HashMap::new(),
        admin: None,
        upgrade: None,
        stream,
    };
    let handed = handoff::receive_sockets(&inherited.stream).map_err(|error| {
        let why = match error.kind() {
            std::io::ErrorKind::UnexpectedEof => "it closed the handover without its sockets",
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                "it did not hand its sockets over in time"
            }
            _ => "its sockets could not be received",
        };
        anyhow::anyhow!(
            "the running weir refused or failed the binary upgrade: {why} ({error}); it \
             keeps serving, and its own log says why (out of file descriptors, for one)"
        )
    })?;
    for (name, fd) in handed {
        match name.split_once(' ') {
            Some(("listen", address)) => {
                inherited.listeners.insert(address.parse()?, fd);
            }
            Some(("admin", address)) => inherited.admin = Some((address.parse()?, fd)),
            _ if name == "upgrade" => inherited.upgrade = Some(fd),
            _ if name == PERSISTENCE_KEY => adopt_persistence_key(fd)?,
            _ if name == TLS_RESUMPTION => adopt_tls_resumption(fd),
            _ => tracing::warn!(name, "unknown socket handed over; closed"),
        }
    }
    Ok(inherited)
}

impl Inherited {
    /// Tells the old process that this one accepts: it stops and drains. Unless `stop` is
    /// set (a stop signal came while this process started; set by the signal handler
    /// itself, so it is seen here at once): then nothing is sent, the old process, never
    /// told READY, keeps serving, and the answer is `false`.
    pub fn ready(self, stop: &AtomicBool) -> anyhow::Result<bool> {
        if stop.load(Ordering::SeqCst) {
            return Ok(false);
        }
        (&self.stream).write_all(handoff::READY)?;
        handoff::expect_line(&self.stream, handoff::STOPPING)
            .context("the old process did not confirm it stops")?;
        Ok(true)
    }
}

/// A flag the stop signals (SIGTERM, SIGINT, SIGQUIT) set in their handler, for
/// [`Inherited::ready`]: tokio hands a signal to its listeners only when the runtime next
/// polls its event driver, which a process busy starting may not have done since.
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGQUIT,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&flag))
            .context("cannot listen for the stop signals")?;
    }
    Ok(flag)
}

/// What the running process hands over.
pub struct Handover {
    pub live: Arc<weir_proxy::Live>,
    pub admin: Option<(SocketAddr, OwnedFd)>,
    pub upgrade: OwnedFd,
}

/// Serves upgrade requests on `listener` until one succeeds (the new process's id) or
/// `stop` triggers (`None`).
pub async fn serve(
    listener: tokio::net::UnixListener,
    handover: Handover,
    stop: weir_core::ShutdownSignal,
) -> Option<u32> {
    let handover = Arc::new(handover);
    let mut failures = weir_observe::AcceptFailures::new("upgrade socket");
    loop {
        let accepted = tokio::select! {
            () = stop.triggered() => return None,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                failures.failed(&error);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        failures.accepted();
        if stranger(&stream).is_some() {
            tracing::warn!("upgrade socket: a process of another user was refused");
            continue;
        }
        let successor = peer_pid(&stream);
        let handover = Arc::clone(&handover);
        let outcome = async move {
            let stream = stream.into_std()?;
            stream.set_nonblocking(false)?;
            tokio::task::spawn_blocking(move || hand_over(&stream, &handover)).await?
        };
        match outcome.await {
            Ok(true) => {
                tracing::info!(
                    successor,
                    "binary upgrade: the new process accepts; no longer accepting, draining"
                );
                return Some(successor);
            }
            Ok(false) => {
                tracing::debug!(
                    "upgrade socket: a process connected and left without asking for the \
                     sockets (another weir of this config finding this one running)"
                );
            }
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "binary upgrade failed; still serving");
            }
        }
    }
}

/// The uid of the process at the other end of `stream` when it is neither this process's
/// user nor root (`None` for those; an unknown peer counts as a stranger, uid `u32::MAX`).
fn stranger(stream: &impl AsFd) -> Option<u32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let ours = nix::unistd::geteuid().as_raw();
    match getsockopt(stream, PeerCredentials) {
        Ok(peer) if peer.uid() == ours || peer.uid() == 0 => None,
        Ok(peer) => Some(peer.uid()),
        Err(_) => Some(u32::MAX),
    }
}

/// The process id at the other end of `stream` (0 when it cannot be read, which
/// [`stranger`] has refused already).
fn peer_pid(stream: &impl AsFd) -> u32 {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(stream, PeerCredentials)
        .ok()
        .and_then(|peer| u32::try_from(peer.pid()).ok())
        .unwrap_or(0)
}

/// One handover: sockets out, then wait for the new process to be ready. `Ok(false)`: the
/// peer left without asking (a second `weir serve` of the same config finding this one).
fn hand_over(stream: &UnixStream, handover: &Handover) -> anyhow::Result<bool> {
    stream.set_read_timeout(Some(READY_TIMEOUT))?;
    match handoff::expect_line(stream, handoff::HELLO) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(error) => return Err(error).context("not an upgrade request"),
    }
    let mut sockets: Vec<(String, OwnedFd)> = handover
        .live
        .listener_duplicates()?
        .into_iter()
        .map(|(address, fd)| (format!("listen {address}"), fd))
        .collect();
    if let Some((address, fd)) = &handover.admin {
        sockets.push((format!("admin {address}"), fd.as_fd().try_clone_to_owned()?));
    }
    sockets.push((
        "upgrade".to_owned(),
        handover.upgrade.as_fd().try_clone_to_owned()?,
    ));
    sockets.push((PERSISTENCE_KEY.to_owned(), persistence_key()?));
    sockets.push((TLS_RESUMPTION.to_owned(), tls_resumption(&handover.live)?));
    handoff::send_sockets(stream, &sockets)?;
    drop(sockets);
    handoff::expect_line(stream, handoff::READY).context("the new process did not become ready")?;
    (&mut &*stream).write_all(handoff::STOPPING)?;
    Ok(true)
}
