use std::num::NonZeroU64;
use std::time::Duration;

use super::*;
use crate::loss::{GilbertElliott, Probability};

fn rate(bits_per_second: u64) -> Rate {
    Rate::new(NonZeroU64::new(bits_per_second).unwrap())
}

fn delivered(verdict: Verdict) -> Duration {
    match verdict {
        Verdict::Deliver { at } => at,
        other => panic!("expected a delivery, got {other:?}"),
    }
}

#[test]
fn back_to_back_packets_leave_at_exact_multiples_of_the_serialisation_time() {
    // T1: 1,500 bytes take 12,000 / 1,544,000 s = 7.772020725… ms, not a whole number of
    // nanoseconds; the k-th packet must still leave at exactly ceil(k × that).
    let mut model = DirectionModel::new(
        DirectionConfig {
            rate: Some(rate(1_544_000)),
            queue: QueueLimit::Packets(10_000),
            ..DirectionConfig::default()
        },
        1,
    );
    for k in 1..=5_000u128 {
        let at = delivered(model.offer(Duration::ZERO, 1500));
        let exact = (k * 12_000 * 1_000_000_000).div_ceil(1_544_000);
        assert_eq!(at.as_nanos(), exact, "packet {k}");
    }
}

#[test]
fn an_idle_link_starts_serialising_on_arrival_and_adds_the_delay() {
    let mut model = DirectionModel::new(
        DirectionConfig {
            rate: Some(rate(10_000_000)),
            delay: Duration::from_millis(250),
            ..DirectionConfig::default()
        },
        1,
    );
    // 1,250 bytes at 10 Mbit/s: 1 ms.
    let first = delivered(model.offer(Duration::from_secs(1), 1250));
    assert_eq!(first, Duration::from_millis(1251));
    // Arriving while the link is busy: waits for the first.
    let second = delivered(model.offer(Duration::from_micros(1_000_500), 1250));
    assert_eq!(second, Duration::from_millis(1252));
    // Long after: the link was idle, no waiting.
    let third = delivered(model.offer(Duration::from_secs(5), 125));
    assert_eq!(
        third,
        Duration::from_millis(5250) + Duration::from_micros(100)
    );
}

#[test]
fn without_a_rate_a_packet_only_waits_the_delay() {
    let mut model = DirectionModel::new(
        DirectionConfig {
            delay: Duration::from_millis(20),
            ..DirectionConfig::default()
        },
        1,
    );
    for step in 0..100u64 {
        let now = Duration::from_micros(step * 37);
        assert_eq!(
            delivered(model.offer(now, 64_000)),
            now + Duration::from_millis(20)
        );
    }
}

#[test]
fn jitter_varies_the_delay_but_never_reorders() {
    let delay = Duration::from_millis(50);
    let jitter = Duration::from_millis(10);
    let mut model = DirectionModel::new(
        DirectionConfig {
            delay,
            jitter,
            ..DirectionConfig::default()
        },
        42,
    );
    let mut previous = Duration::ZERO;
    let mut delays = Vec::new();
    for step in 0..20_000u64 {
        // A packet every 100 µs: much closer than the jitter, so reordering would be common.
        let now = Duration::from_micros(step * 100);
        let at = delivered(model.offer(now, 100));
        assert!(at >= previous, "packet {step} overtook the one before it");
        assert!(at >= now + delay - jitter, "packet {step} left too early");
        previous = at;
        delays.push(at - now);
    }
    let distinct: std::collections::BTreeSet<_> = delays.iter().collect();
    assert!(distinct.len() > 1_000, "the delay should vary");

    // Sparse packets (further apart than 2 × jitter) are never held back, so their delays
    // fill the whole band evenly: the mean is the delay.
    let mut model = DirectionModel::new(
        DirectionConfig {
            delay,
            jitter,
            ..DirectionConfig::default()
        },
        43,
    );
    let count = 20_000u64;
    let mut total = Duration::ZERO;
    for step in 0..count {
        let now = Duration::from_millis(step * 25);
        let one = delivered(model.offer(now, 100)) - now;
        assert!(one >= delay - jitter && one <= delay + jitter);
        total += one;
    }
    let mean = total / count as u32;
    let sigma = jitter.as_secs_f64() / 3f64.sqrt() / (count as f64).sqrt();
    assert!(
        (mean.as_secs_f64() - delay.as_secs_f64()).abs() < 4.0 * sigma,
        "mean delay {mean:?}"
    );
}

