//! Test nodes and clients for the layer 4 tests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A node that reads each connection to its end, waits `hold`, answers `"<name> <bytes read>"`
/// and closes. It records what each connection sent and how many were open at once.
pub struct Node {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Vec<u8>>>>,
    pub peak: Arc<AtomicUsize>,
}

impl Node {
    pub async fn start(name: &'static str, hold: Duration) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let peak = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let (log, high) = (Arc::clone(&received), Arc::clone(&peak));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (log, high, open) = (Arc::clone(&log), Arc::clone(&high), Arc::clone(&open));
                tokio::spawn(async move {
                    let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                    high.fetch_max(now, Ordering::SeqCst);
                    let mut bytes = Vec::new();
                    let _ = stream.read_to_end(&mut bytes).await;
                    tokio::time::sleep(hold).await;
                    let answer = format!("{name} {}", bytes.len());
                    log.lock().unwrap().push(bytes);
                    let _ = stream.write_all(answer.as_bytes()).await;
                    // Counted open until its FIN: weir frees the slot only once it sees it.
                    open.fetch_sub(1, Ordering::SeqCst);
                    let _ = stream.shutdown().await;
                });
            }
        });
        Node {
            addr,
            received,
            peak,
        }
    }

    pub fn last_received(&self) -> Vec<u8> {
        self.received
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }
}

/// Sends `bytes`, half-closes, and returns all the answer (empty when closed at once).
pub async fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream.shutdown().await.unwrap();
    read_all(&mut stream).await
}

pub async fn read_all(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer));
    let _ = read.await.expect("the answer within 10 s");
    String::from_utf8_lossy(&answer).into_owned()
}

/// A config of one tcp virtual server `l4` (listen on port 0) over pool `p` with `nodes`.
pub fn tcp_config(nodes: &[SocketAddr], pool_extra: &str, vs_extra: &str) -> String {
    let nodes: Vec<String> = nodes
        .iter()
        .map(|n| format!("{{ address = \"{n}\" }}"))
        .collect();
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.p]\nnodes = [{}]\n{pool_extra}\n\n\
         [virtual_servers.l4]\nprotocol = \"tcp\"\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n{vs_extra}\n",
        nodes.join(", ")
    )
}

/// A config of one tls virtual server `s` (listen on port 0, a self-signed certificate for
/// `localhost`, then `tls_extra` keys of its `[tls]` table) over pool `p` with one node.
pub fn tls_config(node: SocketAddr, tls_extra: &str) -> String {
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n[pools.p]\nnodes = [{{ address = \"{node}\" }}]\n\
         [virtual_servers.s]\nprotocol = \"tls\"\nlisten = [\"127.0.0.1:0\"]\npool = \"p\"\n\
         [virtual_servers.s.tls]\ncertificates = [{{ self_signed = [\"localhost\"] }}]\n{tls_extra}"
    )
}

/// The value of one sample line of the metrics text (0 when absent).
pub fn metric(text: &str, sample: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}

/// The first flight of a rustls client naming `name`.
pub fn client_hello(name: &str) -> Vec<u8> {
    use weir_tls::rustls::pki_types::ServerName;
    use weir_tls::rustls::{ClientConfig, ClientConnection, RootCertStore};
    let provider = Arc::new(weir_tls::rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let mut connection = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    while connection.wants_write() {
        connection.write_tls(&mut out).unwrap();
    }
    out
}
