//! `audit verify | seal | show` and `reconcile`: evidence for auditors.

use anyhow::{Result, bail};
use clap::Subcommand;
use recon_aws::AwsClients;
use recon_aws::dynamodb::DynamoAuditLog;
use recon_core::domain::TxKey;
use recon_core::evidence::{SealWindow, VerifyOptions, verify_bucket, verify_from_seal, verify_trail};
use recon_core::ports::{Ledger, LedgerReader};
use recon_core::resources::ResourceNames;
use std::collections::BTreeSet;
use std::path::PathBuf;

#[derive(Subcommand, Clone, Debug)]
pub enum AuditCommand {
    /// Recompute every hash chain, check it against its head and every seal; name the first
    /// broken link of each chain. Exit 1 when anything is broken.
    Verify {
        /// Verify an exported evidence bundle offline instead of the live stores.
        #[arg(long, conflicts_with = "from_seal")]
        bundle: Option<PathBuf>,
        /// Continue from seal N of the table's trail, which an earlier verify checked (its
        /// latest_seal_seq): read only the seals from N and each chain from the record seal N
        /// fixed. What lies before is checked by a full verify only.
        #[arg(long, value_name = "N")]
        from_seal: Option<u64>,
        /// An earlier trail whose retirement you have reviewed (listed by verify): accepted
        /// instead of reported as a break. Repeat for several.
        #[arg(long = "accept-retired", value_name = "TRAIL")]
        accept_retired: Vec<String>,
        /// Verify the trail as the WORM bucket alone holds it (its seals and the records beside
        /// each), without the audit table: for when the table is lost, or to check the bucket's
        /// copy. Records after the newest seal are not in the bucket yet.
        #[arg(long, conflicts_with_all = ["bundle", "from_seal"])]
        from_bucket: bool,
        /// With --from-bucket: the trail to verify (the bucket's only live trail by default).
        #[arg(long, requires = "from_bucket", value_name = "TRAIL")]
        trail: Option<String>,
    },
    /// Write a seal of the chain heads (and their Merkle root) to the WORM bucket, asked of the
    /// control plane. Role: auditor or admin.
    Seal,
    /// The life of one transaction, in order: its audit records, posting and envelopes.
    Show {
        /// The transaction's source_hash (64 hex digits), as triage and show print it.
        #[arg(long)]
        source_hash: String,
        /// An accounting period (YYYY-MM) the transaction's records are under, besides those its
        /// envelopes, records and posting name (a duplicate's and a dead letter's records are
        /// found by period; without any, the ledger is searched for the posting's). Repeatable.
        #[arg(long = "period", value_name = "YYYY-MM", value_parser = |p: &str| recon_core::domain::input::period(p))]
        periods: Vec<String>,
    },
}

pub async fn run(clients: &AwsClients, names: &ResourceNames, cmd: &AuditCommand) -> Result<()> {
    let audit = crate::context::audit_log(clients, names);
    let worm = crate::context::worm(clients, names);
    match cmd {
        // A bundle is verified offline: `dlqctl` does that before it connects to anything.
        AuditCommand::Verify { bundle: Some(path), .. } => print_verify(&crate::bundle::verify_file(path)?, false),
        AuditCommand::Verify {
            bundle: None,
            from_seal,
            accept_retired,
            from_bucket,
            trail,
        } => {
            let opts = VerifyOptions {
                window: Some(seal_window()?),
                accept_retired: accept_retired.clone(),
            };
            let report = match from_seal {
                None if *from_bucket => verify_bucket(&worm, trail.as_deref(), &opts).await?,
                None => verify_trail(&audit, &worm, &opts).await?,
                Some(n) => verify_from_seal(&audit, &worm, *n, &opts).await?,
            };
            print_verify(&report, true)
        }
        AuditCommand::Seal => {
            let control = crate::control::connect_as_cli(clients, names).await?;
            let s = control.seal().await?;
            let value = serde_json::json!({
                "bucket": names.quarantine_bucket, "key": s.key, "seq": s.seq, "chains": s.chains, "root": s.root,
            });
            crate::output::emit(&value, || {
                format!(
                    "sealed {} chains (root {}) at s3://{}/{}",
                    s.chains, s.root, names.quarantine_bucket, s.key
                )
            })
        }
        AuditCommand::Show { source_hash, periods } => show(clients, names, &audit, source_hash, periods).await,
    }
}

