//! Requests that end early are still requests: a client that leaves in the middle of its
//! body, or in the middle of the answer, gets an access record and is counted, with the
//! status its answer had (499 when it had none).

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_testkit::{TestOrigin, TestProxy};

struct Setup {
    proxy: TestProxy,
    origin: TestOrigin,
    log: PathBuf,
}

async fn setup(name: &str) -> Setup {
    setup_with(name, "").await
}

async fn setup_with(name: &str, pool_extra: &str) -> Setup {
    let origin = TestOrigin::start("o").await;
    let log = std::env::temp_dir().join(format!("weir-cut-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    // A small response buffer, so a large answer streams while the client reads it.
    let toml = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\
         [pools.p]\nnodes = [{{ address = \"{}\" }}]\n{pool_extra}\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n\
         [virtual_servers.web.limits]\nresponse_buffer = \"16KiB\"\n",
        log.display(),
        origin.addr
    );
    let proxy = TestProxy::start(&toml).await;
    Setup { proxy, origin, log }
}

impl Setup {
    /// The access records once there are `expected` of them (within 5 s).
    async fn records(&self, expected: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            self.proxy.live.flush_access_log();
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if text.lines().count() >= expected || tokio::time::Instant::now() > deadline {
                return text.lines().map(str::to_owned).collect();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        self.proxy.stop().await;
        self.origin.stop().await;
        let _ = std::fs::remove_file(&self.log);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_body_is_logged_as_499() {
    let setup = setup("body").await;
    let mut stream = TcpStream::connect(setup.proxy.addr).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(stream);
    let records = setup.records(1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    for field in [
        r#""status":499"#,
        r#""method":"POST""#,
        r#""error":"client_closed""#,
    ] {
        assert!(records[0].contains(field), "{field}: {records:?}");
    }
    let text = setup.proxy.metrics.encode();
    assert!(
        text.contains("weir_requests_total{virtual_server=\"web\",class=\"4xx\"} 1"),
        "{text}"
    );
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_short_by_the_client_is_logged_with_its_status() {
    let setup = setup("answer").await;
    let mut stream = TcpStream::connect(setup.proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /bytes/50000000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut first = vec![0u8; 64 * 1024];
    stream.read_exact(&mut first).await.unwrap();
    drop(stream);
    let records = setup.records(1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].contains(r#""status":200"#), "{records:?}");
    let sent: u64 = records[0]
        .split(r#""bytes_sent":"#)
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|number| number.parse().ok())
        .expect("bytes_sent");
    assert!(
        sent > 0 && sent < 50_000_000,
        "bytes_sent {sent} should be what left before the cut"
    );
    let text = setup.proxy.metrics.encode();
    assert!(
        text.contains("weir_requests_total{virtual_server=\"web\",class=\"2xx\"} 1"),
        "{text}"
    );
    setup.stop().await;
}

/// A request that reached a node and failed there (a 504: no head in time) names the node
/// in its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_at_a_node_names_it() {
    let setup = setup_with("node", "[pools.p.timeouts]\nresponse = \"300ms\"").await;
    let response = weir_testkit::client::get(setup.proxy.addr, "/delay/2000")
        .await
        .unwrap();
    assert_eq!(response.status, 504);
    let records = setup.records(1).await;
    assert!(records[0].contains(r#""status":504"#), "{records:?}");
    let node = format!(r#""node":"{}""#, setup.origin.addr);
    assert!(records[0].contains(&node), "{records:?}");
    setup.stop().await;
}
