//! Logging setup shared by the functions and `dlqctl`: one JSON object per event on Lambda (what
//! CloudWatch Logs Insights queries), readable text for a terminal. `RUST_LOG` filters.

use tracing_subscriber::EnvFilter;

/// JSON events with their fields flattened at the top level, no ANSI colours.
pub fn init_json() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_ansi(false)
        .with_target(false)
        .without_time()
        .with_env_filter(filter)
        .try_init();
}

/// Human-readable events on stderr, `warn` and above unless `RUST_LOG` says otherwise.
pub fn init_text(default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
}