/// How long the trail may go without a seal: twice `DLQ_SEAL_EVERY_MINUTES` (set it to the
/// deployment's value), from now.
pub fn seal_window() -> Result<SealWindow> {
    let policy = recon_core::config::SealPolicy::from_lookup(&|k: &str| std::env::var(k).ok())?;
    Ok(SealWindow {
        now: chrono::Utc::now(),
        max_age: policy.max_unsealed(),
    })
}

/// `live`: a verification of the stores (not of a bundle), which tells what to continue from.
pub fn print_verify(report: &recon_core::evidence::VerifyReport, live: bool) -> Result<()> {
    let json = crate::output::json();
    if json {
        crate::output::print_json(report)?;
    } else {
        println!(
            "audit trail: {} records in {} chains, {} seals checked",
            report.records,
            report.chains.len(),
            report.seals
        );
        if let Some(n) = report.from_seal {
            println!(
                "  continued from seal {n}: the seals from {n} and each chain from the record seal {n} fixed (what lies before was checked by an earlier verify; a full verify checks it again)"
            );
        }
        if let Some(t) = &report.trail {
            println!(
                "  trail {t}, newest seal {}",
                report.latest_seal.as_deref().unwrap_or("(none)")
            );
        }
        if report.from_bucket {
            println!("  read from the WORM bucket alone: the records each seal covers, up to the newest seal");
        }
        for (chain, n) in &report.chains {
            match report.read_from.get(chain) {
                Some(first) if report.from_seal.is_some() => {
                    println!("  {chain}: {n} records from record {first}, intact");
                }
                _ => println!("  {chain}: {n} records, intact"),
            }
        }
        for t in &report.unsealed {
            println!(
                "  unsealed: chain {} records {}..{} (oldest {}): not anchored until the next seal",
                t.chain,
                t.from_seq,
                t.to_seq,
                t.oldest_at.map(|a| a.to_rfc3339()).unwrap_or_default()
            );
        }
        for r in &report.retired_trails {
            println!("  retired trail {r}");
        }
        for b in &report.breaks {
            println!("  BROKEN: {b}");
        }
    }
    if !report.intact() {
        let breaks = report.breaks.len();
        return Err(crate::output::Exit(1, format!("the audit trail does not verify ({breaks} breaks)")).into());
    }
    if json {
        return Ok(());
    }
    match report.from_seal {
        Some(n) => println!(
            "verified from seal {n}: every record from its heads on hashes and links correctly, every seal from {n} is a first version, chains from the one before and still holds"
        ),
        None => println!(
            "verified: every record hashes and links correctly, every seal is a first version, chains from the one before and still holds"
        ),
    }
    if let (Some(n), true, false) = (report.latest_seal_seq, live, report.from_bucket) {
        println!("next time, continue from the newest seal: dlqctl audit verify --from-seal {n}");
    }
    Ok(())
}

