//! Log lines as AWS Lambda Powertools writes them, so the queries, dashboards and habits of its
//! users work unchanged: one JSON object per line with `timestamp`, `level`, `message`,
//! `service`, `cold_start`, `function_request_id` and `xray_trace_id` (the last three inside an
//! invocation), then the event's own fields at the top level.

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The formatter. `lambda_runtime` opens a span per invocation carrying `requestId` and
/// `xrayTraceId`; the first request id the process sees is its cold start.
pub struct LambdaJson {
    pub service: String,
    first_request: OnceLock<String>,
}

impl LambdaJson {
    pub fn new(service: impl Into<String>) -> Self {
        LambdaJson {
            service: service.into(),
            first_request: OnceLock::new(),
        }
    }
}

/// An event's fields as JSON values.
#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::from(format!("{value:?}")));
    }
}

impl<S> FormatEvent<S, JsonFields> for LambdaJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::from(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        );
        line.insert("level".into(), Value::from(event.metadata().level().as_str()));
        line.insert("message".into(), fields.0.remove("message").unwrap_or(Value::from("")));
        line.insert("service".into(), Value::from(self.service.as_str()));
        let (mut request, mut trace) = (None, None);
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(formatted) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                if let Ok(Value::Object(span_fields)) = serde_json::from_str::<Value>(formatted.as_str()) {
                    request = span_fields
                        .get("requestId")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or(request);
                    trace = span_fields
                        .get("xrayTraceId")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .or(trace);
                }
            }
        }
        if let Some(id) = request {
            let first = self.first_request.get_or_init(|| id.clone());
            line.insert("cold_start".into(), Value::from(*first == id));
            line.insert("function_request_id".into(), Value::from(id));
        }
        if let Some(trace) = trace {
            line.insert("xray_trace_id".into(), Value::from(trace));
        }
        for (k, v) in fields.0 {
            line.entry(k).or_insert(v);
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// The log filter: `RUST_LOG` when set, else Lambda's `AWS_LAMBDA_LOG_LEVEL` (the function's
/// logging configuration: `TRACE` … `FATAL`), else `info`.
pub fn filter_directive(rust_log: Option<String>, lambda_level: Option<String>) -> String {
    if let Some(directive) = rust_log.filter(|v| !v.trim().is_empty()) {
        return directive;
    }
    match lambda_level.map(|v| v.trim().to_ascii_uppercase()).as_deref() {
        Some("TRACE") => "trace",
        Some("DEBUG") => "debug",
        Some("WARN") => "warn",
        Some("ERROR") | Some("FATAL") => "error",
        _ => "info",
    }
    .to_owned()
}

/// The service name on every line: `POWERTOOLS_SERVICE_NAME` (as Powertools reads it), else the
/// Lambda function's name, else `default`.
pub fn service_name(default: &str) -> String {
    ["POWERTOOLS_SERVICE_NAME", "AWS_LAMBDA_FUNCTION_NAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| default.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn lines(buffer: &Buffer) -> Vec<Value> {
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn lines_carry_the_powertools_keys_and_the_invocation_from_lambda_runtimes_span() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(JsonFields::new())
            .event_format(LambdaJson::new("recon-dlq"))
            .with_writer(buffer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("starting");
            // The span lambda_runtime opens around each invocation (layers::trace::request_span).
            for (id, trace) in [("req-1", "Root=1-aaa"), ("req-2", "Root=1-bbb")] {
                let span = tracing::info_span!("Lambda runtime invoke", requestId = id, xrayTraceId = trace);
                let _in = span.enter();
                tracing::warn!(decision = "POSTED", attempt = 2u64, "message posted");
            }
        });
        let got = lines(&buffer);
        assert_eq!(got.len(), 3);
        let init = &got[0];
        assert_eq!(init["message"], "starting");
        assert_eq!(init["service"], "recon-dlq");
        assert!(init.get("function_request_id").is_none() && init.get("cold_start").is_none());
        for (line, (id, trace, cold)) in got[1..]
            .iter()
            .zip([("req-1", "Root=1-aaa", true), ("req-2", "Root=1-bbb", false)])
        {
            assert_eq!(line["level"], "WARN");
            assert_eq!(line["message"], "message posted");
            assert_eq!(line["function_request_id"], id);
            assert_eq!(line["xray_trace_id"], trace);
            assert_eq!(line["cold_start"], cold);
            assert_eq!(line["decision"], "POSTED");
            assert_eq!(line["attempt"], 2);
            let ts = line["timestamp"].as_str().unwrap();
            assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok(), "{ts}");
        }
    }

    #[test]
    fn rust_log_wins_then_lambdas_log_level_then_info() {
        assert_eq!(filter_directive(Some("debug".into()), Some("ERROR".into())), "debug");
        assert_eq!(filter_directive(None, Some("WARN".into())), "warn");
        assert_eq!(filter_directive(Some(" ".into()), Some("FATAL".into())), "error");
        assert_eq!(filter_directive(None, Some("nonsense".into())), "info");
        assert_eq!(filter_directive(None, None), "info");
    }
}
