//! The consume flow: one SQS batch from the main queue in, a partial-batch response out.
//!
//! Per message: decode -> validate -> commit. Every message ends in exactly one disposition:
//!
//! | disposition               | acknowledged? | durable evidence                      |
//! |---------------------------|---------------|---------------------------------------|
//! | `Committed`               | yes           | the ledger posting                    |
//! | `RedeliveryAcknowledged`  | yes           | the posting of this same SQS message  |
//! | `DuplicateSuppressed`     | yes           | audit record `DUPLICATE_SUPPRESSED`   |
//! | `DeadLettered`            | yes           | the DLQ message + audit `DEAD_LETTERED`|
//! | `RetryScheduled`          | no (failed)   | the message itself, hidden for backoff|
//! | `Deferred` / `Failed`     | no (failed)   | the message itself                    |
//!
//! A message is acknowledged only after its durable evidence is written; if writing it fails,
//! the message is reported failed and SQS delivers it again. One bad body never fails the batch,
//! and the handler never panics on input.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::{BatchHandler, BatchReport, Outcome};
use crate::decisions::{FailureDecision, RetryPolicy, decide_failure};
use crate::domain::{
    AuditKind, AuditRecord, CommitOutcome, DeadLetter, DeadLetterContext, FailureCode, Posting, ProcessError,
    RootCause, TransientKind, attrs, bounded_detail, labels, sqs, validate,
};
use crate::ports::{AuditLog, Clock, DeadLetterQueue, Deadline, Ledger, ReferenceData, WorkQueue};

/// Consumer settings (see `config` for where they come from).
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    pub retry: RetryPolicy,
    /// Stop starting new messages when less than this is left before the invocation deadline.
    pub deadline_margin: Duration,
    /// Message groups processed at once within a batch.
    pub concurrency: usize,
    /// Name recorded as the actor of decisions (the function name).
    pub actor: String,
    /// Whose `replay.*` attributes it believes (a producer's are dropped: a message is no
    /// replay's copy because its sender says so).
    pub trust: crate::domain::sqs::Trust,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            retry: RetryPolicy::default(),
            deadline_margin: Duration::from_secs(3),
            concurrency: crate::resources::DEFAULT_BATCH_CONCURRENCY,
            actor: "consumer".into(),
            trust: crate::domain::sqs::Trust::local(),
        }
    }
}

/// Why a message was handed back to SQS untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeferReason {
    /// Too little time left in the invocation.
    Deadline,
    /// An earlier message of the same FIFO group was not acknowledged.
    GroupBlocked,
}

/// What happened to one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    Committed,
    /// The transaction was already committed by another SQS message (`committed_by`), or handed
    /// to a manual journal (`committed_by` empty).
    DuplicateSuppressed {
        committed_by: String,
    },
    /// This very SQS message was committed before (crash after commit, before the ack).
    RedeliveryAcknowledged,
    DeadLettered {
        code: FailureCode,
        cause: RootCause,
    },
    RetryScheduled {
        delay_secs: u32,
        kind: TransientKind,
    },
    Deferred(DeferReason),
    /// The evidence could not be written (DLQ or audit unavailable): SQS will redeliver.
    Failed {
        detail: String,
    },
}

impl Outcome for Disposition {
    fn acknowledged(&self) -> bool {
        matches!(
            self,
            Disposition::Committed
                | Disposition::DuplicateSuppressed { .. }
                | Disposition::RedeliveryAcknowledged
                | Disposition::DeadLettered { .. }
        )
    }

    fn name(&self) -> &'static str {
        match self {
            Disposition::Committed => "COMMITTED",
            Disposition::DuplicateSuppressed { .. } => "DUPLICATE_SUPPRESSED",
            Disposition::RedeliveryAcknowledged => "REDELIVERY_ACKNOWLEDGED",
            Disposition::DeadLettered { .. } => "DEAD_LETTERED",
            Disposition::RetryScheduled { .. } => "RETRY_SCHEDULED",
            Disposition::Deferred(DeferReason::Deadline) => "DEFERRED_DEADLINE",
            Disposition::Deferred(DeferReason::GroupBlocked) => "DEFERRED_GROUP_BLOCKED",
            Disposition::Failed { .. } => "FAILED",
        }
    }
}

