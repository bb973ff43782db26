//! `Faulty<P>`: any port of the flows behind the fault injector, each call given way and
//! perhaps failed as the run's [`Injector`] decides, and the limits of the real services the
//! memory stores do not keep (a DynamoDB transaction's 100 items and 4 MB) applied on the way.

use chrono::{DateTime, Utc};
use recon_core::decisions::totals::{Totals, TotalsKey};
use recon_core::domain::audit::ChainHead;
use recon_core::domain::{
    AuditRecord, CommitOutcome, CommittedRef, CurrencyMapping, DeadLetter, DlqEnvelope, EnvelopeStatus, FailureCode,
    HandOff, PeriodRecord, Posting, ReferenceSnapshot, ReplayClaim, ReplayRecord, StatusChange, TxKey,
};
use recon_core::ports::{
    AuditLog, AuditOutbox, Backlog, ChainPage, CreateOutcome, DeadLetterQueue, DedupTable, EnvelopePage, EnvelopeStore,
    ExternalLedger, Finish, FlowResult, Ledger, ObjectVersion, OutgoingMessage, Posted, RecordsOfPeriod, ReferenceData,
    ReplayQueue, ReserveOutcome, Settled, StoreError, StoreResult, SweepCursors, Voided, WorkQueue, Worm, Written,
};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::faults::Injector;

/// A port behind the injector.
pub struct Faulty<P> {
    pub inner: P,
    pub faults: Arc<Injector>,
    /// Which flow uses it, when its audit appends are to be told apart (the oracle checks that
    /// a flow itself attempted the records its protocol owes, whoever else repaired them).
    pub used_by: Option<&'static str>,
}

impl<P> Faulty<P> {
    pub fn new(inner: P, faults: Arc<Injector>) -> Self {
        Faulty {
            inner,
            faults,
            used_by: None,
        }
    }

    /// `inner` behind named outages only ([`Injector::outages`]): the tests' and the demo's
    /// ledger on the local stack.
    pub fn with_outages(inner: P, kind: recon_core::domain::TransientKind) -> Self {
        Faulty::new(inner, Arc::new(Injector::outages(kind)))
    }

    /// The same port, its audit appends attempted by `flow` noted in the injector.
    pub fn used_by(self, flow: &'static str) -> Self {
        Faulty {
            used_by: Some(flow),
            ..self
        }
    }
}

impl<P: Ledger> Ledger for Faulty<P> {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let hash = &posting.source_hash;
        self.faults
            .write("Ledger.commit", hash, self.inner.commit(posting))
            .await
    }
    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        self.faults.call("Ledger.lookup", self.inner.lookup(key)).await
    }
    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        let hash = &hand_off.source_hash;
        self.faults
            .write("Ledger.hand_off", hash, self.inner.hand_off(hand_off))
            .await
    }
}

impl<P: ExternalLedger> ExternalLedger for Faulty<P> {
    async fn post(&self, posting: &Posting) -> StoreResult<Posted> {
        self.faults.call("GL.post", self.inner.post(posting)).await
    }
    async fn posted(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        self.faults.call("GL.posted", self.inner.posted(source_hash)).await
    }
    async fn void(&self, source_hash: &str) -> StoreResult<Voided> {
        self.faults.call("GL.void", self.inner.void(source_hash)).await
    }
}

impl<P: DedupTable> DedupTable for Faulty<P> {
    async fn reserve(
        &self,
        source_hash: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<ReserveOutcome> {
        self.faults
            .call(
                "Dedup.claim",
                self.inner.reserve(source_hash, owner, now, lease_until, expires_at),
            )
            .await
    }
    async fn commit(&self, owner: &str, committed: &CommittedRef) -> StoreResult<bool> {
        self.faults
            .call("Dedup.commit", self.inner.commit(owner, committed))
            .await
    }
    async fn release(&self, source_hash: &str, owner: &str) -> StoreResult<()> {
        self.faults
            .call("Dedup.release", self.inner.release(source_hash, owner))
            .await
    }
    async fn leave_in_doubt(&self, source_hash: &str, owner: &str, now: DateTime<Utc>) -> StoreResult<()> {
        self.faults
            .call(
                "Dedup.leave_in_doubt",
                self.inner.leave_in_doubt(source_hash, owner, now),
            )
            .await
    }
    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        self.faults.call("Dedup.lookup", self.inner.lookup(source_hash)).await
    }
}

impl<P: DeadLetterQueue> DeadLetterQueue for Faulty<P> {
    async fn send(&self, letter: &DeadLetter) -> StoreResult<()> {
        self.faults.call("DLQ.send", self.inner.send(letter)).await
    }
}

