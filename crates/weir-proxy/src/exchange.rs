//! The select → checkout → forward stages: pick a node, take a connection,
//! send the request, and wait for the response head — retrying on another
//! node (or a fresh connection) only when that cannot send a request twice.

use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_core::{Error, ErrorKind, Side};
use weir_http::{ForwardRequest, Parsed, RequestHead, ResponseHead, parse_response};
use weir_upstream::{Lease, Pool, Tried};

use crate::VIA;
use crate::answer::Failure;
use crate::client::Client;
use crate::request_body::{self, RequestBody};
use crate::route::VirtualServerRuntime;

/// Retries on a reused connection that the node had closed, per request.
const MAX_STALE_RETRIES: u32 = 3;

/// A request sent and its response head received.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub lease: Lease,
    /// Counts the request on its node until the response has been relayed.
    pub in_flight: weir_upstream::node::InFlight,
    pub node: usize,
    pub response: ResponseHead,
    /// When the request was handed to the node.
    pub sent_at: Instant,
}

/// How one attempt failed.
enum AttemptError {
    /// Failed before the node could have acted on the request; safe to retry if idempotent.
    BeforeSend(Error),
    /// A reused connection turned out closed by the node before any response byte.
    Stale(Error),
    /// Anything else: not retried.
    Fatal(Failure),
}

/// Runs select → checkout → forward until a response head arrives or a
/// failure must be answered.
pub(crate) async fn exchange(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    head: &RequestHead,
    body: &mut RequestBody,
) -> Result<Exchange, Failure> {
    let idempotent = head.method().is_idempotent();
    let mut tried = Tried::default();
    let mut stale_retries = 0;
    let mut node_retries = 0;
    let mut current: Option<usize> = None;
    let mut last_error: Option<Error> = None;
    loop {
        // select (again only when moving to another node)
        let index = match current {
            Some(index) => index,
            None => match pool.select(tried, Instant::now()) {
                Some(index) => index,
                // Every node was tried: answer with what went wrong last.
                None if last_error.is_some() => {
                    return Err(Failure::from_error(last_error.take().expect("checked")));
                }
                None => {
                    pool.metrics.no_node_available.inc();
                    return Err(Failure::from_error(
                        Error::new(ErrorKind::NoNodeAvailable, Side::Internal)
                            .context(format!("every node of pool {} is down", pool.name)),
                    ));
                }
            },
        };
        tried.add(index);
        current = Some(index);
        let node = &pool.nodes[index];
        let can_retry = idempotent && body.is_complete();
        match attempt(client, vs, pool, index, head, body).await {
            Ok(exchange) => return Ok(exchange),
            Err(AttemptError::Stale(error)) if can_retry && stale_retries < MAX_STALE_RETRIES => {
                tracing::debug!(pool = %pool.name, node = %node.address, %error, "reused connection was closed by the node; retrying");
                stale_retries += 1;
            }
            Err(AttemptError::BeforeSend(error)) => {
                if matches!(
                    error.kind(),
                    ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout
                ) {
                    node.record_failure(Instant::now());
                }
                if !error.is_retry_safe() || !can_retry || node_retries >= pool.config.retries {
                    return Err(Failure::from_error(error));
                }
                tracing::debug!(pool = %pool.name, node = %node.address, %error, "retrying on another node");
                pool.metrics.retries.inc();
                node_retries += 1;
                current = None;
                last_error = Some(error);
            }
            Err(AttemptError::Stale(error)) => {
                node.record_failure(Instant::now());
                return Err(Failure::from_error(error));
            }
            Err(AttemptError::Fatal(failure)) => {
                // Passive health: a node that breaks or stalls an exchange counts a failure.
                if failure.error.side() == Side::Upstream {
                    node.record_failure(Instant::now());
                }
                return Err(failure);
            }
        }
    }
}

