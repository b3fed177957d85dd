//! Each bucket trips on its flood and not on ordinary traffic, whatever the
//! byte boundaries.

use std::time::{Duration, Instant};

use weir_testkit::h2flood::frame;

use super::*;

fn watcher() -> FrameWatch {
    let mut watch = FrameWatch::new(FloodLimits::new(64 * 1024, 16 * 1024));
    assert_eq!(watch.received(PREFACE, Instant::now()), None);
    watch
}

/// Feeds `count` copies of `frame` at once; returns the first verdict and after how many.
fn flood(
    watch: &mut FrameWatch,
    frame: &[u8],
    count: usize,
    now: Instant,
) -> Option<(Flood, usize)> {
    (1..=count).find_map(|n| watch.received(frame, now).map(|flood| (flood, n)))
}

#[test]
fn each_flood_is_named() {
    let now = Instant::now();
    let cases = [
        (
            [
                frame(HEADERS, END_HEADERS, 1, b"x"),
                frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]),
            ]
            .concat(),
            Flood::RapidReset,
            201,
        ),
        (frame(SETTINGS, 0, 0, &[]), Flood::Settings, 51),
        (frame(PING, 0, 0, &[0; 8]), Flood::Ping, 101),
        (frame(DATA, 0, 1, &[]), Flood::EmptyFrames, 101),
        (
            frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0, 1]),
            Flood::WindowUpdate,
            1001,
        ),
        // PRIORITY, and a type no one defined.
        (
            frame(0x2, 0, 1, &[0, 0, 0, 0, 16]),
            Flood::IgnoredFrames,
            1001,
        ),
        (frame(0xfa, 0, 0, b"xyz"), Flood::IgnoredFrames, 1001),
    ];
    for (bytes, expected, after) in cases {
        let mut watch = watcher();
        assert_eq!(
            flood(&mut watch, &bytes, 5000, now),
            Some((expected, after)),
            "{expected:?}"
        );
        assert_eq!(watch.verdict(), Some(expected));
    }
}

#[test]
fn acknowledgements_and_ending_frames_are_free() {
    let now = Instant::now();
    let free = [
        frame(SETTINGS, ACK, 0, &[]),
        frame(PING, ACK, 0, &[0; 8]),
        frame(DATA, END_STREAM, 1, &[]),
        frame(DATA, 0, 1, b"x"),
    ];
    for bytes in free {
        let mut watch = watcher();
        assert_eq!(flood(&mut watch, &bytes, 5000, now), None);
    }
}

#[test]
fn a_steady_rate_below_the_budget_never_trips() {
    let mut watch = watcher();
    let start = Instant::now();
    let ping = frame(PING, 0, 0, &[0; 8]);
    // 5 per second for a minute: half the drain rate.
    for tick in 0..300 {
        let now = start + Duration::from_millis(tick * 200);
        assert_eq!(watch.received(&ping, now), None, "tick {tick}");
    }
}

#[test]
fn window_updates_are_credited_by_data_sent() {
    let now = Instant::now();
    let mut watch = watcher();
    let update = frame(WINDOW_UPDATE, 0, 1, &[0, 0, 64, 0]);
    let data = frame(DATA, 0, 1, &[0; 16 * 1024]);
    for _ in 0..20 {
        // A client acknowledging each 16 KiB DATA frame it got, a KiB at a time.
        watch.sent(&data, 0);
        for _ in 0..16 {
            assert_eq!(watch.received(&update, now), None);
        }
    }
    assert_eq!(
        flood(&mut watch, &update, 2000, now).map(|f| f.0),
        Some(Flood::WindowUpdate)
    );
}

#[test]
fn a_header_block_in_too_many_continuations_is_a_flood() {
    let now = Instant::now();
    let mut watch = watcher();
    // A block within bounds: HEADERS and 4 CONTINUATIONs (the limit is 5).
    let mut block = frame(HEADERS, 0, 1, b"abc");
    for _ in 0..3 {
        block.extend(frame(CONTINUATION, 0, 1, b"abc"));
    }
    block.extend(frame(CONTINUATION, END_HEADERS, 1, b"abc"));
    assert_eq!(watch.received(&block, now), None);
    // A block that never ends.
    let mut watch = watcher();
    assert_eq!(watch.received(&frame(HEADERS, 0, 3, b"abc"), now), None);
    let continuation = frame(CONTINUATION, 0, 3, b"abc");
    assert_eq!(
        flood(&mut watch, &continuation, 100, now),
        Some((Flood::Continuation, 6))
    );
}

#[test]
fn byte_boundaries_do_not_matter() {
    let now = Instant::now();
    let mut stream = Vec::from(PREFACE);
    stream.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x82; 40]));
    for _ in 0..60 {
        stream.extend(frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]));
    }
    for split in [1, 2, 7, 9, 13, 64] {
        let mut watch = FrameWatch::new(FloodLimits::new(64 * 1024, 16 * 1024));
        let mut verdict = None;
        for piece in stream.chunks(split) {
            verdict = verdict.or(watch.received(piece, now));
        }
        assert_eq!(verdict, Some(Flood::Settings), "split {split}");
    }
}

