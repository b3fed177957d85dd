//! The binary's contract: `weir check` and start-up failures.

use std::process::Command;

mod process;
use process::{Running, signal};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn temp_config(text: &str) -> tempfile_path::TempPath {
    tempfile_path::TempPath::with_contents(text)
}

/// A tiny self-deleting temporary file (no extra dependency).
mod tempfile_path {
    use std::path::{Path, PathBuf};

    pub struct TempPath(PathBuf);

    impl TempPath {
        pub fn with_contents(text: &str) -> TempPath {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let path = std::env::temp_dir().join(format!(
                "weir-cli-test-{}-{}.toml",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&path, text).expect("temp dir is writable");
            TempPath(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[test]
fn check_accepts_the_examples() {
    let examples = format!("{}/../../examples/weir.toml", manifest_dir());
    let output = weir().args(["check", &examples]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("ok"));
}

#[test]
fn check_reports_file_line_and_key_path() {
    let config = temp_config(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:0\"\npool = \"web\"\n\n[pools.web]\nnodes = [\n  { address = \"127.0.0.1:1\" },\n  { address = \"127.0.0.1:2\" },\n  { address = \"10.0.0.1:99999\" },\n]\n",
    );
    let output = weir().arg("check").arg(config.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!(
        "{}:9: pools.web.nodes[2].address: invalid socket address \"10.0.0.1:99999\"",
        config.path().display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

/// Runs `weir serve --config FILE`, expects it to fail with exit code `code` (2: the
/// configuration was refused, as by `weir check`; 1: anything else), and returns its stderr.
fn serve_fails(config: &tempfile_path::TempPath, code: i32) -> String {
    let output = weir()
        .arg("serve")
        .arg("--config")
        .arg(config.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    stderr
}

#[test]
fn serve_rejects_a_bad_config_before_binding() {
    // The listener would be valid; the pool reference is not.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let config = temp_config(&format!(
        "[virtual_servers.web]\nlisten = \"127.0.0.1:{port}\"\npool = \"missing\"\n\n[pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n"
    ));
    let stderr = serve_fails(&config, 2);
    assert!(stderr.contains("virtual_servers.web.pool"), "{stderr}");
    // Nothing was bound: the port is still free.
    assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
}

#[test]
fn serve_names_an_address_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap();
    let config = temp_config(&format!(
        "[log]\nlevel = \"error\"\n[virtual_servers.web]\nlisten = \"{address}\"\npool = \"web\"\n\n[pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n"
    ));
    let stderr = serve_fails(&config, 1);
    // Placed like any configuration error: file, line and key.
    assert!(
        stderr.contains(&format!(
            "{}:4: virtual_servers.web.listen: cannot listen on {address}",
            config.path().display()
        )),
        "{stderr}"
    );

    // The admin listener and a built-in origin the same way.
    let [free] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[log]\nlevel = \"error\"\n[admin]\nlisten = \"{address}\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{free}\"\npool = \"web\"\n\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n"
    ));
    let stderr = serve_fails(&config, 1);
    assert!(
        stderr.contains(&format!(
            "{}:4: admin.listen: cannot listen on {address}",
            config.path().display()
        )),
        "{stderr}"
    );
    let config = temp_config(&format!(
        "[log]\nlevel = \"error\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{free}\"\npool = \"web\"\n\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n\
         [[origins]]\nname = \"a\"\nlisten = \"127.0.0.1:0\"\n\
         [[origins]]\nname = \"b\"\nlisten = \"{address}\"\n"
    ));
    let stderr = serve_fails(&config, 1);
    assert!(
        stderr.contains(&format!(
            "{}:14: origins[1].listen: cannot listen on {address}",
            config.path().display()
        )),
        "{stderr}"
    );
}

#[test]
fn check_reads_the_admin_token_and_creates_no_access_log() {
    let dir = std::env::temp_dir().join(format!("weir-cli-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let text = |token: &str| {
        format!(
            "[admin]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{token}\"\n\
             [log]\naccess_log_file = \"{}\"\n\
             [virtual_servers.web]\nlisten = \"127.0.0.1:0\"\npool = \"web\"\n\
             [pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n",
            log.display()
        )
    };
    // A token file that is not there: refused with its place, by check and by serve.
    let config = temp_config(&text(&dir.join("missing.token").display().to_string()));
    let output = weir().arg("check").arg(config.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!(
        "{}:3: admin.token_file: cannot read {}",
        config.path().display(),
        dir.join("missing.token").display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!log.exists(), "weir check created {}", log.display());
    assert!(serve_fails(&config, 2).contains(&expected));
    // (serve opened its log before it found the token missing; only dry runs leave none.)
    let _ = std::fs::remove_file(&log);
    // With the token there, the config checks out, and the dry run left no log file.
    std::fs::write(dir.join("admin.token"), "s3cret\n").unwrap();
    let config = temp_config(&text(&dir.join("admin.token").display().to_string()));
    let output = weir().arg("check").arg(config.path()).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!log.exists(), "weir check created {}", log.display());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn print_default_is_the_embedded_config() {
    let output = weir().args(["serve", "--print-default"]).output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("127.0.0.1:8080"), "{text}");
    assert!(weir_config::parse_str(&text, "printed").is_ok());
}

/// `weir serve` with a built-in origin answers through the proxy, survives
/// SIGHUP and SIGUSR2, and exits cleanly (status 0) on SIGQUIT, as on SIGTERM.
#[test]
fn serve_answers_and_exits_cleanly_on_sigquit() {
    use std::io::{Read, Write};
    let [proxy_port, origin_port] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[runtime]\nthreads = 1\ndrain_timeout = \"2s\"\n[log]\nlevel = \"warn\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"web\"\n\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:{origin_port}\" }}]\n\n\
         [[origins]]\nname = \"o\"\nlisten = \"127.0.0.1:{origin_port}\"\n"
    ));
    let mut child = weir()
        .arg("serve")
        .arg("--config")
        .arg(config.path())
        .spawn()
        .unwrap();
    let mut stream = None;
    for _ in 0..100 {
        if let Ok(connected) = std::net::TcpStream::connect(("127.0.0.1", proxy_port)) {
            stream = Some(connected);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut stream = stream.expect("weir listens within 5 s");
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
    assert!(response.contains("X-Origin: o"), "{response}");

    // SIGHUP reloads (nothing, here) and must not end the process.
    signal(&child, "HUP");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP ended weir");
    // SIGUSR2 (nginx's binary upgrade) is logged and ignored.
    signal(&child, "USR2");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "SIGUSR2 ended weir");

    // SIGQUIT (nginx's graceful stop) drains like SIGTERM.
    signal(&child, "QUIT");
    for _ in 0..100 {
        if let Some(exit) = child.try_wait().unwrap() {
            assert!(exit.success(), "{exit:?}");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("weir did not exit within 5 s of SIGQUIT");
}

/// SIGHUP, SIGUSR1 and SIGUSR2 while weir is still starting (here: waiting on a name server
/// that never answers) do not end it: the start goes on and fails on its own, with its
/// message and exit code 2, not killed by the signal.
#[test]
fn signals_during_the_start_do_not_kill_it() {
    use std::os::unix::process::ExitStatusExt;
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let [proxy_port] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[log]\nlevel = \"warn\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"web\"\n\n\
         [pools.web]\nnodes = [{{ address = \"slow.test:80\" }}]\n\
         [pools.web.dns]\nservers = [\"{}\"]\ntimeout = \"1s\"\n",
        silent.local_addr().unwrap()
    ));
    let child = weir()
        .arg("serve")
        .arg("--config")
        .arg(config.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for name in ["HUP", "USR1", "USR2"] {
        signal(&child, name);
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), None, "killed by a signal: {stderr}");
    // A node name that does not resolve refuses the configuration, as `weir check` does.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"slow.test\" does not resolve"),
        "{stderr}"
    );
}

/// SIGHUP, SIGUSR1 and SIGUSR2 while weir still reads its configuration (a FIFO here, so
/// the moment is certain) wait until their handlers are in place: weir starts and serves.
#[test]
fn signals_while_the_configuration_is_read_wait_for_their_handlers() {
    use std::io::Write;
    // Nothing listens at the node's address: the port is held closed for the whole test
    // (taken before free_ports, so that it cannot be picked as weir's own).
    let origin = weir_testkit::ClosedPort::new();
    let origin_port = origin.addr().port();
    let [proxy_port] = weir_testkit::free_ports();
    let fifo = std::env::temp_dir().join(format!("weir-cli-fifo-{}.toml", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let child = weir()
        .arg("serve")
        .arg("--config")
        .arg(&fifo)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    for name in ["HUP", "USR1", "USR2"] {
        signal(&child.0, name);
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(child.0.try_wait().unwrap().is_none(), "a signal ended weir");
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    write!(
        writer,
        "[log]\nlevel = \"warn\"\n[virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\n\
         pool = \"web\"\n[pools.web]\nnodes = [{{ address = \"127.0.0.1:{origin_port}\" }}]\n"
    )
    .unwrap();
    drop(writer);
    let serving = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", proxy_port)).is_ok()
    });
    let _ = std::fs::remove_file(&fifo);
    assert!(serving, "weir listens within 5 s");
    // The held SIGHUP reloaded the file (a FIFO now empty: refused, still serving).
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "a held signal ended weir"
    );
}

/// `--pid-file`: the process id once it serves; removed at a clean exit.
#[test]
fn the_pid_file_names_the_serving_process_and_goes_with_it() {
    // Nothing listens at the node's address: the port is held closed for the whole test
    // (taken before free_ports, so that it cannot be picked as weir's own).
    let origin = weir_testkit::ClosedPort::new();
    let origin_port = origin.addr().port();
    let [proxy_port] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[log]\nlevel = \"warn\"\n[virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\n\
         pool = \"web\"\n[pools.web]\nnodes = [{{ address = \"127.0.0.1:{origin_port}\" }}]\n"
    ));
    let pid_file = std::env::temp_dir().join(format!("weir-cli-{}.pid", std::process::id()));
    let _ = std::fs::remove_file(&pid_file);
    let mut child = weir()
        .arg("serve")
        .arg("--config")
        .arg(config.path())
        .arg("--pid-file")
        .arg(&pid_file)
        .spawn()
        .unwrap();
    let written = (0..100).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::read_to_string(&pid_file).ok()
    });
    assert_eq!(written, Some(format!("{}\n", child.id())));
    assert!(std::net::TcpStream::connect(("127.0.0.1", proxy_port)).is_ok());
    signal(&child, "TERM");
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(!pid_file.exists(), "the PID file outlived weir");
    // A directory that does not exist: refused before serving, with the path.
    let output = weir()
        .arg("serve")
        .arg("--config")
        .arg(config.path())
        .arg("--pid-file")
        .arg("/nonexistent-weir-dir/weir.pid")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--pid-file /nonexistent-weir-dir/weir.pid"),
        "{stderr}"
    );
}

