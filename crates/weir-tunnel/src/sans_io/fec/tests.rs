//! The FEC core end to end without sockets: two cores, a lossy channel between them, and
//! a clock the test moves.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::wire::{self, BlockId, Frame};
use super::*;

const A: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 1);
const B: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 2);

fn timing() -> Timing {
    Timing {
        bandwidth: 100_000_000,
        rtt: Duration::from_millis(50),
        max_delay: Duration::from_millis(20),
        idle: Duration::from_millis(2),
        mtu: 1500,
    }
}

fn settings(mode: Mode) -> FecSettings {
    FecSettings {
        mode,
        ..FecSettings::default()
    }
}

/// A QUIC-looking datagram (first byte 0x40..) of random length, unique by its number.
fn datagram(rng: &mut SmallRng, number: u32) -> Vec<u8> {
    let length = rng.random_range(24..1400);
    let mut bytes = vec![0; length];
    rng.fill(&mut bytes[5..]);
    bytes[0] = 0x40 | (number as u8 & 0x3f);
    bytes[1..5].copy_from_slice(&number.to_be_bytes());
    bytes
}

/// What a run of `count` datagrams from A to B delivered, over a channel that loses each
/// datagram (both ways) with probability `loss`.
struct Run {
    sent: Vec<Vec<u8>>,
    delivered: Vec<Vec<u8>>,
    repairs_sent: usize,
    recovered: u64,
}

fn run(mode: Mode, loss: f64, count: u32, seed: u64) -> Run {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut a = FecCore::new(settings(mode), timing());
    let mut b = FecCore::new(settings(mode), timing());
    let mut now = Instant::now();
    let mut out = Vec::new();
    let mut result = Run {
        sent: Vec::new(),
        delivered: Vec::new(),
        repairs_sent: 0,
        recovered: 0,
    };
    for number in 0..count {
        now += Duration::from_micros(200);
        let bytes = datagram(&mut rng, number);
        let wire = match a.frame(now, B, &bytes, bytes.len(), &mut out) {
            Some(_) => out.clone(),
            None => bytes.clone(),
        };
        a.commit(now, B, &bytes, bytes.len());
        result.sent.push(bytes);
        let mut datagrams = vec![wire];
        datagrams.extend(a.take_outgoing().into_iter().map(|outgoing| {
            result.repairs_sent += usize::from(outgoing.repair);
            outgoing.bytes
        }));
        if number % 50 == 49 {
            // A pause: the open block closes on the quiet gap.
            now += Duration::from_millis(5);
            a.poll(now);
            datagrams.extend(a.take_outgoing().into_iter().map(|outgoing| {
                result.repairs_sent += usize::from(outgoing.repair);
                outgoing.bytes
            }));
        }
        for datagram in datagrams {
            if rng.random_bool(loss) {
                continue;
            }
            b.receive(now, A, &datagram, &mut |up| {
                result.delivered.push(up.to_vec())
            });
        }
        b.poll(now);
        for report in b.take_outgoing() {
            if !rng.random_bool(loss) {
                a.receive(now, B, &report.bytes, &mut |_| {
                    panic!("a report is not data")
                });
            }
        }
    }
    result.recovered = b.take_counters().recovered;
    result
}

#[test]
fn a_clean_link_in_auto_mode_sends_no_repairs() {
    let run = run(Mode::Auto, 0.0, 5000, 1);
    assert_eq!(run.repairs_sent, 0);
    assert_eq!(run.delivered, run.sent);
}

#[test]
fn off_mode_sends_bare_datagrams() {
    let mut core = FecCore::new(settings(Mode::Off), timing());
    let mut out = Vec::new();
    assert_eq!(core.frame(Instant::now(), B, b"\x41abc", 4, &mut out), None);
    let mut up = Vec::new();
    core.receive(Instant::now(), B, b"\x41abc", &mut |bytes| {
        up.push(bytes.to_vec())
    });
    assert_eq!(up, vec![b"\x41abc".to_vec()]);
}

#[test]
fn auto_mode_protects_a_lossy_link_and_recovers_intact_datagrams() {
    for (loss, seed) in [(0.01, 2), (0.05, 3)] {
        let run = run(Mode::Auto, loss, 20_000, seed);
        assert!(run.repairs_sent > 0, "loss {loss}: no repairs");
        assert!(run.recovered > 0, "loss {loss}: nothing recovered");
        // Every datagram passed up is one that was sent, unchanged, and each at most once.
        let sent: HashSet<&Vec<u8>> = run.sent.iter().collect();
        let mut seen = HashSet::new();
        for datagram in &run.delivered {
            assert!(
                sent.contains(datagram),
                "loss {loss}: a datagram was altered"
            );
            assert!(seen.insert(datagram), "loss {loss}: delivered twice");
        }
        // Residual loss well below the link's: most losses were repaired.
        let residual = 1.0 - run.delivered.len() as f64 / run.sent.len() as f64;
        assert!(residual < loss / 3.0, "loss {loss}: residual {residual}");
    }
}