impl<P: WorkQueue> WorkQueue for Faulty<P> {
    async fn change_visibility(&self, receipt_handle: &str, secs: u32) -> StoreResult<()> {
        self.faults
            .call(
                "Queue.change_visibility",
                self.inner.change_visibility(receipt_handle, secs),
            )
            .await
    }
}

impl<P: ReplayQueue> ReplayQueue for Faulty<P> {
    /// The call may fail as a whole, and each entry of it on its own (SQS answers a batch entry
    /// by entry: `InternalError` for one, the others sent).
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<Vec<Result<String, String>>> {
        let failing: Vec<bool> = messages
            .iter()
            .map(|_| self.faults.strikes("Queue.send_batch entry"))
            .collect();
        let sent: Vec<OutgoingMessage> = messages
            .iter()
            .zip(&failing)
            .filter(|(_, f)| !**f)
            .map(|(m, _)| m.clone())
            .collect();
        let mut answers = if sent.is_empty() {
            Vec::new()
        } else {
            self.faults
                .call("Queue.send_batch", self.inner.send_batch(&sent))
                .await?
        }
        .into_iter();
        Ok(failing
            .iter()
            .map(|f| match f {
                true => Err("InternalError: the entry was not sent (injected)".to_owned()),
                false => answers
                    .next()
                    .unwrap_or_else(|| Err("the queue answered no entry".to_owned())),
            })
            .collect())
    }
    async fn visible_depth(&self) -> StoreResult<u64> {
        self.faults
            .call("Queue.visible_depth", self.inner.visible_depth())
            .await
    }
    fn ordered(&self) -> bool {
        self.inner.ordered()
    }
    async fn queued(&self) -> StoreResult<Option<recon_core::ports::Queued>> {
        self.faults.call("Queue.queued", self.inner.queued()).await
    }
}

impl<P: ReferenceData> ReferenceData for Faulty<P> {
    async fn snapshot(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        self.faults.call("Reference.snapshot", self.inner.snapshot()).await
    }
    async fn refresh(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        self.faults.call("Reference.refresh", self.inner.refresh()).await
    }
    async fn put_currency(&self, mapping: &CurrencyMapping) -> StoreResult<()> {
        self.faults
            .call("Reference.put_currency", self.inner.put_currency(mapping))
            .await
    }
    async fn put_period(&self, record: &PeriodRecord) -> StoreResult<()> {
        self.faults
            .call("Reference.put_period", self.inner.put_period(record))
            .await
    }
    async fn put_approval_policy(&self, policy: &recon_core::domain::approval::ApprovalPolicy) -> StoreResult<()> {
        self.faults
            .call("Reference.put_approval_policy", self.inner.put_approval_policy(policy))
            .await
    }
}

impl<P: AuditLog> AuditLog for Faulty<P> {
    async fn append(&self, record: &AuditRecord) -> StoreResult<Option<u64>> {
        if let Some(flow) = self.used_by {
            self.faults
                .attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((flow, record.audit_id.clone()));
        }
        self.faults.call("Audit.append", self.inner.append(record)).await
    }
    async fn linked_elsewhere(&self, seqs: &[u64]) {
        self.inner.linked_elsewhere(seqs).await;
    }
    async fn chain_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        self.faults
            .call(
                "Audit.chain_page",
                self.inner.chain_page(chain, from_seq, cursor, limit),
            )
            .await
    }
    async fn heads(&self) -> StoreResult<Vec<ChainHead>> {
        self.faults.call("Audit.heads", self.inner.heads()).await
    }
    async fn current_trail(&self) -> StoreResult<Option<String>> {
        self.faults
            .call("Audit.current_trail", self.inner.current_trail())
            .await
    }
    async fn start_trail(&self, candidate: &str) -> StoreResult<String> {
        self.faults
            .call("Audit.start_trail", self.inner.start_trail(candidate))
            .await
    }
    async fn sealed_up_to(&self, trail: &str) -> StoreResult<Option<u64>> {
        self.faults
            .call("Audit.sealed_up_to", self.inner.sealed_up_to(trail))
            .await
    }
    async fn note_seal(&self, trail: &str, seq: u64) -> StoreResult<()> {
        self.faults
            .call("Audit.note_seal", self.inner.note_seal(trail, seq))
            .await
    }
}