/// An upgrade socket in a directory that is not there is found by `weir check`, with the
/// file, the line and the key (it used to pass and stop `weir serve` with no line).
#[test]
fn an_upgrade_socket_in_a_missing_directory_fails_the_check() {
    let config = temp_config(
        "[log]\nlevel = \"warn\"\n[runtime]\nupgrade_socket = \"/nonexistent-weir-dir/up.sock\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:1\"\npool = \"web\"\n\n\
         [pools.web]\nnodes = [{ address = \"127.0.0.1:2\" }]\n",
    );
    let output = weir().arg("check").arg(config.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let expected = format!(
        "{}:4: runtime.upgrade_socket: /nonexistent-weir-dir is not a directory",
        config.path().display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

/// `runtime.upgrade_socket` naming a file that is not a socket (a slip of the path) is
/// refused, and the file is left as it was; weir replaces only a stale socket.
#[test]
fn an_upgrade_socket_path_that_is_not_a_socket_is_kept() {
    let [proxy_port] = weir_testkit::free_ports();
    let precious = temp_config("keep me\n");
    let config = temp_config(&format!(
        "[runtime]\nupgrade_socket = \"{}\"\n[log]\nlevel = \"warn\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"web\"\n\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n",
        precious.path().display()
    ));
    let mut child = weir()
        .arg("serve")
        .arg("--config")
        .arg(config.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A weir that took the path over would serve on: stop it rather than wait for ever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("runtime.upgrade_socket") && stderr.contains("is not a socket"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(precious.path()).unwrap(),
        "keep me\n"
    );
}

/// When weir itself runs out of file descriptors, a request that needs a new node
/// connection gets 503 (`out_of_resources`) and the node is not blamed: it is not ejected,
/// and once descriptors are free again it serves at once.
#[test]
fn running_out_of_descriptors_does_not_eject_the_node() {
    use std::io::{Read, Write};
    // A node that answers each request and closes: every request needs a new connection.
    let node = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let node_address = node.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in node.incoming().map_while(Result::ok) {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let [proxy_port] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[runtime]\nthreads = 1\n[log]\nlevel = \"warn\"\naccess_log = false\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"web\"\n\n\
         [pools.web]\nretries = 0\nnodes = [{{ address = \"{node_address}\" }}]\n\
         [pools.web.passive_health]\nconsecutive_failures = 1\nbase_ejection = \"60s\"\n"
    ));
    let log = temp_config("");
    let _weir =
        serve_with_48_descriptors_logging_to(&config, std::fs::File::create(log.path()).unwrap());
    let get = |stream: &mut std::net::TcpStream, rest: &[u8]| {
        stream.write_all(rest).unwrap();
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        String::from_utf8_lossy(&response).into_owned()
    };
    let request = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let mut up = false;
    for _ in 0..100 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", proxy_port)) {
            let response = get(&mut stream, request);
            assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
            up = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(up, "weir listens within 5 s");
    // Clients holding a started request each, until weir has no descriptor left (the rest
    // wait in the listen backlog).
    let mut held: Vec<std::net::TcpStream> = (0..60)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
            stream.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n").unwrap();
            stream
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // The first one's request ends: its node connection cannot be opened.
    let mut first = held.remove(0);
    first
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let response = get(&mut first, b"Connection: close\r\n\r\n");
    assert!(response.starts_with("HTTP/1.1 503 "), "{response}");
    drop(held);
    // Descriptors free again: the node serves at once, not ejected.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    let response = get(&mut stream, request);
    assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
    // The listener that could not accept is named by its address.
    let logged = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        logged.contains(&format!(
            "accept failed; pausing and trying again listener=\"virtual server at 127.0.0.1:{proxy_port}\""
        )),
        "{logged}"
    );
}

/// A node that is down under load fails every request: each is in the access log, and
/// weir's own log gets a few lines a second, not one per request, each naming the pool and
/// the node; so do requests weir refuses (which any client can send by the thousand). The
/// log, a file here, has no terminal colour codes.
#[test]
fn failed_requests_write_a_few_log_lines_a_second() {
    use std::io::{Read, Write};
    // Nothing listens at the node's address: every connect is refused. The port is held
    // (bound, not listening) for the whole test: let go before free_ports, it could be
    // picked as weir's own port, and weir would proxy to itself.
    let node = weir_testkit::ClosedPort::new();
    let node_address = node.addr();
    let [proxy_port] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[runtime]\nthreads = 1\ndrain_timeout = \"1s\"\n[log]\nlevel = \"info\"\naccess_log = false\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"web\"\n\n\
         [pools.web]\nretries = 0\nnodes = [{{ address = \"{node_address}\" }}]\n\
         [pools.web.passive_health]\nconsecutive_failures = 0\n"
    ));
    let stderr = temp_config("");
    let child = weir()
        .args(["serve", "--config"])
        .arg(config.path())
        .stderr(std::fs::File::create(stderr.path()).unwrap())
        .spawn()
        .unwrap();
    let mut weir = Running(child);
    let started = std::time::Instant::now();
    // `tries` requests on a connection each, every answer `status`; how many were answered.
    let send = |tries: usize, request: &[u8], status: &str| -> u64 {
        let mut answered = 0;
        for _ in 0..tries {
            let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", proxy_port)) else {
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            };
            stream.write_all(request).unwrap();
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            assert!(response.starts_with(status), "{response}");
            answered += 1;
        }
        answered
    };
    let request = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let failed = send(100, request, "HTTP/1.1 502 ");
    let refused = send(
        200,
        b"GET /a\rb HTTP/1.1\r\nHost: t\r\n\r\n",
        "HTTP/1.1 400 ",
    );
    let seconds = started.elapsed().as_secs();
    // Stopped (SIGTERM): the last line says what the budgets left out since their last line.
    signal(&weir.0, "TERM");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while weir.0.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "weir stops");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log = std::fs::read_to_string(stderr.path()).unwrap();
    assert!(failed >= 60, "only {failed} requests reached weir");
    assert!(refused >= 150, "only {refused} bad requests reached weir");
    let number = |line: &str, key: &str| -> u64 {
        line.split(&format!("{key}="))
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    let last = log
        .lines()
        .find(|line| line.contains("not logged since the last line"))
        .unwrap_or("");
    for (message, count, key) in [
        ("request failed", failed, "failed"),
        ("rejected request", refused, "refused"),
    ] {
        let lines: Vec<&str> = log.lines().filter(|line| line.contains(message)).collect();
        assert!(!lines.is_empty(), "{log}");
        assert!(
            lines.len() as u64 <= 10 * (seconds + 1),
            "{} {message:?} lines for {count} requests in {seconds} s",
            lines.len()
        );
        // Every failure is a line or counted in one, the last ones in the stop's line.
        let told: u64 = lines.iter().map(|line| 1 + number(line, "left_out")).sum();
        assert_eq!(told + number(last, key), count, "{message}: {log}");
    }
    let named = format!("pool=\"web\" node={node_address}");
    assert!(log.contains(&named), "{named}: {log}");
    assert!(!log.contains('\x1b'), "{log}");
}

