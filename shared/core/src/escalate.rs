//! Escalation of long-lived exceptions (`decisions::escalation`): the age of the oldest PENDING
//! envelope, overall and per failure code, as metrics (`OldestPendingAgeSeconds`), how many
//! failure codes reached each stage (`PendingEscalated` by `Stage`: the template's alarms route
//! each stage to its topic), and one `ESCALATED` audit record per stage a failure code's oldest
//! envelope has reached (once per stage and oldest envelope: a new one when the oldest is
//! decided and the next still breaches).
//!
//! The PENDING envelopes are read oldest first through the status index and only as far as any
//! stage could apply (younger ones cannot escalate), at most `max_read`: what it costs grows with
//! the breaching backlog, not with the history.

use chrono::{DateTime, Utc};
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
    /// Envelopes read.
    pub read: u64,
}

fn age_secs(now: DateTime<Utc>, at: DateTime<Utc>) -> u64 {
    u64::try_from((now - at).num_seconds()).unwrap_or(0)
}

/// Measure the PENDING backlog's age against `chain`; record and emit what breaches.
pub async fn escalate<S: EnvelopeStore, A: AuditLog, M: Metrics>(
    store: &S,
    audit: &A,
    metrics: &M,
    chain: &EscalationChain,
    now: DateTime<Utc>,
    actor: &str,
    max_read: u64,
) -> FlowResult<Escalation> {
    let mut out = Escalation::default();
    let mut oldest: BTreeMap<FailureCode, (String, u64, u64)> = BTreeMap::new();
    let mut cursor = None;
    'pages: loop {
        let (page, next) = store.list_by_status(EnvelopeStatus::Pending, cursor, 100).await?;
        for e in page {
            let age = age_secs(now, e.dead_lettered_at);
            if out.read == 0 {
                out.oldest_age_secs = age;
            }
            out.read += 1;
            let entry = oldest
                .entry(e.failure_code)
                .or_insert_with(|| (e.envelope_id.clone(), age, 0));
            entry.2 += 1;
            // Oldest first: past the youngest age that escalates, nothing younger can.
            if chain.first_secs().is_none_or(|first| age < first) || out.read >= max_read {
                break 'pages;
            }
        }
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    metrics.emit(&Metric {
        name: "OldestPendingAgeSeconds",
        value: i64::try_from(out.oldest_age_secs).unwrap_or(i64::MAX),
        unit: "Seconds",
        dimensions: vec![],
    });
    for (code, (envelope, age, count)) in oldest {
        metrics.emit(&Metric {
            name: "OldestPendingAgeSeconds",
            value: i64::try_from(age).unwrap_or(i64::MAX),
            unit: "Seconds",
            dimensions: vec![("FailureCode", code.as_str().to_owned())],
        });
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
    // Per stage, how many failure codes reached it (0 included): the alarm routing each stage
    // to its topic watches this.
    for stage in &chain.stages {
        let reached = out.groups.iter().filter(|g| g.stages.contains(&stage.name)).count();
        metrics.emit(&Metric {
            name: "PendingEscalated",
            value: i64::try_from(reached).unwrap_or(i64::MAX),
            unit: "Count",
            dimensions: vec![("Stage", stage.name.clone())],
        });
    }
    Ok(out)
}
