//! A node for the cache tests that counts the requests it gets and answers
//! with what the test's handler says (GET, HEAD and PURGE only: no bodies).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What the handler gets: the request head as text, and how many requests
/// came before this one.
pub type Handler = fn(head: &str, count: usize) -> Answer;

/// A response: status, fields, body.
pub struct Answer {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Sent chunked (its length unknown ahead), else with `Content-Length`.
    pub chunked: bool,
    /// A `103 Early Hints` goes first.
    pub early_hints: bool,
    /// The body follows its head after this pause.
    pub body_after: Option<Duration>,
    /// Made when the request comes, the answer is sent after this pause (its content from
    /// before whatever happens meanwhile).
    pub sent_after: Option<Duration>,
    /// Chunked: the second chunk (and the end) follows the first after this pause.
    pub chunk_pause: Option<Duration>,
}

impl Answer {
    pub fn ok(body: &[u8]) -> Answer {
        Answer {
            status: 200,
            fields: Vec::new(),
            body: body.to_vec(),
            chunked: false,
            early_hints: false,
            body_after: None,
            sent_after: None,
            chunk_pause: None,
        }
    }

    /// The answer, made as the request comes, is sent after `pause`.
    pub fn sent_after(mut self, pause: Duration) -> Answer {
        self.sent_after = Some(pause);
        self
    }

    /// The body goes chunked, its second chunk `pause` after its first.
    pub fn chunked_with_pause(mut self, pause: Duration) -> Answer {
        self.chunked = true;
        self.chunk_pause = Some(pause);
        self
    }

    /// The body follows the head after `pause` (the head alone reaches weir first).
    pub fn body_after(mut self, pause: Duration) -> Answer {
        self.body_after = Some(pause);
        self
    }

    /// A `103 Early Hints` (with a `Link`) goes before the answer.
    pub fn early_hints(mut self) -> Answer {
        self.early_hints = true;
        self
    }

    /// The body goes chunked, in two chunks.
    pub fn chunked(mut self) -> Answer {
        self.chunked = true;
        self
    }

    pub fn status(mut self, status: u16) -> Answer {
        self.status = status;
        self
    }

    pub fn field(mut self, name: &str, value: &str) -> Answer {
        self.fields.push((name.to_owned(), value.to_owned()));
        self
    }
}

pub struct CountingNode {
    pub addr: SocketAddr,
    count: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
    gate: Arc<watch::Sender<bool>>,
}

impl CountingNode {
    /// A node that waits `delay` before each answer.
    pub async fn start(handler: Handler, delay: Duration) -> CountingNode {
        let node = CountingNode::start_held(handler, delay).await;
        node.release();
        node
    }

    /// A node that counts the requests it gets but answers none until
    /// [`CountingNode::release`] (then each after `delay`).
    pub async fn start_held(handler: Handler, delay: Duration) -> CountingNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(watch::channel(false).0);
        let (counter, log, opened) = (Arc::clone(&count), Arc::clone(&heads), Arc::clone(&gate));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (counter, log) = (Arc::clone(&counter), Arc::clone(&log));
                let opened = opened.subscribe();
                tokio::spawn(serve(stream, handler, delay, counter, log, opened));
            }
        });
        CountingNode {
            addr,
            count,
            heads,
            gate,
        }
    }

    /// Lets a held node answer (the requests it holds, and all later ones).
    pub fn release(&self) {
        self.gate.send_replace(true);
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The request heads received, in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    handler: Handler,
    delay: Duration,
    count: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
    mut opened: watch::Receiver<bool>,
) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        // A request body (Content-Length only) is read and dropped.
        let length = head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..length);
        let before = count.fetch_add(1, Ordering::SeqCst);
        heads.lock().unwrap().push(head.clone());
        if opened.wait_for(|open| *open).await.is_err() {
            return;
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let answer = handler(&head, before);
        if let Some(pause) = answer.sent_after {
            tokio::time::sleep(pause).await;
        }
        let mut out = String::new();
        if answer.early_hints {
            out.push_str("HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n");
        }
        out.push_str(&format!("HTTP/1.1 {} X\r\n", answer.status));
        for (name, value) in &answer.fields {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        let bodyless = head.starts_with("HEAD ") || answer.status == 304;
        if answer.chunked && !bodyless {
            out.push_str("Transfer-Encoding: chunked\r\n\r\n");
        } else {
            out.push_str(&format!("Content-Length: {}\r\n\r\n", answer.body.len()));
        }
        let mut bytes = out.into_bytes();
        if let Some(pause) = answer.body_after.filter(|_| !bodyless) {
            if stream.write_all(&bytes).await.is_err() {
                return;
            }
            bytes.clear();
            tokio::time::sleep(pause).await;
        }
        if answer.chunked && !bodyless {
            let (first, second) = answer.body.split_at(answer.body.len() / 2);
            for (index, chunk) in [first, second].into_iter().enumerate() {
                if let (1, Some(pause)) = (index, answer.chunk_pause) {
                    if stream.write_all(&bytes).await.is_err() {
                        return;
                    }
                    bytes.clear();
                    tokio::time::sleep(pause).await;
                }
                bytes.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                bytes.extend_from_slice(chunk);
                bytes.extend_from_slice(b"\r\n");
            }
            bytes.extend_from_slice(b"0\r\n\r\n");
        } else if !bodyless {
            bytes.extend_from_slice(&answer.body);
        }
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}
