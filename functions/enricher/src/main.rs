//! The enricher Lambda: wiring only. The flow lives in `recon_dlq::enrich`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_dlq::adapters::aws::{AwsClients, Target};
use recon_dlq::config::EnricherSettings;
use recon_dlq::enrich::AwsEnricher;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Error> {
    recon_dlq::telemetry::init_json();
    let settings = EnricherSettings::from_env()?;
    let clients = AwsClients::connect(Target::Aws).await;
    let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "enricher".into());
    let enricher = Arc::new(AwsEnricher::from_settings(&clients, &settings, &name));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let enricher = enricher.clone();
        async move {
            let deadline = recon_dlq::consume::lambda_deadline(event.context.deadline);
            Ok::<SqsBatchResponse, Error>(enricher.handle_batch(&event.payload, deadline).await.response)
        }
    }))
    .await
}
