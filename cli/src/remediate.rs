//! Remediation commands: `replay` and `quarantine` (with a selector, a dry run and a confirmation),
//! and the reference data that fixes root causes (`ref currency`, `period`).

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use recon_aws::AwsClients;
use recon_core::control::{Command, Remediation};
use recon_core::domain::canary::{Canary, CanarySlice};
use recon_core::domain::{CurrencyMapping, FailureCode, PeriodRecord, PeriodStatus, input};
use recon_core::replay::{ReplayReport, Segment};
use recon_core::resources::ResourceNames;
use std::io::{BufRead, IsTerminal, Write};

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
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Re-open an accounting period.
    Open {
        #[command(flatten)]
        key: PeriodKey,
    },
    /// Plan an open period's close: from `DLQ_PERIOD_CLOSE_WARNING_HOURS` before that day, the
    /// scheduled sweep escalates its PENDING dead letters (they must be decided before).
    Schedule {
        #[command(flatten)]
        key: PeriodKey,
        /// The day it closes (YYYY-MM-DD, from the start of that day, UTC).
        #[arg(long)]
        closes_on: chrono::NaiveDate,
    },
    /// Periods recorded in the reference table (any other period is open).
    List,
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

/// `replay` and `quarantine`, through the control plane: a dry run first (to count and to
/// confirm), then the real thing, limited to what that dry run selected. Above the approval
/// policy the control plane makes an approval request instead; nothing changes now.
pub async fn run(clients: &AwsClients, names: &ResourceNames, a: &SelectorArgs, quarantine: bool) -> Result<()> {
    if a.reason.trim().is_empty() {
        bail!("--reason must say why (it is recorded in the audit trail)");
    }
    let canary = a.canary.map(|slice| Canary {
        slice,
        max_failure_percent: a.canary_max_failures,
        wait_secs: a.canary_wait,
    });
    let wanted = Remediation {
        reason: a.reason.clone(),
        failure_code: a.failure_code,
        root_cause: a.root_cause.clone(),
        entity: a.entity.clone(),
        envelope_ids: a.ids.clone(),
        max_items: a.max_items,
        dry_run: true,
        canary,
        segment: a.segment.map(|s| s.to_string()),
    };
    let command = |r: Remediation| match quarantine {
        true => Command::Quarantine(r),
        false => Command::Replay(r),
    };
    let control = crate::control::connect_as_cli(clients, names).await?;
    let dry = control.ask(&command(wanted.clone())).await?;
    let preview: ReplayReport = serde_json::from_value(dry["report"].clone())?;
    let why: Vec<String> = serde_json::from_value(dry["needs_approval"].clone()).unwrap_or_default();
    if a.dry_run {
        if !why.is_empty() && !crate::output::json() {
            println!("needs approval: {}", why.join("; "));
        }
        return print_report(&preview);
    }
    let changes = preview.changed();
    if why.is_empty() && changes == 0 {
        let value = serde_json::json!({"selected": preview.selected, "changes": 0});
        return crate::output::emit(&value, || {
            format!(
                "nothing to do: {} selected, none would change (--dry-run shows each gate's decision)",
                preview.selected
            )
        });
    }
    // A quarantine cannot be undone (the WORM record is under a COMPLIANCE lock): always asked.
    if why.is_empty() && (quarantine || preview.quarantined > 0 || changes > a.confirm_above) && !a.yes {
        let what = if quarantine {
            "quarantine (irreversible: WORM under a COMPLIANCE lock)"
        } else {
            "change (re-inject, suppress or quarantine)"
        };
        confirm(&format!("{what} {changes} envelopes?"))?;
    }
    // What was confirmed is what runs: a flood landing in between is not quarantined on a
    // confirmation given for three.
    let real = Remediation {
        dry_run: false,
        ..wanted
    }
    .pinned_to(&preview);
    let done = control.ask(&command(real)).await?;
    if let Some(q) = done.get("request").filter(|q| !q.is_null()) {
        let q: recon_core::domain::approval::ApprovalRequest = serde_json::from_value(q.clone())?;
        return crate::output::emit(&q, || {
            format!(
                "needs approval: {}\nrequest {} ({} envelopes, set {}) is PENDING_APPROVAL until {}; another person runs `dlqctl approve {}`",
                q.why.join("; "),
                q.request_id,
                q.exposure.count,
                q.digest,
                q.expires_at,
                q.request_id
            )
        });
    }
    print_report(&serde_json::from_value(done["report"].clone())?)
}

pub async fn currency(clients: &AwsClients, names: &ResourceNames, cmd: &RefCommand) -> Result<()> {
    let store = crate::context::reference(clients, names);
    match cmd {
        RefCommand::Add(a) => {
            let code = input::currency_code(&a.code).map_err(anyhow::Error::msg)?;
            if let Some(iso) = recon_core::domain::reference::iso_minor_units(&code)
                && !a.yes
            {
                confirm(&format!(
                    "override the built-in ISO 4217 {code} ({iso} minor units) with {}?",
                    a.minor_units
                ))?;
            }
            let put = Command::PutCurrency {
                code,
                minor_units: a.minor_units,
                description: a.description.clone(),
            };
            let mapping: CurrencyMapping =
                serde_json::from_value(crate::control::connect_as_cli(clients, names).await?.ask(&put).await?)?;
            crate::output::emit(&mapping, || {
                format!(
                    "{} mapped ({} minor units); consumers see it within DLQ_REFERENCE_CACHE_SECS, replays at once",
                    mapping.code, mapping.minor_units
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
    let (key, status, closes_on, yes) = match cmd {
        PeriodCommand::Close { key, yes } => (key, PeriodStatus::Closed, None, *yes),
        PeriodCommand::Open { key } => (key, PeriodStatus::Open, None, true),
        PeriodCommand::Schedule { key, closes_on } => (key, PeriodStatus::Open, Some(*closes_on), true),
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
    if !yes {
        confirm(&format!(
            "close {} of {}? Nothing more posts into it; its dead letters wait for a decision or a manual journal",
            key.period, key.entity
        ))?;
    }
    let (entity, period) = (key.entity.clone(), key.period.clone());
    let command = match (status, closes_on) {
        (_, Some(closes_on)) => Command::SchedulePeriodClose {
            entity,
            period,
            closes_on,
        },
        (PeriodStatus::Closed, None) => Command::ClosePeriod { entity, period },
        (PeriodStatus::Open, None) => Command::OpenPeriod { entity, period },
    };
    let value = crate::control::connect_as_cli(clients, names)
        .await?
        .ask(&command)
        .await?;
    let record: PeriodRecord = serde_json::from_value(value.clone())?;
    let planned = record
        .closes_on
        .map_or_else(String::new, |d| format!(", closing on {d}"));
    crate::output::emit(&value, || {
        format!("{} {}: {}{planned}", record.entity, record.period, record.status)
    })
}