impl<P: recon_core::ports::ApprovalRequests> recon_core::ports::ApprovalRequests for Faulty<P> {
    async fn create_request(
        &self,
        r: &recon_core::domain::approval::ApprovalRequest,
        record: &AuditRecord,
    ) -> StoreResult<bool> {
        self.faults
            .call("Requests.create", self.inner.create_request(r, record))
            .await
    }
    async fn get_request(&self, id: &str) -> StoreResult<Option<recon_core::domain::approval::ApprovalRequest>> {
        self.faults.call("Requests.get", self.inner.get_request(id)).await
    }
    async fn list_requests(&self, cursor: Option<String>, limit: usize) -> StoreResult<recon_core::ports::RequestPage> {
        self.faults
            .call("Requests.list", self.inner.list_requests(cursor, limit))
            .await
    }
    async fn update_request(
        &self,
        r: &recon_core::domain::approval::ApprovalRequest,
        record: Option<&AuditRecord>,
    ) -> StoreResult<bool> {
        self.faults
            .call("Requests.update", self.inner.update_request(r, record))
            .await
    }
}

impl<P: RecordsOfPeriod> RecordsOfPeriod for Faulty<P> {
    async fn records_of_period(&self, period: Option<&str>) -> StoreResult<Vec<AuditRecord>> {
        self.faults
            .call("Audit.records_of_period", self.inner.records_of_period(period))
            .await
    }
    async fn record(&self, audit_id: &str) -> StoreResult<Option<AuditRecord>> {
        self.faults.call("Audit.record", self.inner.record(audit_id)).await
    }
}

impl<P: EnvelopeStore> EnvelopeStore for Faulty<P> {
    async fn create(&self, envelope: &DlqEnvelope) -> FlowResult<CreateOutcome> {
        self.faults.call("Envelopes.create", self.inner.create(envelope)).await
    }
    async fn get(&self, envelope_id: &str) -> StoreResult<Option<DlqEnvelope>> {
        self.faults.call("Envelopes.get", self.inner.get(envelope_id)).await
    }
    async fn list_by_status(
        &self,
        status: EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<EnvelopePage> {
        self.faults
            .call(
                "Envelopes.list_by_status",
                self.inner.list_by_status(status, cursor, limit),
            )
            .await
    }
    async fn list_all(&self, cursor: Option<String>, limit: usize) -> StoreResult<EnvelopePage> {
        self.faults
            .call("Envelopes.list_all", self.inner.list_all(cursor, limit))
            .await
    }
    async fn list_by_cause(
        &self,
        code: FailureCode,
        cause: &str,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<EnvelopePage> {
        self.faults
            .call(
                "EnvelopeStore.list_by_cause",
                self.inner.list_by_cause(code, cause, cursor, limit),
            )
            .await
    }
    fn cursor_after(&self, e: &DlqEnvelope, group: Option<(FailureCode, &str)>) -> String {
        self.inner.cursor_after(e, group)
    }
    async fn claim(
        &self,
        envelope_id: &str,
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
        seen: Option<usize>,
    ) -> FlowResult<bool> {
        self.faults
            .call(
                "Envelopes.claim",
                self.inner.claim(envelope_id, claim, now, change, seen),
            )
            .await
    }
    async fn renew(
        &self,
        envelope_id: &str,
        replay_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        change: &StatusChange,
    ) -> FlowResult<bool> {
        self.faults
            .call(
                "Envelopes.renew",
                self.inner.renew(envelope_id, replay_id, now, lease_until, change),
            )
            .await
    }
    async fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &StatusChange,
        record: &ReplayRecord,
        audit: Option<&AuditRecord>,
    ) -> FlowResult<bool> {
        self.faults
            .call(
                "Envelopes.finish",
                self.inner.finish(envelope_id, replay_id, change, record, audit),
            )
            .await
    }
    // As DynamoDB does it: the envelopes in transactions of at most 100 items and 4 MB each, one
    // fault per transaction (before: nothing of it written; after: all of it written, the caller
    // sees an error for each), so a call of several transactions may be partly applied.
    async fn claim_many(
        &self,
        envelopes: &[&DlqEnvelope],
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
    ) -> Vec<FlowResult<bool>> {
        let mut out = Vec::with_capacity(envelopes.len());
        for group in transactions(envelopes.iter().map(|e| crate::memory::limits::envelope_item_size(e))) {
            let part = &envelopes[group];
            let answers = async { Ok::<_, StoreError>(self.inner.claim_many(part, claim, now, change).await) };
            out.extend(each(
                part.len(),
                self.faults.call("Envelopes.claim_many", answers).await,
            ));
        }
        out
    }
    async fn finish_many(&self, replay_id: &str, settlements: &[Finish<'_>]) -> Vec<FlowResult<Settled>> {
        let mut out = Vec::with_capacity(settlements.len());
        // Each settlement writes its envelope and its audit record (and moves a counter).
        let sizes = settlements
            .iter()
            .map(|f| crate::memory::limits::envelope_item_size(f.envelope) + 2048);
        for group in transactions(sizes) {
            let part = &settlements[group];
            let answers = async { Ok::<_, StoreError>(self.inner.finish_many(replay_id, part).await) };
            out.extend(each(
                part.len(),
                self.faults.call("Envelopes.finish_many", answers).await,
            ));
        }
        out
    }
}

/// DynamoDB's limits on one transaction: items, and bytes of all its items.
const TRANSACT_ITEMS: usize = 100;
const TRANSACT_BYTES: usize = 4 * 1024 * 1024;

/// Consecutive ranges of items (their sizes given) that fit one transaction each; an item past
/// the limit on its own is a transaction of its own (DynamoDB refuses it there).
fn transactions(sizes: impl Iterator<Item = usize>) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes, mut n) = (0, 0, 0);
    for (i, size) in sizes.enumerate() {
        // Two items an envelope: its update and its record or counter.
        if n > 0 && (bytes + size > TRANSACT_BYTES || (n + 1) * 2 > TRANSACT_ITEMS) {
            out.push(start..i);
            (start, bytes, n) = (i, 0, 0);
        }
        bytes += size;
        n += 1;
    }
    if n > 0 {
        out.push(start..start + n);
    }
    out
}

