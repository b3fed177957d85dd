//! Protocol switches (`101 Switching Protocols`, e.g. WebSocket): after the
//! 101 head, bytes flow both ways untouched until either side closes. The
//! upstream connection is never reused afterwards.

use tokio::io::AsyncWriteExt;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{BodyFraming, ForwardResponse, Version};

use crate::VIA;
use crate::answer::Failure;
use crate::client::Client;
use crate::exchange::Exchange;
use crate::response::Sent;
use crate::route::VirtualServerRuntime;

pub(crate) async fn tunnel(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    exchange: Exchange,
    version: Version,
) -> Result<Sent, Failure> {
    let Exchange {
        mut lease,
        response,
        in_flight,
        ..
    } = exchange;
    // A tunnel is not request load on the node.
    drop(in_flight);
    client.write_buf.clear();
    weir_http::write_response_head(
        &response,
        &ForwardResponse {
            framing: BodyFraming::None,
            version,
            keep_alive: true,
            via: Some(VIA),
            upgrade: true,
            set_headers: &vs.config.response_headers,
        },
        &mut client.write_buf,
    );
    // Whatever the node sent after its 101 head belongs to the new protocol.
    let early = client.upstream_in.split();
    client.write_buf.extend_from_slice(&early);
    let head_bytes = client.write_buf.len() as u64;
    client.flush(vs.config.timeouts.write).await?;
    let upstream = lease.stream();
    if !client.read_buf.is_empty() {
        let pending = client.read_buf.split();
        let written = async {
            upstream.write_all(&pending).await?;
            upstream.flush().await
        };
        written.await.map_err(|error| {
            Failure::silent(Error::upstream(ErrorKind::Io, error).context("switching protocols"))
        })?;
    }
    let copied = tokio::io::copy_bidirectional(&mut client.stream, upstream).await;
    // `lease` drops here: the connection is closed, its slot freed.
    let (_, to_client) = copied.map_err(|error| {
        Failure::silent(Error::new(ErrorKind::Io, Side::Upstream).context(error.to_string()))
    })?;
    Ok(Sent {
        status: 101,
        bytes: head_bytes + to_client,
        keep_alive: false,
    })
}