/// One try on one node: checkout, write the request, read the response head.
async fn attempt(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    index: usize,
    head: &RequestHead,
    body: &mut RequestBody,
) -> Result<Exchange, AttemptError> {
    let in_flight = pool.nodes[index].start_request();
    let mut lease = pool.connections[index]
        .checkout()
        .await
        .map_err(AttemptError::BeforeSend)?;
    let reused = lease.is_reused();
    let upgrade = asks_to_upgrade(head);

    // forward: head and buffered body in one write
    let out = &mut client.upstream_out;
    out.clear();
    weir_http::write_request_head(
        head,
        &ForwardRequest {
            framing: body.framing,
            client_addr: vs.config.forwarded_headers.then_some(client.peer.ip()),
            proto: if client.stream.is_tls() {
                "https"
            } else {
                "http"
            },
            via: vs.config.forwarded_headers.then_some(VIA),
            upgrade,
            strip_expect: true,
            owned_header: vs
                .tls
                .as_ref()
                .and_then(|tls| tls.subject_header.as_deref())
                .map(|name| (name, client.client_subject.as_deref())),
        },
        out,
    );
    body.write_buffered(out);
    let sent_at = Instant::now();
    let written = async {
        let stream = lease.stream();
        stream.write_all(out).await?;
        // A no-op on plain TCP; on TLS it pushes the records out.
        stream.flush().await
    };
    if let Err(error) = written.await {
        let error = Error::upstream(ErrorKind::BadResponse, error).context("writing the request");
        return Err(if reused {
            AttemptError::Stale(error)
        } else {
            AttemptError::Fatal(Failure::from_error(error))
        });
    }
    if !body.is_complete() {
        request_body::stream_rest(client, vs, body, lease.stream())
            .await
            .map_err(AttemptError::Fatal)?;
    }
    pool.nodes[index].metrics.requests_forwarded.inc();

    // wait for the response head
    let response = read_response_head(client, vs, pool, &mut lease, head, reused).await?;
    Ok(Exchange {
        lease,
        in_flight,
        node: index,
        response,
        sent_at,
    })
}

/// Reads the final response head, passing interim (1xx) responses on to the client.
async fn read_response_head(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    lease: &mut Lease,
    head: &RequestHead,
    reused: bool,
) -> Result<ResponseHead, AttemptError> {
    let deadline = tokio::time::Instant::now() + pool.config.timeouts.response;
    client.upstream_in.clear();
    let mut got_any = false;
    loop {
        if !client.upstream_in.is_empty() {
            match parse_response(&client.upstream_in, &vs.head_limits, head.method()) {
                Ok(Parsed::Complete(response, used)) => {
                    bytes::Buf::advance(&mut client.upstream_in, used);
                    if response.status() == 101 && !asks_to_upgrade(head) {
                        return Err(AttemptError::Fatal(Failure::from_error(
                            Error::new(ErrorKind::BadResponse, Side::Upstream)
                                .context("101 Switching Protocols to a request without Upgrade"),
                        )));
                    }
                    if !response.is_interim() || response.status() == 101 {
                        return Ok(response);
                    }
                    // 100 Continue was answered by weir itself; pass others (103) to HTTP/1.1 clients.
                    if response.status() != 100 && head.version() == weir_http::Version::Http11 {
                        let mut interim = bytes::BytesMut::new();
                        weir_http::write_response_head(
                            &response,
                            &weir_http::ForwardResponse {
                                framing: weir_http::BodyFraming::None,
                                version: head.version(),
                                keep_alive: true,
                                via: None,
                                upgrade: false,
                                set_headers: &[],
                            },
                            &mut interim,
                        );
                        client
                            .send(&interim, vs.config.timeouts.write)
                            .await
                            .map_err(AttemptError::Fatal)?;
                    }
                    continue;
                }
                Ok(Parsed::Partial) => {}
                Err(error) => return Err(AttemptError::Fatal(Failure::bad_response(error))),
            }
        }
        client.upstream_in.reserve(8 * 1024);
        let read =
            tokio::time::timeout_at(deadline, lease.stream().read_buf(&mut client.upstream_in))
                .await;
        match read {
            Ok(Ok(0)) => {
                let error = Error::new(ErrorKind::BadResponse, Side::Upstream)
                    .context("node closed the connection before a complete response head");
                return Err(if reused && !got_any {
                    AttemptError::Stale(error)
                } else {
                    AttemptError::Fatal(Failure::from_error(error))
                });
            }
            Ok(Ok(_)) => got_any = true,
            Ok(Err(io)) => {
                let error = Error::upstream(ErrorKind::BadResponse, io)
                    .context("reading the response head");
                return Err(if reused && !got_any {
                    AttemptError::Stale(error)
                } else {
                    AttemptError::Fatal(Failure::from_error(error))
                });
            }
            Err(_) => {
                return Err(AttemptError::Fatal(Failure::from_error(
                    Error::new(ErrorKind::ResponseTimeout, Side::Upstream).context(format!(
                        "no response head within {:?}",
                        pool.config.timeouts.response
                    )),
                )));
            }
        }
    }
}

/// Whether the client asked for a protocol switch (`Connection: upgrade` and an `Upgrade` field).
fn asks_to_upgrade(head: &RequestHead) -> bool {
    head.connection().upgrade && head.header("upgrade").is_some()
}
