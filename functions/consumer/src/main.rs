//! The consumer Lambda: wiring only. The flow lives in `recon_core::consume`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_aws::{AwsClients, ClientTimeouts, Target, telemetry, wiring};
use recon_core::config::ConsumerSettings;
use recon_core::ports::lambda_deadline;
use recon_core::resources::CONSUMER_TIMEOUT;
use std::sync::Arc;

// One thread: an instance serves one invocation at a time, and its work is one task (concurrent
// requests are joined futures, not spawned tasks); at the memory sizes chosen Lambda gives less
// than one vCPU, which a second worker only shares. Measured side by side (BENCHMARKS.md, "Runtime
// flavor"): 18-41 % less CPU per invocation, a shorter p50 and, almost
// everywhere, p99.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init_json("consumer");
    let settings = telemetry::settings_or_exit(ConsumerSettings::from_env());
    // Every request gives up well inside the invocation (see ClientTimeouts::within).
    let clients = AwsClients::connect_with(
        Target::Aws,
        ClientTimeouts::within(CONSUMER_TIMEOUT, settings.deadline_margin),
    )
    .await;
    let name = wiring::function_name("consumer");
    wiring::log_configuration(&clients, &settings.audit_table, &name, &settings.audited).await;
    let ledger = wiring::consumer_ledger(&clients, &settings);
    let consumer = Arc::new(wiring::consumer(&clients, &settings, ledger, &name));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let consumer = consumer.clone();
        async move {
            let report = consumer
                .handle_batch(&event.payload, lambda_deadline(event.context.deadline))
                .await;
            Ok::<SqsBatchResponse, Error>(report.response)
        }
    }))
    .await
}
