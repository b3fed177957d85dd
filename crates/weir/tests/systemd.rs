//! `weir serve` under systemd (`Type=notify-reload`): what it sends to `NOTIFY_SOCKET`, and
//! when. The test plays the service manager: a datagram socket of its own.

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod process;
use process::{Running, signal};

/// The next message that is not a watchdog keep-alive (those are counted), within 10 s.
fn next(socket: &UnixDatagram, keep_alives: &mut usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buffer = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no message from weir within 10 s");
        socket.set_read_timeout(Some(left)).unwrap();
        let n = socket.recv(&mut buffer).expect("a message from weir");
        let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
        if message == "WATCHDOG=1\n" {
            *keep_alives += 1;
            continue;
        }
        return message;
    }
}

/// A directory of the test's own (`name`).
fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-systemd-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A directory of the test's own (`name`) and the service manager's socket in it.
fn manager(name: &str) -> (PathBuf, PathBuf, UnixDatagram) {
    let dir = test_dir(name);
    let socket_path = dir.join("notify");
    let _ = std::fs::remove_file(&socket_path);
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    (dir, socket_path, socket)
}

/// A config in `dir` whose drain may last 5 s, the port it listens on, and its node's
/// port, held closed: keep it for the whole test.
fn draining_config(dir: &Path) -> (PathBuf, u16, weir_testkit::ClosedPort) {
    // Nothing listens at the node's address. The port is held (bound, not listening), taken
    // before free_ports: let go, it could be picked as weir's own port, or any other test's.
    let origin = weir_testkit::ClosedPort::new();
    let origin_port = origin.addr().port();
    let [proxy_port] = weir_testkit::free_ports();
    let config = dir.join("weir.toml");
    std::fs::write(
        &config,
        format!(
            "[log]\nlevel = \"warn\"\n[runtime]\ndrain_timeout = \"5s\"\n\
             [virtual_servers.web]\nlisten = \"127.0.0.1:{proxy_port}\"\n\
             pool = \"web\"\n[pools.web]\nnodes = [{{ address = \"127.0.0.1:{origin_port}\" }}]\n"
        ),
    )
    .unwrap();
    (config, proxy_port, origin)
}

/// A request to `port` still waiting for its body: it keeps a drain going until dropped.
fn request_in_flight(port: u16) -> TcpStream {
    let mut held = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(
        &mut held,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
    )
    .unwrap();
    held
}

#[test]
fn readiness_reloads_stops_and_the_watchdog_reach_systemd() {
    let (dir, socket_path, socket) = manager("reload");
    // Nothing listens at the node's address: the port is held closed for the whole test
    // (taken before free_ports, so that it cannot be picked as weir's own).
    let origin = weir_testkit::ClosedPort::new();
    let origin_port = origin.addr().port();
    let [proxy_port] = weir_testkit::free_ports();
    let config = dir.join("weir.toml");
    let text = format!(
        "[log]\nlevel = \"warn\"\n[virtual_servers.web]\n\
         listen = [\"127.0.0.1:{proxy_port}\", \"[::1]:{proxy_port}\"]\n\
         pool = \"web\"\n[pools.web]\nnodes = [{{ address = \"127.0.0.1:{origin_port}\" }}]\n"
    );
    std::fs::write(&config, &text).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "200000")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let child = Running(child);
    let mut keep_alives = 0;
    let ready = next(&socket, &mut keep_alives);
    assert_eq!(ready, "READY=1\nSTATUS=serving 1 virtual servers\n");
    // Ready means serving.
    assert!(TcpStream::connect(("127.0.0.1", proxy_port)).is_ok());

    // A reload: RELOADING with the monotonic time, then READY with how it went.
    signal(&child.0, "HUP");
    let reloading = next(&socket, &mut keep_alives);
    assert!(
        reloading.starts_with("RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC="),
        "{reloading}"
    );
    assert_eq!(
        next(&socket, &mut keep_alives),
        "READY=1\nSTATUS=serving; the configuration was reloaded\n"
    );
    // A refused one says so, and weir goes on serving the previous configuration.
    std::fs::write(
        &config,
        text.replace("pool = \"web\"\n[pools", "pool = \"nope\"\n[pools"),
    )
    .unwrap();
    signal(&child.0, "HUP");
    assert!(next(&socket, &mut keep_alives).starts_with("RELOADING=1\n"));
    let refused = next(&socket, &mut keep_alives);
    assert!(
        refused.starts_with(
            "READY=1\nSTATUS=serving the previous configuration: the reload was refused ("
        ) && refused.contains("weir.toml:"),
        "{refused}"
    );
    assert!(TcpStream::connect(("127.0.0.1", proxy_port)).is_ok());

    // Keep-alives every half of WatchdogSec (200 ms) while it runs.
    std::thread::sleep(Duration::from_millis(600));
    signal(&child.0, "TERM");
    assert_eq!(
        next(&socket, &mut keep_alives),
        "STOPPING=1\nSTATUS=draining open connections\n"
    );
    assert!(keep_alives >= 3, "{keep_alives} keep-alives");
    let mut child = child;
    let exit = child.0.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A binary upgrade run inside the unit (`weir serve --upgrade`): once the new process
