//! Settling an envelope under a replay's claim: the claim itself (conditional, with a lease),
//! then exactly one of suppressed as a duplicate, quarantined (with the decision in the WORM
//! bucket), or released back to PENDING. A settlement writes its provenance record and, in the
//! same write, its audit record into the outbox; the record is then published to the trail (or
//! by the next replay's drain, if this one fails or dies first).

use chrono::{DateTime, Utc};

use super::ReplayPorts;
use super::gates::{Gate, ReadAhead, Verdict};
use super::report::{ReplayItem, ReplayOutcome, item};
use super::{Replayer, Run};
use crate::domain::edit::EDIT_CLAIM_PREFIX;
use crate::domain::hash::sha256_hex;
use crate::domain::{
    AuditKind, AuditRecord, CommitOutcome, CommittedRef, DlqEnvelope, EnvelopeStatus, FailureCode, HandOff,
    ReplayClaim, ReplayRecord, StatusChange, TxKey,
};
use crate::envelopes::{envelope_audit, publish, publish_many};
use crate::ports::{AuditLog, EnvelopeStore, Finish, FlowResult, Ledger, Settled, StoreError, Worm};

const CLAIM_LOST: &str = "claim lost before the outcome was recorded";
pub(super) const NOT_CLAIMED: &str = "claimed by another replay, or no longer pending";

/// How a claimed envelope leaves REPLAYING.
pub(super) struct Settlement<'a> {
    pub status: EnvelopeStatus,
    pub reason: String,
    pub manual_journal: bool,
    /// The SQS message id of the re-injected copy.
    pub copy: Option<String>,
    /// The copy's transaction, when an edit made it another than the envelope's.
    pub copy_tx: Option<TxKey>,
    /// The decision's audit record (none for a release back to PENDING).
    pub audit: Option<&'a AuditRecord>,
    /// A release whose hand-off waits for a request in doubt ([`CommitOutcome::InDoubt`]).
    pub in_doubt_until: Option<DateTime<Utc>>,
}

impl<'a> Settlement<'a> {
    /// Back to PENDING, nothing decided.
    pub fn release(reason: String) -> Self {
        Settlement {
            status: EnvelopeStatus::Pending,
            reason,
            manual_journal: false,
            copy: None,
            copy_tx: None,
            audit: None,
            in_doubt_until: None,
        }
    }

    /// A decision, with its audit record.
    pub fn decided(status: EnvelopeStatus, reason: String, audit: &'a AuditRecord) -> Self {
        Settlement {
            status,
            audit: Some(audit),
            ..Self::release(reason)
        }
    }
}

impl<P: ReplayPorts> Replayer<P> {
    /// Apply a verdict other than re-injection.
    pub(super) async fn settle(&self, run: &Run<'_>, e: &DlqEnvelope, verdict: Verdict) -> FlowResult<ReplayItem> {
        if let Verdict::StillFailing { gate, detail } = &verdict {
            // Nothing changes, unless a crashed replay left it REPLAYING: take it back to PENDING.
            if e.status == EnvelopeStatus::Replaying && self.claim(run, e, false).await? {
                self.finish(run, e, Settlement::release(format!("still failing: {detail}")))
                    .await?;
            }
            return Ok(item(e, ReplayOutcome::StillFailing, Some(*gate), detail.clone()));
        }
        // A quarantine for a manual journal claims with its intent: one write, the fence.
        let intent = matches!(
            verdict,
            Verdict::Quarantine {
                manual_journal: true,
                ..
            }
        );
        if !self.claim(run, e, intent).await? {
            return Ok(item(e, ReplayOutcome::Skipped, None, NOT_CLAIMED));
        }
        match verdict {
            Verdict::Duplicate { committed_by } => self.settle_claimed_duplicate(run, e, &committed_by).await,
            Verdict::Quarantine {
                gate,
                detail,
                manual_journal,
            } => self.quarantine(run, e, gate, &detail, manual_journal, intent).await,
            Verdict::Reinject | Verdict::StillFailing { .. } => {
                // Not reached: re-injection is batched, still-failing returned above.
                self.finish(run, e, Settlement::release("released".into())).await?;
                Ok(item(e, ReplayOutcome::Skipped, None, "released"))
            }
        }
    }

