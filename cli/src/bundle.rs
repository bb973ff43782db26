//! `reconcile` and `evidence export`: the completeness proof, and a bundle an auditor can verify
//! offline (`dlqctl audit verify --bundle FILE`).

use anyhow::{Context, Result, bail};
use clap::Args;
use recon_aws::AwsClients;
use recon_aws::sqs::SqsQueue;
use recon_aws::stack::resolve_stack;
use recon_core::evidence::{BucketTrail, Bundle, VerifyReport, verify_bundle, write_bundle};
use recon_core::ports::{LedgerScope, Worm};
use recon_core::reconcile::{
    Counts, Entry, Exceptions, Links, Reconciliation, State, Verdict, complete_exceptions, conclude,
    exceptions_of_period, look_up_unmet, manifest_entry, period::gather_period, read_ledger, reconcile_counted,
};
use recon_core::resources::ResourceNames;
use std::path::{Path, PathBuf};

use crate::fanout::FanOut;
use crate::text::printable;

#[derive(Args, Clone, Debug)]
pub struct ReconcileArgs {
    /// JSON lines of the message bodies the producer sent: name every missing or extra record.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Only the transactions of this accounting period, YYYY-MM (the manifest's too; a body
    /// without a readable value date belongs to no period). The ledger is read through its
    /// period index: the cost is that period's, not the history's.
    #[arg(long)]
    pub period: Option<String>,
    /// Read the ledger in this many segments at once (1-64).
    #[arg(long, default_value_t = DEFAULT_SEGMENTS, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub segments: u32,
    /// Read the period's ledger as this many requests to the control plane, one segment each
    /// (1-64; the auditor role's), instead of in this process: for a ledger one machine reads
    /// too slowly. Needs --period; not with --manifest (which keeps every posting).
    #[arg(long, requires = "period", conflicts_with = "manifest", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub fan_out: Option<u32>,
    /// How many of the --fan-out requests run at once (default 1: the template reserves the
    /// control plane 2, for operators' requests beside it; raise the template's
    /// ControlReservedConcurrency with it).
    #[arg(long, requires = "fan_out", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub at_once: u32,
}

/// How many segments of the ledger reconcile and export read at once.
pub const DEFAULT_SEGMENTS: u32 = 4;

fn check_period(period: &str) -> Result<()> {
    if recon_core::domain::message::parse_date(&format!("{period}-01")).is_none() {
        bail!("--period must be YYYY-MM");
    }
    Ok(())
}

/// What the stores say, and the reconciliation of it.
pub struct Evidence {
    /// One per message, but for the committed postings of no lineage (with `Keep::Linked`):
    /// those are only counted, in the reconciliation.
    pub outcomes: Vec<(State, Entry)>,
    /// What the stores contradict each other on (before the reconciliation adds its own).
    pub problems: Vec<String>,
    pub reconciliation: Reconciliation,
}

impl Evidence {
    /// Distinct source hashes among the committed outcomes: equal to the committed count when no
    /// transaction was posted twice.
    pub fn committed_source_hashes(&self) -> u64 {
        self.outcomes
            .iter()
            .filter(|(s, _)| *s == State::Committed)
            .map(|(_, e)| e.reference.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u64
    }
}

pub fn read_manifest(path: &Path) -> Result<Vec<Entry>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open manifest {}", path.display()))?;
    let what = format!("manifest {}", path.display());
    let lines = crate::input::bounded_lines(std::io::BufReader::new(file), crate::input::MAX_BODY_BYTES, &what)?;
    Ok(lines.iter().map(|line| manifest_entry(line)).collect())
}

/// Which messages `gather` keeps as outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Those of a lineage; the committed postings of none are only counted (bounded memory).
    Linked,
    /// Every one: a manifest matches each message by its key, a bundle lists each.
    Every,
}

