//! The REST API over a running proxy: authentication, the model and its dry run, node
//! operations written to the config file and applied, and refusals that change nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_admin::{AdminState, Control};
use weir_core::Shutdown;
use weir_testkit::dns::{Reply as DnsReply, TestDns};
use weir_testkit::{TestOrigin, TestProxy, client};

const TOKEN: &str = "t0ken-for-tests";

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("weir-api-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Setup {
    proxy: TestProxy,
    admin: SocketAddr,
    file: PathBuf,
    origins: Vec<TestOrigin>,
    shutdown: Shutdown,
    _dir: TempDir,
}

struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn config_text(port: u16, nodes: &[SocketAddr]) -> String {
    let nodes: Vec<String> = nodes
        .iter()
        .map(|n| format!("  {{ address = \"{n}\" }},\n"))
        .collect();
    format!(
        "# Written by the API test.\n[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"admin.token\"\n\n\
         [pools.web]\n# the app servers\nnodes = [\n{}]\n\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{port}\"\npool = \"web\"\n",
        nodes.concat()
    )
}

async fn setup(name: &str) -> Setup {
    setup_with(name, |port, a, b| config_text(port, &[a, b])).await
}

/// [`setup`] with the config `make` writes for the proxy's port and origins a and b.
async fn setup_with(name: &str, make: impl FnOnce(u16, SocketAddr, SocketAddr) -> String) -> Setup {
    let dir = TempDir::new(name);
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    std::fs::write(dir.0.join("admin.token"), format!("{TOKEN}\n")).unwrap();
    let file = dir.0.join("weir.toml");
    let port = weir_testkit::free_ports::<1>()[0];
    std::fs::write(&file, make(port, a.addr, b.addr)).unwrap();
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
    Setup {
        proxy,
        admin,
        file,
        origins: vec![a, b],
        shutdown,
        _dir: dir,
    }
}

async fn call(
    admin: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: impl AsRef<[u8]>,
) -> Reply {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    call_with(admin, (method, path), &auth, body).await
}

