//! `cargo xtask demo` (`make demo`): the local pipeline end to end on a generated workload — valid transactions,
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
use recon_core::resources::ResourceNames;
use recon_harness::provision::{StackSettings, ensure_stack, reset_data};
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

/// The database the demo's PostgreSQL ledger lives in, on the local server.
const DEMO_DATABASE: &str = "recon_demo";

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
    refuse_unaccounted_evidence(clients, &stack).await?;
    reset_data(clients, &stack).await?;
    if dlqctl::context::given(recon_core::config::vars::LEDGER).as_deref() == Some("postgres") {
        // A database of the demo's own, new each run, like the tables reset above.
        let db = recon_harness::postgres::ScratchDatabase::renew(DEMO_DATABASE)
            .await
            .map_err(anyhow::Error::msg)?;
        println!("   ledger: PostgreSQL, database {} (new)", db.name);
        dlqctl::context::set(recon_core::config::vars::POSTGRES_URL, &db.url);
        // Over TLS, verified against the local server's CA.
        let ca = recon_harness::postgres::ca_file();
        dlqctl::context::set(recon_core::config::vars::POSTGRES_CA_FILE, &ca.display().to_string());
        // The deploy step: the schema migrated by its owner, never by the functions.
        dlqctl::ops::ledger_migrate(clients, None, None, &[]).await?;
    }

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
    report::prove(clients, &stack, &bodies, started).await?;
    pipeline.leave_for_console().await
}

/// The demo resets the tables but cannot empty the Object Lock bucket, and it ends by verifying
/// the whole trail: evidence in the bucket that no earlier demo run accounts for (written by
/// another version of this code, or by hand) would fail that verification for reasons the demo did
/// not cause. Say so first, with the remedy: the local stack keeps nothing across a restart.
async fn refuse_unaccounted_evidence(clients: &AwsClients, stack: &recon_harness::provision::Stack) -> Result<()> {
    use recon_core::ports::AuditLog;
    let audit = recon_aws::dynamodb::DynamoAuditLog::new(clients.dynamodb.clone(), &stack.names.audit_table);
    let worm = recon_aws::s3::S3Worm::new(clients.s3.clone(), &stack.names.bucket());
    let current = audit.current_trail().await.ok().flatten();
    let evidence = recon_core::evidence::read_worm(&worm, None).await?;
    let unaccounted: Vec<&String> = evidence
        .trails
        .iter()
        .filter(|(id, t)| Some(*id) != current.as_ref() && !retired_by_demo(t))
        .map(|(id, _)| id)
        .collect();
    if evidence.findings.is_empty() && unaccounted.is_empty() {
        return Ok(());
    }
    for f in evidence.findings.iter().take(5) {
        println!("   {f}");
    }
    if !unaccounted.is_empty() {
        println!("   audit trails no demo run retired: {unaccounted:?}");
    }
    bail!(
        "the local stack's Object Lock bucket holds audit evidence no earlier demo run accounts for (written by another version of this code, or by hand), which the demo's final verification would report; restart the local stack, which keeps nothing across a restart: make local-down && make demo"
    )
}

/// A trail one of the demo's own resets retired (the local stack, which only the demo resets).
fn retired_by_demo(t: &recon_core::evidence::KnownTrail) -> bool {
    t.retired
        .as_ref()
        .is_some_and(|r| r.by == recon_harness::provision::DEMO_RETIRER)
}
