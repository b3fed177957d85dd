//! A fast generator per thread for the balancers' random choices: no shared
//! state between threads, so random picks cost no cache-line traffic.

use std::cell::RefCell;

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    /// Seeded once per thread from the operating system's randomness (via `rand`).
    static GENERATOR: RefCell<SmallRng> = RefCell::new(SmallRng::from_rng(&mut rand::rng()));
}

/// A uniformly random `u64`.
pub(super) fn next_u64() -> u64 {
    GENERATOR.with(|generator| generator.borrow_mut().next_u64())
}

/// A random index in `0..bound`; `bound` must be non-zero.
///
/// Uses the high bits of a 64-bit product (Lemire's reduction): no division,
/// and a bias of at most `bound / 2^64`, which no balancer can notice.
pub(super) fn below(bound: usize) -> usize {
    ((u128::from(next_u64()) * bound as u128) >> 64) as usize
}
