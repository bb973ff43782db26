//! `reconcile` and `evidence export`: the completeness proof, and a bundle an auditor can verify
//! offline (`dlqctl audit verify --bundle FILE`).

use anyhow::{Context, Result, bail};
use clap::Args;
use recon_aws::AwsClients;
use recon_aws::dynamodb::DynamoAuditLog;
use recon_aws::provision::resolve_stack;
use recon_aws::s3::S3Worm;
use recon_aws::sqs::SqsQueue;
use recon_core::evidence::{Bundle, VerifyReport, export_bundle, verify_bundle};
use recon_core::ports::{LedgerScope, read_postings};
use recon_core::reconcile::{Entry, Reconciliation, State, manifest_entry, outcomes, reconcile};
use recon_core::resources::ResourceNames;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::text::printable;

#[derive(Args, Clone, Debug)]
pub struct ReconcileArgs {
    /// JSON lines of the message bodies the producer sent: name every missing or extra record.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Only the transactions of this accounting period, YYYY-MM (the manifest's too; a body
    /// without a readable value date belongs to no period).
    #[arg(long)]
    pub period: Option<String>,
}

/// `period` if it is YYYY-MM.
fn check_period(period: &str) -> Result<()> {
    if recon_core::domain::message::parse_date(&format!("{period}-01")).is_none() {
        bail!("--period must be YYYY-MM");
    }
    Ok(())
}

/// The outcomes of the transactions of `period`: every record of a message any of whose records
/// is of that period, or that the (period's) manifest names — a duplicate's record may carry no
/// value date of its own.
fn of_period(outcomes: Vec<(State, Entry)>, period: &str, manifest: Option<&[Entry]>) -> Vec<(State, Entry)> {
    let in_period: std::collections::BTreeSet<String> = outcomes
        .iter()
        .filter(|(_, e)| e.period.as_deref() == Some(period))
        .map(|(_, e)| e.key.clone())
        .chain(manifest.unwrap_or_default().iter().map(|e| e.key.clone()))
        .collect();
    outcomes
        .into_iter()
        .filter(|(_, e)| in_period.contains(&e.key))
        .collect()
}

/// What the stores say, and the reconciliation of it.
pub struct Evidence {
    pub outcomes: Vec<(State, Entry)>,
    pub reconciliation: Reconciliation,
}

pub fn read_manifest(path: &Path) -> Result<Vec<Entry>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open manifest {}", path.display()))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if !line.trim().is_empty() {
            out.push(manifest_entry(&line));
        }
    }
    Ok(out)
}

pub async fn gather(clients: &AwsClients, names: &ResourceNames, manifest: Option<&[Entry]>) -> Result<Evidence> {
    let stack = resolve_stack(clients, names).await?;
    let postings = read_postings(&crate::context::ledger(clients, &stack)?, &LedgerScope::default()).await?;
    let audit = DynamoAuditLog::new(clients.dynamodb.clone(), &names.audit_table)
        .scan()
        .await?;
    let envelopes = crate::triage::envelopes(&crate::triage::store(clients, names), None).await?;
    let main = SqsQueue::new(clients.sqs.clone(), &stack.main_queue_url)
        .depth()
        .await?;
    let dlq = SqsQueue::new(clients.sqs.clone(), &stack.dlq_url).depth().await?;
    let (outcomes, problems) = outcomes(&postings, &envelopes, &audit, dlq.total() == 0);
    let reconciliation = reconcile(outcomes.clone(), problems, manifest, main.total() + dlq.total());
    Ok(Evidence {
        outcomes,
        reconciliation,
    })
}

pub fn print(r: &Reconciliation) {
    let states = [
        State::Committed,
        State::Duplicate,
        State::Pending,
        State::Quarantined,
        State::InFlight,
    ];
    let mut currencies: std::collections::BTreeSet<String> =
        r.by_state.values().flat_map(|t| t.amounts.keys().cloned()).collect();
    if let Some(s) = &r.sent {
        currencies.extend(s.amounts.keys().cloned());
    }
    println!("{:<14} {:>8}  AMOUNT BY CURRENCY", "STATE", "COUNT");
    let line = |name: &str, t: &recon_core::domain::Tally| {
        let amounts: Vec<String> = t.amounts.iter().map(|(c, a)| format!("{a} {c}")).collect();
        println!(
            "{name:<14} {:>8}  {}{}",
            t.count,
            amounts.join("; "),
            if t.without_amount > 0 {
                format!(" (+{} without amount)", t.without_amount)
            } else {
                String::new()
            }
        );
    };
    if let Some(s) = &r.sent {
        line("SENT", s);
    }
    for st in states {
        if let Some(t) = r.by_state.get(&st) {
            line(&format!("{st:?}").to_uppercase(), t);
        }
    }
    println!("{:<14} {:>8}  (messages still in the queues)", "QUEUED", r.queued);
    println!("\nby entity and period:");
    for (ep, counts) in &r.by_entity_period {
        let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{s:?} {n}")).collect();
        println!("  {:<22} {}", printable(ep), parts.join(", "));
    }
    for m in &r.missing {
        println!("MISSING  {}: sent, but in no terminal state", printable(m));
    }
    for x in &r.extra {
        println!("EXTRA    {}: recorded, but never sent", printable(x));
    }
    for p in &r.problems {
        println!("PROBLEM  {}", printable(p));
    }
}

