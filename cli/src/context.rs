//! What the commands share: settings read by the functions' own parsers (the environment's
//! `DLQ_*` variables over the resolved stack's names), the flows wired as `dlqctl` runs them
//! (metrics as debug events), and the local pump over the stack's queues.

use anyhow::Result;
use recon_aws::AwsClients;
use recon_aws::provision::Stack;
use recon_aws::sqs::SqsQueue;
use recon_aws::telemetry::TracingMetrics;
use recon_aws::wiring::{self, AwsEnricher, AwsReplayer};
use recon_core::batch::BatchHandler;
use recon_core::config::{ConsumerSettings, EnricherSettings, ReplaySettings};
use recon_harness::pump::{PumpOptions, PumpStats, pump};

/// The region the clients use (for event records).
pub fn region(clients: &AwsClients) -> String {
    clients
        .sqs
        .config()
        .region()
        .map_or_else(|| "us-east-1".to_owned(), |r| r.to_string())
}

fn environment(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

pub fn consumer_settings(stack: &Stack) -> Result<ConsumerSettings> {
    Ok(ConsumerSettings::from_lookup(stack.lookup(environment))?)
}

pub fn enricher_settings(stack: &Stack) -> Result<EnricherSettings> {
    Ok(EnricherSettings::from_lookup(stack.lookup(environment))?)
}

pub fn replay_settings(stack: &Stack) -> Result<ReplaySettings> {
    Ok(ReplaySettings::from_lookup(stack.lookup(environment))?)
}

pub fn enricher(clients: &AwsClients, stack: &Stack, actor: &str) -> Result<AwsEnricher<TracingMetrics>> {
    Ok(wiring::enricher(
        clients,
        &enricher_settings(stack)?,
        actor,
        TracingMetrics,
    ))
}

pub fn replayer(clients: &AwsClients, stack: &Stack, actor: &str) -> Result<AwsReplayer<TracingMetrics>> {
    Ok(wiring::replayer(
        clients,
        &replay_settings(stack)?,
        actor,
        TracingMetrics,
    ))
}

/// Pump the main queue through `consumer`, as Lambda's SQS trigger would.
pub async fn pump_main<H: BatchHandler>(
    clients: &AwsClients,
    stack: &Stack,
    consumer: &H,
    opts: &PumpOptions,
) -> Result<PumpStats> {
    pump_queue(clients, &stack.main_queue_url, &stack.main_queue_arn, consumer, opts).await
}

/// Pump the DLQ through `enricher`.
pub async fn pump_dlq<H: BatchHandler>(
    clients: &AwsClients,
    stack: &Stack,
    enricher: &H,
    opts: &PumpOptions,
) -> Result<PumpStats> {
    pump_queue(clients, &stack.dlq_url, &stack.dlq_arn, enricher, opts).await
}

async fn pump_queue<H: BatchHandler>(
    clients: &AwsClients,
    url: &str,
    arn: &str,
    handler: &H,
    opts: &PumpOptions,
) -> Result<PumpStats> {
    let queue = SqsQueue::new(clients.sqs.clone(), url);
    Ok(pump(&queue, arn, &region(clients), opts, handler).await?)
}