/// What the stores say about `period` (or the whole history), and its reconciliation against
/// `manifest`. The ledger is read by `period` through its index, in `segments` at once; so are the
/// period's exceptions (its envelopes and the audit records a reconciliation reads), with those of
/// no known period and the envelopes its lineages name from other periods.
pub async fn gather(
    clients: &AwsClients,
    names: &ResourceNames,
    manifest: Option<&[Entry]>,
    period: Option<&str>,
    keep: Keep,
    segments: u32,
    fan_out: Option<&FanOut>,
) -> Result<Evidence> {
    let stack = resolve_stack(clients, names).await?;
    let audit_log = crate::context::audit_log(clients, names);
    let store = crate::triage::store(clients, names);
    let ledger = crate::context::ledger(clients, &stack)?;
    let queues =
        SqsQueue::new(clients.sqs.clone(), &stack.main_queue_url).with_dead_letters(&stack.dlq_url, &stack.parked_url);
    // One period read here: as the control plane reads it (the console's reconciliation and
    // export), one implementation.
    if let (Some(p), None) = (period, fan_out) {
        let every = keep == Keep::Every;
        let concluded = gather_period(&store, &audit_log, &ledger, &queues, (p, segments), every, manifest).await?;
        let (outcomes, problems, reconciliation) = concluded.map_err(anyhow::Error::msg)?;
        return Ok(Evidence {
            outcomes,
            problems,
            reconciliation,
        });
    }
    if period.is_some() && !store.periods_indexed().await? {
        bail!("{}", recon_core::reconcile::period::UNINDEXED);
    }
    let mut exceptions = match period {
        Some(p) => exceptions_of_period(&store, &audit_log, p).await?,
        None => Exceptions {
            envelopes: crate::triage::envelopes(&store, None).await?,
            audit: audit_log.scan().await?,
        },
    };
    let links = match keep {
        Keep::Every => Links::of(&exceptions.envelopes, &exceptions.audit).keeping_everything(),
        Keep::Linked => Links::of(&exceptions.envelopes, &exceptions.audit),
    };
    let scope = LedgerScope {
        period: period.map(str::to_owned),
        ..LedgerScope::default()
    };
    let mut read = match (fan_out, period) {
        (Some(f), Some(p)) if keep == Keep::Linked => {
            let mut read = crate::fanout::read(clients, names, f, p, &links).await?;
            look_up_unmet(&ledger, &scope, &links, &mut read).await?;
            read
        }
        (Some(_), _) => bail!("--fan-out reads one period, without a manifest"),
        (None, _) => read_ledger(&ledger, &scope, segments, &links).await?,
    };
    if let Some(p) = period {
        complete_exceptions(&store, &audit_log, &ledger, p, &mut read, &mut exceptions).await?;
    }
    let queued = recon_core::ports::ReplayQueue::queued(&queues)
        .await?
        .context("the queues' depths cannot be read")?;
    let (outcomes, problems, reconciliation) = conclude(read, &exceptions, period, manifest, queued);
    Ok(Evidence {
        outcomes,
        problems,
        reconciliation,
    })
}

