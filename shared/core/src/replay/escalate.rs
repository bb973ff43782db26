//! Escalation of long-lived exceptions, a step of every sweep (the chain it measures against:
//! `decisions::escalation`): the age of the oldest PENDING envelope, overall and per failure code,
//! as metrics (`OldestPendingAgeSeconds`), how many failure codes reached each stage
//! (`PendingEscalated` by `Stage`: the template's alarms route each stage to its topic), and one
//! `ESCALATED` audit record per stage a failure code's oldest envelope has reached (once per stage
//! and oldest envelope: a new one when the oldest is decided and the next still breaches).
//!
//! Period-close deadlines: before an open period's planned close (`PeriodRecord::closes_on`),
//! every PENDING dead letter of it must be decided. Within the warning window before that day
//! (or past it, the period still open), its PENDING envelopes are counted per entity and period
//! (`PendingBeforePeriodClose`, overall and by `Entity`: the template's alarm pages the finance
//! controller), with one `ESCALATED` record per entity, period and planned close.
//!
//! The PENDING envelopes are read oldest first through the status index and only as far as any
//! stage could apply (younger ones cannot escalate) — every one, up to the cap, while a period
//! close is near — at most `max_read`: what it costs grows with the breaching backlog, not with
//! the history.

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

use crate::decisions::escalation::EscalationChain;
use crate::domain::{AuditKind, AuditRecord, EnvelopeStatus, FailureCode};
use crate::ports::{AuditLog, EnvelopeStore, FlowResult, Metric, Metrics};

/// One failure code's oldest PENDING envelope, and the stages it has reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Breach {
    pub failure_code: FailureCode,
    pub oldest_envelope: String,
    pub age_secs: u64,
    pub stages: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Escalation {
    /// The oldest PENDING envelope's age (0: none pending).
    pub oldest_age_secs: u64,
    /// Per failure code seen, its oldest envelope (those younger than any stage included when
    /// read).
    pub groups: Vec<Breach>,
    /// `ESCALATED` records written now (not those written by an earlier run).
    pub recorded: u64,
    pub read: u64,
    /// Open periods whose planned close is near (or past), with their PENDING envelopes seen.
    pub deadlines: Vec<PeriodDeadline>,
    /// The cap stopped the read while a period close was near: the counts are lower bounds.
    pub incomplete: bool,
}

/// An open period whose planned close is within the warning window, or past.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeriodDeadline {
    /// Upper-case (canonical).
    pub entity: String,
    pub period: String,
    pub closes_on: NaiveDate,
    pub pending: u64,
}

/// The open periods of `snapshot` whose planned close is within `warning` of `now`, or past.
pub fn closing(
    snapshot: &crate::domain::ReferenceSnapshot,
    now: DateTime<Utc>,
    warning: chrono::Duration,
) -> Vec<PeriodDeadline> {
    snapshot
        .scheduled_closes()
        .filter(|(_, _, on)| now + warning >= on.and_time(chrono::NaiveTime::MIN).and_utc())
        .map(|(entity, period, closes_on)| PeriodDeadline {
            entity: entity.to_owned(),
            period: period.to_owned(),
            closes_on,
            pending: 0,
        })
        .collect()
}

