//! The stages between admit and a pipeline, for every virtual server: the PROXY header of a
//! trusted client (its source becomes the client address everywhere after: logs,
//! `X-Forwarded-For`), then, where `[[passthrough]]` rules exist, the ClientHello (peeked, not
//! taken) that decides whether the connection is passed through, still encrypted, to a rule's
//! pool. Then the HTTP pipeline or the TCP session, as the protocol says.
//!
//! ```text
//! admitted → [PROXY header (trusted client)] → [ClientHello → passthrough?] → HTTP pipeline | TCP session
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use weir_config::Protocol;
use weir_core::ShutdownSignal;
use weir_proxy_protocol::{MAX_V1_LENGTH, MAX_V2_LENGTH, ParseError, Parsed};
use weir_tls::client_hello::{
    DEFAULT_MAX_CLIENT_HELLO, HelloError, MAX_RECORD_PAYLOAD, MAX_RECORDS, Peek, read_client_hello,
};

use crate::drain::Admission;
use crate::route::VirtualServerRuntime;
use crate::tcp::peek::{PeekError, peek_until};
use crate::tcp::session::{self, Client};

/// Whether a virtual server's connections need the front stages (plain HTTP and HTTPS
/// without a PROXY header or passthrough rules go straight to the pipeline).
pub(crate) fn needed(vs: &VirtualServerRuntime) -> bool {
    crate::model::front_stages(&vs.config)
}

/// Serves an admitted connection that needs the front stages ([`serve`]) in a task of its
/// own. The task's future holds a whole TCP session (the relay's state, a TLS
/// handshake's): about 5.6 KB. Spawned by value, tokio copied it at each of its spawn
/// layers and again as the task ended (`bench/insns --modes l4`: 20,155 user-space
/// instructions per connection, against 15,237 boxed); boxed, tokio moves a pointer.
pub(crate) fn spawn(
    stream: TcpStream,
    peer: SocketAddr,
    admission: Admission,
    shutdown: ShutdownSignal,
) {
    tokio::spawn(crate::boxed(|| serve(stream, peer, admission, shutdown)));
}

/// Runs the front stages, then the connection's pipeline, until the connection ends. The
/// admission (the virtual server's count, the drain) is held until then.
///
/// Never inlined, and boxed from this module (`spawn`): the optimiser then builds the
/// future in its box instead of on the stack and copying it in (`crate::boxed`).
#[inline(never)]
async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    admission: Admission,
    shutdown: ShutdownSignal,
) {
    let vs = Arc::clone(&admission.vs);
    let accepted = Instant::now();
    // PROXY header, from trusted clients only: anyone else's bytes are data.
    let mut client = Client {
        address: peer,
        destination: None,
        server_name: None,
        accepted,
        tls: None,
    };
    if let Some(accept) = &vs.config.accept_proxy
        && accept
            .trusted
            .iter()
            .any(|network| network.contains(peer.ip()))
    {
        match proxy_header(&mut stream, accept.timeout).await {
            Ok(addresses) => {
                vs.layer4.proxy_header("accepted");
                if let Some(addresses) = addresses {
                    client.address = addresses.source;
                    client.destination = Some(addresses.destination);
                }
            }
            Err(result) => {
                vs.layer4.proxy_header(result);
                // One per connection, and a load balancer's plain TCP health checks make
                // them too: on the budget of refusals.
                if let Some(left_out) = vs.shared.rejection_log.take() {
                    tracing::info!(virtual_server = %vs.config.name, peer = %peer, result, left_out, "PROXY header from a trusted client refused; closing");
                }
                return;
            }
        }
    }
    // ClientHello: passthrough, or on to the virtual server's own protocol. On a tls or
    // https virtual server, reading it is the start of weir's handshake, should weir make
    // it: it holds a place under `max_handshakes`, and `handshake_timeout` counts from it.
    let mut handshake = None;
    if !vs.passthrough.is_empty() {
        if let Some(tls) = &vs.tls {
            match tls.start(client.address) {
                Some(start) => handshake = Some(start),
                None => return,
            }
        }
        match passthrough(&stream, &vs, &mut client).await {
            Route::Pool(pool) => {
                drop(handshake);
                return session::serve_plain(stream, client, &vs, &pool, &admission.drain).await;
            }
            Route::Own => {}
            Route::Close => return,
        }
    }
    let stream = (stream, handshake);
    match vs.config.protocol {
        Protocol::Http | Protocol::Https => {
            // The client's connection limit counts the PROXY header's address.
            crate::refuse::serve_limited(stream, client.address, admission, shutdown).await;
        }
        Protocol::Tcp | Protocol::Tls => {
            session::serve(stream, client, &vs, &admission.drain).await
        }
    }
}