/// Kills the child process it holds when dropped (a failed assertion included).
/// A tcp virtual server's sessions moving bulk data when weir has no descriptor left for
/// the pipes `splice(2)` needs (the default `relay = "auto"` switches to it on bulk;
/// `relay = "splice"` starts with it) are copied instead, whole: none is cut.
#[test]
fn sessions_are_copied_when_no_descriptor_is_left_for_a_pipe() {
    for relay in ["auto", "splice"] {
        copied_without_pipes(relay);
    }
}

fn copied_without_pipes(relay: &str) {
    use std::io::{Read, Write};
    use std::time::Duration;
    // An echo node.
    let node = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let node_address = node.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in node.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut reader = stream.try_clone().unwrap();
                let mut writer = stream;
                let _ = std::io::copy(&mut reader, &mut writer);
            });
        }
    });
    let [proxy_port] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[runtime]\nthreads = 1\n[log]\nlevel = \"error\"\naccess_log = false\n\
         [virtual_servers.db]\nprotocol = \"tcp\"\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"db\"\n\
         [virtual_servers.db.tcp]\nrelay = \"{relay}\"\n\n\
         [pools.db]\nnodes = [{{ address = \"{node_address}\" }}]\n"
    ));
    let _weir = serve_with_48_descriptors(&config);
    let echoes = |stream: &mut std::net::TcpStream| {
        stream
            .set_read_timeout(Some(Duration::from_millis(1_000)))
            .unwrap();
        let mut answer = [0u8; 4];
        stream.write_all(b"ping").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"ping"
    };
    let mut up = false;
    for _ in 0..100 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", proxy_port)) {
            up = echoes(&mut stream);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(up, "weir relays within 5 s");
    // Sessions until weir has no descriptor left (the next one waits in the backlog).
    let mut sessions = Vec::new();
    loop {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
        if !echoes(&mut stream) {
            break;
        }
        sessions.push(stream);
        assert!(
            sessions.len() < 40,
            "the descriptor limit was expected to bite"
        );
    }
    assert!(sessions.len() >= 4, "{} sessions", sessions.len());
    // Each session moves 1 MiB each way, which switches it to splice(2) when it can.
    let block: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    for (index, stream) in sessions.iter_mut().enumerate() {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        let sent = block.clone();
        let writing = std::thread::spawn(move || writer.write_all(&sent));
        let mut echoed = vec![0u8; block.len()];
        let read = stream.read_exact(&mut echoed);
        assert!(read.is_ok(), "{relay}: session {index} was cut: {read:?}");
        assert!(writing.join().unwrap().is_ok());
        assert!(echoed == block, "session {index} echoed other bytes");
    }
}

