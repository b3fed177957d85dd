//! The dashboard in headless Chromium (Debian `chromium`, installed by scripts/test),
//! driven over the DevTools protocol on a pipe: the page loads, its charts draw from live
//! data, clicking "Drain" drains that node (its request count stops growing), and no
//! request leaves the admin listener.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use weir_admin::{AdminState, Control};
use weir_config::NodeMode;
use weir_core::Shutdown;
use weir_testkit::client::Connection;
use weir_testkit::{TestOrigin, TestProxy};

/// Chromium with its DevTools protocol on a pipe (fd 3 in, fd 4 out: NUL-separated JSON).
struct Chromium {
    child: Child,
    input: ChildStdin,
    messages: Receiver<Value>,
    events: Vec<Value>,
    next_id: u64,
    session: Option<String>,
    _profile: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Chromium {
    fn start() -> Chromium {
        let profile = TempDir(
            std::env::temp_dir().join(format!("weir-dashboard-chromium-{}", std::process::id())),
        );
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(
                "exec chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
                 --no-first-run --remote-debugging-pipe --user-data-dir=\"$1\" about:blank \
                 3<&0 4>&1 0</dev/null 1>/dev/null 2>/dev/null",
            )
            .arg("chromium")
            .arg(&profile.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("bash and chromium run (Debian package `chromium`; scripts/test installs it)");
        let input = child.stdin.take().expect("piped");
        let output = child.stdout.take().expect("piped");
        let (sender, messages) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(output);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                message.pop();
                if let Ok(value) = serde_json::from_slice(&message)
                    && sender.send(value).is_err()
                {
                    return;
                }
                message.clear();
            }
        });
        Chromium {
            child,
            input,
            messages,
            events: Vec::new(),
            next_id: 0,
            session: None,
            _profile: profile,
        }
    }

    /// Sends a command (to the attached page once there is one) and waits for its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = &self.session {
            command["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&command).unwrap();
        bytes.push(0);
        self.input
            .write_all(&bytes)
            .expect("chromium reads its pipe");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(message) if message["id"] == id => {
                    assert!(message.get("error").is_none(), "{method}: {message}");
                    return message["result"].clone();
                }
                Ok(event) => self.events.push(event),
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {method}"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium exited"),
            }
        }
    }

    fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({ "url": "about:blank" }));
        let attached = self.call(
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        self.session = attached["sessionId"].as_str().map(str::to_owned);
        self.call("Network.enable", json!({}));
        self.call("Page.navigate", json!({ "url": url }));
    }

    fn evaluate(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` until it is `true`.
    fn wait_for(&mut self, expression: &str, what: &str) {
        let start = Instant::now();
        while self.evaluate(expression) != json!(true) {
            if start.elapsed() > Duration::from_secs(20) {
                let problem = self.evaluate(
                    "document.getElementById('problem').textContent + ' ' + \
                     document.getElementById('operation').textContent",
                );
                panic!("{what}; the page says: {problem}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every URL the page asked for.
    fn requested_urls(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|event| event["method"] == "Network.requestWillBeSent")
            .filter_map(|event| {
                event["params"]["request"]["url"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }
}

/// Keep-alive requests through the proxy until stopped.
fn load(addr: SocketAddr, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut connection = Connection::open(addr).await.unwrap();
        while !stop.load(Ordering::Relaxed) {
            connection
                .send(b"GET / HTTP/1.1\r\nHost: weir\r\n\r\n")
                .await
                .unwrap();
            assert_eq!(connection.response().await.unwrap().status, 200);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_live_data_and_drains_a_node() {
    let dir = TempDir(std::env::temp_dir().join(format!("weir-dashboard-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let a = TestOrigin::start("a").await;
    let b = TestOrigin::start("b").await;
    let file = dir.0.join("weir.toml");
    std::fs::write(
        &file,
        format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\
             [pools.web]\nnodes = [{{ address = \"{}\" }}, {{ address = \"{}\" }}]\n\
             [virtual_servers.web]\nlisten = \"127.0.0.1:0\"\npool = \"web\"\n",
            a.addr, b.addr
        ),
    )
    .unwrap();
    let proxy = TestProxy::start_file(&file).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let state = AdminState {
        control: Some(Arc::new(Control::new(Arc::clone(&proxy.live)).unwrap())),
        ..AdminState::new(Arc::clone(&proxy.metrics), Arc::new(|| true))
    };
    let (shutdown, signal) = Shutdown::new();
    tokio::spawn(weir_admin::serve(listener, state, signal));
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = load(proxy.addr, Arc::clone(&stop));

    let origin = format!("http://{admin}");
    let node_a = a.addr.to_string();
    let a_stats = Arc::clone(&a.stats);
    let b_stats = Arc::clone(&b.stats);
    let live = Arc::clone(&proxy.live);
    tokio::task::spawn_blocking(move || {
        let mut chromium = Chromium::start();
        chromium.open(&format!("{origin}/"));
        chromium.wait_for(
            "Number(document.body.dataset.polls || 0) >= 3",
            "the page polls the API",
        );
        // Charts drawn from live data: lines with segments, and a request rate above zero.
        chromium.wait_for(
            "['connections', 'requests', 'latency', 'errors', 'tls'].every(name => \
               Number(document.getElementById('chart-' + name).dataset.segments) > 0) \
             && series.requests.points.at(-1)[0] > 0 \
             && series.latency.points.at(-1)[0] > 0",
            "charts draw live data",
        );
        assert_eq!(
            chromium.evaluate("document.querySelectorAll('#nodes tr[data-node]').length"),
            json!(2)
        );
        // Click "Drain" on node a.
        let clicked = chromium.evaluate(&format!(
            "(() => {{ const button = document.querySelector('tr[data-node=\"{node_a}\"] \
             button[data-operation=\"drain\"]'); if (!button) return false; button.click(); \
             return true; }})()"
        ));
        assert_eq!(clicked, json!(true));
        chromium.wait_for(
            &format!("(document.body.dataset.lastOperation || '').startsWith('drain {node_a}')"),
            "the drain was applied",
        );
        let model = live.current();
        assert_eq!(model.pools[0].nodes[0].mode(), NodeMode::Draining);
        // a's request count stops growing while b's goes on.
        std::thread::sleep(Duration::from_millis(200));
        let (a_before, b_before) = (a_stats.requests(), b_stats.requests());
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(
            a_stats.requests(),
            a_before,
            "a drained node gets no new request"
        );
        assert!(b_stats.requests() > b_before + 10, "traffic goes on to b");
        chromium.wait_for(
            &format!(
                "document.querySelector('tr[data-node=\"{node_a}\"] td:nth-child(2)')\
                 .textContent === 'draining'"
            ),
            "the table shows the node draining",
        );
        // Nothing but the admin listener was asked for anything.
        let urls = chromium.requested_urls();
        assert!(!urls.is_empty());
        for url in urls {
            assert!(
                url.starts_with(&format!("{origin}/")),
                "the page fetched {url}"
            );
        }
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();
    shutdown.trigger();
    proxy.stop().await;
    a.stop().await;
    b.stop().await;
}