async fn show(
    clients: &AwsClients,
    names: &ResourceNames,
    audit: &DynamoAuditLog,
    source_hash: &str,
    given: &[String],
) -> Result<()> {
    let mut lines: Vec<(chrono::DateTime<chrono::Utc>, String)> = Vec::new();
    let store = crate::triage::store(clients, names);
    let envelopes: Vec<_> = crate::triage::envelopes(&store, None)
        .await?
        .into_iter()
        .filter(|e| e.source_hash == source_hash)
        .collect();
    // The records a reconciliation reads (a duplicate's, a dead letter's) are found by period.
    // Certainly the transaction's: those named, and a verified envelope's (the value date is one
    // of the hashed fields). Perhaps: what its other envelopes, records and posting name.
    let mut certain: BTreeSet<String> = given.iter().cloned().collect();
    certain.extend(envelopes.iter().filter_map(|e| e.decoded_key().period));
    let mut named = certain.clone();
    named.extend(envelopes.iter().filter_map(|e| e.accounting_period.clone()));
    let by_hash = audit.by_hash(source_hash).await?;
    named.extend(by_hash.iter().filter_map(|r| r.record.period.clone()));
    let stack = recon_aws::stack::resolve_stack(clients, names).await?;
    let ledger = crate::context::ledger(clients, &stack)?;
    let mut ledger_unread = None;
    match ledger_entry(&ledger, source_hash, &certain, &named).await {
        Ok(Entry::Posted(p)) => {
            named.insert(p.period.clone());
            lines.push((
                p.committed_at,
                format!(
                    "COMMITTED              {} {} {} {} (message {}, SQS {}, attempt {}{})",
                    p.ledger_entity,
                    p.period,
                    p.amount,
                    p.currency,
                    p.message_id,
                    p.sqs_message_id,
                    p.attempt_count,
                    p.replay_of.map(|r| format!(", replay of {r}")).unwrap_or_default()
                ),
            ));
        }
        Ok(Entry::HandedOff(h)) => lines.push((
            h.committed_at.unwrap_or_default(),
            format!("HANDED_OFF             {}: no posting may follow", h.holder()),
        )),
        Ok(Entry::None) => {}
        // Operators but auditors read no ledger: the rest is still shown, and what was not said.
        Err(e) => {
            eprintln!("the ledger was not read (no posting or hand-off shown): {e}");
            ledger_unread = Some(e.to_string());
        }
    }
    let records = audit
        .with_reconciled(by_hash, source_hash, named.iter().map(String::as_str))
        .await?;
    for r in records {
        let rec = r.record;
        lines.push((
            rec.at,
            format!(
                "{:<22} by {:<24} {} {} attempt {}  {}  [chain {} #{}]",
                rec.kind.as_str(),
                rec.actor,
                rec.failure_code.map(|c| c.as_str()).unwrap_or(""),
                rec.root_cause.as_deref().unwrap_or(""),
                rec.attempt_count,
                rec.detail,
                r.chain,
                r.seq
            ),
        ));
    }
    for e in &envelopes {
        for c in &e.status_history {
            lines.push((
                c.at,
                format!(
                    "ENVELOPE {:<13} {} by {}: {}",
                    c.status.as_str(),
                    e.envelope_id,
                    c.actor,
                    c.reason
                ),
            ));
        }
    }
    if lines.is_empty() {
        bail!(
            "nothing is recorded for source_hash {source_hash} under the periods {named:?} and none: a duplicate's or a dead letter's records are found by period (name one: --period YYYY-MM)"
        );
    }
    lines.sort_by_key(|l| l.0);
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|(at, line)| serde_json::json!({"at": at, "event": line.split_whitespace().collect::<Vec<_>>().join(" ")}))
        .collect();
    crate::output::emit(
        &serde_json::json!({"source_hash": source_hash, "events": events, "ledger_unread": ledger_unread}),
        || {
            let mut out = format!("transaction {source_hash}:");
            for (at, line) in &lines {
                out.push_str(&format!("\n  {}  {line}", at.format("%Y-%m-%d %H:%M:%S%.3f")));
            }
            out
        },
    )
}

/// What the ledger holds of one transaction.
enum Entry {
    Posted(recon_core::domain::Posting),
    HandedOff(recon_core::domain::CommittedRef),
    None,
}

/// The ledger's entry of `source_hash`, under the periods `certain` to be its; without one,
/// under those its records `named`, and — not found there — searched for (a scan of the table).
async fn ledger_entry(
    ledger: &(impl Ledger + LedgerReader),
    source_hash: &str,
    certain: &BTreeSet<String>,
    named: &BTreeSet<String>,
) -> recon_core::ports::StoreResult<Entry> {
    let mut keys: Vec<TxKey> = (if certain.is_empty() { named } else { certain })
        .iter()
        .map(|p| TxKey::new(source_hash, Some(p.clone())))
        .collect();
    if certain.is_empty() {
        keys.push(TxKey::new(source_hash, None));
    }
    for key in &keys {
        if let Some(p) = ledger.posting(key).await? {
            return Ok(Entry::Posted(p));
        }
        if let Some(h) = ledger.lookup(key).await?.filter(|c| c.manual_journal.is_some()) {
            return Ok(Entry::HandedOff(h));
        }
    }
    Ok(Entry::None)
}