pub(super) fn emit<M: Metrics>(
    metrics: &M,
    name: &'static str,
    value: u64,
    unit: &'static str,
    dimension: Option<(&'static str, String)>,
) {
    metrics.emit(&Metric {
        name,
        value: i64::try_from(value).unwrap_or(i64::MAX),
        unit,
        dimensions: dimension.into_iter().collect(),
    });
}

/// Measure the PENDING backlog's age against `chain`, and the PENDING envelopes of `closing`
/// periods (see [`closing`]); record and emit what breaches.
#[allow(clippy::too_many_arguments)]
pub async fn escalate<S: EnvelopeStore, A: AuditLog, M: Metrics>(
    store: &S,
    audit: &A,
    metrics: &M,
    chain: &EscalationChain,
    closing: Vec<PeriodDeadline>,
    now: DateTime<Utc>,
    actor: &str,
    max_read: u64,
) -> FlowResult<Escalation> {
    let mut out = Escalation {
        deadlines: closing,
        ..Escalation::default()
    };
    let mut oldest: BTreeMap<FailureCode, (String, u64, u64)> = BTreeMap::new();
    let mut cursor = crate::ports::Cursor::new("pending envelope read");
    'pages: while let Some(at) = cursor.at() {
        let (page, next) = store.list_by_status(EnvelopeStatus::Pending, at, 100).await?;
        for e in page {
            let age = u64::try_from((now - e.dead_lettered_at).num_seconds()).unwrap_or(0);
            if out.read == 0 {
                out.oldest_age_secs = age;
            }
            out.read += 1;
            let entry = oldest
                .entry(e.failure_code)
                .or_insert_with(|| (e.envelope_id.clone(), age, 0));
            entry.2 += 1;
            if let (Some(entity), Some(period)) = (&e.ledger_entity, &e.accounting_period) {
                let entity = entity.to_ascii_uppercase();
                if let Some(d) = out
                    .deadlines
                    .iter_mut()
                    .find(|d| d.entity == entity && d.period == *period)
                {
                    d.pending += 1;
                }
            }
            if out.read >= max_read {
                out.incomplete = !out.deadlines.is_empty();
                break 'pages;
            }
            // Oldest first: past the youngest age that escalates, nothing younger can (unless a
            // period close is near: then every PENDING envelope may belong to it).
            if out.deadlines.is_empty() && chain.first_secs().is_none_or(|first| age < first) {
                break 'pages;
            }
        }
        cursor.follow(next)?;
    }
    emit(metrics, "OldestPendingAgeSeconds", out.oldest_age_secs, "Seconds", None);
    for (code, (envelope, age, count)) in oldest {
        let dimension = ("FailureCode", code.as_str().to_owned());
        emit(metrics, "OldestPendingAgeSeconds", age, "Seconds", Some(dimension));
        let stages: Vec<String> = chain.reached(age).map(|s| s.name.clone()).collect();
        for stage in chain.reached(age) {
            let detail = format!(
                "{count} PENDING {} envelopes seen, the oldest {envelope} dead-lettered {} h ago: past the {} stage ({} h)",
                code.as_str(),
                age / 3600,
                stage.name,
                stage.after_hours
            );
            let mut r = AuditRecord::system(
                AuditKind::Escalated,
                &format!("{}#{}#{envelope}", stage.name, code.as_str()),
                now,
                actor,
                detail,
            );
            r.failure_code = Some(code);
            if audit.append(&r).await?.is_some() {
                out.recorded += 1;
                tracing::warn!(stage = %stage.name, failure_code = code.as_str(), oldest = %envelope, age_secs = age, "escalated");
            }
        }
        out.groups.push(Breach {
            failure_code: code,
            oldest_envelope: envelope,
            age_secs: age,
            stages,
        });
    }
    period_close(&mut out, audit, metrics, now, actor).await?;
    // Per stage, how many failure codes reached it (0 included): the alarm routing each stage
    // to its topic watches this.
    for stage in &chain.stages {
        let reached = out.groups.iter().filter(|g| g.stages.contains(&stage.name)).count();
        let dimension = ("Stage", stage.name.clone());
        emit(metrics, "PendingEscalated", reached as u64, "Count", Some(dimension));
    }
    Ok(out)
}

/// The period-close deadlines: metrics (0 included, so the alarm clears) and one record per
/// entity, period and planned close that has PENDING envelopes. When the read stopped at its cap
/// a near period's envelopes may be among those not read: each then counts as at least one (the
/// alarm breaches, the record says so) rather than none.
async fn period_close<A: AuditLog, M: Metrics>(
    out: &mut Escalation,
    audit: &A,
    metrics: &M,
    now: DateTime<Utc>,
    actor: &str,
) -> FlowResult<()> {
    let incomplete = out.incomplete;
    let counted = |d: &PeriodDeadline| if incomplete { d.pending.max(1) } else { d.pending };
    let total: u64 = out.deadlines.iter().map(counted).sum();
    emit(metrics, "PendingBeforePeriodClose", total, "Count", None);
    let mut by_entity: BTreeMap<&str, u64> = BTreeMap::new();
    for d in &out.deadlines {
        *by_entity.entry(d.entity.as_str()).or_default() += counted(d);
    }
    for (entity, n) in by_entity {
        let dimension = Some(("Entity", entity.to_owned()));
        emit(metrics, "PendingBeforePeriodClose", n, "Count", dimension);
    }
    let mut recorded = 0;
    for d in out.deadlines.iter().filter(|d| counted(d) > 0) {
        let (at_least, more) = match incomplete {
            true => (
                "at least ",
                " (the read stopped at its cap: more may be among those not read)",
            ),
            false => ("", ""),
        };
        let detail = format!(
            "{at_least}{} PENDING envelopes of {} {} must be decided before the period closes on {}{more}",
            d.pending, d.entity, d.period, d.closes_on
        );
        let mut r = AuditRecord::system(
            AuditKind::Escalated,
            &format!("period-close#{}#{}#{}", d.entity, d.period, d.closes_on),
            now,
            actor,
            detail,
        );
        r.ledger_entity = Some(d.entity.clone());
        if audit.append(&r).await?.is_some() {
            recorded += 1;
            tracing::warn!(entity = %d.entity, period = %d.period, closes_on = %d.closes_on, pending = d.pending, incomplete, "period close escalated");
        }
    }
    out.recorded += recorded;
    Ok(())
}
