//! The one source of randomness of a simulated run: SplitMix64, seeded. Everything the run
//! decides at random (workload, interleaving, faults, crashes) draws from it, so a seed
//! reproduces the run exactly.

use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `ppm` in a million.
    pub fn chance(&mut self, ppm: u32) -> bool {
        self.below(1_000_000) < u64::from(ppm)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The run's generator, shared by the executor, the models and the fault injector.
#[derive(Clone, Debug)]
pub struct SharedRng(Arc<Mutex<Rng>>);

impl SharedRng {
    pub fn new(seed: u64) -> Self {
        SharedRng(Arc::new(Mutex::new(Rng::new(seed))))
    }

    pub fn get(&self) -> MutexGuard<'_, Rng> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