/// One request with `headers` (whole lines, each ending in CRLF) in its head.
async fn call_with(
    admin: SocketAddr,
    (method, path): (&str, &str),
    headers: &str,
    body: impl AsRef<[u8]>,
) -> Reply {
    let body = body.as_ref();
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(&[head.as_bytes(), body].concat())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("a reply in time")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    Reply {
        status: head[9..12].parse().unwrap(),
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

async fn api(admin: SocketAddr, method: &str, path: &str, body: impl AsRef<[u8]>) -> Reply {
    call(admin, method, path, Some(TOKEN), body).await
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

impl Setup {
    async fn stop(self) {
        self.shutdown.trigger();
        self.proxy.stop().await;
        for origin in self.origins {
            origin.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_gets_401_and_changes_nothing() {
    let setup = setup("auth").await;
    let before = read(&setup.file);
    let node = setup.origins[0].addr;
    for token in [None, Some("wrong"), Some("t0ken-for-test")] {
        let path = format!("/api/v1/pools/web/nodes/{node}/drain");
        let reply = call(setup.admin, "POST", &path, token, "").await;
        assert_eq!(reply.status, 401, "{token:?}: {}", reply.body);
        assert_eq!(
            call(setup.admin, "GET", "/api/v1/status", token, "")
                .await
                .status,
            401
        );
        assert_eq!(
            call(setup.admin, "GET", "/metrics", token, "").await.status,
            401
        );
    }
    assert_eq!(read(&setup.file), before, "the file is untouched");
    assert_eq!(setup.proxy.live.generation(), 1);
    // Each refusal counted, for an alert on someone guessing the token.
    let metrics = setup.proxy.metrics.encode();
    assert!(
        metrics.contains("weir_admin_unauthorized_total 9\n"),
        "{metrics}"
    );
    // The health check and the dashboard page need no token; the right token works.
    assert_eq!(
        call(setup.admin, "GET", "/healthz", None, "").await.status,
        200
    );
    assert_eq!(call(setup.admin, "GET", "/", None, "").await.status, 200);
    let status = api(setup.admin, "GET", "/api/v1/status", "").await;
    assert_eq!(status.status, 200);
    assert_eq!(status.json()["pools"][0]["nodes"][0]["state"], "active");

    // Refused from its head: the 401 comes without weir waiting for (or holding) the
    // body it announces.
    let mut stream = TcpStream::connect(setup.admin).await.unwrap();
    stream
        .write_all(
            b"PUT /api/v1/config HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer wrong\r\n\
              Content-Length: 8000000\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut answer))
        .await
        .expect("answered before the body")
        .unwrap();
    assert_eq!(&answer, b"HTTP/1.1 401");
    setup.stop().await;
}

/// A method a resource does not take gets 405 naming the ones it does, in JSON like every
/// other error; so does a body past the admin listener's limit (413).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_methods_get_405_with_allow_and_errors_are_json() {
    let setup = setup("methods").await;
    let node = setup.origins[0].addr;
    for (method, path, allow) in [
        ("DELETE", "/api/v1/config".to_owned(), "GET, HEAD, PUT"),
        ("PUT", "/api/v1/reload".to_owned(), "GET, HEAD, POST"),
        ("POST", "/api/v1/status".to_owned(), "GET, HEAD"),
        (
            "GET",
            format!("/api/v1/pools/web/nodes/{node}/drain"),
            "POST",
        ),
        (
            "POST",
            format!("/api/v1/pools/web/nodes/{node}/weight"),
            "PUT",
        ),
        ("DELETE", "/api/v1/cache".to_owned(), "GET, HEAD"),
    ] {
        let reply = api(setup.admin, method, &path, "").await;
        assert_eq!(reply.status, 405, "{method} {path}: {}", reply.body);
        assert!(
            reply.head.contains(&format!("\r\nAllow: {allow}\r\n")),
            "{method} {path}: {}",
            reply.head
        );
        assert!(reply.body.contains("\"error\""), "{}", reply.body);
    }
    // A path that names no resource is 404 whatever the method: an operation weir does not
    // have, or the cache of a virtual server that has none.
    for path in [
        format!("/api/v1/pools/web/nodes/{node}/nosuch"),
        format!("/api/v1/pools/nope/nodes/{node}/drain"),
        "/api/v1/cache/web/purge".to_owned(),
    ] {
        for method in ["GET", "POST", "DELETE"] {
            let reply = api(setup.admin, method, &path, "").await;
            assert_eq!(reply.status, 404, "{method} {path}: {}", reply.body);
        }
    }
    // A body announced past the limit is refused before it is sent.
    let mut stream = TcpStream::connect(setup.admin).await.unwrap();
    let head = format!(
        "PUT /api/v1/config HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: {}\r\n\r\n",
        8 * 1024 * 1024 + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("a reply in time")
        .unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert!(
        text.contains("application/json") && text.contains("\"error\""),
        "{text}"
    );
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_gets_400_naming_the_field() {
    let setup = setup("json").await;
    let before = read(&setup.file);
    let path = format!("/api/v1/pools/web/nodes/{}/weight", setup.origins[0].addr);
    for (body, message) in [
        (r#"{"weight": }"#, "malformed JSON in field \"weight\": "),
        (
            r#"{"weight": "x"}"#,
            "field \"weight\": \"x\" is not a whole number",
        ),
        (
            r#"{"weight": 0}"#,
            "field \"weight\": 0 is not a whole number between 1 and 10000",
        ),
        (
            r#"{"wieght": 2}"#,
            "unknown field \"wieght\"; expected \"weight\"",
        ),
        ("{}", "missing field \"weight\""),
        (
            r#"{"weight": 1, "weight": 900}"#,
            "field \"weight\" given more than once",
        ),
    ] {
        let reply = api(setup.admin, "PUT", &path, body).await;
        assert_eq!(reply.status, 400, "{body}");
        let error = reply.json()["error"].as_str().unwrap().to_owned();
        assert!(error.starts_with(message), "{body}: {error}");
    }
    assert_eq!(read(&setup.file), before);
    assert_eq!(setup.proxy.live.generation(), 1);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_given_by_name_shows_its_name_and_address() {
    let dns = TestDns::start();
    dns.set(
        "a.test",
        DnsReply::Records(vec!["127.0.0.1".parse().unwrap()], 60),
    );
    let server = dns.address;
    let setup = setup_with("names", |port, a, b| {
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"admin.token\"\n\n\
             [pools.web]\nnodes = [\n  {{ address = \"{b}\" }},\n  \
             {{ address = \"a.test:{}\" }},\n]\n\n\
             [pools.web.dns]\nservers = [\"{server}\"]\n\n\
             [virtual_servers.web]\nlisten = \"127.0.0.1:{port}\"\npool = \"web\"\n",
            a.port()
        )
    })
    .await;
    let (a, b) = (setup.origins[0].addr, setup.origins[1].addr);
    let status = api(setup.admin, "GET", "/api/v1/status", "").await.json();
    let nodes = &status["pools"][0]["nodes"];
    assert_eq!(nodes[0]["address"], b.to_string());
    assert_eq!(nodes[0]["name"], Value::Null);
    assert_eq!(nodes[1]["address"], a.to_string());
    assert_eq!(nodes[1]["name"], format!("a.test:{}", a.port()));
    let config = api(setup.admin, "GET", "/api/v1/config", "").await.json();
    let written = &config["pools"][0]["nodes"][1];
    assert_eq!(written["address"], format!("a.test:{}", a.port()));
    assert_eq!(written["resolved"], true);
    // An address a name resolved to has no entry of its own: refused, pointing to the name.
    let refused = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{a}/drain"),
        "",
    )
    .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    let label = format!("a.test:{}", a.port());
    assert!(
        refused.body.contains(&format!("nodes/{label}/")),
        "{}",
        refused.body
    );
    // The name, as the status lists it, edits its entry (for every address it resolves to).
    let shouted = format!("A.TEST.:{}", a.port());
    let drained = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{shouted}/drain"),
        "",
    )
    .await;
    assert_eq!(drained.status, 200, "{}", drained.body);
    let answer = drained.json();
    assert_eq!(
        answer["diff"]["nodes"][0]["name"],
        label.as_str(),
        "{answer}"
    );
    assert_eq!(answer["diff"]["nodes"][0]["keys"][0], "state", "{answer}");
    let text = read(&setup.file);
    assert!(
        text.contains(&format!(
            "{{ address = \"{label}\", state = \"draining\" }}"
        )),
        "{text}"
    );
    let status = api(setup.admin, "GET", "/api/v1/status", "").await.json();
    assert_eq!(status["pools"][0]["nodes"][1]["state"], "draining");
    assert_eq!(status["pools"][0]["nodes"][0]["state"], "active");
    let other = format!("/api/v1/pools/web/nodes/b.test:{}/drain", a.port());
    let missing = api(setup.admin, "POST", &other, "").await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_operations_edit_the_file_and_apply_it() {
    let setup = setup("nodes").await;
    let (a, b) = (setup.origins[0].addr, setup.origins[1].addr);
    let drained = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{a}/drain"),
        "",
    )
    .await;
    assert_eq!(drained.status, 200, "{}", drained.body);
    assert_eq!(drained.json()["generation"], 2);
    let text = read(&setup.file);
    assert!(
        text.contains(&format!("{{ address = \"{a}\", state = \"draining\" }}")),
        "{text}"
    );
    assert!(
        text.starts_with("# Written by the API test.\n"),
        "comments kept"
    );
    // Every request now goes to b.
    let before = setup.origins[0].stats.requests();
    for _ in 0..6 {
        let response = client::get(setup.proxy.addr, "/").await.unwrap();
        assert_eq!(response.header("x-origin"), Some("b"));
    }
    assert_eq!(setup.origins[0].stats.requests(), before);
    let status = api(setup.admin, "GET", "/api/v1/status", "").await.json();
    assert_eq!(status["pools"][0]["nodes"][0]["state"], "draining");

    // Weight, then enable again: back to round robin over both.
    let weighted = api(
        setup.admin,
        "PUT",
        &format!("/api/v1/pools/web/nodes/{b}/weight"),
        r#"{"weight": 5}"#,
    )
    .await;
    assert_eq!(weighted.status, 200, "{}", weighted.body);
    let enabled = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{a}/enable"),
        "",
    )
    .await;
    assert_eq!(enabled.status, 200);
    let model = api(setup.admin, "GET", "/api/v1/config", "").await.json();
    assert_eq!(model["generation"], 4);
    assert_eq!(model["pools"][0]["nodes"][0]["state"], "active");
    assert_eq!(model["pools"][0]["nodes"][1]["weight"], 5);
    // Unknown nodes and pools: 404, nothing changed.
    let missing = api(
        setup.admin,
        "POST",
        "/api/v1/pools/web/nodes/127.0.0.1:1/drain",
        "",
    )
    .await;
    assert_eq!(missing.status, 404);
    let path = format!("/api/v1/pools/nope/nodes/{a}/drain");
    assert_eq!(api(setup.admin, "POST", &path, "").await.status, 404);
    let bad = api(
        setup.admin,
        "POST",
        "/api/v1/pools/web/nodes/nonsense/drain",
        "",
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(setup.proxy.live.generation(), 4);
    setup.stop().await;
}

/// A config file reached through a symbolic link (kept in a checkout, say) stays a link: a
/// node operation edits the file it points to, and keeps that file's permissions, owner
/// and group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_config_file_is_edited_where_it_lives() {
    use std::os::unix::fs::PermissionsExt;
    let setup = setup("linked").await;
    let a = setup.origins[0].addr;
    let checkout = setup._dir.0.join("checkout");
    std::fs::create_dir(&checkout).unwrap();
    let target = checkout.join("weir.toml");
    std::fs::rename(&setup.file, &target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    // Another owner and group (a deploy user's), where the test may give them.
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&target, Some(65534), Some(65534)).unwrap();
    }
    let owner = |path: &Path| {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).unwrap();
        (meta.uid(), meta.gid())
    };
    let before = owner(&target);
    std::os::unix::fs::symlink(&target, &setup.file).unwrap();
    let drained = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{a}/drain"),
        "",
    )
    .await;
    assert_eq!(drained.status, 200, "{}", drained.body);
    let link = std::fs::symlink_metadata(&setup.file).unwrap();
    assert!(link.file_type().is_symlink(), "the link was replaced");
    let text = read(&target);
    assert!(text.contains("state = \"draining\""), "{text}");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert_eq!(owner(&target), before, "owner and group kept");
    assert_eq!(
        std::fs::read_dir(&checkout).unwrap().count(),
        1,
        "a temporary file left"
    );
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_is_validated_with_its_diff_then_applied() {
    let setup = setup("candidate").await;
    let (a, b) = (setup.origins[0].addr, setup.origins[1].addr);
    let port = setup.proxy.addr.port();
    // Dry run: the diff, nothing applied.
    let candidate = config_text(port, &[b]);
    let dry = api(setup.admin, "POST", "/api/v1/config/validate", &candidate).await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    let dry = dry.json();
    assert_eq!(dry["valid"], true);
    assert_eq!(dry["diff"]["nodes"][0]["address"], a.to_string());
    assert_eq!(dry["diff"]["nodes"][0]["change"], "removed");
    assert_eq!(setup.proxy.live.generation(), 1);
    // An invalid one: 422 with file, line and key; nothing applied.
    let invalid = candidate.replace("pool = \"web\"", "pool = \"wbe\"");
    let refused = api(setup.admin, "POST", "/api/v1/config/validate", &invalid).await;
    assert_eq!(refused.status, 422);
    // A dry run is no reload: nothing recorded.
    assert!(setup.proxy.live.last_reload().is_none());
    let error = &refused.json()["errors"][0];
    assert_eq!(error["key"], "virtual_servers.web.pool");
    assert_eq!(error["line"], 18);
    assert_eq!(
        error["message"],
        "unknown pool \"wbe\" (did you mean \"web\"?); defined pools: web"
    );
    let refused = api(setup.admin, "PUT", "/api/v1/config", &invalid).await;
    assert_eq!(refused.status, 422);
    assert!(
        !read(&setup.file).contains("wbe"),
        "an invalid candidate is never written"
    );
    // A refused change, logged and counted as one (what an alert on reload success reads).
    let last = setup
        .proxy
        .live
        .last_reload()
        .expect("the refusal is recorded");
    assert!(
        last.error.as_deref().is_some_and(|e| e.contains("wbe")),
        "{last:?}"
    );
    let metrics = setup.proxy.metrics.encode();
    assert!(
        metrics.contains("weir_config_last_reload_success 0\n"),
        "{metrics}"
    );
    // A body that is no UTF-8 text: 400, and a refused change too.
    let before = read(&setup.file);
    let not_text = [candidate.as_bytes(), b"\n# \xff\xfe\n"].concat();
    let refused = api(setup.admin, "PUT", "/api/v1/config", &not_text).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let last = setup.proxy.live.last_reload().expect("recorded");
    assert!(
        last.error.as_deref().is_some_and(|e| e.contains("UTF-8")),
        "{last:?}"
    );
    assert_eq!(read(&setup.file), before, "nothing written");
    // Applied: written to the file, then reloaded.
    let applied = api(setup.admin, "PUT", "/api/v1/config", &candidate).await;
    assert_eq!(applied.status, 200, "{}", applied.body);
    assert_eq!(applied.json()["generation"], 2);
    assert_eq!(read(&setup.file), candidate);
    let response = client::get(setup.proxy.addr, "/").await.unwrap();
    assert_eq!(response.header("x-origin"), Some("b"));
    setup.stop().await;
}

/// Two operators: B drains a node while A edits the file it read before. A's `PUT` with
/// the ETag it read gets 412 and B's drain stays; after reading again, A's `PUT` applies.
/// Without `If-Match` a `PUT` replaces the file as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_with_a_stale_etag_is_refused_with_412() {
    let setup = setup("etag").await;
    let a = setup.origins[0].addr;
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let first = api(setup.admin, "GET", "/api/v1/config/toml", "").await;
    let etag = |reply: &Reply| {
        reply
            .head
            .lines()
            .find_map(|line| line.strip_prefix("ETag: "))
            .expect("an ETag")
            .to_owned()
    };
    let read_tag = etag(&first);
    assert!(
        read_tag.starts_with('"') && read_tag.len() == 34,
        "{read_tag}"
    );
    let drained = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{a}/drain"),
        "",
    )
    .await;
    assert_eq!(drained.status, 200, "{}", drained.body);
    let after_drain = read(&setup.file);
    // A's edit of what it read: the log level, made before the drain.
    let edit = |text: &str| text.replace("level = \"warn\"", "level = \"info\"");
    let stale = call_with(
        setup.admin,
        ("PUT", "/api/v1/config"),
        &format!("{auth}If-Match: {read_tag}\r\n"),
        edit(&first.body),
    )
    .await;
    assert_eq!(stale.status, 412, "{}", stale.body);
    assert_eq!(read(&setup.file), after_drain, "the drain was undone");
    assert_ne!(etag(&stale), read_tag);
    // The same condition on whatever else reads or edits the file: a node operation, the
    // reload, the file itself.
    for (method, path) in [
        ("POST", format!("/api/v1/pools/web/nodes/{a}/enable")),
        ("POST", "/api/v1/reload".to_owned()),
        ("GET", "/api/v1/config/toml".to_owned()),
    ] {
        let refused = call_with(
            setup.admin,
            (method, &path),
            &format!("{auth}If-Match: {read_tag}\r\n"),
            "",
        )
        .await;
        assert_eq!(refused.status, 412, "{method} {path}: {}", refused.body);
    }
    assert_eq!(read(&setup.file), after_drain, "a refused operation wrote");
    assert_eq!(setup.proxy.live.generation(), 2, "a refused reload applied");
    // A weak tag, or another tag, never matches; the current one (among others) does.
    let again = api(setup.admin, "GET", "/api/v1/config/toml", "").await;
    let now = etag(&again);
    assert_eq!(etag(&stale), now);
    for condition in [format!("W/{now}"), "\"x\"".to_owned()] {
        let refused = call_with(
            setup.admin,
            ("PUT", "/api/v1/config"),
            &format!("{auth}If-Match: {condition}\r\n"),
            edit(&again.body),
        )
        .await;
        assert_eq!(refused.status, 412, "{condition}");
    }
    let applied = call_with(
        setup.admin,
        ("PUT", "/api/v1/config"),
        &format!("{auth}If-Match: \"x\", {now}\r\n"),
        edit(&again.body),
    )
    .await;
    assert_eq!(applied.status, 200, "{}", applied.body);
    assert!(read(&setup.file).contains("draining"), "B's drain was lost");
    let current = etag(&api(setup.admin, "GET", "/api/v1/config/toml", "").await);
    let enabled = call_with(
        setup.admin,
        ("POST", &format!("/api/v1/pools/web/nodes/{a}/enable")),
        &format!("{auth}If-Match: {current}\r\n"),
        "",
    )
    .await;
    assert_eq!(enabled.status, 200, "{}", enabled.body);
    assert!(!read(&setup.file).contains("draining"));
    assert!(read(&setup.file).contains("level = \"info\""));
    setup.stop().await;
}

/// With the config file gone, no `If-Match` holds (412, not a failure to read it), and a
/// `PUT` whose reload is refused leaves no file behind: nothing later reads the refused
/// candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_config_file_matches_no_etag_and_a_refused_put_leaves_none() {
    let setup = setup("missing").await;
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let text = read(&setup.file);
    std::fs::remove_file(&setup.file).unwrap();
    let a = setup.origins[0].addr;
    let drain = format!("/api/v1/pools/web/nodes/{a}/drain");
    for (method, path) in [
        ("PUT", "/api/v1/config"),
        ("POST", "/api/v1/reload"),
        ("POST", drain.as_str()),
        ("GET", "/api/v1/config/toml"),
    ] {
        let refused = call_with(
            setup.admin,
            (method, path),
            &format!("{auth}If-Match: *\r\n"),
            text.clone(),
        )
        .await;
        assert_eq!(refused.status, 412, "{method} {path}: {}", refused.body);
    }
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let candidate = text.replace(
        &setup.proxy.addr.to_string(),
        &busy.local_addr().unwrap().to_string(),
    );
    assert_ne!(candidate, text);
    let refused = api(setup.admin, "PUT", "/api/v1/config", &candidate).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        !setup.file.exists(),
        "the refused candidate was left as the file"
    );
    assert_eq!(setup.proxy.live.generation(), 1);
    drop(busy);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_edited_but_not_reloaded_is_not_overwritten() {
    let setup = setup("conflict").await;
    let a = setup.origins[0].addr;
    let edited =
        read(&setup.file).replace("level = \"warn\"", "level = \"warn\"\naccess_log = true");
    // Invalid TOML would do too: the point is that it differs from what runs.
    let edited = edited.replace("access_log = false\n", "");
    std::fs::write(&setup.file, &edited).unwrap();
    let reply = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{a}/drain"),
        "",
    )
    .await;
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert_eq!(read(&setup.file), edited);
    // Reloading it first resolves the conflict.
    let reloaded = api(setup.admin, "POST", "/api/v1/reload", "").await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    let reply = api(
        setup.admin,
        "POST",
        &format!("/api/v1/pools/web/nodes/{a}/drain"),
        "",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let stats = api(setup.admin, "GET", "/api/v1/stats", "").await.json();
    assert_eq!(stats["generation"], 3);
    assert_eq!(stats["last_reload"]["applied"], true);
    setup.stop().await;
}

/// A client that sends `Expect: 100-continue` and waits (curl does for bodies over 1 MiB)
/// gets `100 Continue` once its head passed, then its answer; one refused from its head
/// gets the refusal and no 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_before_the_body() {
    let setup = setup("continue").await;
    let candidate = config_text(setup.proxy.addr.port(), &[setup.origins[0].addr]);
    for (token, first) in [(TOKEN, "HTTP/1.1 100 Continue"), ("wrong", "HTTP/1.1 401")] {
        let mut stream = TcpStream::connect(setup.admin).await.unwrap();
        let head = format!(
            "POST /api/v1/config/validate HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {token}\r\n\
             Content-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
            candidate.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        // Nothing of the body is sent before an answer comes.
        let mut got = vec![0u8; 512];
        let read = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut got))
            .await
            .expect("an answer to the head alone")
            .unwrap();
        let text = String::from_utf8_lossy(&got[..read]).into_owned();
        assert!(text.starts_with(first), "{token}: {text}");
        if token != TOKEN {
            continue;
        }
        stream.write_all(candidate.as_bytes()).await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
            .await
            .expect("the answer in time")
            .unwrap();
        let all = format!("{text}{}", String::from_utf8_lossy(&rest));
        let last = all.rsplit("HTTP/1.1 ").next().unwrap();
        assert!(last.starts_with("200 "), "{all}");
    }
    setup.stop().await;
}

