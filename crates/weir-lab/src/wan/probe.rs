//! The WAN lab's two ends: a file server that sends a generated file (original or edited)
//! and a fetcher that times a download and checks every byte against the same generator.
//!
//! The file is made from a seed, so neither end stores it: `original` is pseudo-random
//! (incompressible, like the WX report's "random binaries"); `edited` is the original with
//! scattered small edits (overwrites, insertions and deletions).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// Which file a fetch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The generated file.
    Original,
    /// The generated file with `edits` small changes spread over it.
    Edited,
}

/// The generated files' parameters, shared by both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSpec {
    /// The file's size in bytes.
    pub size: usize,
    /// Seeds the file's content, so both ends generate the same bytes.
    pub seed: u64,
    /// How many small changes the edited variant has.
    pub edits: u32,
}

/// What a fetch measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fetched {
    /// Payload bytes received.
    pub bytes: u64,
    /// From the connect to the last byte (or to the deadline).
    pub seconds: f64,
    /// From the connect to the first byte of the file.
    pub first_byte_seconds: f64,
    /// Whether the whole file arrived before the deadline.
    pub complete: bool,
    /// Whether what arrived is byte for byte the expected file.
    pub verified: bool,
}

impl Variant {
    /// The one-byte request that asks the server for this variant.
    pub fn request(self) -> u8 {
        match self {
            Variant::Original => b'o',
            Variant::Edited => b'e',
        }
    }

    /// Parses `original` or `edited`.
    pub fn parse(text: &str) -> Option<Variant> {
        match text {
            "original" => Some(Variant::Original),
            "edited" => Some(Variant::Edited),
            _ => None,
        }
    }
}

impl FileSpec {
    /// The flags that name this file to `weir tunnel probe serve` and `fetch`.
    pub fn flags(&self) -> [String; 6] {
        [
            "--size".to_owned(),
            self.size.to_string(),
            "--seed".to_owned(),
            self.seed.to_string(),
            "--edits".to_owned(),
            self.edits.to_string(),
        ]
    }

    /// The file's bytes.
    pub fn generate(&self, variant: Variant) -> Vec<u8> {
        let mut data = pseudo_random(self.size, self.seed);
        if variant == Variant::Edited {
            apply_edits(&mut data, self.edits, self.seed ^ 0x5eed);
        }
        data
    }
}

/// Fast deterministic bytes (xorshift64*): incompressible to zstd.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut data = Vec::with_capacity(len + 8);
    while data.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        data.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    data.truncate(len);
    data
}

/// `count` edits at pseudo-random places: a third overwrite 32 bytes, a third insert 17,
/// a third delete 23.
pub fn apply_edits(data: &mut Vec<u8>, count: u32, seed: u64) {
    let mut state = seed | 1;
    for edit in 0..count {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        if data.len() < 100 {
            return;
        }
        let at = (state >> 16) as usize % (data.len() - 64);
        match edit % 3 {
            0 => data[at..at + 32].copy_from_slice(&pseudo_random(32, state)),
            1 => {
                data.splice(at..at, pseudo_random(17, state));
            }
            _ => {
                data.drain(at..at + 23);
            }
        }
    }
}

/// Serves the files on `listen` until killed: each connection sends one request byte
/// (`o` or `e`) and gets the file, then a close. `congestion` sets the sockets' TCP
/// congestion control (the baseline uses `cubic`).
pub fn serve(listen: SocketAddr, spec: FileSpec, congestion: Option<&str>) -> io::Result<()> {
    let original = std::sync::Arc::new(spec.generate(Variant::Original));
    let edited = std::sync::Arc::new(spec.generate(Variant::Edited));
    let listener = TcpListener::bind(listen)?;
    println!("serving {} bytes on {listen}", original.len());
    io::stdout().flush()?;
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        if let Some(name) = congestion {
            socket2::SockRef::from(&stream).set_tcp_congestion(name.as_bytes())?;
        }
        let (original, edited) = (original.clone(), edited.clone());
        thread::spawn(move || {
            let mut request = [0u8; 1];
            if stream.read_exact(&mut request).is_err() {
                return;
            }
            let data = if request[0] == b'e' { edited } else { original };
            let _ = stream.write_all(&data);
            let _ = stream.shutdown(std::net::Shutdown::Write);
            // Wait for the client's close so that the last bytes are not reset away.
            let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
            let mut rest = [0u8; 64];
            let _ = stream.read(&mut rest);
        });
    }
    Ok(())
}

