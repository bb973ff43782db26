//! The replay Lambda: wiring only. The flow lives in `recon_core::replay`.
//!
//! Input: an EventBridge scheduled event from this deployment's sweep schedule (a sweep over
//! PENDING envelopes, resuming from its saved cursor, as that schedule, its audit records naming
//! this invocation's request id) or from its seal schedule (seal the audit trail). Anything else
//! is refused: a replay or quarantine by hand, an approved request and a period's reconcile
//! segments are asked of the control plane, which knows who asks. Output: the sweep's report,
//! or the seal.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_aws::{AwsClients, ClientTimeouts, Target, telemetry, wiring};
use recon_core::config::ReplaySettings;
use recon_core::ports::lambda_deadline;
use recon_core::replay::{Invocation, parse_invocation};
use recon_core::resources::REPLAY_TIMEOUT;
use std::sync::Arc;

// One thread, as the consumer's runtime (why, and what it measured: functions/consumer/src/main.rs).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init_json("replay");
    let settings = telemetry::settings_or_exit(ReplaySettings::from_env());
    // Every request gives up well inside the invocation (see ClientTimeouts::within).
    let clients = AwsClients::connect_with(
        Target::Aws,
        ClientTimeouts::within(REPLAY_TIMEOUT, settings.deadline_margin),
    )
    .await;
    let name = wiring::function_name("replay");
    wiring::log_configuration(&clients, &settings.audit_table, &name, &settings.audited).await;
    let metrics = wiring::emf(&settings.metrics_namespace, &settings.stack);
    let replayer = Arc::new(wiring::replayer(&clients, &settings, &name, metrics));
    let schedules = Arc::new((settings.sweep_schedule.clone(), settings.seal_schedule.clone()));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let replayer = replayer.clone();
        let schedules = schedules.clone();
        async move {
            match parse_invocation(&event.payload, &schedules.0, &schedules.1)? {
                Invocation::Seal => {
                    let (key, seal) = Box::pin(replayer.seal()).await?;
                    Ok::<serde_json::Value, Error>(serde_json::json!({ "sealed": key, "seal": seal }))
                }
                Invocation::Sweep(mut request) => {
                    request.invocation = Some(event.context.request_id.clone());
                    // Boxed: the sweep's future is deep, and this one holds it beside the seal's.
                    let report = Box::pin(replayer.run(&request, lambda_deadline(event.context.deadline))).await?;
                    if let Err(e) = replayer.expire_requests().await {
                        tracing::warn!(error = %e, "approval requests not expired; the next sweep tries again");
                    }
                    Ok(serde_json::to_value(report)?)
                }
            }
        }
    }))
    .await
}
