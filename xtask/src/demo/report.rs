//! The demo's proof, read back from the stores: the library's reconciliation of the producer's
//! manifest (what was sent) against every terminal state, by count and by amount per currency,
//! then the audit trail sealed and verified — exactly what `dlqctl reconcile --manifest` and
//! `dlqctl audit verify` report.

use anyhow::{Result, bail};
use recon_aws::AwsClients;
use recon_aws::dynamodb::DynamoAuditLog;
use recon_aws::s3::S3Worm;
use recon_aws::sqs::SqsQueue;
use recon_core::domain::{Tally, Total};
use recon_core::evidence::{seal, verify_bucket, verify_trail};
use recon_core::ports::{LedgerScope, read_postings};
use recon_core::reconcile::{Reconciliation, State};
use recon_harness::provision::Stack;
use std::path::Path;
use std::time::Instant;

use dlqctl::bundle::Evidence;

fn tally(r: &Reconciliation, state: State) -> Tally {
    r.by_state.get(&state).cloned().unwrap_or_default()
}

/// `a + b + c`, exactly (`None` when it is too large to total).
fn sum3(a: Total, b: Total, c: Total) -> Option<Total> {
    a.checked_add(b).and_then(|ab| ab.checked_add(c)).ok()
}

pub async fn prove(clients: &AwsClients, stack: &Stack, bodies: &[&str], started: Instant) -> Result<()> {
    let manifest_path = Path::new(".local-aws").join("demo-manifest.jsonl");
    std::fs::write(&manifest_path, bodies.join("\n") + "\n")?;
    let manifest = dlqctl::bundle::read_manifest(&manifest_path)?;
    let evidence = dlqctl::bundle::gather(
        clients,
        &stack.names,
        Some(&manifest),
        None,
        dlqctl::bundle::Keep::Every,
        dlqctl::bundle::DEFAULT_SEGMENTS,
        None,
    )
    .await?;
    let holds = print_result(clients, stack, &evidence, started).await?;
    if !holds {
        dlqctl::bundle::print(&evidence.reconciliation);
        bail!("the completeness identity does not hold (see above)");
    }
    print_evidence(clients, stack, &manifest_path, &evidence.reconciliation).await
}

/// The result table; whether the identity holds with nothing left pending, in flight or queued.
async fn print_result(clients: &AwsClients, stack: &Stack, evidence: &Evidence, started: Instant) -> Result<bool> {
    let r = &evidence.reconciliation;
    let sent = r.sent.clone().unwrap_or_default();
    let (committed, duplicates, quarantined, pending, in_flight) = (
        tally(r, State::Committed),
        tally(r, State::Duplicate),
        tally(r, State::Quarantined),
        tally(r, State::Pending),
        tally(r, State::InFlight),
    );
    // Where each duplicate was caught: the consumer's audit record, or a replay's envelope.
    let by_replays = evidence
        .outcomes
        .iter()
        .filter(|(s, e)| *s == State::Duplicate && e.reference.starts_with("envelope "))
        .count() as u64;
    let distinct_hashes = evidence.committed_source_hashes();
    let via_replay = read_postings(&dlqctl::context::ledger(clients, stack)?, &LedgerScope::default())
        .await?
        .iter()
        .filter(|p| p.replay_of.is_some())
        .count();
    let main = SqsQueue::new(clients.sqs.clone(), &stack.main_queue_url)
        .depth()
        .await?;
    let dlq = SqsQueue::new(clients.sqs.clone(), &stack.dlq_url).depth().await?;

    println!("\n== result ({:.1} s)", started.elapsed().as_secs_f64());
    println!("   sent                   {:>6}", sent.count);
    println!(
        "   committed              {:>6}   ({via_replay} of them through a replay; {distinct_hashes} distinct source hashes)",
        committed.count
    );
    println!(
        "   duplicates suppressed  {:>6}   ({} by the consumer, {by_replays} by replays)",
        duplicates.count,
        duplicates.count - by_replays
    );
    println!(
        "   quarantined            {:>6}   (WORM; flagged for a manual journal where they cannot post)",
        quarantined.count
    );
    println!("   awaiting remediation   {:>6}", pending.count + in_flight.count);
    println!("   queues                 main {}, DLQ {}", main.total(), dlq.total());
    println!(
        "\n   {:<8} {:>22} {:>22} {:>22} {:>22}",
        "CURRENCY", "SENT", "COMMITTED", "DUPLICATES", "QUARANTINED"
    );
    for (c, sa) in &sent.amounts {
        let (ca, da, qa) = (committed.get(c), duplicates.get(c), quarantined.get(c));
        let equal = sum3(ca, da, qa) == Some(*sa);
        println!(
            "   {c:<8} {sa:>22} {ca:>22} {da:>22} {qa:>22}  {}",
            if equal { "=" } else { "≠" }
        );
    }
    println!(
        "   ({} sent messages carry no usable amount; {} quarantined envelopes hold them)",
        sent.without_amount, quarantined.without_amount
    );
    let holds =
        r.holds && r.queued == 0 && pending.count == 0 && in_flight.count == 0 && distinct_hashes == committed.count;
    println!(
        "\n   sent {} = committed {} + duplicates suppressed {} + quarantined {}, by count and by amount per currency: {}",
        sent.count,
        committed.count,
        duplicates.count,
        quarantined.count,
        if holds { "HOLDS" } else { "DOES NOT HOLD" }
    );
    Ok(holds)
}