    /// Claimed, and its transaction turned out committed (or handed to a manual journal by
    /// another envelope): suppress it, never re-inject. `committed_by` is the ledger's holder.
    pub(super) async fn settle_claimed_duplicate(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        committed_by: &str,
    ) -> FlowResult<ReplayItem> {
        let detail = format!("already committed by {committed_by}: not re-injected");
        let code = Some(FailureCode::ReplayDuplicate);
        let record = self.audit_record(run, e, AuditKind::ReplaySuppressed, code, detail.clone());
        let settled = Settlement::decided(EnvelopeStatus::SuppressedDuplicate, detail.clone(), &record);
        let done = item(e, ReplayOutcome::SuppressedDuplicate, Some(Gate::Idempotency), detail);
        self.conclude(run, e, settled, done).await
    }

    /// Finish `e` as `s` says and publish its record: `done`, or skipped when the claim was lost.
    async fn conclude(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        s: Settlement<'_>,
        done: ReplayItem,
    ) -> FlowResult<ReplayItem> {
        let record = s.audit;
        if !self.finish(run, e, s).await? {
            return Ok(item(e, ReplayOutcome::Skipped, None, CLAIM_LOST));
        }
        if let Some(record) = record {
            self.publish(record).await;
        }
        Ok(done)
    }

    /// Quarantine a claimed envelope. Before flagging it for a manual journal, the ledger is asked
    /// again, under the claim: a transaction committed meanwhile (by another message, a copy, an
    /// earlier write whose caller saw an error) is suppressed instead, never booked twice by hand.
    /// `intent_written`: it was claimed with the intent to hand it off (its claim's change says so).
    pub(super) async fn quarantine(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        gate: Gate,
        detail: &str,
        manual_journal: bool,
        intent_written: bool,
    ) -> FlowResult<ReplayItem> {
        if manual_journal {
            // The intent first, under the claim: from here on no other replay undoes this
            // hand-off (one that takes the claim over finishes it), and a replay that stalled
            // past its lease (an operator's suspended laptop) stops here, before the ledger.
            if !intent_written && !self.intend_hand_off(run, e).await? {
                return Ok(item(e, ReplayOutcome::Skipped, None, CLAIM_LOST));
            }
            let instead = match self.identified_transaction(e).await? {
                Some(key) => self.hand_off(run, e, key, gate, "").await?,
                // Not identified by its body: no hand-off, but a transaction committed under
                // the hash it claims is not booked again by hand.
                None => match self.committed(e, &ReadAhead::default()).await? {
                    Some(c) => Some(self.settle_claimed_duplicate(run, e, &c.holder()).await?),
                    None => None,
                },
            };
            if let Some(it) = instead {
                return Ok(it);
            }
        }
        // The quarantine decision itself goes to the WORM bucket next to the envelope's copy.
        let doc = serde_json::json!({
            "schema": "recon-dlq/quarantine/v1",
            "envelope_id": e.envelope_id,
            "source_hash": e.source_hash,
            "gate": gate,
            "reason": detail,
            "manual_journal": manual_journal,
            "replay_id": run.replay_id,
            "triggered_by": run.req.triggered_by,
            "at": self.clock.now(),
            "envelope_worm_key": e.worm.as_ref().map(|w| w.key.clone()),
        })
        .to_string();
        let key = format!("quarantine/{}/{}.json", e.envelope_id, sha256_hex(doc.as_bytes()));
        self.worm.put(&key, doc.as_bytes()).await?;
        let reason = format!(
            "quarantined by the {gate:?} gate: {detail}; WORM s3://{}/{key}",
            self.worm.bucket()
        );
        let record = self.audit_record(run, e, AuditKind::Quarantined, None, reason.clone());
        let settled = Settlement {
            manual_journal,
            ..Settlement::decided(EnvelopeStatus::Quarantined, reason, &record)
        };
        let done = item(e, ReplayOutcome::Quarantined, Some(gate), detail);
        self.conclude(run, e, settled, done).await
    }

