//! Metrics for CloudWatch (Embedded Metric Format on Lambda: `recon_aws::telemetry`).

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub value: i64,
    pub unit: &'static str,
    /// dimension name -> value
    pub dimensions: Vec<(&'static str, String)>,
}

port! {
    pub trait Metrics {
        fn emit(&self, metric: &Metric);
    }
}