pub fn print(r: &Reconciliation) {
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
    // In State's order: committed, duplicate, pending, quarantined, in flight.
    for (st, t) in &r.by_state {
        line(&format!("{st:?}").to_uppercase(), t);
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
    for x in &r.edited {
        println!("EDITED   {}", printable(x));
    }
    for x in &r.altered {
        println!("ALTERED  {}: recorded with other amounts than were sent", printable(x));
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
    if let (Some(m), Some(period)) = (manifest.as_mut(), &args.period) {
        m.retain(|e| e.period.as_deref() == Some(period.as_str()));
    }
    let keep = if manifest.is_some() { Keep::Every } else { Keep::Linked };
    let fan_out = args.fan_out.map(|segments| FanOut {
        segments,
        at_once: args.at_once,
    });
    let ev = gather(
        clients,
        names,
        manifest.as_deref(),
        args.period.as_deref(),
        keep,
        args.segments,
        fan_out.as_ref(),
    )
    .await?;
    if crate::output::json() {
        crate::output::print_json(&ev.reconciliation)?;
    } else {
        print(&ev.reconciliation);
    }
    match ev.reconciliation.verdict {
        Verdict::DoesNotHold => Err(crate::output::Exit(
            1,
            "reconciliation does not hold: ingested ≠ committed + duplicates + pending + quarantined + in flight"
                .into(),
        )
        .into()),
        Verdict::Undecided => Err(crate::output::Exit(3, format!(
            "reconciliation undecided ({} queued): nothing is wrong yet, but what the queued messages become decides; run it again once the queues are empty",
            ev.reconciliation.queued
        ))
        .into()),
        Verdict::Holds => {
            if !crate::output::json() {
                println!(
                    "\nreconciliation holds: ingested = committed + duplicates + pending + quarantined + in flight, by count and amount, with nothing queued"
                );
            }
            Ok(())
        }
    }
}

/// Write the evidence bundle of `period`: it lists every transaction of the period, so it holds
/// them all (the period's, never the history's), and the audit records it carries go to the file
/// a page at a time. Reconciling the period reads that period's exceptions through their indexes
/// (see `gather`). Written beside `out` and renamed over it once whole, so a failed export
/// leaves no half bundle and an earlier bundle at `out` untouched.
///
/// The trail is sealed first by `control` (as its caller: an auditor), so that the bundle covers
/// every record up to now; the rest is read here.
pub async fn export(
    clients: &AwsClients,
    names: &ResourceNames,
    control: &crate::control::ControlPlane,
    period: &str,
    out: &Path,
) -> Result<()> {
    check_period(period)?;
    let ev = gather(clients, names, None, Some(period), Keep::Every, DEFAULT_SEGMENTS, None).await?;
    // A bundle is verified offline against its own outcomes: every one is listed, none queued.
    let reconciliation = reconcile_counted(Counts::default(), &ev.outcomes, ev.problems, None, 0);
    let sealed = control.seal().await?;
    let audit = crate::context::audit_log(clients, names);
    let worm = crate::context::worm(clients, names);
    let file = OutFile::create(out)?;
    let mut writer = file.writer()?;
    let result = write_bundle(
        &audit,
        &worm,
        (&sealed.trail, sealed.seq),
        chrono::Utc::now(),
        period,
        &ev.outcomes,
        &reconciliation,
        &mut writer,
    )
    .await;
    let written = file.finish(writer, result)?;
    let value = serde_json::json!({
        "path": out.display().to_string(),
        "period": period,
        "transactions": written.transactions,
        "audit_records": written.audit_records,
        "chains": written.chains,
        "seals": written.seals,
    });
    crate::output::emit(&value, || {
        format!(
            "exported {}: {} transactions of {period}, {} audit records in {} chains, {} seals",
            out.display(),
            written.transactions,
            written.audit_records,
            written.chains,
            written.seals
        )
    })
}

/// A bundle's file: written beside `out` and moved into place once whole (a device or pipe,
/// `--out /dev/stdout`, is written as it is); a failed write leaves nothing at `out`.
struct OutFile {
    out: PathBuf,
    partial: PathBuf,
    direct: bool,
}

impl OutFile {
    fn create(out: &Path) -> Result<Self> {
        let direct = std::fs::metadata(out).is_ok_and(|m| !m.is_file());
        let partial = if direct {
            out.to_path_buf()
        } else {
            let mut name = out.file_name().unwrap_or_default().to_os_string();
            name.push(".partial");
            out.with_file_name(name)
        };
        Ok(OutFile {
            out: out.to_path_buf(),
            partial,
            direct,
        })
    }

    fn writer(&self) -> Result<std::io::BufWriter<std::fs::File>> {
        let file =
            std::fs::File::create(&self.partial).with_context(|| format!("writing {}", self.partial.display()))?;
        Ok(std::io::BufWriter::new(file))
    }

    fn finish<T>(
        self,
        writer: std::io::BufWriter<std::fs::File>,
        result: Result<T, recon_core::evidence::ExportError>,
    ) -> Result<T> {
        drop(writer);
        let written = result.map_err(|e| {
            if !self.direct {
                let _ = std::fs::remove_file(&self.partial);
            }
            anyhow::Error::new(e).context(format!("writing {}", self.out.display()))
        })?;
        if !self.direct {
            std::fs::rename(&self.partial, &self.out)
                .with_context(|| format!("moving {} to {}", self.partial.display(), self.out.display()))?;
        }
        Ok(written)
    }
}

/// `evidence export --from-bucket`: the audit trail as the WORM bucket alone holds it, up to its
/// newest seal, as a bundle with no period (nothing of the tables or the ledger is read, and no
/// seal is written).
pub async fn export_from_bucket(
    clients: &AwsClients,
    names: &ResourceNames,
    trail: Option<&str>,
    out: &Path,
) -> Result<()> {
    let worm = crate::context::worm(clients, names);
    let bucket = BucketTrail::open(&worm, trail).await?;
    let Some(latest) = bucket.latest_seal().cloned() else {
        bail!("bucket {}: the trail has no seal to export from", worm.bucket());
    };
    let reconciliation = reconcile_counted(Counts::default(), &[], Vec::new(), None, 0);
    let file = OutFile::create(out)?;
    let mut writer = file.writer()?;
    let result = write_bundle(
        &bucket,
        &worm,
        (&latest.trail, latest.seq),
        chrono::Utc::now(),
        "",
        &[],
        &reconciliation,
        &mut writer,
    )
    .await;
    let written = file.finish(writer, result)?;
    let findings = bucket.findings();
    let value = serde_json::json!({
        "path": out.display().to_string(),
        "trail": latest.trail,
        "audit_records": written.audit_records,
        "chains": written.chains,
        "seals": written.seals,
        "findings": findings,
    });
    crate::output::emit(&value, || {
        let mut text = format!(
            "exported {} from bucket {} alone: trail {}, {} audit records in {} chains, {} seals",
            out.display(),
            worm.bucket(),
            latest.trail,
            written.audit_records,
            written.chains,
            written.seals
        );
        for f in &findings {
            text.push_str(&format!("\n  FOUND: {}", printable(f)));
        }
        text
    })?;
    // The bundle holds the records as read; what the bucket shows besides them is not in it.
    if !findings.is_empty() {
        let n = findings.len();
        return Err(crate::output::Exit(1, format!("the bucket shows {n} things no sealer writes (above)")).into());
    }
    Ok(())
}

/// The largest evidence bundle `audit verify --bundle` reads (it is read whole, and its members
/// held while they are checked): a period of a busy deployment is far below it; export a larger
/// history period by period.
pub const MAX_BUNDLE_BYTES: usize = 1 << 30;

pub fn verify_file(path: &Path) -> Result<VerifyReport> {
    verify_file_within(path, MAX_BUNDLE_BYTES)
}

fn verify_file_within(path: &Path, max: usize) -> Result<VerifyReport> {
    let limit = "the largest evidence bundle dlqctl verifies; export one period at a time";
    let bytes = crate::input::bounded_bytes(path, max, limit)?;
    let bundle: Bundle =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not an evidence bundle", path.display()))?;
    Ok(verify_bundle(&bundle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_larger_than_the_bound_is_refused_before_it_is_read() {
        let path = std::env::temp_dir().join(format!("bundle-{}.json", std::process::id()));
        std::fs::write(&path, "x".repeat(100)).unwrap();
        let err = verify_file_within(&path, 99).unwrap_err().to_string();
        assert!(
            err.contains("longer than 99 bytes") && err.contains("one period at a time"),
            "{err}"
        );
        let err = verify_file_within(&path, 100).unwrap_err().to_string();
        assert!(err.contains("is not an evidence bundle"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_period_is_yyyy_mm() {
        assert!(check_period("2026-13").is_err());
        assert!(check_period("2026-11").is_ok());
        assert!(check_period("2026-1").is_err());
    }
}
