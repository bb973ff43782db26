//! The enricher Lambda: wiring only. The flow lives in `recon_core::enrich`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_aws::{AwsClients, ClientTimeouts, Target, telemetry, wiring};
use recon_core::config::EnricherSettings;
use recon_core::ports::lambda_deadline;
use recon_core::resources::ENRICHER_TIMEOUT;
use std::sync::Arc;

// One thread, as the consumer's runtime (why, and what it measured: functions/consumer/src/main.rs).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init_json("enricher");
    let settings = telemetry::settings_or_exit(EnricherSettings::from_env());
    // Every request gives up well inside the invocation (see ClientTimeouts::within).
    let clients = AwsClients::connect_with(
        Target::Aws,
        ClientTimeouts::within(ENRICHER_TIMEOUT, settings.deadline_margin),
    )
    .await;
    let name = wiring::function_name("enricher");
    wiring::log_configuration(&clients, &settings.audit_table, &name, &settings.audited).await;
    let metrics = wiring::emf(&settings.metrics_namespace, &settings.stack);
    let enricher = Arc::new(wiring::enricher(&clients, &settings, &name, metrics));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let enricher = enricher.clone();
        async move {
            let report = enricher
                .handle_batch(&event.payload, lambda_deadline(event.context.deadline))
                .await;
            Ok::<SqsBatchResponse, Error>(report.response)
        }
    }))
    .await
}