/// An API request that names no resource (an unknown path, a method the resource does not
/// take, a pool, node or cache the running config does not have) is refused from its head:
/// a client waiting to send a large body gets the refusal, not `100 Continue`, and weir
/// reads none of the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_no_resource_is_refused_before_its_body() {
    let setup = setup("refused-head").await;
    let node = setup.origins[0].addr;
    let cases = [
        ("POST", "/api/v1/status".to_owned(), 405),
        ("DELETE", "/api/v1/config".to_owned(), 405),
        ("POST", "/api/v1/no-such-thing".to_owned(), 404),
        (
            "POST",
            format!("/api/v1/pools/nope/nodes/{node}/drain"),
            404,
        ),
        (
            "POST",
            "/api/v1/pools/web/nodes/192.0.2.1:80/drain".to_owned(),
            404,
        ),
        (
            "PUT",
            "/api/v1/pools/web/nodes/192.0.2.1:80/weight".to_owned(),
            404,
        ),
        (
            "POST",
            format!("/api/v1/pools/web/nodes/{node}/restart"),
            404,
        ),
        ("POST", "/api/v1/cache/web/purge".to_owned(), 404),
        ("PUT", "/api/v1/cache".to_owned(), 405),
    ];
    for (method, path, status) in cases {
        let mut stream = TcpStream::connect(setup.admin).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Length: 8000000\r\nExpect: 100-continue\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
            .await
            .unwrap_or_else(|_| panic!("{method} {path}: answered and closed from the head"))
            .unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} ")),
            "{method} {path}: {text}"
        );
        if status == 405 {
            assert!(text.contains("\r\nAllow: "), "{method} {path}: {text}");
        }
    }
    // The same node operation on a node that exists goes on to its body.
    let mut stream = TcpStream::connect(setup.admin).await.unwrap();
    let head = format!(
        "PUT /api/v1/pools/web/nodes/{node}/weight HTTP/1.1\r\nHost: admin\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: 13\r\nExpect: 100-continue\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut got = vec![0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut got))
        .await
        .expect("an answer to the head")
        .unwrap();
    let text = String::from_utf8_lossy(&got[..read]);
    assert!(text.starts_with("HTTP/1.1 100 Continue"), "{text}");
    setup.stop().await;
}

