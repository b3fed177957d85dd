//! weir stopped (SIGSTOP: a debugger, a paused VM, a frozen cgroup) past its timeouts and
//! resumed: what came in while it was stopped is handled before a timeout is declared. A
//! stopped process's `epoll_wait` returns nothing when it resumes, so its timers fire before
//! it reads the sockets that became readable meanwhile; a node's answer that came in time
//! was taken for a 504, and a layer 4 session's bytes for an idle timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use weir_testkit::free_ports;

struct Weir(Child);

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A node on a loopback port of its own that serves each connection with `serve`, on a
/// thread of its own.
fn node(serve: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || serve(stream));
        }
    });
    address
}

/// Answers each request 300 ms after its head arrived.
fn slowly(mut stream: TcpStream) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let _ = stream.read(&mut byte);
}

/// Echoes what it reads.
fn echo(mut stream: TcpStream) {
    let mut buffer = [0u8; 1024];
    while let Ok(n @ 1..) = stream.read(&mut buffer) {
        if stream.write_all(&buffer[..n]).is_err() {
            return;
        }
    }
}

fn connect(address: SocketAddr) -> TcpStream {
    let start = Instant::now();
    loop {
        match TcpStream::connect(address) {
            Ok(stream) => {
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                return stream;
            }
            Err(error) => {
                assert!(start.elapsed() < Duration::from_secs(10), "{error}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn an_answer_and_bytes_that_came_while_weir_was_stopped_are_not_timeouts() {
    let dir = std::env::temp_dir().join(format!("weir-stopped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The nodes first: a port free_ports found and let go may be handed to a listener
    // bound after it, and weir, given the same port, would fail to start.
    let (web_node, db_node) = (node(slowly), node(echo));
    let [http, tcp] = free_ports::<2>();
    let config = dir.join("weir.toml");
    std::fs::write(
        &config,
        format!(
            "[runtime]\nthreads = 1\n\
             [virtual_servers.web]\nlisten = \"127.0.0.1:{http}\"\npool = \"web\"\n\
             [virtual_servers.db]\nlisten = \"127.0.0.1:{tcp}\"\nprotocol = \"tcp\"\npool = \"db\"\n\
             [virtual_servers.db.tcp]\nidle_timeout = \"2s\"\n\
             [pools.web]\nnodes = [{{ address = \"{}\" }}]\n\
             [pools.web.timeouts]\nresponse = \"1s\"\n\
             [pools.db]\nnodes = [{{ address = \"{}\" }}]\n",
            web_node, db_node
        ),
    )
    .unwrap();
    let weir = Weir(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = Pid::from_raw(weir.0.id() as i32);
    let mut session = connect(SocketAddr::from(([127, 0, 0, 1], tcp)));
    session.write_all(b"hello").unwrap();
    let mut echoed = [0u8; 5];
    session.read_exact(&mut echoed).unwrap();
    let mut request = connect(SocketAddr::from(([127, 0, 0, 1], http)));
    request
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    // The request reaches the node; weir stops before its answer (300 ms) comes.
    std::thread::sleep(Duration::from_millis(150));
    kill(pid, Signal::SIGSTOP).unwrap();
    // 1 s into the session's 2 s idle timeout its client speaks, while weir is stopped.
    std::thread::sleep(Duration::from_millis(850));
    session.write_all(b"in-time").unwrap();
    // Resumed past both the response timeout (1 s) and the idle timeout (2 s).
    std::thread::sleep(Duration::from_millis(2_500));
    kill(pid, Signal::SIGCONT).unwrap();
    let mut answer = String::new();
    request.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let mut echoed = [0u8; 7];
    session.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"in-time");
    drop(weir);
    let _ = std::fs::remove_dir_all(&dir);
}