/// gRPC clients (grpc-go's BDP estimate) send a PING as data arrives, one per burst of
/// messages: a PING after weir wrote DATA or HEADERS is not counted, one after only
/// weir's own PING ACK is.
#[test]
fn a_ping_after_data_weir_wrote_is_not_a_flood() {
    let now = Instant::now();
    let ping = frame(PING, 0, 0, &[0; 8]);
    let ack = frame(PING, ACK, 0, &[0; 8]);
    let message = frame(DATA, 0, 1, &[0; 20]);
    let head = frame(HEADERS, END_HEADERS, 3, &[0x88]);
    let mut watch = watcher();
    for round in 0..5000 {
        watch.sent(if round % 2 == 0 { &message } else { &head }, 0);
        assert_eq!(watch.received(&ping, now), None, "round {round}");
        watch.sent(&ack, 0);
    }
    // Answering the PING alone excuses nothing.
    let mut watch = watcher();
    let found = (1..=200).find_map(|n| {
        let verdict = watch.received(&ping, now);
        watch.sent(&ack, 0);
        verdict.map(|flood| (flood, n))
    });
    assert_eq!(found, Some((Flood::Ping, 101)));
}

/// gRPC's C core acknowledges each small DATA frame with two WINDOW_UPDATEs (the
/// stream's and the connection's): a stream of small messages is not a flood.
#[test]
fn two_window_updates_per_data_frame_are_not_a_flood() {
    let now = Instant::now();
    let message = frame(DATA, 0, 1, &[0; 30]);
    let stream_update = frame(WINDOW_UPDATE, 0, 1, &[0, 0, 0, 30]);
    let connection_update = frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0, 30]);
    let mut watch = watcher();
    for round in 0..10_000 {
        watch.sent(&message, 0);
        assert_eq!(watch.received(&stream_update, now), None, "round {round}");
        assert_eq!(
            watch.received(&connection_update, now),
            None,
            "round {round}"
        );
    }
}

/// What weir writes is read frame by frame whatever the write boundaries.
#[test]
fn written_frames_are_found_across_write_boundaries() {
    let now = Instant::now();
    let ping = frame(PING, 0, 0, &[0; 8]);
    let mut written = frame(SETTINGS, 0, 0, &[0; 6]);
    written.extend_from_slice(&frame(HEADERS, END_HEADERS, 1, &[0x88; 40]));
    written.extend_from_slice(&frame(DATA, 0, 1, &[7; 300]));
    for split in 1..written.len() {
        let mut watch = watcher();
        // 150 PINGs, each after one HEADERS and DATA pair written in two pieces.
        for _ in 0..150 {
            watch.sent(&written[..split], 0);
            watch.sent(&written[split..], 0);
            assert_eq!(watch.received(&ping, now), None, "split {split}");
        }
    }
}

/// The "data dribble" (CVE-2019-9511): a client that keeps its window at a byte, so that
/// weir writes one-byte DATA frames, and answers each with two WINDOW_UPDATEs and a PING to
/// earn credit, is still a flood, within a second at the rate it needs (tens of thousands
/// of frames a second).
#[test]
fn dribbled_data_does_not_buy_unlimited_pings_or_updates() {
    let start = Instant::now();
    let dribble = frame(DATA, 0, 1, b"x");
    let stream_update = frame(WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]);
    let connection_update = frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0, 1]);
    let ping = frame(PING, 0, 0, &[0; 8]);
    let mut watch = watcher();
    let found = (0..40_000u32).find_map(|round| {
        // 40,000 rounds a second, the rate one such client reached on loopback.
        let now = start + Duration::from_micros(u64::from(round) * 25);
        watch.sent(&dribble, 0);
        [&stream_update, &connection_update, &ping]
            .into_iter()
            .find_map(|frame| watch.received(frame, now))
            .map(|flood| (flood, now - start))
    });
    let (_, after) = found.expect("the dribble is a flood");
    assert!(after < Duration::from_secs(1), "found after {after:?}");
}

/// Each request explains a PRIORITY and a PRIORITY_UPDATE of its own (RFC 9218), however
/// many requests a connection carries at once.
#[test]
fn priority_frames_with_requests_are_not_a_flood() {
    let mut watch = watcher();
    let now = Instant::now();
    for stream in 0..5000u32 {
        let id = 2 * stream + 1;
        let mut bytes = frame(HEADERS, END_HEADERS | END_STREAM, id, &[0x82]);
        bytes.extend(frame(0x2, 0, id, &[0, 0, 0, 0, 16]));
        bytes.extend(frame(0x10, 0, 0, &[0, 0, 0, 1, b'u', b'=', b'1']));
        assert_eq!(watch.received(&bytes, now), None, "request {stream}");
    }
}

