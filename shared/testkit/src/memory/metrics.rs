//! Metrics kept in memory.

use recon_core::ports::{Metric, Metrics};
use std::sync::Mutex;

use super::lock;

/// Metrics kept in memory.
#[derive(Default)]
pub struct MemoryMetrics {
    emitted: Mutex<Vec<Metric>>,
}

impl MemoryMetrics {
    pub fn emitted(&self) -> Vec<Metric> {
        lock(&self.emitted).clone()
    }
}

impl Metrics for MemoryMetrics {
    fn emit(&self, metric: &Metric) {
        lock(&self.emitted).push(metric.clone());
    }
}