#[test]
fn on_mode_recovers_any_pattern_of_up_to_the_repair_count() {
    let mut rng = SmallRng::seed_from_u64(4);
    for trial in 0..200 {
        let settings = FecSettings {
            mode: Mode::On,
            block: rng.random_range(1..=64),
            max_overhead: 0.5,
            min_loss: 0.05,
        };
        let mut a = FecCore::new(settings, timing());
        let mut b = FecCore::new(settings, timing());
        let now = Instant::now();
        let sources = settings.block;
        let repairs = settings.repairs(sources, None);
        let mut sent = Vec::new();
        let mut frames = Vec::new();
        let mut out = Vec::new();
        for number in 0..sources {
            let bytes = datagram(&mut rng, number as u32);
            a.frame(now, B, &bytes, bytes.len(), &mut out);
            a.commit(now, B, &bytes, bytes.len());
            frames.push(out.clone());
            sent.push(bytes);
        }
        let outgoing = a.take_outgoing();
        assert_eq!(outgoing.len(), repairs, "trial {trial}");
        frames.extend(outgoing.into_iter().map(|outgoing| outgoing.bytes));
        // Lose `repairs` of the sources and repairs, anywhere.
        let mut lost = HashSet::new();
        while lost.len() < repairs {
            lost.insert(rng.random_range(0..frames.len()));
        }
        let mut delivered = HashSet::new();
        for (index, frame) in frames.iter().enumerate() {
            if !lost.contains(&index) {
                b.receive(now, A, frame, &mut |up| {
                    delivered.insert(up.to_vec());
                });
            }
        }
        let expected: HashSet<Vec<u8>> = sent.into_iter().collect();
        assert_eq!(
            delivered, expected,
            "trial {trial}: block {sources}, lost {lost:?}"
        );
    }
}

#[test]
fn gso_segments_are_framed_one_by_one() {
    let mut core = FecCore::new(settings(Mode::Auto), timing());
    let contents: Vec<u8> = (0..250u32).map(|byte| 0x40 | byte as u8).collect();
    let mut out = Vec::new();
    let stride = core
        .frame(Instant::now(), B, &contents, 100, &mut out)
        .unwrap();
    assert_eq!(stride, 100 + wire::DATA_HEADER);
    let frames: Vec<_> = out
        .chunks(stride)
        .map(|frame| wire::parse(frame).unwrap())
        .collect();
    let payloads: Vec<&[u8]> = contents.chunks(100).collect();
    for (seq, (frame, payload)) in frames.iter().zip(payloads).enumerate() {
        assert_eq!(
            *frame,
            Frame::Data {
                seq: seq as u32,
                protected: false,
                payload
            }
        );
    }
    // Framing without a commit does not advance the numbers.
    let first = out[..stride].to_vec();
    core.frame(Instant::now(), B, &contents, 100, &mut out);
    assert_eq!(out[..stride], first[..]);
}

#[test]
fn random_and_mangled_datagrams_never_panic() {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut core = FecCore::new(settings(Mode::On), timing());
    let now = Instant::now();
    let mut valid = Vec::new();
    let block = BlockId {
        first: 10,
        sources: 4,
        repairs: 2,
    };
    for index in 0..2 {
        valid.push(wire::repair(block, index, &[7; 64]));
    }
    for seq in 8..16 {
        let mut frame = Vec::new();
        wire::write_data(&mut frame, seq, true, &[0x41; 70]);
        valid.push(frame);
    }
    valid.push(wire::report(5, 3_000_000_000));
    for _ in 0..50_000 {
        let mut bytes = if rng.random_bool(0.5) {
            let length = rng.random_range(0..200);
            (0..length).map(|_| rng.random::<u8>()).collect::<Vec<u8>>()
        } else {
            valid[rng.random_range(0..valid.len())].clone()
        };
        if !bytes.is_empty() && rng.random_bool(0.7) {
            let at = rng.random_range(0..bytes.len());
            bytes[at] = rng.random();
            if rng.random_bool(0.3) {
                bytes.truncate(at);
            }
        }
        // First bytes 0..4 are frames; force many of them.
        if let Some(first) = bytes.first_mut()
            && rng.random_bool(0.5)
        {
            *first = rng.random_range(0..5);
        }
        core.receive(now, A, &bytes, &mut |_| {});
        core.poll(now);
        core.take_outgoing();
    }
}