/// A HEAD request refused from its head gets the refusal's head and no body (RFC 9110,
/// section 9.3.2), also when it announced an empty body of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_request_refused_from_its_head_gets_no_body() {
    let setup = setup("refused-head-method").await;
    for (path, token, status) in [
        ("/api/v1/status", None, 401),
        ("/api/v1/nothing", Some(TOKEN), 404),
        ("/nothing", None, 404),
    ] {
        let reply = call(setup.admin, "HEAD", path, token, "").await;
        assert_eq!(reply.status, status, "{path}: {}", reply.head);
        assert!(reply.head.contains("Content-Length: "), "{}", reply.head);
        assert_eq!(reply.body, "", "{path}");
    }
    setup.stop().await;
}

/// A request body is not timed as a whole against the head's 5 s: one that keeps coming
/// over a slow link is read, and one that stops for 5 s gets 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_is_read_while_it_keeps_coming() {
    let setup = setup("slow-body").await;
    let candidate = config_text(setup.proxy.addr.port(), &[setup.origins[0].addr]);
    let send = async |pause_at: Option<usize>| {
        let mut stream = TcpStream::connect(setup.admin).await.unwrap();
        let head = format!(
            "POST /api/v1/config/validate HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            candidate.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        // Eight pieces a second apart: the body takes 7 s, more than the head's 5 s.
        let pieces: Vec<&[u8]> = candidate
            .as_bytes()
            .chunks(candidate.len().div_ceil(8))
            .collect();
        for (index, piece) in pieces.iter().enumerate() {
            if index > 0 {
                let pause = match pause_at == Some(index) {
                    true => Duration::from_millis(6_500),
                    false => Duration::from_secs(1),
                };
                tokio::time::sleep(pause).await;
            }
            if stream.write_all(piece).await.is_err() {
                break;
            }
        }
        let mut raw = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await;
        String::from_utf8_lossy(&raw).into_owned()
    };
    let (steady, stalled) = tokio::join!(send(None), send(Some(2)));
    assert!(steady.starts_with("HTTP/1.1 200 "), "{steady}");
    assert!(stalled.starts_with("HTTP/1.1 408 "), "{stalled}");
    setup.stop().await;
}

