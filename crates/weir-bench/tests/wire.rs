//! Raw-bytes servers for what `weir origin` never does: close-delimited bodies, silence and
//! garbage. Each server answers a fixed number of connections, then stops.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{plan, settings};
use weir_bench::Stop;

/// Accepts `connections` connections; on each, reads one request and writes `answer` (if
/// any), then closes after `hold`.
fn raw_server(
    connections: usize,
    answer: &'static [u8],
    hold: Duration,
) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    let server = std::thread::spawn(move || {
        for _ in 0..connections {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(answer);
            std::thread::sleep(hold);
        }
    });
    (url, server)
}

fn one_connection(url: String, count: u64) -> weir_bench::Report {
    let mut run = settings(vec![url], Stop::Count(count));
    run.connections = 1;
    run.threads = Some(1);
    run.timeout = Duration::from_millis(300);
    weir_bench::run(&plan(run)).expect("run")
}

#[test]
fn close_delimited_bodies_end_at_the_close() {
    let (url, server) = raw_server(
        3,
        b"HTTP/1.1 200 OK\r\n\r\nhello, until the close",
        Duration::ZERO,
    );
    let report = one_connection(url, 3);
    server.join().expect("server");
    assert_eq!((report.requests.completed, report.errors.total), (3, 0));
    // No keep-alive after a close-delimited body: a new connection each time.
    assert_eq!(report.connections_opened, 3);
    assert_eq!(report.bytes_received, 3 * 41);
}

#[test]
fn silence_is_a_timeout_and_garbage_a_parse_error() {
    let (url, server) = raw_server(2, b"", Duration::from_millis(600));
    let report = one_connection(url, 2);
    server.join().expect("server");
    assert_eq!((report.errors.timeout, report.errors.total), (2, 2));
    assert_eq!(report.siege.availability_percent, 0.0);

    let (url, server) = raw_server(2, b"SMTP ready\r\n\r\n", Duration::ZERO);
    let report = one_connection(url, 2);
    server.join().expect("server");
    assert_eq!((report.errors.parse, report.errors.total), (2, 2));

    let (url, server) = raw_server(
        2,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        Duration::ZERO,
    );
    let report = one_connection(url, 2);
    server.join().expect("server");
    assert_eq!((report.errors.read, report.errors.total), (2, 2));
}