    /// Hand `source_hash` off to a manual journal in the ledger, under the claim on `e`
    /// (`what`: which transaction, for an error). `None`: handed off (by `e`, now or before);
    /// else what `e` settled as instead: a duplicate when a posting holds the transaction, back
    /// to PENDING when a request in doubt may still be applied.
    pub(super) async fn hand_off(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        key: TxKey,
        gate: Gate,
        what: &str,
    ) -> FlowResult<Option<ReplayItem>> {
        let hand_off = HandOff {
            source_hash: key.source_hash,
            period: key.period,
            envelope_id: e.envelope_id.clone(),
            replay_id: run.replay_id.clone(),
            handed_off_at: self.clock.now(),
        };
        match self.ledger.hand_off(&hand_off).await? {
            CommitOutcome::Committed => Ok(None),
            CommitOutcome::AlreadyCommitted(c) if c.handed_off_by(&e.envelope_id) => Ok(None),
            CommitOutcome::AlreadyCommitted(c) => Ok(Some(self.settle_claimed_duplicate(run, e, &c.holder()).await?)),
            // Its hand-off must wait until `until`: back to PENDING, nothing decided, no replay
            // claims it before.
            CommitOutcome::InDoubt { until } => {
                let detail = format!(
                    "the hand-off waits until {until}: a request to the general ledger may still be applied (it cannot void a key)"
                );
                let done = item(e, ReplayOutcome::StillFailing, Some(gate), detail.clone());
                let settled = Settlement {
                    in_doubt_until: Some(until),
                    ..Settlement::release(detail)
                };
                Ok(Some(self.conclude(run, e, settled, done).await?))
            }
            // Without its hand-off in the ledger a manual journal could be booked beside a later
            // posting: no quarantine for a manual journal then.
            CommitOutcome::Refused { rule, detail } => {
                Err(StoreError::infra(format!("the ledger refused the hand-off{what} ({rule}): {detail}")).into())
            }
        }
    }

    /// Record under this run's live claim that it hands the transaction off (and extend the
    /// lease for it): `false` when the claim is gone or its lease ended.
    async fn intend_hand_off(&self, run: &Run<'_>, e: &DlqEnvelope) -> FlowResult<bool> {
        let now = self.clock.now();
        let reason = format!("handing the transaction to a manual journal (replay {})", run.replay_id);
        let change = run.change(EnvelopeStatus::Replaying, now, reason, true);
        self.store
            .renew(&e.envelope_id, &run.replay_id, now, now + self.config.lease, &change)
            .await
    }

    /// Is the envelope's transaction committed (or handed to a manual journal)? Answered from
    /// `ahead` when it read this transaction. Its ledger key: the hash its body decodes to, else
    /// the hash it claims; none for a raw digest (an unidentified message is never in the ledger).
    pub(super) async fn committed(&self, e: &DlqEnvelope, ahead: &ReadAhead) -> FlowResult<Option<CommittedRef>> {
        let key = self.identified_transaction(e).await?;
        match key.or_else(|| e.claimed_hash().map(TxKey::hash_only)) {
            Some(key) => Ok(ahead.lookup(&self.ledger, &key).await?),
            None => Ok(None),
        }
    }

    /// Append a decision's record to the trail and drop it from the outbox. The decision is made
    /// and its record is safe in the outbox: if this fails, the next replay's drain publishes it.
    pub(super) async fn publish(&self, record: &AuditRecord) {
        if let Err(e) = publish(&self.store, &self.audit, &self.metrics, record).await {
            tracing::warn!(audit_id = %record.audit_id, error = %e, "audit record left in the outbox for the next replay");
        }
    }

    /// [`Self::publish`] of several decisions' records at once.
    pub(super) async fn publish_all(&self, records: &[AuditRecord]) {
        if let Err(e) = publish_many(&self.store, &self.audit, &self.metrics, records).await {
            tracing::warn!(records = records.len(), error = %e, "audit records left in the outbox for the next replay");
        }
    }

    /// Claim `e` for this run (from PENDING, or from an expired lease). `false`: not ours. Its
    /// change is flagged for a manual journal when `intent`: the claim is then the hand-off's
    /// intent too (one write), which a replay taking it over finishes.
    pub(super) async fn claim(&self, run: &Run<'_>, e: &DlqEnvelope, intent: bool) -> FlowResult<bool> {
        if self.held_by_edit(run, e) {
            return Ok(false);
        }
        let now = self.clock.now();
        let (claim, change) = self.claim_for(run, now, intent);
        // Only as `e` was read: the verdict (and a pinned set's fingerprint) is about that state.
        self.store
            .claim(&e.envelope_id, &claim, now, &change, Some(e.status_history.len()))
            .await
    }

    /// [`Replayer::claim`] of several envelopes, in as few store writes as it allows: one answer
    /// per envelope, in order.
    pub(super) async fn claim_many(&self, run: &Run<'_>, envelopes: &[DlqEnvelope]) -> Vec<FlowResult<bool>> {
        let now = self.clock.now();
        let (claim, change) = self.claim_for(run, now, false);
        let asked: Vec<&DlqEnvelope> = envelopes.iter().filter(|e| !self.held_by_edit(run, e)).collect();
        let mut answers = self.store.claim_many(&asked, &claim, now, &change).await.into_iter();
        envelopes
            .iter()
            .map(|e| match self.held_by_edit(run, e) {
                true => Ok(false),
                false => answers.next().unwrap_or(Ok(false)),
            })
            .collect()
    }