/// Reads a PROXY header (v1 or v2) and takes exactly its bytes. `Ok(None)`: a header without
/// addresses (LOCAL, UNKNOWN). `Err`: the `result` label of the refusal.
async fn proxy_header(
    stream: &mut TcpStream,
    timeout: Duration,
) -> Result<Option<weir_proxy_protocol::Addresses>, &'static str> {
    let max = MAX_V1_LENGTH.max(MAX_V2_LENGTH);
    let parsed = peek_until(
        stream,
        max,
        timeout,
        |bytes| match weir_proxy_protocol::parse(bytes) {
            Ok(Parsed::Partial) => None,
            Ok(Parsed::Complete { header, consumed }) => Some(Ok((header, consumed))),
            Err(error) => Some(Err(error)),
        },
    )
    .await
    .map_err(|error| match error {
        PeekError::Closed => "closed",
        PeekError::Timeout { .. } => "timeout",
        PeekError::TooLong => "too_long",
    })?;
    let (header, consumed) = parsed.map_err(ParseError::as_str)?;
    // The header's bytes are in the kernel already: this read does not wait.
    let mut taken = vec![0; consumed];
    stream.read_exact(&mut taken).await.map_err(|_| "closed")?;
    Ok(header.addresses)
}

/// Where the ClientHello sends a connection.
enum Route {
    /// Passed through to this pool.
    Pool(Arc<weir_upstream::Pool>),
    /// No rule matched: the virtual server's own protocol serves it.
    Own,
    Close,
}

/// Peeks at the ClientHello and picks a passthrough rule.
async fn passthrough(stream: &TcpStream, vs: &VirtualServerRuntime, client: &mut Client) -> Route {
    // A tls or https virtual server waits as long as for its own handshakes; a tcp one as
    // its `tcp.hello_timeout` says.
    let timeout = match (&vs.config.tls, &vs.config.tcp) {
        (Some(tls), _) => tls.handshake_timeout,
        (None, Some(tcp)) => tcp.hello_timeout,
        (None, None) => weir_config::TcpSettings::default().hello_timeout,
    };
    let max = DEFAULT_MAX_CLIENT_HELLO + MAX_RECORDS * 5 + MAX_RECORD_PAYLOAD + 5;
    let read = peek_until(stream, max, timeout, |bytes| {
        match read_client_hello(bytes, DEFAULT_MAX_CLIENT_HELLO) {
            Ok(Peek::Partial) => None,
            Ok(Peek::Complete(hello)) => Some(Ok(hello)),
            Err(error) => Some(Err(error)),
        }
    })
    .await;
    let hello = match read {
        Ok(Ok(hello)) => hello,
        // A tcp virtual server's plain-TCP clients go to its own pool.
        Ok(Err(HelloError::NotTls)) if vs.config.protocol == Protocol::Tcp => {
            vs.layer4.client_hello("default_pool");
            return Route::Own;
        }
        // A tls or https virtual server's own TLS refuses it (plain HTTP, an SSLv2 hello,
        // a hello that breaks the format) with the alert TLS asks for (RFC 8446 §6), and
        // counts it as the failed handshake it is, as without passthrough rules; a close
        // with the bytes unread would be a reset.
        Ok(Err(
            error @ (HelloError::Malformed(_) | HelloError::NotTls | HelloError::NotClientHello),
        )) if vs.config.protocol != Protocol::Tcp => {
            vs.layer4.client_hello(error.as_str());
            return Route::Own;
        }
        Ok(Err(error)) => return refuse(vs, client, error.as_str()),
        Err(PeekError::Closed) => return refuse(vs, client, "closed"),
        // A client that sent nothing waits for the server to speak first (SMTP, MySQL):
        // not TLS, so a tcp virtual server's own pool serves it, as for other plain TCP.
        Err(PeekError::Timeout { silent: true }) if vs.config.protocol == Protocol::Tcp => {
            vs.layer4.client_hello("default_pool");
            return Route::Own;
        }
        Err(PeekError::Timeout { .. }) => return refuse(vs, client, "timeout"),
        Err(PeekError::TooLong) => return refuse(vs, client, "too_large"),
    };
    match vs.passthrough_pool(&hello) {
        Some(pool) => {
            vs.layer4.client_hello("passthrough");
            client.server_name = hello.server_name;
            Route::Pool(Arc::clone(pool))
        }
        None => {
            let result = match vs.config.protocol {
                Protocol::Tcp => "default_pool",
                _ => "terminated",
            };
            vs.layer4.client_hello(result);
            Route::Own
        }
    }
}

fn refuse(vs: &VirtualServerRuntime, client: &Client, result: &'static str) -> Route {
    vs.layer4.client_hello(result);
    tracing::debug!(virtual_server = %vs.config.name, client = %client.address, result, "no ClientHello to route by; closing");
    Route::Close
}
