//! The reference-audit Lambda: wiring only. The flow lives in `recon_core::reference_audit`.
//!
//! Input: a batch of the reference table's stream records (NEW_AND_OLD_IMAGES). Output: the
//! partial batch response (the first record not recorded, so the stream retries from it).

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_aws::{AwsClients, ClientTimeouts, Target, telemetry, wiring};
use recon_core::config::ReferenceAuditSettings;
use recon_core::resources::REFERENCE_AUDIT_TIMEOUT;
use std::sync::Arc;
use std::time::Duration;

// One thread, as the consumer's runtime (why, and what it measured: functions/consumer/src/main.rs).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init_json("reference-audit");
    let settings = telemetry::settings_or_exit(ReferenceAuditSettings::from_env());
    let clients = AwsClients::connect_with(
        Target::Aws,
        ClientTimeouts::within(REFERENCE_AUDIT_TIMEOUT, Duration::from_secs(3)),
    )
    .await;
    let name = wiring::function_name("reference-audit");
    wiring::log_configuration(&clients, &settings.audit_table, &name, &settings.audited).await;
    let auditor = Arc::new(wiring::reference_auditor(&clients, &settings));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| {
        let auditor = auditor.clone();
        async move { Ok::<DynamoDbEventResponse, Error>(auditor.handle(&event.payload).await) }
    }))
    .await
}
