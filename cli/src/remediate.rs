//! Remediation commands: `replay` and `quarantine` (with a selector, a dry run and a confirmation),
//! and the reference data that fixes root causes (`ref currency`, `period`).

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use recon_aws::AwsClients;
use recon_core::domain::canary::{Canary, CanarySlice};
use recon_core::domain::{AuditKind, AuditRecord, CurrencyMapping, FailureCode, PeriodRecord, PeriodStatus, input};
use recon_core::ports::{AuditLog, ReferenceData};
use recon_core::replay::{ReplayReport, ReplayRequest, Segment, Selector};
use recon_core::resources::ResourceNames;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use crate::context::{identity, replay_session};
use crate::output::fit;
use crate::text::printable;

#[derive(Args, Clone, Debug)]
pub struct SelectorArgs {
    /// Only envelopes with this failure code (POISON_MESSAGE, UNRECOVERABLE_PAYLOAD, ...).
    #[arg(long)]
    pub failure_code: Option<FailureCode>,
    /// Only this root cause; a trailing `*` matches a prefix (`UNMAPPED_CURRENCY:*`).
    #[arg(long)]
    pub root_cause: Option<String>,
    /// Only this ledger entity.
    #[arg(long)]
    pub entity: Option<String>,
    /// Only these envelopes (repeatable).
    #[arg(long = "id")]
    pub ids: Vec<String>,
    /// At most this many envelopes.
    #[arg(long)]
    pub max_items: Option<usize>,
    /// Only this part of the envelopes, INDEX/COUNT (e.g. 2/4): run COUNT replays, one per
    /// segment, to sweep a large backlog at once without contending for the same envelopes.
    #[arg(long)]
    pub segment: Option<Segment>,
    /// Why (recorded in the audit trail). Required.
    #[arg(long)]
    pub reason: String,
    /// A name to record next to your AWS identity (the audit trail always records the caller's
    /// identity from sts:GetCallerIdentity, never a local user name).
    #[arg(long)]
    pub triggered_by: Option<String>,
    /// Re-inject a first slice (a count, or a share: 5%), wait for its copies to be committed or
    /// dead-lettered again, and go on only if few enough failed (a request keeps it for its
    /// execution). The consumer must be running (on AWS it is; locally, `cargo xtask pump`).
    #[arg(long, value_name = "N|P%")]
    pub canary: Option<CanarySlice>,
    /// The canary's failures tolerated, in percent of its slice (copies with no outcome by the
    /// end of the wait count as failures).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub canary_max_failures: u8,
    /// Seconds the canary waits for its copies' outcomes (1-600).
    #[arg(long, default_value_t = 120)]
    pub canary_wait: u32,
    /// Show each gate's decision and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// A replay asks for confirmation when more envelopes than this would change (a quarantine,
    /// irreversible under the COMPLIANCE lock, always asks).
    #[arg(long, default_value_t = 100)]
    pub confirm_above: u64,
}

#[derive(Subcommand, Clone, Debug)]
pub enum RefCommand {
    /// Map a currency (or change a mapping): its minor units.
    Add(CurrencyArgs),
    /// The currencies mapped in the reference table (ISO 4217 is built in).
    List,
}

#[derive(Args, Clone, Debug)]
pub struct CurrencyArgs {
    /// The currency code (ISO 4217 or your own: a metal, a stablecoin, an internal unit).
    pub code: String,
    /// Digits after the decimal point an amount in it may carry.
    #[arg(long)]
    pub minor_units: u32,
    /// What the code stands for, for the next reader.
    #[arg(long, default_value = "")]
    pub description: String,
    /// A name to record next to your AWS identity (sts:GetCallerIdentity, always recorded).
    #[arg(long)]
    pub actor: Option<String>,
    /// Do not ask before overriding a built-in ISO 4217 currency.
    #[arg(long)]
    pub yes: bool,
}

// No doc comment here: a flattened struct's would replace its command's help.
#[derive(Args, Clone, Debug)]
pub struct PeriodKey {
    /// The ledger entity (as messages carry it; compared without regard to case).
    pub entity: String,
    /// The period, YYYY-MM.
    pub period: String,
}

