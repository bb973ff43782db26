//! The enrich flow: one SQS batch from the DLQ in, a partial-batch response out. Every dead
//! letter becomes exactly one `DlqEnvelope` (deterministic id, conditional put) with a WORM copy
//! in the Object Lock bucket; unidentifiable payloads go straight to `QUARANTINED` with their
//! bytes in the bucket; bodies too large for a DynamoDB item live in the bucket and are
//! referenced from the envelope. A DLQ message is acknowledged only when its envelope, its WORM
//! copy and its audit record all exist.
//!
//! The count of PENDING envelopes is kept exact by the store; when it crosses the high-water mark
//! one `DLQ_OVERFLOW` audit record and metric are emitted per crossing (not per message).

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::domain::{
    AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, FailureCode, WormRef, envelope::sha256_hex,
    envelope_from_dlq_message,
};
use crate::local::HandlerOutput;
use crate::ports::{AuditLog, Clock, CreateOutcome, EnvelopeStore, Metric, Metrics, StoreError, StoreResult, Worm};
use crate::resources::{DEFAULT_OVERFLOW_HIGH_WATER, INLINE_BODY_LIMIT};

#[derive(Clone, Debug)]
pub struct EnricherConfig {
    /// Name recorded as the actor (the function name).
    pub actor: String,
    /// PENDING envelopes above this raise `DLQ_OVERFLOW`.
    pub overflow_high_water: i64,
    pub concurrency: usize,
    pub deadline_margin: Duration,
}

impl Default for EnricherConfig {
    fn default() -> Self {
        EnricherConfig {
            actor: "enricher".into(),
            overflow_high_water: DEFAULT_OVERFLOW_HIGH_WATER,
            concurrency: 8,
            deadline_margin: Duration::from_secs(3),
        }
    }
}

/// What happened to one DLQ message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnrichOutcome {
    /// A new envelope (PENDING or QUARANTINED).
    Enriched {
        envelope_id: String,
        status: EnvelopeStatus,
    },
    /// Its envelope already existed (the DLQ message was delivered again); its WORM copy and
    /// audit record were made sure of.
    AlreadyEnriched { envelope_id: String },
    /// Handed back to SQS (too little time left, or a store failed).
    Failed { detail: String },
}

impl EnrichOutcome {
    pub fn acknowledged(&self) -> bool {
        !matches!(self, EnrichOutcome::Failed { .. })
    }
    pub fn name(&self) -> &'static str {
        match self {
            EnrichOutcome::Enriched {
                status: EnvelopeStatus::Quarantined,
                ..
            } => "QUARANTINED",
            EnrichOutcome::Enriched { .. } => "ENRICHED",
            EnrichOutcome::AlreadyEnriched { .. } => "ALREADY_ENRICHED",
            EnrichOutcome::Failed { .. } => "FAILED",
        }
    }
}

pub struct Enricher<S, W, A, M> {
    pub store: S,
    pub worm: W,
    pub audit: A,
    pub metrics: M,
    pub clock: Arc<dyn Clock>,
    pub config: EnricherConfig,
}

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
    }
}