/// A token file that cannot be read makes the API answer 503, without saying which file or
/// why to a client that has shown no token (weir's log says it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_token_file_is_not_described_to_clients() {
    let setup = setup("token-gone").await;
    assert_eq!(
        api(setup.admin, "GET", "/api/v1/status", "").await.status,
        200
    );
    // A new generation reads the token at its first request: emptied meanwhile (a file
    // rewritten in place), it cannot be read.
    let text = read(&setup.file).replace("# Written by", "# Reloaded, written by");
    std::fs::write(&setup.file, text).unwrap();
    setup.proxy.live.reload_file().unwrap();
    let token = setup.file.with_file_name("admin.token");
    std::fs::write(&token, "").unwrap();
    for path in ["/api/v1/status", "/metrics"] {
        let reply = call(setup.admin, "GET", path, None, "").await;
        assert_eq!(reply.status, 503, "{path}: {}", reply.body);
        assert!(
            !reply.body.contains("admin.token"),
            "{path}: {}",
            reply.body
        );
        assert!(
            !reply
                .body
                .contains(&*setup.file.parent().unwrap().to_string_lossy()),
            "{}",
            reply.body
        );
    }
    setup.stop().await;
}

/// A config file grown past the most a config may be (here a sparse file: no disk used) is
/// refused by every admin call that reads it, as a reload refuses it, without reading it
/// into the process; a `PUT` does not write over it (it could not be put back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_past_the_size_limit_is_refused_unread_by_the_api() {
    let setup = setup("huge").await;
    let a = setup.origins[0].addr;
    let text = read(&setup.file);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&setup.file)
        .unwrap();
    file.set_len(weir_config::MAX_CONFIG_BYTES + 1).unwrap();
    drop(file);
    for (method, path, body) in [
        ("GET", "/api/v1/config/toml".to_owned(), String::new()),
        ("POST", "/api/v1/reload".to_owned(), String::new()),
        (
            "POST",
            format!("/api/v1/pools/web/nodes/{a}/drain"),
            String::new(),
        ),
        ("PUT", "/api/v1/config".to_owned(), text.clone()),
    ] {
        let refused = api(setup.admin, method, &path, &body).await;
        assert!(
            refused.status >= 400 && refused.body.contains("larger than 64 MiB"),
            "{method} {path}: {} {}",
            refused.status,
            refused.body
        );
    }
    let size = std::fs::metadata(&setup.file).unwrap().len();
    assert_eq!(size, weir_config::MAX_CONFIG_BYTES + 1, "written over");
    assert_eq!(setup.proxy.live.generation(), 1);
    setup.stop().await;
}

