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
            frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]),
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
    for _ in 0..20 {
        // A client acknowledging each 16 KiB DATA frame it got.
        watch.sent(16 * 1024);
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
