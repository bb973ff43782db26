//! Logging setup shared by the functions and `dlqctl`: one JSON object per event on Lambda (what
//! CloudWatch Logs Insights queries); dlqctl's readable text is its own (`cli/src/output.rs`).

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// JSON log lines with Powertools' keys (see [`crate::logs`]); the level from `RUST_LOG`, else
/// Lambda's `AWS_LAMBDA_LOG_LEVEL`, else `info`. `default_service` names the service when neither
/// `POWERTOOLS_SERVICE_NAME` nor the function's name is set.
///
/// The filter is `tracing_subscriber`'s `Targets`: a default level and `target=level` pairs,
/// comma-separated. `RUST_LOG`'s span and field filters (env-filter's syntax) are not read: they
/// would link a regex engine into every function. A directive that does not parse logs at `info`.
pub fn init_json(default_service: &str) {
    let directive = crate::logs::filter_directive(
        std::env::var("RUST_LOG").ok(),
        std::env::var("AWS_LAMBDA_LOG_LEVEL").ok(),
    );
    let format = crate::logs::LambdaJson::new(crate::logs::service_name(default_service));
    let _ = tracing_subscriber::registry()
        .with(log_filter(&directive))
        .with(format.invocations())
        .with(tracing_subscriber::fmt::layer().event_format(format))
        .try_init();
}

/// The functions' filter from a directive (see [`init_json`]); `info` when it does not parse.
/// Pieces are trimmed and empty ones dropped, as env-filter does (`Targets` would read an empty
/// piece as "every target at trace"); a span or field filter (`[`, `{`) is env-filter's syntax,
/// which `Targets` would take for a target name matching nothing: refused, so `info`.
pub(crate) fn log_filter(directive: &str) -> Targets {
    let pieces: Vec<&str> = directive.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    let info = || Targets::new().with_default(LevelFilter::INFO);
    if pieces.iter().any(|p| p.contains(['[', ']', '{', '}'])) {
        return info();
    }
    pieces.join(",").parse::<Targets>().unwrap_or_else(|_| info())
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
    use tracing::Level;

    #[test]
    fn the_functions_filter_reads_levels_and_targets_and_falls_back_to_info() {
        use crate::logs::{INVOKE_SPAN_TARGET, filter_directive};
        let warn = log_filter(&filter_directive(None, Some("WARN".into())));
        assert!(!warn.would_enable("recon_core::consume", &Level::INFO));
        assert!(warn.would_enable("recon_core::consume", &Level::WARN));
        assert!(
            warn.would_enable(INVOKE_SPAN_TARGET, &Level::INFO),
            "the invocation span, whatever the level"
        );
        let mixed = log_filter(&filter_directive(Some("warn,recon_core=debug".into()), None));
        assert!(mixed.would_enable("recon_core::replay", &Level::DEBUG));
        assert!(!mixed.would_enable("aws_smithy_runtime", &Level::INFO));
        // env-filter's span syntax is not read by the functions: info, not silence.
        for spans in ["[handle{id=1}]=trace", "recon_core[handle]=debug"] {
            let spans = log_filter(&filter_directive(Some(spans.into()), None));
            assert!(spans.would_enable("recon_core::consume", &Level::INFO));
            assert!(!spans.would_enable("recon_core::consume", &Level::DEBUG));
        }
        // White space and empty pieces, as env-filter reads them: not "everything at trace".
        let loose = log_filter(&filter_directive(Some("warn, recon_core=debug,".into()), None));
        assert!(loose.would_enable("recon_core::replay", &Level::DEBUG));
        assert!(!loose.would_enable("aws_smithy_runtime", &Level::TRACE));
        assert!(!loose.would_enable("aws_smithy_runtime", &Level::INFO));
    }

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