/// Under every open-file limit from too few to start the runtime to enough to serve,
/// weir either serves or exits 1 before it says it serves, naming what it could not do:
/// never a bare "Too many open files" after its "serving" lines.
#[test]
fn too_few_descriptors_to_start_is_named_before_anything_serves() {
    let [proxy_port, admin_port] = weir_testkit::free_ports();
    let config = temp_config(&format!(
        "[runtime]\nthreads = 1\n[log]\naccess_log = false\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"web\"\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n"
    ));
    let mut served = false;
    for limit in 8..=24 {
        let stderr = tempfile_path::TempPath::with_contents("");
        let mut child = Running(
            Command::new("prlimit")
                .arg(format!("--nofile={limit}:{limit}"))
                .args(["--", env!("CARGO_BIN_EXE_weir"), "serve", "--config"])
                .arg(config.path())
                .stderr(std::fs::File::create(stderr.path()).unwrap())
                .spawn()
                .expect("run weir under prlimit (util-linux)"),
        );
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break Some(status);
            }
            if start.elapsed() > std::time::Duration::from_millis(1500) {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let log = std::fs::read_to_string(stderr.path()).unwrap();
        let Some(status) = status else {
            assert!(log.contains("virtual server serving"), "{limit}: {log}");
            served = true;
            break;
        };
        assert_eq!(status.code(), Some(1), "{limit}: {log}");
        assert!(
            !log.contains("serving"),
            "{limit}: said it serves, then failed: {log}"
        );
        let last = log.lines().last().unwrap_or_default();
        assert!(
            last.contains("Too many open files")
                && last.trim_start_matches("weir: ").contains(": "),
            "{limit}: the failure names nothing: {last}"
        );
        drop(child);
    }
    assert!(served, "24 descriptors were not enough to serve");
}

