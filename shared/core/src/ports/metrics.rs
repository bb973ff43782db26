//! Metrics for CloudWatch (Embedded Metric Format on Lambda: `recon_aws::telemetry`).

use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub value: i64,
    pub unit: &'static str,
    /// dimension name -> value
    pub dimensions: Vec<(&'static str, String)>,
}

pub trait Metrics: Send + Sync {
    fn emit(&self, metric: &Metric);
}

impl<T: Metrics> Metrics for Arc<T> {
    fn emit(&self, metric: &Metric) {
        (**self).emit(metric)
    }
}
