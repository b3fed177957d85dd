//! Never panic on network input: a fixed-seed stream of random and mutated
//! requests, several per connection, and the proxy must keep serving.
//!
//! Its own test binary, because it counts panics with a process-wide hook.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_testkit::{TestOrigin, TestProxy, client, config};

/// Panics anywhere in this process (proxy tasks included) since the hook was set.
static PANICS: AtomicUsize = AtomicUsize::new(0);

const CASES: usize = 2000;
const PER_CONNECTION: usize = 4;
const CONCURRENT: usize = 25;

/// Valid requests that mutations start from. No `/bytes` or `/delay`
/// targets, so that a mutated number cannot make a huge or slow answer.
const SEEDS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: t\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\"\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
    b"GET /?chunked=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"HEAD /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n\r\n",
    b"PUT /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
    b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, X-A\r\nUpgrade: websocket\r\nX-A: 1\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n",
    b"GET http://a.example.com/x?y HTTP/1.1\r\nHost: a.example.com\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
    b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
    b"GET /status/204 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
];

/// Pieces that parsers tend to trip over.
const SPECIAL_BYTES: &[u8] = b"\r\n\0 :\t\x7f\xff,;\"\\/?#%";
const SPECIAL_LINES: &[&[u8]] = &[
    b"Content-Length: 3\r\n",
    b"Content-Length: 99999999999999999999999\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip, chunked\r\n",
    b"Host: x\r\n",
    b"Connection: close, keep-alive, upgrade, host\r\n",
    b"Expect: 100-continue\r\n",
    b" folded\r\n",
    b"\r\n",
    b"0\r\n\r\n",
    b"ffffffffffffffff\r\n",
];

/// xorshift64*: small, fixed, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// One test input: random bytes, or a seed with a few mutations.
fn case(rng: &mut Rng) -> Vec<u8> {
    if rng.below(10) == 0 {
        let length = rng.below(300);
        return (0..length).map(|_| rng.next() as u8).collect();
    }
    let mut bytes = rng.pick(SEEDS).to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(8) {
            0 if at < bytes.len() => bytes[at] = rng.next() as u8,
            1 => bytes.insert(at, *rng.pick(SPECIAL_BYTES)),
            2 => {
                let end = (at + rng.below(8)).min(bytes.len());
                bytes.drain(at..end);
            }
            3 => bytes.truncate(at),
            4 => {
                let end = (at + rng.below(16)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
            5 => {
                // A special line at the start of some line.
                let line_start = bytes[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |lf| lf + 1);
                let line = rng.pick(SPECIAL_LINES);
                bytes.splice(line_start..line_start, line.iter().copied());
            }
            6 => {
                let other = rng.pick(SEEDS);
                let from = rng.below(other.len());
                bytes.splice(at..at, other[from..].iter().copied());
            }
            _ => {
                if at < bytes.len() && bytes[at].is_ascii_alphabetic() {
                    bytes[at] ^= 0x20; // flip case
                }
            }
        }
    }
    bytes
}

/// Sends one connection's worth of cases, half-closes, and returns what came back.
async fn send_cases(addr: std::net::SocketAddr, cases: Vec<Vec<u8>>) -> Vec<u8> {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        panic!("the proxy stopped accepting");
    };
    for case in &cases {
        if stream.write_all(case).await.is_err() {
            break; // the proxy closed after an answer; fine
        }
    }
    let _ = stream.shutdown().await;
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "connection left open after the client closed");
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_never_brings_the_proxy_down() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.limits]\nmax_body_bytes = \"64KiB\"",
    ))
    .await;

    let mut rng = Rng(0x5eed_0fca_5e5e_ed00);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut cases_sent = 0;
    while cases_sent < CASES {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..CONCURRENT {
            let cases: Vec<Vec<u8>> = (0..PER_CONNECTION).map(|_| case(&mut rng)).collect();
            cases_sent += cases.len();
            batch.spawn(send_cases(proxy.addr, cases));
        }
        while let Some(reply) = batch.join_next().await {
            let reply = reply.expect("client task");
            if !reply.is_empty() {
                assert!(
                    reply.starts_with(b"HTTP/1."),
                    "not an HTTP response: {:?}",
                    String::from_utf8_lossy(&reply[..reply.len().min(200)])
                );
                *statuses.entry(client::first_status(&reply)).or_default() += 1;
            }
        }
    }

    // Still serving, and nothing panicked on the way.
    let response = client::get(proxy.addr, "/").await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "statuses: {statuses:?}");
    // Both kinds of traffic were exercised: rejected and forwarded.
    assert!(
        statuses.get(&400).copied().unwrap_or(0) > 50,
        "{statuses:?}"
    );
    assert!(
        statuses.get(&200).copied().unwrap_or(0) > 20,
        "{statuses:?}"
    );
    assert!(
        statuses.keys().all(|status| matches!(
            status,
            100 | 200 | 204 | 400 | 404 | 405 | 408 | 413 | 414 | 417 | 431 | 501 | 505
        )),
        "unexpected statuses: {statuses:?}"
    );
    proxy.stop().await;
    origin.stop().await;
}