/// `weir serve` of `config` with at most 48 open files (`prlimit`, util-linux), so a test
/// reaches the limit with a few dozen connections; killed when dropped.
fn serve_with_48_descriptors(config: &tempfile_path::TempPath) -> Running {
    serve_with_48_descriptors_logging_to(config, std::process::Stdio::null())
}

/// The same, with weir's own log (standard error) going to `stderr`.
fn serve_with_48_descriptors_logging_to(
    config: &tempfile_path::TempPath,
    stderr: impl Into<std::process::Stdio>,
) -> Running {
    let child = Command::new("prlimit")
        .args([
            "--nofile=48:48",
            "--",
            env!("CARGO_BIN_EXE_weir"),
            "serve",
            "--config",
        ])
        .arg(config.path())
        .stderr(stderr)
        .spawn()
        .expect("run weir under prlimit (util-linux)");
    Running(child)
}

/// `weir reload --config FILE`: a file that does not load is refused with exit code 2
/// (without the running weir when the admin address must come from that file, through it
/// with `--admin`, where the refusal is counted); a good one is applied (exit code 0).
#[test]
fn reload_refuses_a_bad_file_with_exit_code_2() {
    let (good, admin) = admin_config();
    let config = temp_config(&good);
    let _serving = serve_with_admin(&config, &admin);
    let metrics = || admin_get(&admin, "/metrics");
    let reload = |extra: &[&str]| {
        weir()
            .args(["reload", "--config"])
            .arg(config.path())
            .args(extra)
            .output()
            .unwrap()
    };

    std::fs::write(
        config.path(),
        good.replace("pool = \"web\"", "pool = \"ghost\""),
    )
    .unwrap();
    let output = reload(&[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("virtual_servers.web.pool"), "{stderr}");
    assert!(
        stderr.contains("the running weir was not asked"),
        "{stderr}"
    );
    let output = reload(&["--admin", &admin]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("virtual_servers.web.pool"), "{stderr}");
    let text = metrics().expect("metrics");
    assert!(
        text.contains("weir_config_reloads_total{result=\"refused\"} 1"),
        "{text}"
    );

    std::fs::write(
        config.path(),
        good.replace("threads = 1\n", "threads = 1\ndrain_timeout = \"3s\"\n"),
    )
    .unwrap();
    let output = reload(&[]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("runtime.drain_timeout"));
}

/// A weir whose admin listener wants a token, from a file beside its config file: the
/// config, the token file, the config's text, the admin address and the running weir.
fn serve_with_a_token() -> (
    tempfile_path::TempPath,
    std::path::PathBuf,
    String,
    String,
    Running,
) {
    let (text, admin) = admin_config();
    let config = temp_config("");
    let token_name = format!(
        "{}.token",
        config.path().file_name().unwrap().to_string_lossy()
    );
    let token = config.path().with_file_name(&token_name);
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let good = text.replace(
        &format!("listen = \"{admin}\"\n"),
        &format!("listen = \"{admin}\"\ntoken_file = \"{token_name}\"\n"),
    );
    std::fs::write(config.path(), &good).unwrap();
    let serving = serve_with_admin(&config, &admin);
    (config, token, good, admin, serving)
}

/// `weir reload --config FILE --admin ADDR` with a file that does not load: the running
/// weir is still asked with the token the file names (relative to the file), so its
/// refusal, with file, line and key, comes back (exit code 2), not a 401.
#[test]
fn reload_with_admin_sends_the_token_a_refused_file_names() {
    let (config, token, good, admin, _serving) = serve_with_a_token();
    std::fs::write(
        config.path(),
        good.replace("pool = \"web\"", "pool = \"ghost\""),
    )
    .unwrap();
    let reload = || {
        weir()
            .args(["reload", "--config"])
            .arg(config.path())
            .args(["--admin", &admin])
            .output()
            .unwrap()
    };
    let output = reload();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("virtual_servers.web.pool"), "{stderr}");
    // A file that does not even parse names no token: its own error, not a 401.
    std::fs::write(config.path(), format!("{good}\n[[[broken")).unwrap();
    let output = reload();
    let _ = std::fs::remove_file(&token);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("wants a bearer token"), "{stderr}");
    // "answered 401", not a bare "401": the admin port itself may contain those digits.
    assert!(!stderr.contains("answered 401"), "{stderr}");
}