/// Compare the PENDING count with the high-water mark and raise or clear `DLQ_OVERFLOW`. The
/// store's flag makes exactly one caller report each crossing. Returns the episode raised, if any.
pub async fn check_overflow<S: EnvelopeStore, A: AuditLog, M: Metrics>(
    store: &S,
    audit: &A,
    metrics: &M,
    high_water: i64,
    actor: &str,
    now: chrono::DateTime<chrono::Utc>,
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

impl<S: EnvelopeStore, W: Worm, A: AuditLog, M: Metrics> Enricher<S, W, A, M> {
    pub async fn handle_batch(&self, event: &SqsEvent, deadline: Option<SystemTime>) -> HandlerOutput {
        let outcomes: Vec<EnrichOutcome> = futures::stream::iter(&event.records)
            .map(|m| async move {
                let late = deadline.is_some_and(|d| {
                    d.duration_since(SystemTime::now())
                        .map_or(true, |left| left < self.config.deadline_margin)
                });
                if late {
                    EnrichOutcome::Failed {
                        detail: "too little time left in the invocation".into(),
                    }
                } else {
                    self.handle_message(m).await
                }
            })
            .buffered(self.config.concurrency.max(1))
            .collect()
            .await;
        let mut response = SqsBatchResponse::default();
        for (m, o) in event.records.iter().zip(&outcomes) {
            if !o.acknowledged() {
                let mut f = BatchItemFailure::default();
                f.item_identifier = m.message_id.clone().unwrap_or_default();
                response.batch_item_failures.push(f);
            }
        }
        HandlerOutput {
            response,
            outcomes: outcomes.iter().map(EnrichOutcome::name).collect(),
        }
    }

    pub async fn handle_message(&self, m: &SqsMessage) -> EnrichOutcome {
        match self.enrich(m).await {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(
                    decision = "ENRICH_FAILED",
                    dlq_message_id = m.message_id.as_deref().unwrap_or(""),
                    error = %e,
                    "dead letter left in the DLQ for another attempt"
                );
                EnrichOutcome::Failed { detail: e.to_string() }
            }
        }
    }

    async fn enrich(&self, m: &SqsMessage) -> Result<EnrichOutcome, StoreError> {
        let now = self.clock.now();
        let body = m.body.as_deref().unwrap_or("");
        let mut envelope = envelope_from_dlq_message(m, now, &self.config.actor);

        // The body bytes go to the bucket when the item cannot hold them, or when the payload
        // is quarantined (its bytes must be kept as they are).
        let large = body.len() > INLINE_BODY_LIMIT;
        if large || envelope.status == EnvelopeStatus::Quarantined {
            let key = envelope.payload_key();
            self.worm.put(&key, body.as_bytes()).await?;
            envelope.original.body_key = Some(key);
            if large {
                envelope.original.body = None;
            }
        }
        let (key, bytes) = envelope.worm_document(body);
        envelope.worm = Some(WormRef {
            bucket: self.worm.bucket().to_owned(),
            key,
            sha256: sha256_hex(&bytes),
        });

        let (stored, created) = match self.store.create(&envelope).await? {
            CreateOutcome::Created => (envelope, true),
            CreateOutcome::Exists(existing) => (*existing, false),
        };
        // The WORM copy is derived from the stored envelope, so every retry writes the same bytes
        // to the same key, whichever delivery created the envelope.
        let (key, bytes) = stored.worm_document(body);
        self.worm.put(&key, &bytes).await?;

        let kind = if stored.status == EnvelopeStatus::Quarantined {
            AuditKind::Quarantined
        } else {
            AuditKind::Enriched
        };
        let detail = format!(
            "envelope {} ({}); WORM s3://{}/{key}",
            stored.envelope_id,
            stored.status,
            self.worm.bucket()
        );
        self.audit
            .append(&envelope_audit(&stored, kind, &self.config.actor, detail))
            .await?;

        if !created {
            return Ok(EnrichOutcome::AlreadyEnriched {
                envelope_id: stored.envelope_id,
            });
        }
        self.metrics.emit(&Metric {
            name: "DeadLettered",
            value: 1,
            unit: "Count",
            dimensions: vec![("FailureCode", stored.failure_code.as_str().to_owned())],
        });
        tracing::warn!(
            decision = kind.as_str(),
            envelope_id = %stored.envelope_id,
            trace_id = stored.trace_id.as_deref().unwrap_or(""),
            source_hash = %stored.source_hash,
            match_decision = stored.match_decision.as_deref().unwrap_or(""),
            failure_code = stored.failure_code.as_str(),
            root_cause = %stored.root_cause,
            attempt_count = stored.attempt_count,
            status = stored.status.as_str(),
            "dead letter enriched"
        );
        if stored.status == EnvelopeStatus::Pending {
            check_overflow(
                &self.store,
                &self.audit,
                &self.metrics,
                self.config.overflow_high_water,
                &self.config.actor,
                now,
            )
            .await?;
        }
        Ok(EnrichOutcome::Enriched {
            envelope_id: stored.envelope_id,
            status: stored.status,
        })
    }
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

/// The enricher wired to AWS (or the local stack); metrics in EMF unless said otherwise.
pub type AwsEnricher<M = crate::telemetry::EmfMetrics> = Enricher<
    crate::adapters::aws::dynamodb::DynamoEnvelopeStore,
    crate::adapters::aws::s3::S3Worm,
    crate::adapters::aws::dynamodb::DynamoAuditLog,
    M,
>;

impl AwsEnricher {
    pub fn from_settings(
        clients: &crate::adapters::aws::AwsClients,
        s: &crate::config::EnricherSettings,
        actor: &str,
    ) -> Self {
        let metrics = crate::telemetry::EmfMetrics {
            namespace: s.metrics_namespace.clone(),
        };
        AwsEnricher::with_metrics(clients, s, actor, metrics)
    }
}

impl<M: Metrics> AwsEnricher<M> {
    pub fn with_metrics(
        clients: &crate::adapters::aws::AwsClients,
        s: &crate::config::EnricherSettings,
        actor: &str,
        metrics: M,
    ) -> Self {
        Enricher {
            store: crate::adapters::aws::dynamodb::DynamoEnvelopeStore::new(
                clients.dynamodb.clone(),
                &s.envelope_table,
            ),
            worm: crate::adapters::aws::s3::S3Worm::new(clients.s3.clone(), &s.quarantine_bucket),
            audit: crate::adapters::aws::dynamodb::DynamoAuditLog::new(clients.dynamodb.clone(), &s.audit_table),
            metrics,
            clock: Arc::new(crate::ports::SystemClock),
            config: EnricherConfig {
                actor: actor.to_owned(),
                overflow_high_water: s.overflow_high_water,
                concurrency: s.concurrency,
                deadline_margin: s.deadline_margin,
            },
        }
    }
}
