//! The envelope table, in four roles: the envelopes themselves (created once, then changed only
//! under a replay's claim, as `domain::status` allows), the sweep cursors, the backlog (the exact
//! PENDING count that `DLQ_OVERFLOW` watches, and the overflow flag), and the audit outbox.
//!
//! Every implementation checks `domain::status::check_initial` / `check_transition` before it
//! writes, and keeps the PENDING count in the same transaction as the status change.
//!
//! **Audit outbox**: a decision (an envelope settled by a replay, a crossing of the high-water
//! mark) writes its audit record into the outbox *in the same write* as the state change; the
//! flow then appends it to the trail and clears it. If the append fails or the invocation dies
//! first, the record waits in the outbox and the next sweep appends it: no decision without its
//! record.

use chrono::{DateTime, Utc};
use std::future::Future;

use super::{FlowResult, StoreResult};
use crate::domain::totals::{Totals, TotalsKey};
use crate::domain::{AuditRecord, DlqEnvelope, EnvelopeStatus, FailureCode, ReplayClaim, ReplayRecord, StatusChange};
use std::collections::BTreeMap;

/// What creating an envelope did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// An envelope with this id was already stored (a redelivered DLQ message): here it is.
    Exists(Box<DlqEnvelope>),
}

/// A page of envelopes and the opaque cursor of the next one.
pub type EnvelopePage = (Vec<DlqEnvelope>, Option<String>);

/// What one settlement of [`EnvelopeStore::finish_many`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Not settled: the claim was lost (the lease ran out and another replay took it over).
    ClaimLost,
    /// Settled; its audit record (if it has one) is in the outbox, for the caller to publish.
    InOutbox,
    /// Settled, and its audit record linked into the trail at this `seq` in the same write:
    /// nothing to publish.
    InTrail(u64),
}

impl Settled {
    /// What `finish`'s answer means: settled with the record in the outbox, or the claim lost.
    pub fn in_outbox(settled: bool) -> Self {
        if settled { Settled::InOutbox } else { Settled::ClaimLost }
    }
}

/// One envelope's settlement in [`EnvelopeStore::finish_many`]: what [`EnvelopeStore::finish`]
/// takes, and the envelope as read before its claim (its id, and its size for the store to group
/// writes by).
#[derive(Clone, Copy, Debug)]
pub struct Finish<'a> {
    pub envelope: &'a DlqEnvelope,
    pub change: &'a StatusChange,
    pub record: &'a ReplayRecord,
    pub audit: Option<&'a AuditRecord>,
}