/// `weir reload --admin ADDR` alone: an answer that is not a verdict on the candidate (401
/// for a missing token, a listener that is not weir's admin one) is a failure to ask (exit
/// code 1, with the address and the status), not a refused reload (2).
#[test]
fn reload_with_admin_tells_a_failure_to_ask_from_a_refusal() {
    let (_config, token, good, admin, _serving) = serve_with_a_token();
    let proxy = good
        .split("[virtual_servers.web]\nlisten = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the proxy's address")
        .to_owned();
    // And a web server that answers 200 to anything.
    let web = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let web_address = web.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in web.incoming().take(1) {
            let mut stream = stream.unwrap();
            // The whole request head first: answering earlier would cut the client's write.
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    for (address, says) in [
        (admin.as_str(), "answered 401"),
        (proxy.as_str(), "answered 502"),
        (web_address.as_str(), "answered 200"),
    ] {
        let output = weir()
            .args(["reload", "--admin", address])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{address}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains(address),
            "{stderr}"
        );
    }
    let output = weir()
        .args(["reload", "--admin", &admin, "--token-file"])
        .arg(&token)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&token);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `weir reload --config FILE` for a weir that runs another file: the running weir would
/// re-read its own, so it is not asked (exit code 2, nothing reloaded); the file it runs,
/// named through a symbolic link, is reloaded.
#[test]
fn reload_refuses_a_file_the_running_weir_does_not_read() {
    let (text, admin) = admin_config();
    let running = temp_config(&text);
    let _serving = serve_with_admin(&running, &admin);
    let other = temp_config(&text.replace("127.0.0.1:1\"", "127.0.0.1:2\""));
    let reload = |path: &std::path::Path| {
        weir()
            .args(["reload", "--config"])
            .arg(path)
            .output()
            .unwrap()
    };

    let output = reload(other.path());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "runs {}, not {}",
            running.path().display(),
            other.path().display()
        )),
        "{stderr}"
    );
    let generation = || {
        let answer = admin_get(&admin, "/api/v1/reload").expect("GET /api/v1/reload");
        let (_, body) = answer.split_once("\r\n\r\n").expect("a complete response");
        let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
        body["generation"].as_u64().expect("a generation")
    };
    assert_eq!(generation(), 1, "nothing was reloaded");

    let link = running.path().with_extension("link.toml");
    std::os::unix::fs::symlink(running.path(), &link).unwrap();
    let output = reload(&link);
    let _ = std::fs::remove_file(&link);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(generation(), 2, "the file weir runs was reloaded");
}

