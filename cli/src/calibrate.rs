//! `dlqctl calibrate`: the retry budget measured against history (`recon_core::calibrate`).

use anyhow::{Result, bail};
use chrono::{DateTime, NaiveDate, Utc};
use clap::Args;
use recon_aws::AwsClients;
use recon_aws::stack::resolve_stack;
use recon_core::calibrate::{Calibration, calibrate, count_attempts};
use recon_core::domain::input;
use recon_core::ports::LedgerScope;
use recon_core::resources::ResourceNames;

use crate::context;

#[derive(Args, Clone, Debug)]
pub struct CalibrateArgs {
    /// Only what was committed or dead-lettered on or after this day (YYYY-MM-DD, UTC).
    #[arg(long)]
    pub since: Option<String>,
    /// Only the postings of this accounting period (YYYY-MM): the period index, not the history.
    #[arg(long)]
    pub period: Option<String>,
}

fn since(day: Option<&str>) -> Result<Option<DateTime<Utc>>> {
    let Some(day) = day else { return Ok(None) };
    let Ok(d) = NaiveDate::parse_from_str(day.trim(), "%Y-%m-%d") else {
        bail!("--since `{}`: expected a day, YYYY-MM-DD", crate::text::printable(day));
    };
    Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()))
}

fn text(c: &Calibration) -> String {
    let mut out = format!(
        "current budget: {} receives, backoff {} s doubling to {} s (spans {} s)\ncommitted on the first receive: {}\n",
        c.current.max_attempts,
        c.current.backoff_base_secs,
        c.current.backoff_cap_secs,
        c.current_window_secs,
        c.first_try
    );
    out.push_str("recovered at attempt (of every message that failed once):\n");
    for a in &c.curve {
        out.push_str(&format!(
            "  {:>3}: {:>8}  {:>3}.{} %\n",
            a.attempt,
            a.recovered,
            a.permille / 10,
            a.permille % 10
        ));
    }
    out.push_str(&format!(
        "exhausted (TRANSIENT_EXHAUSTED): {}\nknee: {}\n",
        c.exhausted,
        c.knee.map_or_else(
            || "none (no attempt after the first recovers 1 %)".to_owned(),
            |k| format!("attempt {k}")
        )
    ));
    for k in &c.kinds {
        out.push_str(&format!(
            "  {:<20} exhausted {:>6}: posted later {}, failed again {} ({} receives spent proving poison), undecided {} — {}\n",
            k.kind, k.exhausted, k.recovered_later, k.failed_again, k.receives_on_poison, k.undecided, k.advice
        ));
    }
    if c.redriven > 0 {
        out.push_str(&format!(
            "redriven by SQS (crash or timeout loops): {}, {} receives\n",
            c.redriven, c.receives_on_redrive
        ));
    }
    out.push_str(&format!(
        "recommended: {} receives, backoff {} s doubling to {} s (spans {} s): DLQ_MAX_ATTEMPTS / the redrive policy's maxReceiveCount, DLQ_BACKOFF_BASE_SECS, DLQ_BACKOFF_CAP_SECS",
        c.recommended.max_attempts,
        c.recommended.backoff_base_secs,
        c.recommended.backoff_cap_secs,
        c.recommended_window_secs
    ));
    for n in &c.notes {
        out.push_str(&format!("\nnote: {n}"));
    }
    out
}

pub async fn run(clients: &AwsClients, names: &ResourceNames, a: &CalibrateArgs) -> Result<()> {
    let since = since(a.since.as_deref())?;
    let scope = match &a.period {
        Some(p) => LedgerScope::period(input::period(p).map_err(anyhow::Error::msg)?),
        None => LedgerScope::default(),
    };
    let c = measure(clients, names, &scope, since).await?;
    crate::output::emit(&c, || text(&c))
}

/// The calibration of this deployment's budget over `scope`'s postings and the envelopes.
pub async fn measure(
    clients: &AwsClients,
    names: &ResourceNames,
    scope: &LedgerScope,
    since: Option<DateTime<Utc>>,
) -> Result<Calibration> {
    let stack = resolve_stack(clients, names).await?;
    let current = context::consumer_settings(&stack)?.retry;
    let ledger = context::ledger(clients, &stack)?;
    let by_attempt = count_attempts(&ledger, scope, since).await?;
    let store = crate::triage::store(clients, names);
    let envelopes = crate::triage::envelopes(&store, None).await?;
    Ok(calibrate(
        &ledger,
        &by_attempt,
        &envelopes,
        current,
        since,
        scope.period.as_deref(),
    )
    .await?)
}
