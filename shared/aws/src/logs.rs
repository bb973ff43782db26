//! Log lines as AWS Lambda Powertools writes them, so the queries, dashboards and habits of its
//! users work unchanged: one JSON object per line with `timestamp`, `level`, `message`,
//! `service`, `cold_start`, `function_request_id` and `xray_trace_id` (the last three inside an
//! invocation), then the event's own fields at the top level.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The span `lambda_runtime` opens around each invocation (`requestId`, `xrayTraceId`), and the
/// target to enable it at whatever level the function logs (at `warn` it would be filtered out,
/// and with it every line's request id).
pub const INVOKE_SPAN: &str = "Lambda runtime invoke";
pub const INVOKE_SPAN_TARGET: &str = "lambda_runtime::layers::trace";

/// The formatter. The first invocation span the process opens is its cold start (whether or not
/// that invocation logs anything: [`ColdStart`] watches the spans).
pub struct LambdaJson {
    pub service: String,
    first_request: Arc<OnceLock<String>>,
}

impl LambdaJson {
    pub fn new(service: impl Into<String>) -> Self {
        LambdaJson {
            service: service.into(),
            first_request: Arc::default(),
        }
    }

    /// The layer that records the first invocation's request id for this formatter.
    pub fn cold_start(&self) -> ColdStart {
        ColdStart(self.first_request.clone())
    }
}

/// Records the request id of the first invocation span.
pub struct ColdStart(Arc<OnceLock<String>>);

impl<S: Subscriber> Layer<S> for ColdStart {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        if attrs.metadata().name() != INVOKE_SPAN || self.0.get().is_some() {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(Value::String(id)) = fields.0.get("requestId") {
            let _ = self.0.set(id.clone());
        }
    }
}

/// The trace id Powertools writes: the `Root=` part of the X-Ray header.
fn xray_root(header: &str) -> &str {
    header
        .split(';')
        .find_map(|part| part.trim().strip_prefix("Root="))
        .unwrap_or(header)
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
            line.insert("xray_trace_id".into(), Value::from(xray_root(&trace)));
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
    let level = match rust_log.filter(|v| !v.trim().is_empty()) {
        Some(directive) => directive,
        None => match lambda_level.map(|v| v.trim().to_ascii_uppercase()).as_deref() {
            Some("TRACE") => "trace",
            Some("DEBUG") => "debug",
            Some("WARN") => "warn",
            Some("ERROR") | Some("FATAL") => "error",
            _ => "info",
        }
        .to_owned(),
    };
    // The invocation span carries the request id every line needs, whatever the level.
    format!("{level},{INVOKE_SPAN_TARGET}=info")
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
    use std::sync::Mutex;
    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::prelude::*;

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

    /// The span lambda_runtime opens around each invocation (`layers::trace::request_span`).
    fn invocation(id: &str, trace: &str) -> tracing::Span {
        tracing::info_span!(target: "lambda_runtime::layers::trace", "Lambda runtime invoke", requestId = id, xrayTraceId = trace)
    }

    fn subscriber(buffer: &Buffer, directive: &str) -> impl Subscriber + Send + Sync {
        let format = LambdaJson::new("recon-dlq");
        tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new(directive))
            .with(format.cold_start())
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(JsonFields::new())
                    .event_format(format)
                    .with_writer(buffer.clone()),
            )
    }

    #[test]
    fn lines_carry_the_powertools_keys_and_the_invocation_from_lambda_runtimes_span() {
        let buffer = Buffer::default();
        tracing::subscriber::with_default(subscriber(&buffer, &filter_directive(None, None)), || {
            tracing::info!("starting");
            for (id, trace) in [
                ("req-1", "Root=1-aaa-111;Parent=p1;Sampled=1"),
                ("req-2", "Root=1-bbb-222;Sampled=0"),
            ] {
                let _in = invocation(id, trace).entered();
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
            .zip([("req-1", "1-aaa-111", true), ("req-2", "1-bbb-222", false)])
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
    fn at_warn_the_request_id_stays_and_a_silent_first_invocation_is_still_the_cold_start() {
        let buffer = Buffer::default();
        let directive = filter_directive(None, Some("WARN".into()));
        tracing::subscriber::with_default(subscriber(&buffer, &directive), || {
            {
                let _in = invocation("req-1", "Root=1-aaa-111").entered();
                tracing::info!("filtered out at WARN");
            }
            let _in = invocation("req-2", "Root=1-bbb-222").entered();
            tracing::error!("the ledger refused");
        });
        let got = lines(&buffer);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["function_request_id"], "req-2");
        assert_eq!(got[0]["cold_start"], false);
    }

    #[test]
    fn rust_log_wins_then_lambdas_log_level_then_info() {
        let span = ",lambda_runtime::layers::trace=info";
        assert_eq!(
            filter_directive(Some("debug".into()), Some("ERROR".into())),
            format!("debug{span}")
        );
        assert_eq!(filter_directive(None, Some("WARN".into())), format!("warn{span}"));
        assert_eq!(
            filter_directive(Some(" ".into()), Some("FATAL".into())),
            format!("error{span}")
        );
        assert_eq!(filter_directive(None, Some("nonsense".into())), format!("info{span}"));
        assert_eq!(filter_directive(None, None), format!("info{span}"));
    }
}