/// Downloads `variant` from `to`, for at most `timeout`, and checks it.
pub fn fetch(
    to: SocketAddr,
    spec: FileSpec,
    variant: Variant,
    timeout: Duration,
) -> io::Result<Fetched> {
    let expected = spec.generate(variant);
    let start = Instant::now();
    let deadline = start + timeout;
    let mut stream = connect(to, deadline)?;
    stream.write_all(&[variant.request()])?;
    let mut received = Vec::with_capacity(expected.len());
    let mut buffer = vec![0u8; 256 << 10];
    let mut complete = false;
    let mut first_byte: Option<f64> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buffer) {
            Ok(0) => {
                complete = received.len() == expected.len();
                break;
            }
            Ok(count) => {
                first_byte.get_or_insert_with(|| start.elapsed().as_secs_f64());
                received.extend_from_slice(&buffer[..count]);
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(error) => return Err(error),
        }
    }
    let seconds = start.elapsed().as_secs_f64().min(timeout.as_secs_f64());
    let verified = expected.starts_with(&received);
    Ok(Fetched {
        bytes: received.len() as u64,
        seconds,
        first_byte_seconds: first_byte.unwrap_or(seconds),
        complete,
        verified: verified && complete,
    })
}

/// `flows` downloads of `variant` at once; the bytes add up, and the result is complete and
/// verified only if every download is.
pub fn fetch_many(
    to: SocketAddr,
    spec: FileSpec,
    variant: Variant,
    timeout: Duration,
    flows: usize,
) -> io::Result<Fetched> {
    let handles: Vec<_> = (0..flows.max(1))
        .map(|_| thread::spawn(move || fetch(to, spec, variant, timeout)))
        .collect();
    let mut total = Fetched {
        bytes: 0,
        seconds: 0.0,
        first_byte_seconds: f64::MAX,
        complete: true,
        verified: true,
    };
    for handle in handles {
        let fetched = handle
            .join()
            .map_err(|_| io::Error::other("a fetch thread panicked"))??;
        total.bytes += fetched.bytes;
        total.seconds = total.seconds.max(fetched.seconds);
        total.first_byte_seconds = total.first_byte_seconds.min(fetched.first_byte_seconds);
        total.complete &= fetched.complete;
        total.verified &= fetched.verified;
    }
    Ok(total)
}

/// Connects, retrying while the server (or the tunnel's listener) starts.
fn connect(to: SocketAddr, deadline: Instant) -> io::Result<TcpStream> {
    loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(5)) {
            Ok(stream) => return Ok(stream),
            Err(error) if Instant::now() + Duration::from_millis(100) < deadline => {
                tracing::debug!(%error, "connect failed; retrying");
                thread::sleep(Duration::from_millis(100));
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_reproducible_and_edits_small() {
        let spec = FileSpec {
            size: 1 << 20,
            seed: 3,
            edits: 30,
        };
        let original = spec.generate(Variant::Original);
        assert_eq!(original, spec.generate(Variant::Original));
        let edited = spec.generate(Variant::Edited);
        assert_ne!(original, edited);
        // 10 insertions of 17 and 10 deletions of 23.
        assert_eq!(edited.len(), original.len() + 10 * 17 - 10 * 23);
        let compressed = zstd::bulk::compress(&original, 1).unwrap();
        assert!(
            compressed.len() > original.len(),
            "pseudo-random data must not compress"
        );
    }

    #[test]
    fn fetch_checks_every_byte() {
        let spec = FileSpec {
            size: 300_000,
            seed: 9,
            edits: 5,
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        thread::spawn(move || serve(address, spec, None));
        for variant in [Variant::Original, Variant::Edited] {
            let fetched = fetch(address, spec, variant, Duration::from_secs(10)).unwrap();
            assert!(fetched.complete && fetched.verified, "{fetched:?}");
            assert_eq!(fetched.bytes as usize, spec.generate(variant).len());
        }
        // The wrong spec: bytes arrive but do not verify.
        let wrong = FileSpec { seed: 10, ..spec };
        let fetched = fetch(address, wrong, Variant::Original, Duration::from_secs(10)).unwrap();
        assert!(!fetched.verified);
    }
}