port! {
    pub trait EnvelopeStore {
        /// Store a new envelope unless one with its id exists. Its status must be an initial one.
        fn create(&self, envelope: &DlqEnvelope) -> impl Future<Output = FlowResult<CreateOutcome>> + Send;
        fn get(&self, envelope_id: &str) -> impl Future<Output = StoreResult<Option<DlqEnvelope>>> + Send;
        /// Envelopes in `status`, oldest first, a page at a time.
        fn list_by_status(
            &self,
            status: EnvelopeStatus,
            cursor: Option<String>,
            limit: usize,
        ) -> impl Future<Output = StoreResult<EnvelopePage>> + Send;
        /// The cursor of [`EnvelopeStore::list_by_status`] (`group` none) or of
        /// [`EnvelopeStore::list_by_cause`] (its group) that goes on just after `e`, an envelope
        /// that list returned: a reader that stops inside a page starts its next one there.
        fn cursor_after(&self, e: &DlqEnvelope, group: Option<(FailureCode, &str)>) -> String;
        /// The envelopes of one group (failure code and exact root cause), of every status, oldest
        /// first, a page at a time: a group's page reads that group, not every envelope of a
        /// status. [`EnvelopeStore::cursor_after`] of `Some((code, cause))` goes on inside it.
        fn list_by_cause(
            &self,
            code: FailureCode,
            cause: &str,
            cursor: Option<String>,
            limit: usize,
        ) -> impl Future<Output = StoreResult<EnvelopePage>> + Send;
        /// Every envelope, a page at a time (no order).
        fn list_all(&self, cursor: Option<String>, limit: usize) -> impl Future<Output = StoreResult<EnvelopePage>> + Send;
        /// Claim an envelope for a replay: from PENDING, or from REPLAYING whose lease ended before
        /// `now` (a replay that crashed). Sets status REPLAYING and `claim`, appends `change`.
        /// `Ok(false)` when it is neither (another replay holds it, or it is settled).
        /// `seen`: the length of the status history the caller read, when the claim must fail if
        /// the envelope changed since (another replay claimed and released it: the caller's verdict,
        /// or an approval's fingerprint, is about a state that is gone).
        fn claim(
            &self,
            envelope_id: &str,
            claim: &ReplayClaim,
            now: DateTime<Utc>,
            change: &StatusChange,
            seen: Option<usize>,
        ) -> impl Future<Output = FlowResult<bool>> + Send;
        /// Under `replay_id`'s own claim (REPLAYING under it, its lease not ended at `now`): append
        /// `change` (a REPLAYING change: what the replay is about to do that no other may undo, its
        /// hand-off of the transaction to a manual journal) and extend the lease to `lease_until`.
        /// `Ok(false)` when the claim is not ours any more (taken over, settled) or its lease ended.
        /// The fence of a step another store takes: a replay that stalled past its lease finds out
        /// here, and one that takes the claim over later reads the change and finishes that step.
        fn renew(
            &self,
            envelope_id: &str,
            replay_id: &str,
            now: DateTime<Utc>,
            lease_until: DateTime<Utc>,
            change: &StatusChange,
        ) -> impl Future<Output = FlowResult<bool>> + Send;
        /// Settle a claimed envelope in `change.status`: only if it is REPLAYING under `replay_id`.
        /// Appends `change` and `record`, and puts `audit` (the decision's record) in the outbox, in
        /// the same write. `Ok(false)` when the claim was lost (lease expired and taken over).
        fn finish(
            &self,
            envelope_id: &str,
            replay_id: &str,
            change: &StatusChange,
            record: &ReplayRecord,
            audit: Option<&AuditRecord>,
        ) -> impl Future<Output = FlowResult<bool>> + Send;
        /// [`EnvelopeStore::claim`] of several envelopes under one claim, each only as it was read
        /// (`seen`: the length of its status history): one answer per envelope, in order, each what
        /// `claim` answers. DynamoDB: the claims (from PENDING, or taking over an expired lease) in
        /// as few transactions as its limits allow (all or nothing each: one refused for an envelope
        /// is sent again without it, which is then claimed on its own).
        fn claim_many(
            &self,
            envelopes: &[&DlqEnvelope],
            claim: &ReplayClaim,
            now: DateTime<Utc>,
            change: &StatusChange,
        ) -> impl Future<Output = Vec<FlowResult<bool>>> + Send {
            async move {
                let mut answers = Vec::with_capacity(envelopes.len());
                for e in envelopes {
                    let seen = Some(e.status_history.len());
                    answers.push(self.claim(&e.envelope_id, claim, now, change, seen).await);
                }
                answers
            }
        }
        /// [`EnvelopeStore::finish`] of several envelopes claimed under `replay_id`: one answer per
        /// settlement, in order, each what `finish` answers, and where its audit record went (the
        /// outbox, or the trail). DynamoDB: in as few transactions as its limits allow, as
        /// [`EnvelopeStore::claim_many`]; a store given the trail links the records into it in the
        /// transaction that settles their envelopes ([`Settled::InTrail`]), and uses the outbox when
        /// the chains' heads keep moving under it.
        fn finish_many(
            &self,
            replay_id: &str,
            settlements: &[Finish<'_>],
        ) -> impl Future<Output = Vec<FlowResult<Settled>>> + Send;
    }

    /// Audit records written with the state change they record, until they are in the trail.
    pub trait AuditOutbox {
        /// Records not yet known to be in the trail, oldest first.
        fn pending_records(&self, limit: usize) -> impl Future<Output = StoreResult<Vec<AuditRecord>>> + Send;
        /// The record is in the trail: drop it from the outbox.
        fn record_written(&self, audit_id: &str) -> impl Future<Output = StoreResult<()>> + Send;
        /// [`AuditOutbox::record_written`] of several records (DynamoDB: `BatchWriteItem`).
        fn records_written(&self, audit_ids: &[String]) -> impl Future<Output = StoreResult<()>> + Send {
            async move {
                for id in audit_ids {
                    self.record_written(id).await?;
                }
                Ok(())
            }
        }
    }

    /// Where a sweep left off, by name.
    pub trait SweepCursors {
        /// A sweep's saved position (`None`: start from the oldest).
        fn load_cursor(&self, name: &str) -> impl Future<Output = StoreResult<Option<String>>> + Send;
        fn save_cursor(&self, name: &str, cursor: Option<&str>) -> impl Future<Output = StoreResult<()>> + Send;
        /// Take `n` of the `limit` re-injections the whole deployment may send in the wall-clock
        /// second `second` (Unix time): true when taken, false when that second is used up. Every
        /// replay invocation counts in the same windows, so concurrent sweeps share one rate limit.
        /// The first take of a second always succeeds, even above `limit` (a batch is not split).
        fn take_sends(&self, second: i64, n: u32, limit: u32) -> impl Future<Output = StoreResult<bool>> + Send;
    }

    /// The backlog of envelopes awaiting remediation.
    pub trait Backlog {
        /// PENDING envelopes, exactly (kept in the same transaction as every status change).
        fn pending_count(&self) -> impl Future<Output = StoreResult<i64>> + Send;
        /// Triage's totals of the PENDING envelopes by key (`decisions::totals`), kept in the same
        /// write as every change into or out of PENDING, as the count is; zero sums may be left
        /// in. `None` when they do not cover every envelope (a table written before they were
        /// kept, or a totals item that could not hold another envelope's): triage then counts
        /// the envelopes themselves.
        fn triage_totals(
            &self,
        ) -> impl Future<Output = StoreResult<Option<BTreeMap<TotalsKey, Totals>>>> + Send;
        /// Switch the overflow flag on, unless it is on: then returns the new episode number and,
        /// in the same write, puts `record(episode)` (its `DLQ_OVERFLOW` record) in the audit
        /// outbox, so that exactly one caller reports each crossing and the report cannot be lost.
        fn raise_overflow(
            &self,
            record: &(dyn Fn(u64) -> AuditRecord + Sync),
        ) -> impl Future<Output = StoreResult<Option<u64>>> + Send;
        /// Switch the overflow flag off (the backlog is below the mark again).
        fn clear_overflow(&self) -> impl Future<Output = StoreResult<()>> + Send;
    }
}

/// Every envelope in `status` (or every envelope), following the pages.
pub async fn all_envelopes<S: EnvelopeStore>(
    store: &S,
    status: Option<EnvelopeStatus>,
) -> StoreResult<Vec<DlqEnvelope>> {
    let (mut all, mut cursor) = (Vec::new(), super::ledger::Cursor::new("envelope read"));
    while let Some(at) = cursor.at() {
        let (page, next) = match status {
            Some(s) => store.list_by_status(s, at, 500).await?,
            None => store.list_all(at, 500).await?,
        };
        all.extend(page);
        cursor.follow(next)?;
    }
    Ok(all)
}
