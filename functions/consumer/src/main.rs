//! The consumer Lambda: wiring only. The flow lives in `recon_dlq::consume`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_dlq::adapters::aws::dynamodb::DynamoLedger;
use recon_dlq::adapters::aws::{AwsClients, Target};
use recon_dlq::config::ConsumerSettings;
use recon_dlq::consume::AwsConsumer;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Error> {
    recon_dlq::telemetry::init_json();
    let settings = ConsumerSettings::from_env()?;
    let clients = AwsClients::connect(Target::Aws).await;
    let ledger = DynamoLedger::new(clients.dynamodb.clone(), &settings.ledger_table);
    let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "consumer".into());
    let consumer = Arc::new(AwsConsumer::from_settings(&clients, &settings, ledger, &name));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let consumer = consumer.clone();
        async move {
            let deadline = recon_dlq::consume::lambda_deadline(event.context.deadline);
            let report = consumer.handle_batch(&event.payload, deadline).await;
            Ok::<SqsBatchResponse, Error>(report.response)
        }
    }))
    .await
}
