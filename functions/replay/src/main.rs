//! The replay Lambda: wiring only. The flow lives in `recon_dlq::replay`.
//!
//! Input: an EventBridge scheduled event (a sweep over PENDING envelopes, resuming from its saved
//! cursor) or a manual payload `{"reason", "triggered_by", "failure_code"?, "root_cause"?,
//! "entity"?, "envelope_ids"?, "max_items"?, "dry_run"?}`; unknown fields are refused.
//! Output: the replay report.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_dlq::adapters::aws::{AwsClients, Target};
use recon_dlq::config::ReplaySettings;
use recon_dlq::replay::{AwsReplayer, budget_until, parse_invocation};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Error> {
    recon_dlq::telemetry::init_json();
    let settings = ReplaySettings::from_env()?;
    let clients = AwsClients::connect(Target::Aws).await;
    let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "replay".into());
    let replayer = Arc::new(AwsReplayer::from_settings(&clients, &settings, &name));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let replayer = replayer.clone();
        async move {
            let request = parse_invocation(&event.payload)?;
            let report = replayer
                .run(
                    &request,
                    recon_dlq::consume::lambda_deadline(event.context.deadline).map(budget_until),
                )
                .await?;
            Ok::<serde_json::Value, Error>(serde_json::to_value(report)?)
        }
    }))
    .await
}