/// An h2c node that takes every stream and never answers; returns its address.
async fn silent_h2c_node() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(tcp).await else {
                    return;
                };
                let mut held: Vec<(_, h2::server::SendResponse<bytes::Bytes>)> = Vec::new();
                while let Some(Ok(stream)) = connection.accept().await {
                    held.push(stream);
                }
            });
        }
    });
    addr
}

/// The nodes of an h2c pool show the queue and connections of their HTTP/2 side (the
/// one such a pool uses), not those of the HTTP/1.1 side it never uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_of_an_h2c_pool_shows_its_streams_queue() {
    let node = silent_h2c_node().await;
    let setup = setup_with("h2c-status", |port, _, _| {
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"admin.token\"\n\n\
             [pools.web]\nprotocol = \"h2c\"\nnodes = [{{ address = \"{node}\" }}]\n\
             [pools.web.connections]\nmax_connections = 1\nqueue_length = 10\n\
             queue_timeout = \"30s\"\n\
             [pools.web.http2]\nmax_concurrent_streams = 1\n\n\
             [virtual_servers.web]\nlisten = \"127.0.0.1:{port}\"\npool = \"web\"\n"
        )
    })
    .await;
    let proxy = setup.proxy.addr;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(proxy).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        clients.push(stream);
    }
    let mut last = Value::Null;
    for _ in 0..200 {
        let status = api(setup.admin, "GET", "/api/v1/status", "").await.json();
        last = status["pools"][0]["nodes"][0].clone();
        if last["queue_length"] == 2 && last["connections_open"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(last["queue_length"], 2, "{last}");
    assert_eq!(last["connections_open"], 1, "{last}");
    assert_eq!(last["connections_idle"], 0, "{last}");
    drop(clients);
    setup.stop().await;
}