/// serves, the old one, still the main process systemd knows, names the new one as main,
/// and sends no more keep-alives while it drains (they would cover a successor that hangs).
#[test]
fn a_binary_upgrade_names_the_new_main_process() {
    let (dir, socket_path, socket) = manager("upgrade");
    let (config, proxy_port, _origin) = draining_config(&dir);
    let start = |upgrade: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
        command
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("NOTIFY_SOCKET", &socket_path)
            .stderr(std::process::Stdio::null());
        // Only the old process has a watchdog: a keep-alive after the handover is its.
        match upgrade {
            true => command.arg("--upgrade").env_remove("WATCHDOG_USEC"),
            false => command.env("WATCHDOG_USEC", "100000"),
        };
        Running(command.spawn().unwrap())
    };
    let mut old = start(false);
    let mut keep_alives = 0;
    assert!(next(&socket, &mut keep_alives).starts_with("READY=1\n"));
    // A request still waiting for its body keeps the old process draining.
    let held = request_in_flight(proxy_port);
    let new = start(true);
    let pid = new.0.id();
    // The new process says READY too (systemd takes it once it is the main process), and
    // the old one names it; in either order.
    let mut messages = [
        next(&socket, &mut keep_alives),
        next(&socket, &mut keep_alives),
    ];
    messages.sort();
    assert_eq!(
        messages,
        [
            format!(
                "MAINPID={pid}\nSTATUS=binary upgrade: process {pid} serves; draining open connections\n"
            ),
            "READY=1\nSTATUS=serving 1 virtual servers\n".to_owned(),
        ]
    );
    keep_alives = 0;
    std::thread::sleep(Duration::from_millis(600));
    socket.set_nonblocking(true).unwrap();
    let mut buffer = [0u8; 512];
    while let Ok(n) = socket.recv(&mut buffer) {
        if &buffer[..n] == b"WATCHDOG=1\n" {
            keep_alives += 1;
        }
    }
    // One may have been on its way as the handover ended.
    assert!(
        keep_alives <= 1,
        "{keep_alives} keep-alives from the old process after MAINPID="
    );
    drop(held);
    let exit = old.0.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(TcpStream::connect(("127.0.0.1", proxy_port)).is_ok());
    drop(new);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The service manager's socket may be an abstract name (`@name`, sd_notify(3)); a
/// watchdog period of zero is none (no keep-alives); and once STOPPING=1 is sent, a SIGHUP
/// during the drain tells systemd nothing more (a READY after it would say weir serves).
#[test]
fn an_abstract_socket_a_zero_watchdog_and_silence_after_stopping() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("weir-systemd-abstract-{}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = UnixDatagram::bind_addr(&address).unwrap();
    let dir = test_dir("abstract");
    let (config, proxy_port, _origin) = draining_config(&dir);
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .env("WATCHDOG_USEC", "0")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    let mut keep_alives = 0;
    assert!(next(&socket, &mut keep_alives).starts_with("READY=1\n"));
    // A client whose request is still waiting for its node keeps the drain going.
    let held = request_in_flight(proxy_port);
    std::thread::sleep(Duration::from_millis(200));
    signal(&child.0, "TERM");
    assert!(next(&socket, &mut keep_alives).starts_with("STOPPING=1\n"));
    signal(&child.0, "HUP");
    socket
        .set_read_timeout(Some(Duration::from_millis(800)))
        .unwrap();
    let mut buffer = [0u8; 512];
    let after = socket
        .recv(&mut buffer)
        .map(|n| String::from_utf8_lossy(&buffer[..n]).into_owned());
    assert!(after.is_err(), "told systemd after STOPPING=1: {after:?}");
    assert_eq!(keep_alives, 0, "keep-alives for a zero watchdog period");
    drop(held);
    let exit = child.0.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
