//! Measuring a link: a bulk TCP sender and a sink that reports goodput (payload bits per
//! second) over a window after a warm-up, so that slow start does not count.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// How long the sender keeps trying to connect while the sink is starting.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);

/// Payload received over a measured window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Goodput {
    /// Payload bytes received in the window.
    pub bytes: u64,
    /// Length of the window, measured from the end of the warm-up.
    pub elapsed: Duration,
}

impl Goodput {
    /// Goodput in payload bits per second over the window.
    pub fn bits_per_second(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64()
    }
}

/// Accepts one connection on `listen`, and counts the bytes read from `warmup` after the first
/// byte until `warmup + window` after it; then closes (which stops the sender). Gives up
/// after `timeout` without a connection.
pub fn tcp_sink(
    listen: SocketAddr,
    warmup: Duration,
    window: Duration,
    timeout: Duration,
) -> io::Result<Goodput> {
    let listener = TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let give_up = Instant::now() + timeout;
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= give_up {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no sender connected",
                    ));
                }
                thread::sleep(Duration::from_millis(10));
            }
            Err(error) => return Err(error),
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buffer = vec![0u8; 256 * 1024];
    let first = stream.read(&mut buffer)?;
    if first == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the sender sent nothing",
        ));
    }
    let start = Instant::now() + warmup;
    let end = start + window;
    // The window opens at the first read past `start` (its bytes arrived before it) and
    // closes at the last read before `end`.
    let mut opened: Option<Instant> = None;
    let mut last = Instant::now();
    let mut bytes = 0u64;
    loop {
        let read = stream.read(&mut buffer)?;
        let now = Instant::now();
        if read == 0 || now >= end {
            break;
        }
        if now >= start {
            match opened {
                None => opened = Some(now),
                Some(_) => bytes += read as u64,
            }
            last = now;
        }
    }
    let opened = opened.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the sender stopped during the warm-up",
        )
    })?;
    Ok(Goodput {
        bytes,
        elapsed: last.saturating_duration_since(opened),
    })
}

/// Connects to `to` (retrying while the sink starts) and writes as fast as the link takes it
/// until the sink closes or `duration` passes. Returns the bytes written.
pub fn tcp_send(to: SocketAddr, duration: Duration) -> io::Result<u64> {
    let give_up = Instant::now() + CONNECT_PATIENCE;
    let mut stream = loop {
        match TcpStream::connect_timeout(&to, CONNECT_PATIENCE) {
            Ok(stream) => break stream,
            Err(error) if Instant::now() < give_up => {
                tracing::debug!(%error, "sink not ready yet");
                thread::sleep(Duration::from_millis(50));
            }
            Err(error) => return Err(error),
        }
    };
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let chunk = vec![0x5a_u8; 64 * 1024];
    let stop = Instant::now() + duration;
    let mut written = 0u64;
    while Instant::now() < stop {
        match stream.write(&chunk) {
            Ok(0) => break,
            Ok(count) => written += count as u64,
            // The sink closed after its window: the normal end.
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                break;
            }
            Err(error) => return Err(error),
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_measures_a_sender_on_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let sink = thread::spawn(move || {
            tcp_sink(
                address,
                Duration::from_millis(100),
                Duration::from_millis(300),
                Duration::from_secs(5),
            )
        });
        let written = tcp_send(address, Duration::from_secs(5)).unwrap();
        let goodput = sink.join().unwrap().unwrap();
        assert!(goodput.bytes > 0 && goodput.bytes <= written);
        assert!(goodput.elapsed > Duration::from_millis(200));
        assert!(goodput.elapsed <= Duration::from_millis(300));
        assert!(goodput.bits_per_second() > 0.0);
    }
}