/// The same proof as an auditor gets it: the reconciliation's summary, and the hash-chained audit
/// trail sealed and verified.
async fn print_evidence(clients: &AwsClients, stack: &Stack, manifest: &Path, r: &Reconciliation) -> Result<()> {
    println!("\n== evidence");
    println!(
        "   dlqctl reconcile --manifest {}: {} sent, {} missing, {} extra, {} cross-store problems: {}",
        manifest.display(),
        r.sent.as_ref().map_or(0, |s| s.count),
        r.missing.len(),
        r.extra.len(),
        r.problems.len(),
        if r.holds { "HOLDS" } else { "DOES NOT HOLD" }
    );
    // The reference table's stream, as its event-source mapping would deliver it: every change
    // the demo made (a currency mapped, a period closed) recorded however it was made.
    let settings = recon_core::config::ReferenceAuditSettings::from_lookup(stack.lookup(|k| std::env::var(k).ok()))?;
    let auditor = recon_aws::wiring::reference_auditor(clients, &settings);
    let changes = recon_harness::streams::pump_stream(clients, &settings.reference_table, &auditor)
        .await
        .map_err(anyhow::Error::msg)?;
    println!("   reference-audit: {changes} changes on the reference table's stream, each a REFERENCE_CHANGED record");
    let c = dlqctl::calibrate::measure(clients, &stack.names, &LedgerScope::default(), None).await?;
    println!(
        "   dlqctl calibrate: {} exhausted, knee at attempt {}; budget {} receives spanning {} s, recommended {} spanning {} s",
        c.exhausted,
        c.knee.map_or_else(|| "-".to_owned(), |k| k.to_string()),
        c.current.max_attempts,
        c.current_window_secs,
        c.recommended.max_attempts,
        c.recommended_window_secs
    );
    let audit = DynamoAuditLog::new(clients.dynamodb.clone(), &stack.names.audit_table);
    let worm = S3Worm::new(clients.s3.clone(), &stack.names.bucket());
    let (key, sealed) = seal(&audit, &worm, chrono::Utc::now()).await?;
    // The trails the demo's own resets retired (this is the local stack, which only the demo
    // resets): accepted and listed; any other retirement stays a break.
    let accept_retired = recon_core::evidence::read_worm(&worm, None)
        .await?
        .trails
        .into_iter()
        .filter(|(_, t)| super::retired_by_demo(t))
        .map(|(id, _)| id)
        .collect();
    let opts = recon_core::evidence::VerifyOptions {
        window: Some(dlqctl::audit::seal_window()?),
        accept_retired,
    };
    let verified = verify_trail(&audit, &worm, &opts).await?;
    println!(
        "   dlqctl audit verify: {} records in {} chains, {} seals (latest {key}, root {}…): {}",
        verified.records,
        verified.chains.len(),
        verified.seals,
        &sealed.root[..16],
        if verified.intact() { "INTACT" } else { "BROKEN" }
    );
    if !verified.intact() {
        for b in &verified.breaks {
            println!("   BROKEN: {b}");
        }
        bail!("the audit trail does not verify (see above)");
    }
    // The same trail, read from the bucket alone (the records each seal wrote beside it).
    let alone = verify_bucket(&worm, verified.trail.as_deref(), &opts).await?;
    println!(
        "   dlqctl audit verify --from-bucket (no table read): {} records, {} seals: {}",
        alone.records,
        alone.seals,
        if alone.intact() { "INTACT" } else { "BROKEN" }
    );
    if !alone.intact() {
        for b in &alone.breaks {
            println!("   BROKEN: {b}");
        }
        bail!("the audit trail does not verify from the bucket alone (see above)");
    }
    let bundle = Path::new(".local-aws").join(format!("demo-bundle-{DEMO_PERIOD}.json"));
    print!("   dlqctl evidence export --period {DEMO_PERIOD}: ");
    // The auditor asks the control plane for the seal the bundle ends with.
    let auditor = dlqctl::control::connect(clients, &stack.names, None, Some("auditor:audrey")).await?;
    dlqctl::bundle::export(clients, &stack.names, &auditor, DEMO_PERIOD, &bundle).await?;
    verify_with_standalone_script(&bundle)
}

/// The period of the demo's workload (value dates in November 2026).
const DEMO_PERIOD: &str = "2026-11";

/// `python3 tools/verify_bundle.py BUNDLE`: the bundle verified without this project's code.
fn verify_with_standalone_script(bundle: &Path) -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/verify_bundle.py");
    let out = match std::process::Command::new("python3").arg(&script).arg(bundle).output() {
        Ok(out) => out,
        Err(e) => {
            println!(
                "   tools/verify_bundle.py not run (python3: {e}); run it on {}",
                bundle.display()
            );
            return Ok(());
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    println!(
        "   python3 tools/verify_bundle.py (standard library only, none of this code): {}",
        text.lines().last().unwrap_or_default()
    );
    if !out.status.success() {
        print!("{text}{}", String::from_utf8_lossy(&out.stderr));
        bail!("the standalone verifier does not verify the exported bundle");
    }
    Ok(())
}
