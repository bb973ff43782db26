//! Steps on envelopes that both the enricher and the replay take: the audit record of an
//! envelope, its original body (inline or from the WORM bucket), the `DLQ_OVERFLOW` check
//! against the exact PENDING count, and publishing the audit outbox (see `ports::envelopes`).

use chrono::{DateTime, Utc};

use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, FailureCode};
use crate::ports::{AuditLog, AuditOutbox, Backlog, Metric, Metrics, StoreResult, Worm};

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
        period: e.accounting_period.clone(),
    }
}

/// Compare the PENDING count with the high-water mark and raise or clear `DLQ_OVERFLOW`. The
/// store's flag makes exactly one caller report each crossing, and its record goes into the audit
/// outbox with the flag: a failure after that leaves it for the next drain. Returns the episode
/// raised, if any.
pub async fn check_overflow<S: Backlog + AuditOutbox, A: AuditLog, M: Metrics>(
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
        store.clear_overflow().await?;
        return Ok(None);
    }
    let record = |episode: u64| {
        let mut r = AuditRecord::system(
            AuditKind::DlqOverflow,
            &episode.to_string(),
            now,
            actor,
            format!("{pending} PENDING envelopes, above the high-water mark of {high_water} (episode {episode})"),
        );
        r.failure_code = Some(FailureCode::DlqOverflow);
        r
    };
    let Some(episode) = store.raise_overflow(&record).await? else {
        return Ok(None);
    };
    tracing::error!(
        decision = "DLQ_OVERFLOW",
        failure_code = FailureCode::DlqOverflow.as_str(),
        pending,
        high_water,
        episode,
        "DLQ backlog above its high-water mark"
    );
    publish(store, audit, metrics, &record(episode)).await?;
    Ok(Some(episode))
}

/// Append a record from the audit outbox to the trail, then drop it from the outbox. A
/// `DLQ_OVERFLOW` record also emits its metric (at least once: the alarm pages on it).
pub async fn publish<S: AuditOutbox, A: AuditLog, M: Metrics>(
    outbox: &S,
    audit: &A,
    metrics: &M,
    record: &AuditRecord,
) -> StoreResult<()> {
    audit.append(record).await?;
    overflow_metrics(metrics, std::slice::from_ref(record));
    outbox.record_written(&record.audit_id).await
}

/// [`publish`] of several records: appended together ([`AuditLog::append_many`]: on DynamoDB one
/// transaction instead of one each), then dropped from the outbox together. When they cannot be
/// appended together, each is published on its own, so that one record the trail refuses leaves
/// only itself in the outbox; the first error is returned.
pub async fn publish_many<S: AuditOutbox, A: AuditLog, M: Metrics>(
    outbox: &S,
    audit: &A,
    metrics: &M,
    records: &[AuditRecord],
) -> StoreResult<()> {
    if records.is_empty() {
        return Ok(());
    }
    if let Err(together) = audit.append_many(records).await {
        tracing::warn!(error = %together, records = records.len(), "audit records published one by one");
        let mut first = None;
        for r in records {
            if let Err(e) = publish(outbox, audit, metrics, r).await {
                first.get_or_insert(e);
            }
        }
        return first.map_or(Ok(()), Err);
    }
    overflow_metrics(metrics, records);
    let ids: Vec<String> = records.iter().map(|r| r.audit_id.clone()).collect();
    outbox.records_written(&ids).await
}

fn overflow_metrics<M: Metrics>(metrics: &M, records: &[AuditRecord]) {
    for _ in records.iter().filter(|r| r.kind == AuditKind::DlqOverflow) {
        metrics.emit(&Metric {
            name: "DlqOverflow",
            value: 1,
            unit: "Count",
            dimensions: vec![],
        });
    }
}

/// Publish what the outbox still holds: the records of decisions whose own publication failed
/// or never ran (the invocation died after the state change). Returns how many.
pub async fn drain_outbox<S: AuditOutbox, A: AuditLog, M: Metrics>(
    outbox: &S,
    audit: &A,
    metrics: &M,
) -> StoreResult<usize> {
    let mut published = 0;
    // Pages of 100; a bounded number per call (the next drain takes the rest).
    for _ in 0..100 {
        let records = outbox.pending_records(100).await?;
        if records.is_empty() {
            break;
        }
        publish_many(outbox, audit, metrics, &records).await?;
        for r in &records {
            tracing::warn!(audit_id = %r.audit_id, "audit record published from the outbox");
        }
        published += records.len();
    }
    Ok(published)
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
