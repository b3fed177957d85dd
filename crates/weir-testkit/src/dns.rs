//! A DNS server on loopback UDP whose answers a test changes: A, AAAA and SRV records from
//! a table, SERVFAIL or NXDOMAIN on demand. It runs on a thread of its own, so a proxy that
//! resolves names while blocking its runtime (a start, a reload) still gets answers.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server answers for a name.
#[derive(Debug, Clone)]
pub enum Reply {
    /// These addresses (A for IPv4, AAAA for IPv6 queries) with this TTL in seconds.
    Records(Vec<IpAddr>, u32),
    /// SRV records (priority, weight, port, target) with this TTL in seconds; other
    /// queries for the name get no records.
    Services(Vec<(u16, u16, u16, String)>, u32),
    /// SERVFAIL.
    ServerFailure,
    /// `Records` for A queries, SERVFAIL for AAAA ones (a resolver failing one family).
    AddressesButNoIpv6(Vec<IpAddr>, u32),
    /// NXDOMAIN (also the answer for a name not in the table).
    NameError,
    /// `Records`, and with them one more address record of the asked type owned by another
    /// name (a record the answer should not have carried).
    RecordsAndStranger(Vec<IpAddr>, u32, String, IpAddr),
    /// SERVFAIL for A queries, no records for AAAA ones.
    Ipv4FailsIpv6Empty,
}

/// The server; it stops when dropped.
pub struct TestDns {
    /// Where it listens (127.0.0.1, a free port).
    pub address: SocketAddr,
    table: Arc<Mutex<HashMap<String, Reply>>>,
    queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl TestDns {
    /// Starts a server with an empty table (every name: NXDOMAIN).
    pub fn start() -> TestDns {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP port");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("set a read timeout");
        let address = socket.local_addr().expect("a bound socket has an address");
        let table: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let queries = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (served, counted, stopped) =
            (Arc::clone(&table), Arc::clone(&queries), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut buffer = [0u8; 1500];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((length, from)) = socket.recv_from(&mut buffer) else {
                    continue;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let table = served.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(reply) = respond(&buffer[..length], &table) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        TestDns {
            address,
            table,
            queries,
            stop,
        }
    }

    /// From now on, `host` (lower case, without the trailing dot) gets `reply`.
    pub fn set(&self, host: &str, reply: Reply) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(host.to_owned(), reply);
    }

    /// How many queries arrived so far.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The answer to one query, written by hand (an independent check of the resolver's parser).
fn respond(query: &[u8], table: &HashMap<String, Reply>) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let length = usize::from(*query.get(at)?);
        at += 1;
        if length == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + length)?).to_lowercase());
        at += length;
    }
    let question_end = at + 4;
    let kind = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let host = labels.join(".");
    let mut out = query.get(..2)?.to_vec();
    let address = |ip: &IpAddr| match (ip, kind) {
        (IpAddr::V4(v4), 1) => Some(v4.octets().to_vec()),
        (IpAddr::V6(v6), 28) => Some(v6.octets().to_vec()),
        _ => None,
    };
    // A record owned by another name than the one asked, if the reply has one.
    let mut stranger = None;
    // (rcode, TTL, each answer's record data), for the asked type only.
    let (rcode, ttl, answers): (u8, u32, Vec<Vec<u8>>) = match table.get(&host) {
        Some(Reply::Records(ips, ttl)) => (0, *ttl, ips.iter().filter_map(address).collect()),
        Some(Reply::RecordsAndStranger(ips, ttl, owner, ip)) => {
            stranger = address(ip).map(|data| (owner.clone(), data));
            (0, *ttl, ips.iter().filter_map(address).collect())
        }
        Some(Reply::Services(records, ttl)) if kind == 33 => {
            let data = records.iter().map(|(priority, weight, port, target)| {
                let mut data = Vec::new();
                for value in [priority, weight, port] {
                    data.extend_from_slice(&value.to_be_bytes());
                }
                for label in target.split('.').filter(|label| !label.is_empty()) {
                    data.push(label.len() as u8);
                    data.extend_from_slice(label.as_bytes());
                }
                data.push(0);
                data
            });
            (0, *ttl, data.collect())
        }
        Some(Reply::Services(_, ttl)) => (0, *ttl, Vec::new()),
        Some(Reply::AddressesButNoIpv6(_, _)) if kind == 28 => (2, 0, Vec::new()),
        Some(Reply::AddressesButNoIpv6(ips, ttl)) => {
            let data = ips.iter().filter_map(|ip| match (ip, kind) {
                (IpAddr::V4(v4), 1) => Some(v4.octets().to_vec()),
                _ => None,
            });
            (0, *ttl, data.collect())
        }
        Some(Reply::ServerFailure) => (2, 0, Vec::new()),
        Some(Reply::Ipv4FailsIpv6Empty) if kind == 1 => (2, 0, Vec::new()),
        Some(Reply::Ipv4FailsIpv6Empty) => (0, 30, Vec::new()),
        Some(Reply::NameError) | None => (3, 0, Vec::new()),
    };
    out.extend_from_slice(&[0x81, 0x80 | rcode, 0, 1]);
    let count = answers.len() + usize::from(stranger.is_some());
    out.extend_from_slice(&u16::try_from(count).ok()?.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(query.get(12..question_end)?);
    for data in answers {
        out.extend_from_slice(&[0xc0, 12]);
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&[0, 1]);
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&u16::try_from(data.len()).ok()?.to_be_bytes());
        out.extend_from_slice(&data);
    }
    if let Some((owner, data)) = stranger {
        for label in owner.split('.').filter(|label| !label.is_empty()) {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&[0, 1]);
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&u16::try_from(data.len()).ok()?.to_be_bytes());
        out.extend_from_slice(&data);
    }
    Some(out)
}
