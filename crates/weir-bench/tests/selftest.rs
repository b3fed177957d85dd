//! The coordinated-omission self-test, in its own test binary so that no other test's load
//! runs beside its timing.

use weir_bench::selftest;

#[test]
fn coordinated_omission_selftest_passes() {
    let outcome = selftest::run(selftest::SelftestOptions::default()).expect("selftest runs");
    assert!(outcome.passed(), "{}", outcome.text());
    // p50 to p99 rest on enough samples to be judged; only p99.9 (the run's slowest few) may not.
    for comparison in &outcome.comparisons[..4] {
        assert!(comparison.checked, "{}", outcome.text());
    }
    // The uncorrected service time misses the stall at p90 (coordinated omission).
    let p90 = outcome.comparisons[1];
    assert_eq!(p90.quantile, 0.9);
    assert!(
        p90.uncorrected_ms < p90.expected_ms / 2.0,
        "{}",
        outcome.text()
    );
}