pub async fn reconcile_cmd(clients: &AwsClients, names: &ResourceNames, args: &ReconcileArgs) -> Result<()> {
    if let Some(period) = &args.period {
        check_period(period)?;
    }
    let mut manifest = args.manifest.as_deref().map(read_manifest).transpose()?;
    let mut ev = gather(clients, names, manifest.as_deref()).await?;
    if let Some(period) = &args.period {
        if let Some(m) = manifest.as_mut() {
            m.retain(|e| e.period.as_deref() == Some(period.as_str()));
        }
        let problems = std::mem::take(&mut ev.reconciliation.problems);
        let queued = ev.reconciliation.queued;
        ev.reconciliation = reconcile(
            of_period(std::mem::take(&mut ev.outcomes), period, manifest.as_deref()),
            problems,
            manifest.as_deref(),
            queued,
        );
    }
    if crate::output::json() {
        println!("{}", serde_json::to_string_pretty(&ev.reconciliation)?);
    } else {
        print(&ev.reconciliation);
    }
    if !ev.reconciliation.holds {
        return Err(crate::output::CheckFailed(
            "reconciliation does not hold: ingested ≠ committed + duplicates + pending + quarantined + in flight"
                .into(),
        )
        .into());
    }
    if !crate::output::json() {
        println!(
            "\nreconciliation holds: ingested = committed + duplicates + pending + quarantined + in flight, by count and amount"
        );
    }
    Ok(())
}

pub async fn export(clients: &AwsClients, names: &ResourceNames, period: &str, out: &Path) -> Result<()> {
    check_period(period)?;
    let ev = gather(clients, names, None).await?;
    let outcomes = of_period(ev.outcomes, period, None);
    let reconciliation = reconcile(outcomes.clone(), ev.reconciliation.problems.clone(), None, 0);
    let audit = DynamoAuditLog::new(clients.dynamodb.clone(), &names.audit_table);
    let worm = S3Worm::new(clients.s3.clone(), &names.bucket());
    let bundle = export_bundle(&audit, &worm, chrono::Utc::now(), period, outcomes, reconciliation).await?;
    std::fs::write(out, serde_json::to_vec_pretty(&bundle)?).with_context(|| format!("writing {}", out.display()))?;
    let value = serde_json::json!({
        "path": out.display().to_string(),
        "period": period,
        "transactions": bundle.outcomes.len(),
        "audit_records": bundle.audit_records.len(),
        "chains": bundle.heads.len(),
        "seals": bundle.seals.len(),
    });
    crate::output::emit(&value, || {
        format!(
            "exported {}: {} transactions of {period}, {} audit records in {} chains, {} seals",
            out.display(),
            bundle.outcomes.len(),
            bundle.audit_records.len(),
            bundle.heads.len(),
            bundle.seals.len()
        )
    })
}

/// Verify a bundle file offline.
pub fn verify_file(path: &Path) -> Result<VerifyReport> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bundle: Bundle =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not an evidence bundle", path.display()))?;
    Ok(verify_bundle(&bundle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, period: Option<&str>, reference: &str) -> Entry {
        Entry {
            key: key.into(),
            currency: Some("USD".into()),
            amount: Some(rust_decimal::Decimal::ONE),
            entity: Some("ACME-US".into()),
            period: period.map(str::to_owned),
            reference: reference.into(),
        }
    }

    #[test]
    fn a_period_keeps_its_transactions_with_every_record_of_them() {
        let outcomes = vec![
            (State::Committed, entry("msg:a", Some("2026-11"), "posting a")),
            // A duplicate of a, recorded without its period: it follows its transaction.
            (State::Duplicate, entry("msg:a", None, "audit dup-a")),
            (State::Committed, entry("msg:b", Some("2026-10"), "posting b")),
            (State::Quarantined, entry("raw:c", None, "envelope c")),
        ];
        let kept = of_period(outcomes.clone(), "2026-11", None);
        let refs: Vec<&str> = kept.iter().map(|(_, e)| e.reference.as_str()).collect();
        assert_eq!(refs, ["posting a", "audit dup-a"]);
        // The manifest names a message whose records carry no period.
        let manifest = [entry("raw:c", Some("2026-11"), "")];
        let kept = of_period(outcomes, "2026-11", Some(&manifest));
        let refs: Vec<&str> = kept.iter().map(|(_, e)| e.reference.as_str()).collect();
        assert_eq!(refs, ["posting a", "audit dup-a", "envelope c"]);
        assert!(check_period("2026-13").is_err());
        assert!(check_period("2026-11").is_ok());
    }
}