pub struct Consumer<L, Q, D, R, A> {
    pub ledger: L,
    pub queue: Q,
    pub dlq: D,
    pub reference: R,
    pub audit: A,
    pub clock: Arc<dyn Clock>,
    pub config: ConsumerConfig,
}

impl<L, Q, D, R, A> Consumer<L, Q, D, R, A>
where
    L: Ledger,
    Q: WorkQueue,
    D: DeadLetterQueue,
    R: ReferenceData,
    A: AuditLog,
{
    /// Handle one Lambda invocation. `deadline` is when the invocation times out (from the
    /// Lambda context); messages not started before `deadline - margin` are reported failed.
    pub async fn handle_batch(&self, event: &SqsEvent, deadline: Option<DateTime<Utc>>) -> BatchReport<Disposition> {
        let deadline = deadline.map(|d| Deadline::at(&*self.clock, d));
        // Group by FIFO message group, keeping batch order inside each group. On a standard
        // queue every message is its own group.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, m) in event.records.iter().enumerate() {
            let group = m.attributes.get("MessageGroupId").map(String::as_str);
            match group.and_then(|g| group_index.get(g)) {
                Some(&gi) => groups[gi].push(i),
                None => {
                    group_index.extend(group.map(|g| (g, groups.len())));
                    groups.push(vec![i]);
                }
            }
        }

        // Every message is in exactly one group: sorted by index, one disposition each.
        let mut dispositions: Vec<(usize, Disposition)> = futures::stream::iter(groups)
            .map(|group| self.handle_group(event, group, deadline))
            .buffer_unordered(self.config.concurrency.max(1))
            .flat_map(futures::stream::iter)
            .collect()
            .await;
        dispositions.sort_by_key(|(i, _)| *i);
        BatchReport::new(event, dispositions.into_iter().map(|(_, d)| d).collect())
    }

    async fn handle_group(
        &self,
        event: &SqsEvent,
        group: Vec<usize>,
        deadline: Option<Deadline>,
    ) -> Vec<(usize, Disposition)> {
        let mut out = Vec::with_capacity(group.len());
        let mut blocked = false;
        for i in group {
            let d = if blocked {
                Disposition::Deferred(DeferReason::GroupBlocked)
            } else if deadline.is_some_and(|d| d.within(&*self.clock, self.config.deadline_margin)) {
                Disposition::Deferred(DeferReason::Deadline)
            } else {
                self.handle_message(&event.records[i]).await
            };
            blocked |= !d.acknowledged();
            if let Disposition::Deferred(_) = d {
                let left_ms = deadline.map_or(-1, |dl| {
                    i64::try_from(dl.remaining(&*self.clock).as_millis()).unwrap_or(i64::MAX)
                });
                tracing::info!(
                    decision = d.name(),
                    sqs_message_id = event.records[i].message_id.as_deref().unwrap_or(""),
                    deadline_in_ms = left_ms,
                    "message handed back to SQS unprocessed"
                );
            }
            out.push((i, d));
        }
        out
    }

    /// Decide one message and carry the decision out.
    pub async fn handle_message(&self, m: &SqsMessage) -> Disposition {
        // What its sender may not say is dropped before anything reads it (its dead letter
        // carries the message as believed).
        let m = &*self.config.trust.believed(m);
        let attempt = sqs::receive_count(m);
        let sqs_id = m.message_id.as_deref().unwrap_or("");
        let body = m.body.as_deref().unwrap_or("");
        let replay_of = sqs::string_attr(m, attrs::REPLAY_OF).map(str::to_owned);

        let committed =
            async {
                let reference = self.reference.snapshot().await?;
                let msg = match validate(body, &reference) {
                    // A failure on reference data may be a fix this container has not seen yet:
                    // look again with fresh data before dead-lettering.
                    Err(ProcessError::Poison {
                        cause:
                            RootCause::UnmappedCurrency(_)
                            | RootCause::ScaleExceedsCurrency(_)
                            | RootCause::ClosedPeriod { .. },
                        ..
                    }) => validate(body, &*self.reference.refresh().await?)?,
                    other => other?,
                };
                let posting = Posting::from_message(&msg, sqs_id, attempt, self.clock.now(), replay_of);
                // `None`: this delivery wrote it; else who holds the transaction.
                let held = match self.ledger.commit(&posting).await? {
                    CommitOutcome::Committed => None,
                    CommitOutcome::AlreadyCommitted(existing) => Some(existing),
                    CommitOutcome::Refused { rule, detail } => {
                        return Err(ProcessError::poison(RootCause::LedgerRefused(rule), detail));
                    }
                    // Only a hand-off waits so; a commit that did would be tried again.
                    CommitOutcome::InDoubt { until } => {
                        return Err(ProcessError::Transient {
                            kind: TransientKind::Conflict,
                            detail: format!("the transaction is in doubt until {until}"),
                        });
                    }
                };
                Ok::<_, ProcessError>((posting, held))
            }
            .await;

        match committed {
            Ok((posting, None)) => {
                log_posting("COMMITTED", &posting, attempt, None);
                Disposition::Committed
            }
            Ok((posting, Some(existing))) if existing.sqs_message_id == sqs_id => {
                log_posting("REDELIVERY_ACKNOWLEDGED", &posting, attempt, None);
                Disposition::RedeliveryAcknowledged
            }
            Ok((posting, Some(existing))) => {
                let record = AuditRecord {
                    audit_id: AuditRecord::id_for(AuditKind::DuplicateSuppressed, sqs_id),
                    kind: AuditKind::DuplicateSuppressed,
                    at: self.clock.now(),
                    actor: self.config.actor.clone(),
                    sqs_message_id: sqs_id.to_owned(),
                    message_id: Some(posting.message_id.clone()),
                    trace_id: Some(posting.trace_id.clone()),
                    source_hash: Some(posting.source_hash.clone()),
                    match_decision: Some(posting.match_decision.to_string()),
                    failure_code: Some(FailureCode::ReplayDuplicate),
                    root_cause: None,
                    attempt_count: attempt,
                    ledger_entity: Some(posting.ledger_entity.clone()),
                    currency: Some(posting.currency.clone()),
                    amount: Some(posting.amount.to_string()),
                    detail: format!("already committed by {}", existing.holder()),
                    replay_of: posting.replay_of.clone(),
                    period: Some(posting.period.clone()),
                };
                if let Err(e) = self.audit.append(&record).await {
                    return self.failed(sqs_id, format!("duplicate not acknowledged: audit write failed: {e}"));
                }
                log_posting(
                    "DUPLICATE_SUPPRESSED",
                    &posting,
                    attempt,
                    Some(FailureCode::ReplayDuplicate),
                );
                Disposition::DuplicateSuppressed {
                    committed_by: existing.sqs_message_id,
                }
            }
            Err(err) => match decide_failure(err, attempt, &self.config.retry, sqs_id) {
                FailureDecision::DeadLetter { code, cause, detail } => {
                    self.dead_letter(m, code, cause, &detail, attempt).await
                }
                FailureDecision::Retry {
                    delay_secs,
                    kind,
                    detail,
                } => {
                    let l = labels(body);
                    let receipt = m.receipt_handle.as_deref().unwrap_or("");
                    if let Err(e) = self.queue.change_visibility(receipt, delay_secs).await {
                        // Not fatal: the message comes back after the queue's own visibility timeout.
                        tracing::warn!(sqs_message_id = sqs_id, error = %e, "could not set the backoff visibility");
                    }
                    tracing::warn!(
                        decision = "RETRY_SCHEDULED",
                        trace_id = l.trace_id.as_deref().unwrap_or(""),
                        source_hash = l.source_hash.as_deref().unwrap_or(""),
                        match_decision = l.match_decision.as_deref().unwrap_or(""),
                        transient_kind = kind.as_str(),
                        attempt_count = attempt,
                        max_attempts = self.config.retry.max_attempts,
                        delay_secs,
                        sqs_message_id = sqs_id,
                        error = bounded_detail(&detail),
                        "transient failure; retry scheduled"
                    );
                    Disposition::RetryScheduled { delay_secs, kind }
                }
            },
        }
    }

    fn failed(&self, sqs_id: &str, detail: String) -> Disposition {
        tracing::error!(decision = "FAILED", sqs_message_id = sqs_id, error = %detail, "message left for redelivery");
        Disposition::Failed { detail }
    }

    async fn dead_letter(
        &self,
        m: &SqsMessage,
        code: FailureCode,
        cause: RootCause,
        detail: &str,
        attempt: u32,
    ) -> Disposition {
        let sqs_id = m.message_id.as_deref().unwrap_or("");
        let body = m.body.clone().unwrap_or_default();
        let l = labels(&body);
        let now = self.clock.now();
        let letter = DeadLetter {
            body,
            failure_code: code,
            root_cause: cause.clone(),
            attempt_count: attempt,
            context: DeadLetterContext {
                error_detail: bounded_detail(detail).to_owned(),
                dead_lettered_at: now,
                sent_at: sqs::epoch_millis_attr(m, "SentTimestamp"),
                first_received_at: sqs::epoch_millis_attr(m, "ApproximateFirstReceiveTimestamp"),
                source_queue_arn: m.event_source_arn.clone(),
                source_message_id: sqs_id.to_owned(),
                message_group_id: m.attributes.get("MessageGroupId").cloned(),
                trace_id: l.trace_id.clone(),
                aws_trace_header: m.attributes.get(sqs::AWS_TRACE_HEADER).cloned(),
                source_hash: l.source_hash.clone(),
                actor: self.config.actor.clone(),
                original_attributes: sqs::original_attributes(m),
            },
        };
        if let Err(e) = self.dlq.send(&letter).await {
            return self.failed(sqs_id, format!("dead letter not sent ({code}, {cause}): {e}"));
        }
        let record = AuditRecord {
            audit_id: AuditRecord::id_for(AuditKind::DeadLettered, sqs_id),
            kind: AuditKind::DeadLettered,
            at: now,
            actor: self.config.actor.clone(),
            sqs_message_id: sqs_id.to_owned(),
            message_id: l.message_id.clone(),
            trace_id: l.trace_id.clone(),
            // The idempotency anchor, or the digest of the raw body (as the envelope will name it).
            source_hash: l.source_hash.clone().or_else(|| {
                Some(format!(
                    "raw:{}",
                    crate::domain::hash::sha256_hex(letter.body.as_bytes())
                ))
            }),
            match_decision: l.match_decision.clone(),
            failure_code: Some(code),
            root_cause: Some(cause.to_string()),
            attempt_count: attempt,
            ledger_entity: l.ledger_entity.clone(),
            currency: l.currency.clone(),
            amount: l.amount.clone(),
            detail: bounded_detail(detail).to_owned(),
            replay_of: sqs::string_attr(m, attrs::REPLAY_OF).map(str::to_owned),
            period: l.period(),
        };
        if let Err(e) = self.audit.append(&record).await {
            // The dead letter is out; redelivery sends it again and the enricher's deterministic
            // envelope id folds the two together.
            return self.failed(sqs_id, format!("dead-lettered but audit write failed: {e}"));
        }
        tracing::warn!(
            decision = "DEAD_LETTERED",
            trace_id = l.trace_id.as_deref().unwrap_or(""),
            source_hash = l.source_hash.as_deref().unwrap_or(""),
            match_decision = l.match_decision.as_deref().unwrap_or(""),
            failure_code = code.as_str(),
            root_cause = %cause,
            attempt_count = attempt,
            sqs_message_id = sqs_id,
            error = bounded_detail(detail),
            "message dead-lettered"
        );
        Disposition::DeadLettered { code, cause }
    }
}

fn log_posting(decision: &'static str, p: &Posting, attempt: u32, code: Option<FailureCode>) {
    tracing::info!(
        decision,
        trace_id = %p.trace_id,
        source_hash = %p.source_hash,
        match_decision = p.match_decision.as_str(),
        failure_code = code.map_or("", FailureCode::as_str),
        attempt_count = attempt,
        sqs_message_id = %p.sqs_message_id,
        message_id = %p.message_id,
        ledger_entity = %p.ledger_entity,
        "ledger decision"
    );
}

impl<L, Q, D, R, A> BatchHandler for Consumer<L, Q, D, R, A>
where
    L: Ledger,
    Q: WorkQueue,
    D: DeadLetterQueue,
    R: ReferenceData,
    A: AuditLog,
{
    type Outcome = Disposition;
    async fn handle(&self, event: &SqsEvent, deadline: Option<DateTime<Utc>>) -> BatchReport<Disposition> {
        self.handle_batch(event, deadline).await
    }
}
