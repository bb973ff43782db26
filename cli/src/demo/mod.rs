//! `dlqctl demo`: the local pipeline end to end on a generated workload — valid transactions,
//! duplicates, poison, unrecoverable payloads and transient ledger faults — then the proof, from
//! the stores themselves, that every message sent is committed, suppressed as a duplicate, or
//! quarantined, and that nothing posted twice.
//!
//! [`workload`] generates the messages and what each should become; [`phases`] runs the
//! pipeline and the operator's remediation; [`report`] proves the identity with the library's own
//! reconciliation against the producer's manifest, and verifies the audit trail.

mod phases;
mod report;
mod workload;

use anyhow::{Result, bail};
use clap::Args;
use recon_aws::AwsClients;
use recon_aws::provision::{StackSettings, ensure_stack, reset_data};
use recon_core::resources::ResourceNames;
use std::time::Instant;

#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    /// Valid transactions in the workload.
    #[arg(long, default_value_t = 200)]
    pub valid: usize,
    /// Seed of the generated workload (same seed, same workload).
    #[arg(long, default_value_t = 20261202)]
    pub seed: u64,
}

pub async fn run(clients: &AwsClients, names: &ResourceNames, args: &DemoArgs) -> Result<()> {
    if !clients.target.is_local() {
        bail!("the demo resets its queues and tables: it runs against the local stack only (drop --aws)");
    }
    let started = Instant::now();
    let settings = StackSettings::default();
    println!(
        "== setting up {} on the local stack (queues, tables, Object Lock bucket)",
        names.main_queue.trim_end_matches("-main")
    );
    let stack = ensure_stack(clients, names, &settings).await?;
    reset_data(clients, &stack).await?;

    let (happy, mess) = workload::generate(args)?;
    let pipeline = phases::Pipeline::new(clients, &stack, settings.max_receive_count, &mess).await?;
    pipeline.happy_path(&happy).await?;
    pipeline.messy(&mess).await?;
    pipeline.enrich().await?;
    pipeline.checkpoint(&happy, &mess).await?;
    pipeline.remediate().await?;

    let bodies: Vec<&str> = happy
        .bodies
        .iter()
        .chain(mess.bodies.iter())
        .map(String::as_str)
        .collect();
    report::prove(clients, &stack, &bodies, started).await
}
