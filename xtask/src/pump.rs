//! The local pump: the stand-in for Lambda's SQS event-source mappings (the consumer on the main
//! queue, the enricher on the DLQ, in this process), and the scheduled sweep between rounds.

use anyhow::Result;
use clap::Args;
use dlqctl::{context, output, remediate};
use recon_aws::AwsClients;
use recon_aws::sqs::SqsQueue;
use recon_aws::stack::{Stack, resolve_stack};
use recon_core::batch::BatchHandler;
use recon_core::replay::{ReplayReport, ReplayRequest};
use recon_core::resources::ResourceNames;
use recon_harness::pump::{PumpOptions, PumpStats, pump};
use std::time::Duration;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queues {
    Main,
    Dlq,
    All,
}

#[derive(Args, Clone, Debug)]
pub struct PumpArgs {
    /// Which queues to drain: the main queue (consumer), the DLQ (enricher), or both in turn.
    #[arg(long, value_enum, default_value_t = Queues::All)]
    pub queue: Queues,
    /// Process one batch and stop, instead of running until the queue is idle.
    #[arg(long)]
    pub once: bool,
    /// Messages per batch (1-10), like the event source mapping's BatchSize.
    #[arg(long, default_value_t = 10)]
    pub batch_size: i32,
    /// The emulated function timeout, seconds.
    #[arg(long, default_value_t = 30)]
    pub function_timeout_secs: u64,
    /// Give up when the queue is not idle after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub max_secs: u64,
    /// Also run the scheduled replay sweep, every this many seconds, pumping in between (as the
    /// EventBridge schedule would on AWS). Runs until interrupted, or for --rounds.
    #[arg(long)]
    pub sweep_every: Option<u64>,
    /// With --sweep-every: stop after this many sweeps.
    #[arg(long)]
    pub rounds: Option<u64>,
}

/// One pump round of one queue: a line of JSON each under `--json` (a stream a program can read
/// as it comes), else text.
fn print_stats(label: &str, stats: &PumpStats) {
    if output::json() {
        let value = serde_json::json!({
            "queue": label, "batches": stats.batches, "received": stats.received,
            "acknowledged": stats.deleted, "handed_back": stats.reported_failed, "outcomes": stats.outcomes,
        });
        println!("{value}");
        return;
    }
    println!(
        "{label}: {} batches, {} messages received, {} acknowledged, {} handed back to SQS",
        stats.batches, stats.received, stats.deleted, stats.reported_failed
    );
    for (outcome, n) in &stats.outcomes {
        println!("  {outcome:<24} {n}");
    }
}

pub async fn run(clients: &AwsClients, names: &ResourceNames, args: &PumpArgs) -> Result<()> {
    let stack = resolve_stack(clients, names).await?;
    let opts = PumpOptions {
        batch_size: args.batch_size,
        function_timeout: Duration::from_secs(args.function_timeout_secs),
        until_idle: !args.once,
        max_duration: Duration::from_secs(args.max_secs),
        progress_every: if output::progress() { 10 } else { 0 },
        ..PumpOptions::default()
    };
    let settings = context::consumer_settings(&stack)?;
    let ledger = recon_aws::wiring::consumer_ledger(clients, &settings);
    let consumer = recon_aws::wiring::consumer(clients, &settings, ledger, "xtask-pump");
    let enricher = context::enricher(clients, &stack, "xtask-pump")?;
    let mut round = 0;
    loop {
        if args.queue != Queues::Dlq {
            print_stats(&names.main_queue, &pump_main(clients, &stack, &consumer, &opts).await?);
        }
        if args.queue != Queues::Main {
            print_stats(
                &names.dead_letter_queue,
                &pump_dlq(clients, &stack, &enricher, &opts).await?,
            );
        }
        let Some(every) = args.sweep_every else { return Ok(()) };
        let report = sweep(clients, &stack).await?;
        if output::json() {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            remediate::print_report(&report)?;
        }
        round += 1;
        if args.rounds.is_some_and(|r| round >= r) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(every)).await;
    }
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
    Ok(pump(&queue, arn, &context::region(clients), opts, handler).await?)
}

/// One scheduled sweep, as the EventBridge schedule would trigger it (for `pump --sweep-every` and the demo).
pub async fn sweep(clients: &AwsClients, stack: &Stack) -> Result<ReplayReport> {
    let r = context::replayer(clients, stack, "xtask-sweep")?;
    let req = ReplayRequest {
        triggered_by: "xtask pump --sweep-every".into(),
        ..ReplayRequest::scheduled(&stack.names.sweep_schedule)
    };
    Ok(r.run(&req, Some(chrono::Utc::now() + Duration::from_secs(600))).await?)
}