/// Streams reset as soon as the client opened them (CVE-2023-44487) count; cancels of
/// streams that lived a second or more (gRPC calls reaching their deadline at a slow node,
/// 100 at a time) do not, however many; resets of streams never opened do not either.
#[test]
fn only_premature_resets_count_as_a_rapid_reset() {
    let headers = |id: u32| frame(HEADERS, END_HEADERS, id, b"x");
    let reset = |id: u32| frame(RST_STREAM, 0, id, &[0, 0, 0, 8]);
    // Each stream opened, then reset `lifetime` later, one opened every 10 ms (100 open at
    // once for a 1 s lifetime); the first verdict and after how many resets.
    let run = |lifetime: Duration| {
        let mut watch = watcher();
        let start = Instant::now();
        let step = Duration::from_millis(10);
        let lag = (lifetime.as_millis() / step.as_millis()) as u32;
        for n in 0..3000u32 {
            let now = start + step * n;
            if let Some(flood) = watch.received(&headers(2 * n + 1), now) {
                return Some((flood, n));
            }
            if n >= lag {
                let old = 2 * (n - lag) + 1;
                if let Some(flood) = watch.received(&reset(old), now) {
                    return Some((flood, n - lag + 1));
                }
            }
        }
        None
    };
    assert_eq!(
        run(Duration::from_millis(1100)),
        None,
        "deadlines past a second"
    );
    assert_eq!(run(Duration::from_secs(5)), None);
    // Half a second: 100 premature resets a second, past the budget's 50.
    assert!(matches!(
        run(Duration::from_millis(500)),
        Some((Flood::RapidReset, _))
    ));
    // Each stream reset at once, 100 a second: past the burst of 200 as the bucket drains
    // at 50 a second.
    assert_eq!(run(Duration::ZERO), Some((Flood::RapidReset, 400)));
    // The attack at full speed: at the burst.
    let mut watch = watcher();
    let now = Instant::now();
    let tripped = (0..1000u32).find_map(|n| {
        watch.received(&headers(2 * n + 1), now);
        watch
            .received(&reset(2 * n + 1), now)
            .map(|flood| (flood, n + 1))
    });
    assert_eq!(tripped, Some((Flood::RapidReset, 201)));
    // Resets of streams the client never opened are the codec's protocol errors.
    let mut watch = watcher();
    assert_eq!(flood(&mut watch, &reset(99), 5000, Instant::now()), None);
}

/// A client that cancels a third of its streams early (each 200 ms after opening it, well
/// past the budget's rate) is not an attacker: premature resets count as a flood only while
/// they are half or more of the streams opened lately.
#[test]
fn a_client_cancelling_a_third_of_its_streams_early_is_no_flood() {
    let headers = |id: u32| frame(HEADERS, END_HEADERS, id, b"x");
    let reset = |id: u32| frame(RST_STREAM, 0, id, &[0, 0, 0, 8]);
    let mut watch = watcher();
    let start = Instant::now();
    // 300 streams a second, one in three reset 200 ms after it opened (100 a second).
    let step = Duration::from_micros(3333);
    for n in 0..6000u32 {
        let now = start + step * n;
        assert_eq!(watch.received(&headers(2 * n + 1), now), None);
        if n >= 60 && (n - 60) % 3 == 0 {
            assert_eq!(watch.received(&reset(2 * (n - 60) + 1), now), None, "{n}");
        }
    }
}

/// The codec's resets of requests it refused as malformed are counted from what weir writes,
/// whatever the write boundaries; resets of streams weir was handed, and other codes, not.
#[test]
fn resets_of_refused_requests_are_counted_from_the_written_frames() {
    let mut written = frame(HEADERS, END_HEADERS, 1, &[0x88; 10]);
    // Stream 5 refused (PROTOCOL_ERROR), stream 7 refused by the codec's stream limit
    // (REFUSED_STREAM), stream 3 (handed to weir) reset with PROTOCOL_ERROR.
    written.extend_from_slice(&frame(RST_STREAM, 0, 5, &[0, 0, 0, 1]));
    written.extend_from_slice(&frame(RST_STREAM, 0, 7, &[0, 0, 0, 7]));
    written.extend_from_slice(&frame(RST_STREAM, 0, 3, &[0, 0, 0, 1]));
    written.extend_from_slice(&frame(DATA, 0, 1, &[0, 0, 0, 1]));
    for split in 1..written.len() {
        let mut watch = watcher();
        let refused = watch.sent(&written[..split], 3) + watch.sent(&written[split..], 3);
        assert_eq!(refused, 1, "split {split}");
    }
    assert_eq!(watcher().sent(&written, 0), 2);
}
