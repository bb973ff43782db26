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
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The span `lambda_runtime` opens around each invocation (`requestId`, `xrayTraceId`), and the
/// target to enable it at whatever level the function logs (at `warn` it would be filtered out,
/// and with it every line's request id).
pub const INVOKE_SPAN: &str = "Lambda runtime invoke";
pub const INVOKE_SPAN_TARGET: &str = "lambda_runtime::layers::trace";

/// The formatter. The invocation a line belongs to is read from its span, where [`Invocations`]
/// left it when the span opened (the first the process opens is its cold start, whether or not
/// that invocation logs anything).
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

    /// The layer that reads each invocation span once, for this formatter.
    pub fn invocations(&self) -> Invocations {
        Invocations(self.first_request.clone())
    }
}

/// What a line inside an invocation carries, kept in the invocation span's extensions (read once
/// when the span opens, not on every line).
struct Invocation {
    request_id: String,
    xray_trace_id: Option<String>,
    cold_start: bool,
}

/// Reads each invocation span as it opens; the first request id the process sees is its cold start.
pub struct Invocations(Arc<OnceLock<String>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Invocations {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != INVOKE_SPAN {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let Some(Value::String(request_id)) = fields.0.remove("requestId") else {
            return;
        };
        let cold_start = *self.0.get_or_init(|| request_id.clone()) == request_id;
        let xray_trace_id = match fields.0.get("xrayTraceId") {
            Some(Value::String(header)) => Some(xray_root(header).to_owned()),
            _ => None,
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Invocation {
                request_id,
                xray_trace_id,
                cold_start,
            });
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

impl<S, N> FormatEvent<S, N> for LambdaJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
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
        if let Some(scope) = ctx.event_scope() {
            for span in scope {
                let extensions = span.extensions();
                let Some(invocation) = extensions.get::<Invocation>() else {
                    continue;
                };
                line.insert("cold_start".into(), Value::from(invocation.cold_start));
                line.insert(
                    "function_request_id".into(),
                    Value::from(invocation.request_id.as_str()),
                );
                if let Some(trace) = &invocation.xray_trace_id {
                    line.insert("xray_trace_id".into(), Value::from(trace.as_str()));
                }
                break;
            }
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
            .with(crate::telemetry::log_filter(directive))
            .with(format.invocations())
            .with(
                tracing_subscriber::fmt::layer()
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

    /// The template's metric filters count `{ $.alarm = "LEDGER_CREDENTIAL_REFUSED" }`: the line
    /// a credential refused for good writes carries that field at the top level, at any level
    /// Lambda may be set to.
    #[test]
    fn a_credential_refused_for_good_is_a_line_the_alarm_counts() {
        let buffer = Buffer::default();
        let directive = filter_directive(None, Some("ERROR".into()));
        tracing::subscriber::with_default(subscriber(&buffer, &directive), || {
            recon_core::ports::log_refused("postgres", "connect: 28P01 password authentication failed");
        });
        let got = lines(&buffer);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["alarm"], recon_core::ports::CREDENTIAL_REFUSED);
        assert_eq!(got[0]["ledger"], "postgres");
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
