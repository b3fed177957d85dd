//! A tunnel pair in-process on loopback, with test certificates and small TCP servers.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use weir_tls::{KeyType, TestCa};
use weir_tunnel::{Client, Metrics, Role, Server, parse_str};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A directory of certificates: `ca.pem`, `server.pem`/`.key`, `client.pem`/`.key`, and a
/// second CA's client pair (`stranger.pem`/`.key`) that the far side must refuse.
pub struct Certificates {
    pub dir: PathBuf,
}

impl Certificates {
    pub fn new() -> Certificates {
        let dir = std::env::temp_dir().join(format!(
            "weir-tunnel-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = TestCa::new("tunnel test CA").unwrap();
        let server = ca
            .server(&["127.0.0.1".to_owned()], KeyType::EcdsaP256, 30)
            .unwrap();
        let client = ca.client("near side", KeyType::EcdsaP256, 30).unwrap();
        let other = TestCa::new("another CA").unwrap();
        let stranger = other.client("stranger", KeyType::EcdsaP256, 30).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write("ca.pem", &ca.certificate().cert_pem);
        write("server.pem", &server.cert_pem);
        write("server.key", &server.key_pem);
        write("client.pem", &client.cert_pem);
        write("client.key", &client.key_pem);
        write("stranger.pem", &stranger.cert_pem);
        write("stranger.key", &stranger.key_pem);
        Certificates { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running side: its metrics and how to stop it.
pub struct Side {
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Side {
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Extra TOML for both sides' shared tables (`[link]`, `[dedup]` …).
pub fn server_toml(
    certs: &Certificates,
    listen: SocketAddr,
    services: &[(&str, SocketAddr)],
    extra: &str,
) -> String {
    let mut text = format!(
        "[server]\nlisten = \"{listen}\"\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\nconnect_timeout = \"2s\"\ndrain_timeout = \"1s\"\n{extra}\n",
        certs.path("server.pem"),
        certs.path("server.key"),
        certs.path("ca.pem"),
    );
    for (name, target) in services {
        text.push_str(&format!("[services.{name}]\nconnect = \"{target}\"\n"));
    }
    text
}

pub fn client_toml(
    certs: &Certificates,
    server: SocketAddr,
    identity: &str,
    services: &[&str],
    extra: &str,
) -> String {
    let mut text = format!(
        "[client]\nserver = \"{server}\"\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\nconnect_timeout = \"3s\"\ndrain_timeout = \"1s\"\n{extra}\n",
        certs.path("ca.pem"),
        certs.path(&format!("{identity}.pem")),
        certs.path(&format!("{identity}.key")),
    );
    for name in services {
        text.push_str(&format!("[services.{name}]\nlisten = \"127.0.0.1:0\"\n"));
    }
    text
}

/// Starts a far side; returns it and its UDP address.
/// Whether `error` or one of its causes is "address in use".
fn in_use(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

pub async fn start_server(toml: &str) -> (Side, SocketAddr) {
    let config =
        parse_str(toml, "server.toml", Role::Server).unwrap_or_else(|error| panic!("{error}"));
    let metrics = Metrics::new();
    // A restarted far side reuses its port: the stopped one's socket closes once quinn has
    // drained its connections, which may take a moment (a new process would not wait).
    let mut attempts = 0;
    let server = loop {
        match Server::bind(config.clone(), Arc::clone(&metrics)) {
            Ok(server) => break server,
            Err(error) if in_use(&error) && attempts < 100 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("{error}"),
        }
    };
    let address = server.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    (
        Side {
            metrics,
            stop: Some(stop),
            task: Some(task),
        },
        address,
    )
}

/// Starts a near side; returns it and each service's listen address, in order.
pub async fn start_client(toml: &str) -> (Side, Vec<SocketAddr>) {
    let config =
        parse_str(toml, "client.toml", Role::Client).unwrap_or_else(|error| panic!("{error}"));
    let metrics = Metrics::new();
    let client = Client::bind(config, Arc::clone(&metrics))
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let addresses = client
        .listen_addresses()
        .into_iter()
        .map(|(_, address)| address)
        .collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(client.run(async {
        let _ = stopped.await;
    }));
    (
        Side {
            metrics,
            stop: Some(stop),
            task: Some(task),
        },
        addresses,
    )
}

/// A far side on a free port with `services` and a near side ("client") for all of them,
/// both with `link`; returns far side, near side and the services' listen addresses.
pub async fn start_pair(
    certs: &Certificates,
    services: &[(&str, SocketAddr)],
    link: &str,
) -> (Side, Side, Vec<SocketAddr>) {
    let (server, udp) = start_server(&server_toml(
        certs,
        "127.0.0.1:0".parse().unwrap(),
        services,
        link,
    ))
    .await;
    let names: Vec<&str> = services.iter().map(|(name, _)| *name).collect();
    let (client, listen) = start_client(&client_toml(certs, udp, "client", &names, link)).await;
    (server, client, listen)
}

/// An echo server: each connection gets back what it sends, then a close.
pub async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
                let _ = write.shutdown().await;
            });
        }
    });
    address
}

/// A server that sends `data` to each connection that sends a byte, then closes.
pub async fn file_server(data: Arc<std::sync::Mutex<Vec<u8>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let data = data.lock().unwrap().clone();
            tokio::spawn(async move {
                let mut byte = [0u8; 1];
                if stream.read_exact(&mut byte).await.is_ok() {
                    let _ = stream.write_all(&data).await;
                    let _ = stream.shutdown().await;
                }
            });
        }
    });
    address
}

/// Connects, sends one byte, reads to the end.
pub async fn fetch(address: SocketAddr) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(address).await?;
    stream.write_all(b"?").await?;
    let mut data = Vec::new();
    stream.read_to_end(&mut data).await?;
    Ok(data)
}

/// Pseudo-random bytes from a seed (xorshift; fast in debug builds).
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut data = Vec::with_capacity(len + 8);
    while data.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    data.truncate(len);
    data
}

/// Waits up to `limit` for `condition`.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

pub fn exists(path: &Path) -> bool {
    path.exists()
}