    /// An approved edit's claim is taken over only by that edit's own execution (resumed): the
    /// original may be handed off already, its edited copy on its way.
    fn held_by_edit(&self, run: &Run<'_>, e: &DlqEnvelope) -> bool {
        e.status == EnvelopeStatus::Replaying
            && e.replay
                .as_ref()
                .is_some_and(|c| c.replay_id.starts_with(EDIT_CLAIM_PREFIX) && c.replay_id != run.replay_id)
    }

    fn claim_for(&self, run: &Run<'_>, now: DateTime<Utc>, intent: bool) -> (ReplayClaim, StatusChange) {
        let claim = ReplayClaim {
            replay_id: run.replay_id.clone(),
            triggered_by: run.req.triggered_by.clone(),
            reason: run.req.reason.clone(),
            claimed_at: now,
            lease_until: now + self.config.lease,
        };
        // A quarantine for a manual journal (an operator's, by hand or an approved request's)
        // claims with its decision (`intent`): a replay that takes the claim over (this one
        // crashed, or stalled past the lease) finishes it, never re-injects what was decided
        // for a manual journal.
        let reason = format!("claimed by replay {} ({})", run.replay_id, run.req.reason);
        (claim, run.change(EnvelopeStatus::Replaying, now, reason, intent))
    }

    /// Finish a claimed envelope as `s` says, with its provenance record (and its audit record
    /// in the outbox). `false`: the claim was lost.
    pub(super) async fn finish(&self, run: &Run<'_>, e: &DlqEnvelope, s: Settlement<'_>) -> FlowResult<bool> {
        let audit = s.audit;
        let (change, record) = self.settled(run, s);
        self.store
            .finish(&e.envelope_id, &run.replay_id, &change, &record, audit)
            .await
    }

    /// [`Replayer::finish`] of several claimed envelopes, in as few store writes as it allows: one
    /// answer per settlement, in order, with where its audit record went. Records the store
    /// linked into the trail are reported to the audit log (which seals as after its own).
    pub(super) async fn finish_many(
        &self,
        run: &Run<'_>,
        settlements: Vec<(&DlqEnvelope, Settlement<'_>)>,
    ) -> Vec<FlowResult<Settled>> {
        let written: Vec<_> = settlements
            .into_iter()
            .map(|(e, s)| (e, s.audit, self.settled(run, s)))
            .collect();
        let asked: Vec<Finish<'_>> = written
            .iter()
            .map(|(e, audit, (change, record))| Finish {
                envelope: e,
                change,
                record,
                audit: *audit,
            })
            .collect();
        let mut answers = self.store.finish_many(&run.replay_id, &asked).await;
        // One answer per settlement, whatever the store answered: a missing one is unknown.
        let answered = answers.len();
        answers.resize_with(asked.len(), || {
            Err(StoreError::infra(format!(
                "the envelope store answered {answered} of {} settlements",
                asked.len()
            ))
            .into())
        });
        let linked: Vec<u64> = answers
            .iter()
            .filter_map(|a| match a {
                Ok(Settled::InTrail(seq)) => Some(*seq),
                _ => None,
            })
            .collect();
        if !linked.is_empty() {
            self.audit.linked_elsewhere(&linked).await;
        }
        answers
    }

    /// The status change and provenance record a settlement writes.
    fn settled(&self, run: &Run<'_>, s: Settlement<'_>) -> (StatusChange, ReplayRecord) {
        let now = self.clock.now();
        let change = run.change(s.status, now, s.reason, s.manual_journal);
        let record = ReplayRecord {
            replay_id: run.replay_id.clone(),
            triggered_by: run.req.triggered_by.clone(),
            reason: run.req.reason.clone(),
            at: now,
            outcome: s.status,
            sqs_message_id: s.copy,
            copy_source_hash: s.copy_tx.as_ref().map(|k| k.source_hash.clone()),
            copy_period: s.copy_tx.and_then(|k| k.period),
            in_doubt_until: s.in_doubt_until,
        };
        (change, record)
    }

    pub(super) fn audit_record(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        kind: AuditKind,
        code: Option<FailureCode>,
        detail: String,
    ) -> AuditRecord {
        let mut r = envelope_audit(e, kind, &run.req.actor(), detail);
        r.audit_id = AuditRecord::replay_id_for(kind, &e.envelope_id, &run.replay_id);
        r.at = self.clock.now();
        r.failure_code = code.or(r.failure_code);
        r
    }
}
