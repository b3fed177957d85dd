//! The cache endpoints of the REST API over a running proxy with a cache:
//! purge by URL, prefix, tag and everything, bans, and refusals.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_admin::{AdminState, Control};
use weir_core::Shutdown;
use weir_testkit::{TestProxy, client};

const TOKEN: &str = "cache-t0ken";

/// A node whose responses may be cached for a minute, tagged by their first
/// path segment; counts its requests.
async fn node(count: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 2048];
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        count.fetch_add(1, Ordering::SeqCst);
                        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                        let tag = path.split('/').nth(1).unwrap_or("");
                        let response = format!(
                            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nSurrogate-Key: {tag}\r\nContent-Length: {}\r\n\r\n{path}",
                            path.len()
                        );
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

async fn purge(admin: SocketAddr, body: &str) -> (u16, Value) {
    call(admin, "POST", "/api/v1/cache/web/purge", body).await
}

async fn call(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("a reply in time")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (head[9..12].parse().unwrap(), value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_by_url_prefix_tag_and_ban() {
    let count = Arc::new(AtomicUsize::new(0));
    let node = node(Arc::clone(&count)).await;
    let dir = std::env::temp_dir().join(format!("weir-cache-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("admin.token"), format!("{TOKEN}\n")).unwrap();
    let file = dir.join("weir.toml");
    std::fs::write(
        &file,
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"admin.token\"\n\n\
             [pools.web]\nnodes = [{{ address = \"{node}\" }}]\n\n\
             [virtual_servers.web]\nlisten = \"127.0.0.1:0\"\npool = \"web\"\n\
             [virtual_servers.web.cache]\n"
        ),
    )
    .unwrap();
    let proxy = TestProxy::start_file(&file).await;
    let control = Arc::new(Control::new(Arc::clone(&proxy.live)).expect("the token reads"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let state = AdminState {
        control: Some(control),
        ..AdminState::new(Arc::clone(&proxy.metrics), Arc::new(|| true))
    };
    let (shutdown, signal) = Shutdown::new();
    tokio::spawn(weir_admin::serve(listener, state, signal));

    let paths = ["/a/1", "/a/2", "/b/1", "/c/1", "/d/1"];
    let fill = || async {
        for path in paths {
            assert_eq!(client::get(proxy.addr, path).await.unwrap().status, 200);
        }
    };
    fill().await;
    fill().await;
    assert_eq!(count.load(Ordering::SeqCst), 5, "the second round hits");
    let (status, listed) = call(admin, "GET", "/api/v1/cache", "").await;
    assert_eq!(status, 200);
    assert_eq!(listed["caches"][0]["objects"], 5);

    // weir_testkit::client::get sends `Host: test`.
    let host = "http://test";
    assert_eq!(
        purge(admin, &format!("{{\"url\": \"{host}/b/1\"}}")).await,
        (200, serde_json::json!({"purged": 1}))
    );
    assert_eq!(
        purge(admin, &format!("{{\"prefix\": \"{host}/a/\"}}")).await,
        (200, serde_json::json!({"purged": 2}))
    );
    assert_eq!(
        purge(admin, "{\"tag\": \"c\"}").await,
        (200, serde_json::json!({"purged": 1}))
    );
    let (status, banned) = call(
        admin,
        "POST",
        "/api/v1/cache/web/bans",
        "{\"pattern\": \"/d/\"}",
    )
    .await;
    assert_eq!(status, 200, "{banned}");
    let (_, bans) = call(admin, "GET", "/api/v1/cache/web/bans", "").await;
    assert_eq!(bans["bans"][0]["pattern"], "/d/");
    fill().await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        10,
        "every object was purged or banned"
    );
    assert_eq!(purge(admin, "{\"all\": true}").await.1["purged"], 5);

    // Refusals: bad bodies, bad patterns, unknown virtual servers.
    assert_eq!(purge(admin, "{\"url\": \"not a url\"}").await.0, 400);
    assert_eq!(purge(admin, "[]").await.0, 400);
    assert_eq!(
        call(
            admin,
            "POST",
            "/api/v1/cache/web/bans",
            "{\"pattern\": \"(\"}"
        )
        .await
        .0,
        400
    );
    assert_eq!(call(admin, "GET", "/api/v1/cache/nope", "").await.0, 404);
    // A body that says more than one thing, or says it otherwise, purges nothing.
    fill().await;
    refused_bodies_and_paths(admin).await;
    assert_eq!(purge(admin, "{\"all\": true}").await.1["purged"], 5);
    shutdown.trigger();
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Bodies that say more than one thing, or say it otherwise, purge and ban nothing; paths
/// that name no resource are 404 whatever the method, not 405.
async fn refused_bodies_and_paths(admin: SocketAddr) {
    for body in [
        "{\"url\": 5, \"all\": true}",
        "{\"url\": \"http://x/a\", \"all\": true}",
        "{\"url\": 5}",
        "{\"all\": 1}",
        "{\"all\": false}",
        "{\"everything\": true}",
        "{}",
        // A name given twice: a map would keep the last, and act on it alone.
        "{\"url\": \"http://x/other\", \"url\": \"http://x/a\"}",
        "{\"all\": true, \"all\": true}",
    ] {
        let (status, answer) = purge(admin, body).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    for body in [
        "{\"pattern\": 5}",
        "{\"pattern\": \"/a/\", \"all\": true}",
        "{\"pattern\": \"x\", \"pattern\": \"/a/\"}",
    ] {
        let (status, answer) = call(admin, "POST", "/api/v1/cache/web/bans", body).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    // Paths that name no resource are 404 whatever the method, not 405.
    for (method, path) in [
        ("GET", "/api/v1/cache/web/nosuch"),
        ("POST", "/api/v1/cache/web/nosuch"),
        ("DELETE", "/api/v1/cache/nope"),
        ("DELETE", "/api/v1/cache/nope/purge"),
    ] {
        assert_eq!(
            call(admin, method, path, "").await.0,
            404,
            "{method} {path}"
        );
    }
    assert_eq!(
        call(admin, "PUT", "/api/v1/cache/web/purge", "{}").await.0,
        405
    );
}