#[test]
fn the_queue_drops_the_tail_past_its_packet_limit() {
    let mut model = DirectionModel::new(
        DirectionConfig {
            rate: Some(rate(8_000_000)),
            queue: QueueLimit::Packets(10),
            ..DirectionConfig::default()
        },
        1,
    );
    // A burst of 100 packets of 1,000 bytes (1 ms each at 8 Mbit/s) at t = 0: one on the wire
    // and ten waiting.
    let verdicts: Vec<_> = (0..100)
        .map(|_| model.offer(Duration::ZERO, 1000))
        .collect();
    let admitted = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Deliver { .. }))
        .count();
    assert_eq!(admitted, 11);
    assert!(verdicts[11..].iter().all(|v| *v == Verdict::QueueFull));
    assert_eq!(model.backlog(Duration::ZERO), (10, 10_000));
    // 3.5 ms later three have left and the fourth is on the wire: room for three more.
    let now = Duration::from_micros(3500);
    assert_eq!(model.backlog(now), (7, 7_000));
    let more: Vec<_> = (0..5).map(|_| model.offer(now, 1000)).collect();
    assert!(
        more[..3]
            .iter()
            .all(|v| matches!(v, Verdict::Deliver { .. }))
    );
    assert!(more[3..].iter().all(|v| *v == Verdict::QueueFull));
    // The last admitted one leaves after all 14 before it: 14 ms.
    assert_eq!(delivered(more[2]), Duration::from_millis(14));
    // Once drained, the link is idle and takes packets again.
    assert_eq!(model.backlog(Duration::from_secs(1)), (0, 0));
}

#[test]
fn the_queue_drops_the_tail_past_its_byte_limit() {
    let mut model = DirectionModel::new(
        DirectionConfig {
            rate: Some(rate(1_000_000)),
            queue: QueueLimit::Bytes(3000),
            ..DirectionConfig::default()
        },
        1,
    );
    let sizes = [1500, 1000, 1000, 1000, 500, 1, 1500];
    let verdicts: Vec<_> = sizes
        .iter()
        .map(|size| model.offer(Duration::ZERO, *size))
        .collect();
    // 1,500 on the wire; then three of 1,000 waiting fill the 3,000 bytes exactly, so the
    // 500, the 1 and the 1,500 behind them are dropped.
    let kinds: Vec<bool> = verdicts
        .iter()
        .map(|v| matches!(v, Verdict::Deliver { .. }))
        .collect();
    assert_eq!(kinds, [true, true, true, true, false, false, false]);
    assert_eq!(model.backlog(Duration::ZERO), (3, 3000));
}

#[test]
fn lost_packets_take_no_capacity() {
    let mut model = DirectionModel::new(
        DirectionConfig {
            rate: Some(rate(8_000)),
            loss: Loss::Bernoulli(Probability::new(1.0).unwrap()),
            ..DirectionConfig::default()
        },
        1,
    );
    for _ in 0..10 {
        assert_eq!(model.offer(Duration::ZERO, 1000), Verdict::Lost);
    }
    assert_eq!(model.backlog(Duration::ZERO), (0, 0));
}

#[test]
fn loss_in_the_model_matches_the_configured_rate() {
    let loss = Loss::GilbertElliott(GilbertElliott {
        p: 0.01,
        r: 0.2,
        h: 0.3,
        k: 1.0,
    });
    let mut model = DirectionModel::new(
        DirectionConfig {
            loss,
            ..DirectionConfig::default()
        },
        9,
    );
    let count = 1_000_000;
    let lost = (0..count)
        .filter(|_| model.offer(Duration::ZERO, 100) == Verdict::Lost)
        .count();
    let measured = lost as f64 / count as f64;
    let expected = loss.expected_rate();
    assert!(
        (measured - expected).abs() < 0.05 * expected,
        "measured {measured}, expected {expected}"
    );
}

#[test]
fn same_seed_same_fate() {
    let config = DirectionConfig {
        jitter: Duration::from_millis(5),
        delay: Duration::from_millis(10),
        loss: Loss::Bernoulli(Probability::new(0.1).unwrap()),
        ..DirectionConfig::default()
    };
    let run = |seed| {
        let mut model = DirectionModel::new(config.clone(), seed);
        (0..1000u64)
            .map(|step| model.offer(Duration::from_millis(step), 100))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn transmission_time_rounds_up() {
    assert_eq!(
        rate(1_544_000).transmission_time(1500),
        Duration::from_nanos(7_772_021)
    );
    assert_eq!(
        rate(10_000_000).transmission_time(1250),
        Duration::from_millis(1)
    );
}
