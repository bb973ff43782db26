//! The enrich flow: one SQS batch from the DLQ in, a partial-batch response out. Every dead
//! letter becomes exactly one `DlqEnvelope` (deterministic id, conditional put) with a WORM copy
//! in the Object Lock bucket; unidentifiable payloads go straight to `QUARANTINED` with their
//! bytes in the bucket; bodies too large for a DynamoDB item live in the bucket and are
//! referenced from the envelope. A DLQ message is acknowledged only when its envelope, its WORM
//! copy and its audit record all exist.
//!
//! The count of PENDING envelopes is kept exact by the store; when it crosses the high-water mark
//! one `DLQ_OVERFLOW` audit record and metric are emitted per crossing (not per message).

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::{BatchHandler, BatchReport, Outcome};
use crate::domain::{
    AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, WormRef, envelope::SQS_REDRIVE, envelope_from_dlq_message,
    hash::sha256_hex,
};
use crate::envelopes::{check_overflow, envelope_audit};
use crate::ports::{
    AuditLog, AuditOutbox, Backlog, Clock, CreateOutcome, Deadline, EnvelopeStore, FlowError, FlowResult, Metric,
    Metrics, RecordsOfPeriod, Worm,
};
use crate::resources::{DEFAULT_BATCH_CONCURRENCY, DEFAULT_OVERFLOW_HIGH_WATER, INLINE_BODY_LIMIT};

#[derive(Clone, Debug)]
pub struct EnricherConfig {
    /// Name recorded as the actor (the function name).
    pub actor: String,
    /// PENDING envelopes above this raise `DLQ_OVERFLOW`.
    pub overflow_high_water: i64,
    pub concurrency: usize,
    pub deadline_margin: Duration,
    /// Whose `dlq.*` (the consumer's) and `replay.*` (the replay's, the control plane's)
    /// attributes it believes: a dead letter anyone else sent reads as a bare redrive.
    pub trust: crate::domain::sqs::Trust,
}

impl Default for EnricherConfig {
    fn default() -> Self {
        EnricherConfig {
            actor: "enricher".into(),
            overflow_high_water: DEFAULT_OVERFLOW_HIGH_WATER,
            concurrency: DEFAULT_BATCH_CONCURRENCY,
            deadline_margin: Duration::from_secs(3),
            trust: crate::domain::sqs::Trust::local(),
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

impl Outcome for EnrichOutcome {
    fn acknowledged(&self) -> bool {
        !matches!(self, EnrichOutcome::Failed { .. })
    }
    fn name(&self) -> &'static str {
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

impl<S: EnvelopeStore + Backlog + AuditOutbox, W: Worm, A: AuditLog + RecordsOfPeriod, M: Metrics>
    Enricher<S, W, A, M>
{
    pub async fn handle_batch(&self, event: &SqsEvent, deadline: Option<DateTime<Utc>>) -> BatchReport<EnrichOutcome> {
        let deadline = deadline.map(|d| Deadline::at(&*self.clock, d));
        let outcomes: Vec<EnrichOutcome> = futures::stream::iter(&event.records)
            .map(|m| async move {
                if deadline.is_some_and(|d| d.within(&*self.clock, self.config.deadline_margin)) {
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
        BatchReport::new(event, outcomes)
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

    async fn enrich(&self, m: &SqsMessage) -> Result<EnrichOutcome, FlowError> {
        let now = self.clock.now();
        let m = &*self.config.trust.believed(m);
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

        if stored.dead_lettered_by != SQS_REDRIVE {
            self.record_dead_letter(&stored).await?;
        }
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

    /// The consumer's `DEAD_LETTERED` record of a dead letter it sent, when the trail lacks it:
    /// its own write did not land (an error after the DLQ send, then a crash or SQS's redrive
    /// before another delivery wrote it), or has not landed yet. Rebuilt from the envelope under
    /// the consumer's own id and actor, so the trail holds every dead-lettering decision: one
    /// read per delivery of a dead letter, a write only when missing (the detail says who wrote
    /// it; appends are idempotent on the id, so the consumer's write landing later changes
    /// nothing).
    async fn record_dead_letter(&self, e: &DlqEnvelope) -> FlowResult<()> {
        let audit_id = AuditRecord::id_for(AuditKind::DeadLettered, &e.original.source_message_id);
        if self.audit.record(&audit_id).await?.is_some() {
            return Ok(());
        }
        let mut r = envelope_audit(
            e,
            AuditKind::DeadLettered,
            &e.dead_lettered_by,
            format!(
                "{} (recorded by {}, which found the consumer's own record missing)",
                e.error_detail, self.config.actor
            ),
        );
        r.audit_id = audit_id;
        r.at = e.dead_lettered_at;
        r.replay_of = e.replay_of().map(str::to_owned);
        self.audit.append(&r).await?;
        tracing::warn!(audit_id = %r.audit_id, envelope_id = %e.envelope_id, "the consumer's DEAD_LETTERED record was missing: written from the envelope");
        Ok(())
    }
}

impl<S: EnvelopeStore + Backlog + AuditOutbox, W: Worm, A: AuditLog + RecordsOfPeriod, M: Metrics> BatchHandler
    for Enricher<S, W, A, M>
{
    type Outcome = EnrichOutcome;
    async fn handle(&self, event: &SqsEvent, deadline: Option<DateTime<Utc>>) -> BatchReport<EnrichOutcome> {
        self.handle_batch(event, deadline).await
    }
}
