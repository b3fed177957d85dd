//! Listeners: binding, the accept → admit stages, and the set of listening sockets a reload
//! diffs (added, removed, re-bound) rather than rebuilds.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::libc;
use nix::{getsockopt_impl, setsockopt_impl, sockopt_impl};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use weir_config::Config;
use weir_config::diff::ListenOptions;
use weir_core::{Shutdown, ShutdownSignal};

use crate::drain::{Admission, Drain};
use crate::model::ModelCell;
use crate::route::VirtualServerRuntime;
use crate::{front, pipeline, refuse};

/// A listening socket before it serves.
#[derive(Debug)]
pub(crate) struct Bound {
    /// As written in the config (port 0 stays 0).
    pub address: SocketAddr,
    pub virtual_server: String,
    pub options: ListenOptions,
    pub socket: std::net::TcpListener,
}

/// The listening sockets of a running proxy, by bound address (unique even where several
/// virtual servers say port 0).
#[derive(Debug, Default)]
pub(crate) struct Listeners {
    entries: HashMap<SocketAddr, Entry>,
}

/// One listening socket and its accept loop.
#[derive(Debug)]
struct Entry {
    /// As written in the config.
    configured: SocketAddr,
    local: SocketAddr,
    socket: Arc<TcpListener>,
    /// The virtual server it serves (a reload may hand it to another).
    target: Arc<Mutex<String>>,
    options: ListenOptions,
    stop: Shutdown,
    task: JoinHandle<()>,
}

/// What an accept loop needs from the running proxy.
#[derive(Debug, Clone)]
pub(crate) struct AcceptContext {
    pub cell: Arc<ModelCell>,
    pub drain: Arc<Drain>,
    pub shutdown: ShutdownSignal,
}