#[derive(Subcommand, Clone, Debug)]
pub enum PeriodCommand {
    /// Close an accounting period (YYYY-MM) for an entity: nothing more posts into it.
    Close {
        #[command(flatten)]
        key: PeriodKey,
        /// A name to record next to your AWS identity (sts:GetCallerIdentity, always recorded).
        #[arg(long)]
        actor: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Re-open an accounting period.
    Open {
        #[command(flatten)]
        key: PeriodKey,
        /// A name to record next to your AWS identity (sts:GetCallerIdentity, always recorded).
        #[arg(long)]
        actor: Option<String>,
    },
    /// Plan an open period's close: from `DLQ_PERIOD_CLOSE_WARNING_HOURS` before that day, the
    /// scheduled sweep escalates its PENDING dead letters (they must be decided before).
    Schedule {
        #[command(flatten)]
        key: PeriodKey,
        /// The day it closes (YYYY-MM-DD, from the start of that day, UTC).
        #[arg(long)]
        closes_on: chrono::NaiveDate,
        /// A name to record next to your AWS identity (sts:GetCallerIdentity, always recorded).
        #[arg(long)]
        actor: Option<String>,
    },
    /// Periods recorded in the reference table (any other period is open).
    List,
}

fn request(a: &SelectorArgs, actor: &str, quarantine: bool) -> Result<ReplayRequest> {
    if a.reason.trim().is_empty() {
        bail!("--reason must say why (it is recorded in the audit trail)");
    }
    Ok(ReplayRequest {
        selector: Selector {
            failure_code: a.failure_code,
            root_cause: a.root_cause.clone(),
            entity: a.entity.clone(),
            envelope_ids: a.ids.clone(),
            max_items: a.max_items,
            segment: a.segment,
        },
        dry_run: false,
        reason: a.reason.clone(),
        triggered_by: actor.to_owned(),
        scheduled: false,
        quarantine,
    })
}

pub fn print_report(r: &ReplayReport) -> Result<()> {
    if crate::output::json() {
        return crate::output::print_json(r);
    }
    let verb = if r.dry_run { "would" } else { "did" };
    println!(
        "replay {} ({verb}): selected {}, re-injected {}, suppressed as duplicate {}, still failing {}, quarantined {}, skipped {}{}",
        r.replay_id,
        r.selected,
        r.reinjected,
        r.suppressed_duplicate,
        r.still_failing,
        r.quarantined,
        r.skipped,
        r.stopped
            .as_deref()
            .map(|s| format!(" — stopped: {s}"))
            .unwrap_or_default()
    );
    if let Some(c) = &r.canary {
        println!("  {c}");
    }
    if !r.changed_since.is_empty() {
        println!(
            "  {} envelopes changed since they were approved (or assessed): not touched",
            r.changed_since.len()
        );
    }
    for i in r.items.iter().take(40) {
        let gate = i.gate.map(|g| format!("{g:?}")).unwrap_or_default();
        println!(
            "  {:<38} {:<22} {:<12} {}",
            i.envelope_id,
            i.outcome,
            gate,
            printable(&i.detail)
        );
    }
    if r.items.len() > 40 || r.items_truncated {
        println!("  … (--json for every line)");
    }
    Ok(())
}

/// Ask `question` on the terminal: an error unless the answer is yes.
pub fn confirm(question: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!("{question} — refusing without a terminal to confirm; pass --yes");
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if !matches!(line.trim(), "y" | "Y" | "yes") {
        bail!("cancelled; nothing changed");
    }
    Ok(())
}

/// `replay` and `quarantine`: a dry run first (to count and to confirm), then the real thing.
pub async fn run(clients: &AwsClients, names: &ResourceNames, a: &SelectorArgs, quarantine: bool) -> Result<()> {
    let (me, mut r) = replay_session(clients, names, a.triggered_by.as_deref()).await?;
    let wanted = request(a, &me.to_string(), quarantine)?;
    let canary = a
        .canary
        .map(|slice| Canary {
            slice,
            max_failure_percent: a.canary_max_failures,
            wait_secs: a.canary_wait,
        })
        .map(|c| c.check().map(|()| c).map_err(anyhow::Error::msg))
        .transpose()?;
    let assessed = r.assess(&wanted, None).await?;
    let preview = assessed.preview.clone();
    if a.dry_run {
        if !assessed.why.is_empty() && !crate::output::json() {
            println!("needs approval: {}", assessed.why.join("; "));
        }
        return print_report(&preview);
    }
    if !assessed.why.is_empty() {
        // Above the policy: a request for a second person, exactly the envelopes this dry run
        // would change; nothing changes now.
        let q = r.request_approval(&wanted, &assessed, &me, canary).await?;
        return crate::output::emit(&q, || {
            format!(
                "needs approval: {}
request {} ({} envelopes, set {}) is PENDING_APPROVAL until {}; another identity runs `dlqctl approve {}`",
                q.why.join("; "),
                q.request_id,
                q.exposure.count,
                q.digest,
                q.expires_at,
                q.request_id
            )
        });
    }
    let changes = preview.changed();
    if changes == 0 {
        let value = serde_json::json!({"selected": preview.selected, "changes": 0});
        return crate::output::emit(&value, || {
            format!(
                "nothing to do: {} selected, none would change (--dry-run shows each gate's decision)",
                preview.selected
            )
        });
    }
    // A quarantine cannot be undone (the WORM record is under a COMPLIANCE lock): always asked.
    if (quarantine || preview.quarantined > 0 || changes > a.confirm_above) && !a.yes {
        let what = if quarantine {
            "quarantine (irreversible: WORM under a COMPLIANCE lock)"
        } else {
            "change (re-inject, suppress or quarantine)"
        };
        confirm(&format!("{what} {changes} envelopes?"))?;
    }
    let total = preview.selected;
    let progress = crate::output::progress();
    if progress {
        r.progress = Some(Arc::new(move |rep: &ReplayReport| {
            eprint!(
                "\r  {}/{total} envelopes: {} re-injected, {} suppressed, {} quarantined, {} still failing, {} skipped   ",
                rep.selected, rep.reinjected, rep.suppressed_duplicate, rep.quarantined, rep.still_failing, rep.skipped
            );
        }));
    }
    // What was confirmed is what runs: a flood landing in between is not quarantined on a
    // confirmation given for three.
    let req = wanted.pinned_to(&preview);
    let report = r.run_guarded(&req, canary.as_ref(), in_process_deadline()).await?;
    if progress {
        eprintln!();
    }
    print_report(&report)
}

/// The deadline of a replay run in this process: the replay function's own timeout. A run stops
/// starting new work near it (and says so: run it again to go on), so a command left running on
/// a machine that was suspended stops soon after it wakes; its claims' leases fence what it had
/// begun (a hand-off's intent is written under its claim, which a replay taking over finishes).
pub fn in_process_deadline() -> Option<chrono::DateTime<chrono::Utc>> {
    Some(chrono::Utc::now() + recon_core::resources::REPLAY_TIMEOUT)
}

pub async fn audit_change(
    clients: &AwsClients,
    names: &ResourceNames,
    actor: &str,
    subject: &str,
    detail: String,
) -> Result<()> {
    let now = chrono::Utc::now();
    let subject = format!("{subject}#{}", now.timestamp_nanos_opt().unwrap_or_default());
    let record = AuditRecord::system(AuditKind::ReferenceChanged, &subject, now, actor, detail);
    crate::context::audit_log(clients, names).append(&record).await?;
    Ok(())
}

pub async fn currency(clients: &AwsClients, names: &ResourceNames, cmd: &RefCommand) -> Result<()> {
    let store = crate::context::reference(clients, names);
    match cmd {
        RefCommand::Add(a) => {
            let code = input::currency_code(&a.code).map_err(anyhow::Error::msg)?;
            let minor_units = &input::minor_units(a.minor_units).map_err(anyhow::Error::msg)?;
            // Who changes it is established first: a command that cannot say who changes nothing.
            let actor = identity(clients, a.actor.as_deref()).await?.to_string();
            if let Some(iso) = recon_core::domain::reference::iso_minor_units(&code)
                && !a.yes
            {
                confirm(&format!(
                    "override the built-in ISO 4217 {code} ({iso} minor units) with {minor_units}?"
                ))?;
            }
            let mapping = CurrencyMapping {
                code: code.clone(),
                minor_units: *minor_units,
                description: a.description.clone(),
            };
            store
                .put_currency(&mapping)
                .await
                .context("writing the reference table")?;
            audit_change(
                clients,
                names,
                &actor,
                &format!("CURRENCY#{code}"),
                format!("currency {code} mapped with {minor_units} minor units"),
            )
            .await?;
            crate::output::emit(&mapping, || {
                format!(
                    "{code} mapped ({minor_units} minor units); consumers see it within DLQ_REFERENCE_CACHE_SECS, replays at once"
                )
            })
        }
        RefCommand::List => {
            let (currencies, _) = store.load().await?;
            crate::output::emit(&currencies, || {
                let mut out = format!("{:<12} {:>11}  DESCRIPTION", "CODE", "MINOR UNITS");
                for c in &currencies {
                    out.push_str(&format!(
                        "\n{:<12} {:>11}  {}",
                        fit(&printable(&c.code), 12),
                        c.minor_units,
                        printable(&c.description)
                    ));
                }
                out.push_str("\n(ISO 4217 currencies are built in)");
                out
            })
        }
    }
}

pub async fn period(clients: &AwsClients, names: &ResourceNames, cmd: &PeriodCommand) -> Result<()> {
    let store = crate::context::reference(clients, names);
    let (key, status, closes_on, actor, yes) = match cmd {
        PeriodCommand::Close { key, actor, yes } => (key, PeriodStatus::Closed, None, actor, *yes),
        PeriodCommand::Open { key, actor } => (key, PeriodStatus::Open, None, actor, true),
        PeriodCommand::Schedule { key, closes_on, actor } => (key, PeriodStatus::Open, Some(*closes_on), actor, true),
        PeriodCommand::List => {
            let (_, periods) = store.load().await?;
            return crate::output::emit(&periods, || {
                let mut out = format!("{:<24} {:<8} {:<7} CLOSES ON", "ENTITY", "PERIOD", "STATUS");
                for p in &periods {
                    out.push_str(&format!(
                        "\n{:<24} {:<8} {:<7} {}",
                        fit(&printable(&p.entity), 24),
                        p.period,
                        p.status,
                        p.closes_on.map_or_else(|| "-".to_owned(), |d| d.to_string())
                    ));
                }
                out.push_str("\n(periods not listed are open)");
                out
            });
        }
    };
    let period = &input::period(&key.period).map_err(anyhow::Error::msg)?;
    // Entities are compared without regard to case: stored as messages carry them.
    let entity = &input::entity(&key.entity).map_err(anyhow::Error::msg)?;
    if let Some(on) = closes_on {
        let (_, periods) = store.load().await?;
        let closed = periods
            .iter()
            .any(|p| p.entity.eq_ignore_ascii_case(entity) && p.period == *period && p.status == PeriodStatus::Closed);
        if closed {
            bail!("{period} of {entity} is closed already: nothing to schedule (`dlqctl period open` first)");
        }
        if on.format("%Y-%m").to_string() <= *period {
            bail!(
                "{period} cannot close on {on}: a period closes after it ends (on or after the first day of the next month)"
            );
        }
    }
    let actor = identity(clients, actor.as_deref()).await?.to_string();
    if !yes {
        confirm(&format!(
            "close {period} of {entity}? Nothing more posts into it; its dead letters wait for a decision or a manual journal"
        ))?;
    }
    store
        .put_period(&PeriodRecord {
            entity: entity.clone(),
            period: period.clone(),
            status,
            closes_on,
        })
        .await?;
    let planned = closes_on.map_or_else(String::new, |d| format!(", closing on {d}"));
    audit_change(
        clients,
        names,
        &actor,
        &format!("PERIOD#{entity}#{period}"),
        format!("period {period} of {entity} set {status}{planned}"),
    )
    .await?;
    let value = serde_json::json!({"entity": entity, "period": period, "status": status, "closes_on": closes_on});
    crate::output::emit(&value, || format!("{entity} {period}: {status}{planned}"))
}
