//! The enricher Lambda. Envelope building is not implemented yet (issue 3), so this function is
//! deliberately safe rather than silent: it reports every DLQ message as a batch item failure, so
//! SQS keeps each one in the DLQ untouched until the real enricher is deployed.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    recon_dlq::telemetry::init_json();
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async move {
        let mut response = SqsBatchResponse::default();
        for m in &event.payload.records {
            let mut f = BatchItemFailure::default();
            f.item_identifier = m.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(f);
        }
        tracing::warn!(
            count = response.batch_item_failures.len(),
            "enricher not implemented yet: dead letters left in the DLQ"
        );
        Ok::<SqsBatchResponse, Error>(response)
    }))
    .await
}