/// `weir reload --config FILE` after FILE's `[admin]` table was edited: the running weir
/// still listens on its old address (admin.listen moves with a restart) and wants its old
/// token until a reload applies the new file. What the file names cannot reach it, and the
/// error says how to (the old address or token file, or SIGHUP); with them it reloads.
#[test]
fn reload_after_the_admin_table_changed_says_how_to_reach_the_running_weir() {
    let (text, admin) = admin_config();
    let config = temp_config("");
    let token_name = |n: u32| {
        format!(
            "{}.{n}.token",
            config.path().file_name().unwrap().to_string_lossy()
        )
    };
    let old_token = config.path().with_file_name(token_name(1));
    let new_token = config.path().with_file_name(token_name(2));
    std::fs::write(&old_token, "old-token\n").unwrap();
    std::fs::write(&new_token, "new-token\n").unwrap();
    let with_token = |name: String| {
        text.replace(
            &format!("listen = \"{admin}\"\n"),
            &format!("listen = \"{admin}\"\ntoken_file = \"{name}\"\n"),
        )
    };
    std::fs::write(config.path(), with_token(token_name(1))).unwrap();
    let _serving = serve_with_admin(&config, &admin);
    let reload = |extra: &[&str]| {
        weir()
            .args(["reload", "--config"])
            .arg(config.path())
            .args(extra)
            .output()
            .unwrap()
    };

    // A new token file.
    std::fs::write(config.path(), with_token(token_name(2))).unwrap();
    let output = reload(&[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("answered 401") && stderr.contains("--token-file"),
        "{stderr}"
    );
    assert!(!stderr.contains("  "), "one space between words: {stderr}");
    // No token file at all.
    std::fs::write(config.path(), &text).unwrap();
    let output = reload(&[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("names no admin.token_file") && stderr.contains("--token-file"),
        "{stderr}"
    );
    std::fs::write(config.path(), with_token(token_name(2))).unwrap();
    let old = old_token.to_string_lossy().into_owned();
    let output = reload(&["--token-file", &old]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // A new admin address (the running weir took the new token with that reload). Nothing
    // listens there, and nothing may for the whole test: the reload must fail to connect,
    // not be answered. weir does not bind it (admin.listen moves with a restart).
    let moved_port = weir_testkit::ClosedPort::new();
    let moved = moved_port.addr().to_string();
    std::fs::write(
        config.path(),
        with_token(token_name(2)).replace(&admin, &moved),
    )
    .unwrap();
    let output = reload(&[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--admin") && stderr.contains("SIGHUP"),
        "{stderr}"
    );
    assert!(!stderr.contains("  "), "one space between words: {stderr}");
    let output = reload(&["--admin", &admin]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("admin.listen"),
        "needs_restart names it: {stdout}"
    );
    let _ = std::fs::remove_file(&old_token);
    let _ = std::fs::remove_file(&new_token);
}

/// A config with an admin listener (no token) on free ports, and that listener's address.
fn admin_config() -> (String, String) {
    let [proxy_port, admin_port] = weir_testkit::free_ports();
    let text = format!(
        "[runtime]\nthreads = 1\n[log]\nlevel = \"error\"\naccess_log = false\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\
         [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\npool = \"web\"\n\
         [pools.web]\nnodes = [{{ address = \"127.0.0.1:1\" }}]\n"
    );
    (text, format!("127.0.0.1:{admin_port}"))
}

/// Starts `weir serve --config FILE` and waits (up to 5 s) for its admin listener.
fn serve_with_admin(config: &tempfile_path::TempPath, admin: &str) -> Running {
    let serving = Running(
        weir()
            .arg("serve")
            .arg("--config")
            .arg(config.path())
            .spawn()
            .unwrap(),
    );
    for _ in 0..100 {
        if admin_get(admin, "/metrics").is_some() {
            return serving;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the admin listener at {admin} does not answer within 5 s");
}

/// One `GET` to the admin listener (no token): the whole response, head and body.
fn admin_get(admin: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(admin).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}

/// This crate's directory as cargo gives it to the running test, not as it
/// was when the test was built: a build cache shared by two checkouts of the
/// repository may run a test binary built in the other one, and the test must
/// read this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
}

/// `weir bench` exits non-zero when nothing succeeded (every connect refused here), after
/// its report, and refuses meaningless options before it runs.
#[test]
fn bench_fails_when_nothing_succeeded() {
    // A port nothing listens on, held closed for the whole test.
    let closed = weir_testkit::ClosedPort::new();
    let url = format!("http://{}/", closed.addr());
    let output = weir()
        .args([
            "bench",
            "-c",
            "1",
            "-t",
            "1",
            "-n",
            "5",
            "--no-progress",
            &url,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("no request succeeded"), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("errors: connect 5"));
    let output = weir()
        .args(["bench", "-d", "0s", "--no-progress", &url])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--duration must be longer than zero")
    );
}

/// `weir lab --out DIR`: a directory that cannot be made is refused before the experiment
/// starts (not once it has run), naming the option.
#[test]
fn lab_out_is_checked_before_the_run() {
    let file = temp_config("not a directory");
    let started = std::time::Instant::now();
    let output = weir()
        .args(["lab", "offload", "--out"])
        .arg(file.path().join("sub"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--out"), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{stderr}"
    );
}