#[test]
fn many_peers_are_bounded() {
    let mut core = FecCore::new(settings(Mode::Auto), timing());
    let now = Instant::now();
    for port in 0..1000u16 {
        let peer = SocketAddr::from(([10, 0, 0, 1], port));
        core.receive(now, peer, &wire::report(1, 1), &mut |_| {});
    }
    assert!(core.peers.len() <= MAX_PEERS);
}

#[test]
fn auto_repairs_wait_for_spare_capacity_and_cover_the_tail() {
    let mut rng = SmallRng::seed_from_u64(6);
    let mut a = FecCore::new(settings(Mode::Auto), timing());
    let mut b = FecCore::new(settings(Mode::Auto), timing());
    let mut now = Instant::now();
    let mut out = Vec::new();
    let (mut busy_repairs, mut tail_repairs) = (0, 0);
    let mut last_lost = None;
    // 1,400-byte datagrams every 100 µs: 14 MB/s into a 12.5 MB/s link, 2 % lost.
    for number in 0..20_000u32 {
        now += Duration::from_micros(100);
        let mut bytes = vec![0x41; 1400];
        bytes[1..5].copy_from_slice(&number.to_be_bytes());
        a.frame(now, B, &bytes, bytes.len(), &mut out);
        a.commit(now, B, &bytes, bytes.len());
        busy_repairs += a.take_outgoing().iter().filter(|o| o.repair).count();
        if rng.random_bool(0.02) {
            last_lost = Some(bytes.clone());
        } else {
            b.receive(now, A, &out, &mut |_| {});
        }
        b.poll(now);
        for report in b.take_outgoing() {
            a.receive(now, B, &report.bytes, &mut |_| {});
        }
    }
    // The sender stops: the open block closes, the queue drains, repairs go out.
    let mut rebuilt = Vec::new();
    for _ in 0..100 {
        now += Duration::from_millis(1);
        a.poll(now);
        for outgoing in a.take_outgoing() {
            tail_repairs += usize::from(outgoing.repair);
            b.receive(now, A, &outgoing.bytes, &mut |up| rebuilt.push(up.to_vec()));
        }
    }
    assert!(
        busy_repairs < 20,
        "{busy_repairs} repairs took the busy link"
    );
    assert!(
        tail_repairs > 10,
        "only {tail_repairs} repairs for the tail"
    );
    let last_lost = last_lost.expect("something was lost");
    assert!(
        rebuilt.contains(&last_lost),
        "the last loss was not rebuilt"
    );
}

/// What strangers can make a side keep is bounded: a frame larger than the link's MTU is
/// dropped (never kept, never passed up), a peer silent for `PEER_IDLE` is forgotten, and a
/// report about frames never sent to its address changes nothing.
#[test]
fn strangers_frames_are_bounded_forgotten_and_not_believed() {
    let now = Instant::now();
    let mut core = FecCore::new(settings(Mode::Auto), timing());
    let mut up = 0;
    let mut frame = Vec::new();
    wire::write_data(&mut frame, 7, true, &[0x41; 1400]);
    core.receive(now, A, &frame, &mut |_| up += 1);
    assert_eq!((up, core.take_counters().malformed), (1, 0));
    let mut oversized = Vec::new();
    wire::write_data(&mut oversized, 8, true, &[0x41; 4000]);
    core.receive(now, A, &oversized, &mut |_| up += 1);
    let shard = wire::repair(
        BlockId {
            first: 0,
            sources: 4,
            repairs: 2,
        },
        0,
        &[0; 3000],
    );
    core.receive(now, A, &shard, &mut |_| up += 1);
    assert_eq!((up, core.take_counters().malformed), (1, 2));
    // A report from B, to which nothing was sent: no loss figure.
    core.receive(now, B, &wire::report(10, 5), &mut |_| up += 1);
    assert_eq!(core.take_counters().loss_ppm, None);
    assert_eq!(core.peers.len(), 2);
    // Silent peers go, and the timer wakes for it.
    assert!(core.deadline().is_some_and(|at| at <= now + PEER_IDLE));
    core.poll(now + PEER_IDLE / 2);
    assert_eq!(core.peers.len(), 2);
    core.poll(now + PEER_IDLE);
    assert_eq!(core.peers.len(), 0);
}
