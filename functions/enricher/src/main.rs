//! The enricher Lambda: wiring only. The flow lives in `recon_core::enrich`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_aws::{AwsClients, Target, telemetry, wiring};
use recon_core::config::EnricherSettings;
use recon_core::ports::lambda_deadline;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init_json();
    let settings = EnricherSettings::from_env()?;
    let clients = AwsClients::connect(Target::Aws).await;
    let metrics = wiring::emf(&settings.metrics_namespace);
    let enricher = Arc::new(wiring::enricher(
        &clients,
        &settings,
        &wiring::function_name("enricher"),
        metrics,
    ));
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
