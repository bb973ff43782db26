//! Steps on envelopes that both the enricher and the replay take: the audit record of an
//! envelope, its original body (inline or from the WORM bucket), and the `DLQ_OVERFLOW` check
//! against the exact PENDING count.

use chrono::{DateTime, Utc};

use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, FailureCode};
use crate::ports::{AuditLog, Backlog, Metric, Metrics, StoreResult, Worm};

/// The audit record of an envelope's creation (`ENRICHED` or `QUARANTINED`).
pub fn envelope_audit(e: &DlqEnvelope, kind: AuditKind, actor: &str, detail: String) -> AuditRecord {
    AuditRecord {
        audit_id: AuditRecord::id_for(kind, &e.envelope_id),
        kind,
        at: e.enriched_at,
        actor: actor.to_owned(),
        sqs_message_id: e.original.source_message_id.clone(),
        message_id: e.message_id.clone(),
        trace_id: e.trace_id.clone(),
        source_hash: Some(e.source_hash.clone()),
        match_decision: e.match_decision.clone(),
        failure_code: Some(e.failure_code),
        root_cause: Some(e.root_cause.clone()),
        attempt_count: e.attempt_count,
        ledger_entity: e.ledger_entity.clone(),
        currency: e.currency.clone(),
        amount: e.amount.clone(),
        detail,
        replay_of: None,
    }
}

/// Compare the PENDING count with the high-water mark and raise or clear `DLQ_OVERFLOW`. The
/// store's flag makes exactly one caller report each crossing. Returns the episode raised, if any.
pub async fn check_overflow<S: Backlog, A: AuditLog, M: Metrics>(
    store: &S,
    audit: &A,
    metrics: &M,
    high_water: i64,
    actor: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<u64>> {
    let pending = store.pending_count().await?;
    metrics.emit(&Metric {
        name: "PendingEnvelopes",
        value: pending,
        unit: "Count",
        dimensions: vec![],
    });
    if pending <= high_water {
        store.set_overflow(false).await?;
        return Ok(None);
    }
    let Some(episode) = store.set_overflow(true).await? else {
        return Ok(None);
    };
    let mut record = AuditRecord::system(
        AuditKind::DlqOverflow,
        &episode.to_string(),
        now,
        actor,
        format!("{pending} PENDING envelopes, above the high-water mark of {high_water} (episode {episode})"),
    );
    record.failure_code = Some(FailureCode::DlqOverflow);
    audit.append(&record).await?;
    metrics.emit(&Metric {
        name: "DlqOverflow",
        value: 1,
        unit: "Count",
        dimensions: vec![],
    });
    tracing::error!(
        decision = "DLQ_OVERFLOW",
        failure_code = FailureCode::DlqOverflow.as_str(),
        pending,
        high_water,
        episode,
        "DLQ backlog above its high-water mark"
    );
    Ok(Some(episode))
}

/// The original body of an envelope, byte for byte: inline, or from the bucket.
pub async fn original_body<W: Worm>(e: &DlqEnvelope, worm: &W) -> StoreResult<Option<String>> {
    if let Some(b) = &e.original.body {
        return Ok(Some(b.clone()));
    }
    let Some(key) = &e.original.body_key else {
        return Ok(None);
    };
    Ok(worm
        .get(key)
        .await?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}
