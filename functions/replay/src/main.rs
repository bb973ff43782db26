//! The replay Lambda. Replay is not implemented yet (issue 4): every invocation fails with an
//! error that says so, and nothing is re-injected.

use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    recon_dlq::telemetry::init_json();
    lambda_runtime::run(service_fn(|_event: LambdaEvent<serde_json::Value>| async move {
        Err::<serde_json::Value, Error>("replay is not implemented in this release; nothing was re-injected".into())
    }))
    .await
}