/// The answers of a call about `n` items, or its fault as each one's answer.
fn each<T>(n: usize, answers: Result<Vec<FlowResult<T>>, StoreError>) -> Vec<FlowResult<T>> {
    match answers {
        Ok(answers) => answers,
        Err(fault) => (0..n).map(|_| Err(fault.clone().into())).collect(),
    }
}

impl<P: SweepCursors> SweepCursors for Faulty<P> {
    async fn load_cursor(&self, name: &str) -> StoreResult<Option<String>> {
        self.faults.call("Cursors.load", self.inner.load_cursor(name)).await
    }
    async fn save_cursor(&self, name: &str, cursor: Option<&str>) -> StoreResult<()> {
        self.faults
            .call("Cursors.save", self.inner.save_cursor(name, cursor))
            .await
    }
    async fn take_sends(&self, second: i64, n: u32, limit: u32) -> StoreResult<bool> {
        self.faults
            .call("Cursors.take_sends", self.inner.take_sends(second, n, limit))
            .await
    }
}

impl<P: Backlog> Backlog for Faulty<P> {
    async fn pending_count(&self) -> StoreResult<i64> {
        self.faults
            .call("Backlog.pending_count", self.inner.pending_count())
            .await
    }
    async fn triage_totals(&self) -> StoreResult<Option<BTreeMap<TotalsKey, Totals>>> {
        self.faults
            .call("Backlog.triage_totals", self.inner.triage_totals())
            .await
    }
    async fn raise_overflow(&self, record: &(dyn Fn(u64) -> AuditRecord + Sync)) -> StoreResult<Option<u64>> {
        self.faults
            .call("Backlog.raise_overflow", self.inner.raise_overflow(record))
            .await
    }
    async fn clear_overflow(&self) -> StoreResult<()> {
        self.faults
            .call("Backlog.clear_overflow", self.inner.clear_overflow())
            .await
    }
}

impl<P: AuditOutbox> AuditOutbox for Faulty<P> {
    async fn pending_records(&self, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        self.faults
            .call("Outbox.pending", self.inner.pending_records(limit))
            .await
    }
    async fn record_written(&self, audit_id: &str) -> StoreResult<()> {
        self.faults
            .call("Outbox.written", self.inner.record_written(audit_id))
            .await
    }
}

impl<P: Worm> Worm for Faulty<P> {
    fn bucket(&self) -> &str {
        self.inner.bucket()
    }
    async fn put(&self, key: &str, bytes: &[u8]) -> StoreResult<Written> {
        self.faults.call("Worm.put", self.inner.put(key, bytes)).await
    }
    async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.faults.call("Worm.get", self.inner.get(key)).await
    }
    async fn get_version(&self, key: &str, version_id: &str) -> StoreResult<Option<Vec<u8>>> {
        self.faults
            .call("Worm.get_version", self.inner.get_version(key, version_id))
            .await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.faults.call("Worm.list", self.inner.list(prefix)).await
    }
    async fn versions(&self, prefix: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.faults.call("Worm.versions", self.inner.versions(prefix)).await
    }
    async fn versions_after(&self, prefix: &str, start_after: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.faults
            .call("Worm.versions_after", self.inner.versions_after(prefix, start_after))
            .await
    }
}
