//! Logging setup shared by the functions and `dlqctl`: one JSON object per event on Lambda (what
//! CloudWatch Logs Insights queries), readable text for a terminal. `RUST_LOG` filters.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// JSON log lines with Powertools' keys (see [`crate::logs`]); the level from `RUST_LOG`, else
/// Lambda's `AWS_LAMBDA_LOG_LEVEL`, else `info`. `default_service` names the service when neither
/// `POWERTOOLS_SERVICE_NAME` nor the function's name is set.
pub fn init_json(default_service: &str) {
    let directive = crate::logs::filter_directive(
        std::env::var("RUST_LOG").ok(),
        std::env::var("AWS_LAMBDA_LOG_LEVEL").ok(),
    );
    let filter = EnvFilter::try_new(&directive).unwrap_or_else(|_| EnvFilter::new("info"));
    let format = crate::logs::LambdaJson::new(crate::logs::service_name(default_service));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(format.invocations())
        .with(tracing_subscriber::fmt::layer().event_format(format))
        .try_init();
}

/// The settings, or the function stops at start-up: one JSON log line naming the variable, the
/// value and what is allowed, then exit status 1 (Lambda reports the failed init; nothing ran).
pub fn settings_or_exit<T>(parsed: Result<T, recon_core::config::ConfigError>) -> T {
    match parsed {
        Ok(settings) => settings,
        Err(e) => {
            tracing::error!(variable = e.variable(), error = %e, "configuration refused at start-up");
            std::process::exit(1);
        }
    }
}

/// Human-readable events on stderr, `warn` and above unless `RUST_LOG` says otherwise.
pub fn init_text(default_level: &str, ansi: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
}

/// Metrics in CloudWatch Embedded Metric Format: one JSON line on stdout per metric, which Lambda
/// ships to CloudWatch Logs and CloudWatch turns into metrics (no API call, no extra latency).
#[derive(Clone, Debug)]
pub struct EmfMetrics {
    pub namespace: String,
    /// The deployment's prefix, a dimension of every metric: two stacks in one account never
    /// share a metric (nor, so, an alarm).
    pub stack: String,
}

impl EmfMetrics {
    /// The EMF document of one metric.
    pub fn document(&self, m: &recon_core::ports::Metric, timestamp_ms: i64) -> serde_json::Value {
        let dims: Vec<&str> = std::iter::once("Stack")
            .chain(m.dimensions.iter().map(|(k, _)| *k))
            .collect();
        let mut doc = serde_json::json!({
            "_aws": {
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": [dims],
                    "Metrics": [{"Name": m.name, "Unit": m.unit}],
                }],
            },
        });
        if let Some(obj) = doc.as_object_mut() {
            obj.insert("Stack".to_owned(), self.stack.clone().into());
            for (k, v) in &m.dimensions {
                obj.insert((*k).to_owned(), v.clone().into());
            }
            obj.insert(m.name.to_owned(), m.value.into());
        }
        doc
    }
}

impl recon_core::ports::Metrics for EmfMetrics {
    fn emit(&self, m: &recon_core::ports::Metric) {
        println!("{}", self.document(m, chrono::Utc::now().timestamp_millis()));
    }
}

/// Metrics as `debug` tracing events: for `dlqctl`, where EMF lines on stdout would be noise.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingMetrics;

impl recon_core::ports::Metrics for TracingMetrics {
    fn emit(&self, m: &recon_core::ports::Metric) {
        tracing::debug!(metric = m.name, value = m.value, unit = m.unit, dimensions = ?m.dimensions, "metric");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::ports::Metric;

    #[test]
    fn emf_documents_carry_the_metric_and_its_dimensions() {
        let m = Metric {
            name: "DeadLettered",
            value: 1,
            unit: "Count",
            dimensions: vec![("FailureCode", "POISON_MESSAGE".into())],
        };
        let doc = EmfMetrics {
            namespace: "ReconDlq".into(),
            stack: "prod-eu".into(),
        }
        .document(&m, 1_700_000_000_000);
        assert_eq!(doc["DeadLettered"], 1);
        assert_eq!(doc["FailureCode"], "POISON_MESSAGE");
        assert_eq!(doc["Stack"], "prod-eu");
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0],
            serde_json::json!(["Stack", "FailureCode"])
        );
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"],
            "DeadLettered"
        );
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_000i64);
    }
}