/// A listening socket with address reuse and the configured backlog.
pub fn bind_tcp(address: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// Sets TCP_NODELAY on a listening socket: the connections it accepts inherit
/// it (Linux copies the option into each one), which saves a system call per
/// connection over setting it on each.
fn nodelay_for_accepted(listener: &std::net::TcpListener) -> io::Result<()> {
    socket2::SockRef::from(listener).set_tcp_nodelay(true)
}

/// How long (seconds) the kernel holds a connection that has sent nothing
/// before handing it to weir anyway; it retransmits its SYN-ACK meanwhile.
/// One, as nginx's `deferred` and most servers that defer use.
const DEFER_ACCEPT_SECS: libc::c_int = 1;

// `TCP_DEFER_ACCEPT`, which neither socket2 nor nix names: nix's macro for
// socket options defines it (the system call it wraps lives in nix).
sockopt_impl!(
    /// Accept a connection only once it has data to read.
    TcpDeferAccept,
    Both,
    libc::IPPROTO_TCP,
    libc::TCP_DEFER_ACCEPT,
    libc::c_int
);

/// Sets or clears `TCP_DEFER_ACCEPT` on a listening socket: with it, a
/// connection is accepted when its first bytes arrive (an HTTP request, a
/// ClientHello), so the accept and the first read share one wake-up, and a
/// client that connects and stays silent costs weir nothing until the kernel
/// gives up waiting ([`DEFER_ACCEPT_SECS`]).
fn set_defer_accept(listener: &impl AsFd, on: bool) -> io::Result<()> {
    let seconds = if on { DEFER_ACCEPT_SECS } else { 0 };
    nix::sys::socket::setsockopt(listener, TcpDeferAccept, &seconds).map_err(io::Error::from)
}

/// A listening socket handed over by another process: non-blocking, with this
/// configuration's backlog (`listen` again on a listening socket only changes it).
pub fn adopt(fd: OwnedFd, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::from(fd);
    socket.set_nonblocking(true)?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

impl Listeners {
    /// Starts serving `bound` sockets (at start-up, or those a reload added).
    pub(crate) fn start(&mut self, bound: Vec<Bound>, context: &AcceptContext) -> io::Result<()> {
        for bound in bound {
            let local = bound.socket.local_addr()?;
            if let Err(error) = nodelay_for_accepted(&bound.socket) {
                tracing::warn!(listen = %local, %error, "cannot set TCP_NODELAY on the listener");
            }
            if let Err(error) = set_defer_accept(&bound.socket, bound.options.defer_accept) {
                tracing::warn!(listen = %local, %error, "cannot set TCP_DEFER_ACCEPT on the listener");
            }
            let socket = Arc::new(TcpListener::from_std(bound.socket)?);
            let target = Arc::new(Mutex::new(bound.virtual_server));
            let (stop, stop_signal) = Shutdown::new();
            let task = tokio::spawn(accept_loop(
                Arc::clone(&socket),
                Arc::clone(&target),
                context.clone(),
                stop_signal,
            ));
            self.entries.insert(
                local,
                Entry {
                    configured: bound.address,
                    local,
                    socket,
                    target,
                    options: bound.options,
                    stop,
                    task,
                },
            );
        }
        Ok(())
    }

    /// Whether a listener of `virtual_server` at `address` is served now: by the socket
    /// bound there, or (port 0) by one configured so for the same virtual server. Such a
    /// candidate listener needs no new socket.
    pub(crate) fn serves(&self, address: SocketAddr, virtual_server: &str) -> bool {
        if self.entries.contains_key(&address) {
            return true;
        }
        address.port() == 0
            && self.entries.values().any(|entry| {
                entry.configured == address
                    && *entry.target.lock().unwrap_or_else(|e| e.into_inner()) == virtual_server
            })
    }

    /// Makes the set of listeners match `config`'s: listeners of addresses no longer
    /// configured stop accepting and close; those that stay serve the virtual server the
    /// config gives them, with its [`ListenOptions`]. Added ones are started with
    /// [`Self::start`].
    pub(crate) fn retain_and_rebind(&mut self, config: &Config) {
        let mut wanted: HashMap<SocketAddr, Vec<(&str, ListenOptions)>> = HashMap::new();
        for (address, name, options) in weir_config::diff::listeners(config) {
            wanted.entry(address).or_default().push((name, options));
        }
        self.entries.retain(|_, entry| {
            let served = entry
                .target
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            // The bound address itself, else (port 0) the address as configured, for the
            // same virtual server.
            let found = wanted
                .get(&entry.local)
                .and_then(|list| list.first())
                .or_else(|| {
                    wanted
                        .get(&entry.configured)
                        .filter(|_| entry.configured.port() == 0)
                        .and_then(|list| list.iter().find(|(name, _)| *name == served))
                });
            let Some(&(name, options)) = found else {
                tracing::info!(listen = %entry.local, "listener removed");
                entry.stop.trigger();
                return false;
            };
            let mut target = entry.target.lock().unwrap_or_else(|e| e.into_inner());
            if *target != name {
                tracing::info!(listen = %entry.local, from = %*target, to = name, "listener handed to another virtual server");
                *target = name.to_owned();
            }
            if entry.options.backlog != options.backlog {
                let socket = socket2::SockRef::from(&*entry.socket);
                match socket.listen(options.backlog.min(i32::MAX as u32) as i32) {
                    Ok(()) => entry.options.backlog = options.backlog,
                    Err(error) => {
                        tracing::warn!(listen = %entry.local, %error, "cannot change the backlog")
                    }
                }
            }
            if entry.options.defer_accept != options.defer_accept {
                match set_defer_accept(&*entry.socket, options.defer_accept) {
                    Ok(()) => entry.options.defer_accept = options.defer_accept,
                    Err(error) => {
                        tracing::warn!(listen = %entry.local, %error, "cannot change TCP_DEFER_ACCEPT")
                    }
                }
            }
            true
        });
    }

    /// The bound addresses, by virtual server name.
    pub(crate) fn local_addrs(&self) -> Vec<(String, SocketAddr)> {
        let mut addrs: Vec<(String, SocketAddr)> = self
            .entries
            .values()
            .map(|entry| {
                let name = entry.target.lock().unwrap_or_else(|e| e.into_inner());
                (name.clone(), entry.local)
            })
            .collect();
        addrs.sort();
        addrs
    }

    /// A duplicate of every listening socket, by configured address (for a binary
    /// upgrade: the new process accepts on the same sockets, so none is ever closed).
    /// A port-0 listener goes by its bound address: no config can name it otherwise.
    pub(crate) fn duplicates(&self) -> io::Result<Vec<(SocketAddr, OwnedFd)>> {
        self.entries
            .values()
            .map(|entry| {
                let address = if entry.configured.port() == 0 {
                    entry.local
                } else {
                    entry.configured
                };
                Ok((address, entry.socket.as_fd().try_clone_to_owned()?))
            })
            .collect()
    }

    /// Stops every accept loop; returns their tasks to wait for.
    pub(crate) fn stop_all(&mut self) -> Vec<JoinHandle<()>> {
        self.entries
            .drain()
            .map(|(_, entry)| {
                entry.stop.trigger();
                entry.task
            })
            .collect()
    }
}

/// accept → admit → spawn the front stages or the pipeline, until the listener is removed or
/// shutdown.
async fn accept_loop(
    listener: Arc<TcpListener>,
    target: Arc<Mutex<String>>,
    context: AcceptContext,
    stop: ShutdownSignal,
) {
    let shutdown = context.shutdown.clone();
    // The virtual server served, and the signal its connections close on (shutdown, or
    // the virtual server's removal).
    let mut current: Option<(Arc<VirtualServerRuntime>, ShutdownSignal)> = None;
    // Accept failures come every pause while they last: one line a second says so, naming
    // the listen address (it stays; the virtual server behind it may change on reload).
    let mut failures = weir_observe::AcceptFailures::new(match listener.local_addr() {
        Ok(address) => format!("virtual server at {address}"),
        Err(_) => "virtual server".to_owned(),
    });
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.triggered() => return,
            _ = stop.triggered() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                // Out of file descriptors or similar: back off instead of spinning.
                failures.failed(&error);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        failures.accepted();
        let stale = current
            .as_ref()
            .is_none_or(|(vs, _)| vs.generation != context.cell.generation());
        if stale {
            current = resolve(&target, &context, current.take());
        }
        let Some((vs, signal)) = &current else {
            // The listener is being removed by the reload that just ran.
            drop(stream);
            continue;
        };
        // admit
        let max = vs.config.limits.max_connections;
        if vs.shared.open.fetch_add(1, Ordering::AcqRel) >= max {
            vs.shared.open.fetch_sub(1, Ordering::AcqRel);
            vs.metrics.connections_rejected.inc();
            tracing::debug!(virtual_server = %vs.config.name, client = %peer, "connection limit reached; closing");
            drop(stream);
            continue;
        }
        vs.metrics.connections_accepted.inc();
        vs.metrics.connections_open.inc();
        let admission = Admission {
            vs: Arc::clone(vs),
            drain: context.drain.enter(),
            permit: None,
        };
        if front::needed(vs) {
            // PROXY header, passthrough or a TCP session: the front stages first (an
            // HTTP connection then meets its client's connection limit in `refuse.rs`).
            front::spawn(stream, peer, admission, signal.clone());
        } else {
            spawn_connection(stream, peer, admission, signal.clone());
        }
    }
}

/// Spawns the pipeline for an admitted connection, past its client's connection limit
/// (`client_connections`) first: within it, the connection holds its place in the count
/// (in its [`Admission`], parked or not) until it ends; past it, the first request gets
/// the limit's answer.
fn spawn_connection(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    mut admission: Admission,
    signal: ShutdownSignal,
) {
    let vs = Arc::clone(&admission.vs);
    match vs.traffic.limits.admit_connection(peer.ip()) {
        Ok(permit) => {
            admission.permit = permit.map(Box::new);
            tokio::spawn(pipeline::serve_connection(
                stream, peer, admission, signal, None,
            ));
        }
        Err(refusal) => {
            vs.traffic.metrics.client_connection_refusals.inc();
            tracing::debug!(virtual_server = %vs.config.name, client = %peer, "client connection limit reached");
            tokio::spawn(refuse::refuse_connection(
                (stream, None),
                peer,
                admission,
                refusal,
                signal,
            ));
        }
    }
}

/// The current model's virtual server for a listener, and the signal its connections
/// close on; the signal is reused while the virtual server's shared part is the same.
fn resolve(
    target: &Mutex<String>,
    context: &AcceptContext,
    previous: Option<(Arc<VirtualServerRuntime>, ShutdownSignal)>,
) -> Option<(Arc<VirtualServerRuntime>, ShutdownSignal)> {
    let vs = context.cell.read_with(|model| {
        let name = target.lock().unwrap_or_else(|e| e.into_inner());
        model.virtual_server(&name).map(Arc::clone)
    })?;
    let signal = match previous {
        Some((old, signal)) if Arc::ptr_eq(&old.shared, &vs.shared) => signal,
        _ => context.shutdown.either(&vs.shared.removed_signal()),
    };
    Some((vs, signal))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_connections_inherit_nodelay_from_the_listener() {
        let listener = bind_tcp(SocketAddr::from(([127, 0, 0, 1], 0)), 16).unwrap();
        listener.set_nonblocking(false).unwrap();
        nodelay_for_accepted(&listener).unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(accepted.nodelay().unwrap());
        // and without it on the listener, an accepted connection has Nagle on
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(plain.local_addr().unwrap()).unwrap();
        let (accepted, _) = plain.accept().unwrap();
        assert!(!accepted.nodelay().unwrap());
    }

    #[test]
    fn a_deferred_listener_accepts_a_connection_once_it_has_sent_something() {
        use std::io::Write as _;
        let listener = bind_tcp(SocketAddr::from(([127, 0, 0, 1], 0)), 16).unwrap();
        set_defer_accept(&listener, true).unwrap();
        assert!(nix::sys::socket::getsockopt(&listener, TcpDeferAccept).unwrap() > 0);
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // connected, but nothing sent: the kernel holds it
        std::thread::sleep(Duration::from_millis(50));
        let pending = listener.accept().map(drop);
        assert_eq!(pending.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        client.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let accepted = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "never accepted");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(error) => panic!("{error}"),
            }
        };
        let mut first = [0u8; 3];
        accepted.peek(&mut first).unwrap();
        assert_eq!(&first, b"GET");
        // cleared again (what a reload that turns it off does)
        set_defer_accept(&listener, false).unwrap();
        assert_eq!(
            nix::sys::socket::getsockopt(&listener, TcpDeferAccept).unwrap(),
            0
        );
        let _silent = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while let Err(error) = listener.accept() {
            assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
            assert!(std::time::Instant::now() < deadline, "never accepted");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
