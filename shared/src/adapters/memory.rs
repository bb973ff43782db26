//! In-memory adapters with the same semantics as the AWS ones (conditional commit, idempotent
//! audit ids), for unit tests, benchmarks and the deterministic simulator.

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::domain::{
    AuditRecord, CommitOutcome, CommittedRef, CurrencyMapping, DeadLetter, PeriodRecord, Posting, ReferenceSnapshot,
    TransientKind,
};
use crate::ports::{
    AuditLog, ClaimOutcome, Clock, DeadLetterQueue, DedupTable, ExternalLedger, Ledger, ReferenceData, StoreError,
    StoreResult, WorkQueue,
};

/// Lock a mutex, recovering from poisoning: a panicking test thread must not hide the state.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
pub struct MemoryLedger {
    postings: Mutex<HashMap<String, Posting>>,
}

impl MemoryLedger {
    pub fn postings(&self) -> Vec<Posting> {
        lock(&self.postings).values().cloned().collect()
    }
    pub fn len(&self) -> usize {
        lock(&self.postings).len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Ledger for MemoryLedger {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let mut map = lock(&self.postings);
        if let Some(existing) = map.get(&posting.source_hash) {
            return Ok(CommitOutcome::AlreadyCommitted(existing.into()));
        }
        map.insert(posting.source_hash.clone(), posting.clone());
        Ok(CommitOutcome::Committed)
    }

    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(lock(&self.postings).get(source_hash).map(CommittedRef::from))
    }
}

/// A DLQ that keeps what it is sent; `fail_sends` makes every send fail (to prove that a
/// message is never acknowledged unrecorded).
#[derive(Default)]
pub struct MemoryDeadLetterQueue {
    letters: Mutex<Vec<DeadLetter>>,
    fail_sends: std::sync::atomic::AtomicBool,
}

impl MemoryDeadLetterQueue {
    pub fn letters(&self) -> Vec<DeadLetter> {
        lock(&self.letters).clone()
    }
    pub fn set_failing(&self, failing: bool) {
        self.fail_sends.store(failing, std::sync::atomic::Ordering::SeqCst);
    }
}

impl DeadLetterQueue for MemoryDeadLetterQueue {
    async fn send(&self, letter: &DeadLetter) -> StoreResult<()> {
        if self.fail_sends.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::new(
                TransientKind::ServiceUnavailable,
                "DLQ unavailable (injected)",
            ));
        }
        lock(&self.letters).push(letter.clone());
        Ok(())
    }
}

/// Records visibility changes by receipt handle.
#[derive(Default)]
pub struct MemoryWorkQueue {
    visibility: Mutex<Vec<(String, u32)>>,
}

impl MemoryWorkQueue {
    pub fn visibility_changes(&self) -> Vec<(String, u32)> {
        lock(&self.visibility).clone()
    }
}

impl WorkQueue for MemoryWorkQueue {
    async fn change_visibility(&self, receipt_handle: &str, secs: u32) -> StoreResult<()> {
        lock(&self.visibility).push((receipt_handle.to_owned(), secs));
        Ok(())
    }
}

#[derive(Default)]
pub struct MemoryReferenceData {
    currencies: Mutex<Vec<CurrencyMapping>>,
    periods: Mutex<Vec<PeriodRecord>>,
    snapshot: RwLock<Arc<ReferenceSnapshot>>,
}

impl MemoryReferenceData {
    fn rebuild(&self) {
        let snap = ReferenceSnapshot::new(lock(&self.currencies).clone(), lock(&self.periods).clone());
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snap);
    }
}

impl ReferenceData for MemoryReferenceData {
    async fn snapshot(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        Ok(self.snapshot.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
    async fn refresh(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        self.snapshot().await
    }
    async fn put_currency(&self, mapping: &CurrencyMapping) -> StoreResult<()> {
        {
            let mut c = lock(&self.currencies);
            c.retain(|m| m.code != mapping.code);
            c.push(mapping.clone());
        }
        self.rebuild();
        Ok(())
    }
    async fn put_period(&self, record: &PeriodRecord) -> StoreResult<()> {
        {
            let mut p = lock(&self.periods);
            p.retain(|r| !(r.entity == record.entity && r.period == record.period));
            p.push(record.clone());
        }
        self.rebuild();
        Ok(())
    }
}

/// The audit trail in memory, chained exactly like the DynamoDB one.
#[derive(Default)]
pub struct MemoryAuditLog {
    state: Mutex<AuditState>,
}

#[derive(Default)]
struct AuditState {
    /// In append order.
    records: Vec<crate::domain::audit::ChainedRecord>,
    heads: HashMap<String, (u64, String)>,
}

impl MemoryAuditLog {
    /// The records, in append order.
    pub fn records(&self) -> Vec<AuditRecord> {
        lock(&self.state).records.iter().map(|c| c.record.clone()).collect()
    }
    /// Tamper with the stored trail (tests of `audit verify`).
    pub fn tamper(&self, f: impl FnOnce(&mut Vec<crate::domain::audit::ChainedRecord>)) {
        f(&mut lock(&self.state).records);
    }
}

impl AuditLog for MemoryAuditLog {
    async fn append(&self, record: &AuditRecord) -> StoreResult<()> {
        use crate::domain::audit::{GENESIS, chain_of, link};
        let mut s = lock(&self.state);
        if s.records.iter().any(|r| r.record.audit_id == record.audit_id) {
            return Ok(());
        }
        let chain = chain_of(&record.audit_id);
        let (seq, hash) = s.heads.get(&chain).cloned().unwrap_or((0, GENESIS.to_owned()));
        let linked = link(record.clone(), &chain, seq, &hash);
        s.heads.insert(chain, (linked.seq, linked.hash.clone()));
        s.records.push(linked);
        Ok(())
    }

    async fn chain(&self, chain: &str) -> StoreResult<Vec<crate::domain::audit::ChainedRecord>> {
        let mut out: Vec<_> = lock(&self.state)
            .records
            .iter()
            .filter(|r| r.chain == chain)
            .cloned()
            .collect();
        out.sort_by_key(|r| r.seq);
        Ok(out)
    }

    async fn trail_id(&self) -> StoreResult<String> {
        Ok("memory".into())
    }

    async fn heads(&self) -> StoreResult<Vec<crate::domain::audit::ChainHead>> {
        let mut out: Vec<_> = lock(&self.state)
            .heads
            .iter()
            .map(|(chain, (seq, hash))| crate::domain::audit::ChainHead {
                chain: chain.clone(),
                seq: *seq,
                hash: hash.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.chain.cmp(&b.chain));
        Ok(out)
    }
}

/// A clock that stands still unless moved.
pub struct FixedClock(Mutex<DateTime<Utc>>);

impl FixedClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        FixedClock(Mutex::new(at))
    }
    pub fn advance(&self, by: chrono::Duration) {
        let mut t = lock(&self.0);
        *t += by;
    }
}

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        *lock(&self.0)
    }
}

#[derive(Clone, Debug)]
enum DedupEntry {
    Claimed { owner: String, lease_until: DateTime<Utc> },
    Committed(CommittedRef),
}

/// The dedup table of the claim protocol, in memory (same conditions as the DynamoDB one).
#[derive(Default)]
pub struct MemoryDedupTable {
    entries: Mutex<HashMap<String, DedupEntry>>,
}

impl DedupTable for MemoryDedupTable {
    async fn claim(
        &self,
        source_hash: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        _expires_at: DateTime<Utc>,
    ) -> StoreResult<ClaimOutcome> {
        let mut e = lock(&self.entries);
        match e.get(source_hash) {
            Some(DedupEntry::Committed(r)) => return Ok(ClaimOutcome::AlreadyCommitted(r.clone())),
            Some(DedupEntry::Claimed {
                owner: other,
                lease_until: until,
            }) if *until >= now => {
                return Ok(ClaimOutcome::HeldElsewhere {
                    owner: other.clone(),
                    lease_until: *until,
                });
            }
            _ => {}
        }
        e.insert(
            source_hash.to_owned(),
            DedupEntry::Claimed {
                owner: owner.to_owned(),
                lease_until,
            },
        );
        Ok(ClaimOutcome::Claimed)
    }

    async fn commit(&self, owner: &str, committed: &CommittedRef) -> StoreResult<bool> {
        let mut e = lock(&self.entries);
        match e.get(&committed.source_hash) {
            Some(DedupEntry::Claimed { owner: o, .. }) if o == owner => {
                e.insert(committed.source_hash.clone(), DedupEntry::Committed(committed.clone()));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, source_hash: &str, owner: &str) -> StoreResult<()> {
        let mut e = lock(&self.entries);
        if matches!(e.get(source_hash), Some(DedupEntry::Claimed { owner: o, .. }) if o == owner) {
            e.remove(source_hash);
        }
        Ok(())
    }

    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(match lock(&self.entries).get(source_hash) {
            Some(DedupEntry::Committed(r)) => Some(r.clone()),
            _ => None,
        })
    }
}

/// A general ledger in memory that counts every post per `source_hash` (how tests see a double
/// posting), optionally failing.
#[derive(Default)]
pub struct MemoryGeneralLedger {
    posts: Mutex<HashMap<String, u32>>,
    failing: std::sync::atomic::AtomicBool,
}

impl MemoryGeneralLedger {
    pub fn posts(&self, source_hash: &str) -> u32 {
        lock(&self.posts).get(source_hash).copied().unwrap_or(0)
    }
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, std::sync::atomic::Ordering::SeqCst);
    }
}

impl ExternalLedger for MemoryGeneralLedger {
    async fn post(&self, posting: &Posting) -> StoreResult<()> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::new(
                TransientKind::ServiceUnavailable,
                "GL unavailable (injected)",
            ));
        }
        *lock(&self.posts).entry(posting.source_hash.clone()).or_default() += 1;
        Ok(())
    }
}

#[derive(Default)]
struct EnvelopeState {
    envelopes: std::collections::BTreeMap<String, crate::domain::DlqEnvelope>,
    pending: i64,
    overflow: bool,
    episodes: u64,
    cursors: HashMap<String, String>,
}

/// The envelope table in memory, with the same conditions and pending count as DynamoDB's.
#[derive(Default)]
pub struct MemoryEnvelopeStore {
    state: Mutex<EnvelopeState>,
}

/// One page of `all` (already in order) after the item whose key is `cursor`, like DynamoDB's
/// `ExclusiveStartKey`: items that leave the listing between pages do not shift the next page.
fn page(
    all: Vec<crate::domain::DlqEnvelope>,
    key: impl Fn(&crate::domain::DlqEnvelope) -> String,
    cursor: Option<String>,
    limit: usize,
) -> crate::ports::EnvelopePage {
    let items: Vec<_> = all
        .into_iter()
        .filter(|e| cursor.as_ref().is_none_or(|c| key(e) > *c))
        .collect();
    let more = items.len() > limit.max(1);
    let items: Vec<_> = items.into_iter().take(limit.max(1)).collect();
    let next = if more { items.last().map(&key) } else { None };
    (items, next)
}

impl crate::ports::EnvelopeStore for MemoryEnvelopeStore {
    async fn create(&self, envelope: &crate::domain::DlqEnvelope) -> StoreResult<crate::ports::CreateOutcome> {
        let mut s = lock(&self.state);
        if let Some(existing) = s.envelopes.get(&envelope.envelope_id) {
            return Ok(crate::ports::CreateOutcome::Exists(Box::new(existing.clone())));
        }
        if envelope.status == crate::domain::EnvelopeStatus::Pending {
            s.pending += 1;
        }
        s.envelopes.insert(envelope.envelope_id.clone(), envelope.clone());
        Ok(crate::ports::CreateOutcome::Created)
    }

    async fn get(&self, envelope_id: &str) -> StoreResult<Option<crate::domain::DlqEnvelope>> {
        Ok(lock(&self.state).envelopes.get(envelope_id).cloned())
    }

    async fn transition(
        &self,
        envelope_id: &str,
        from: crate::domain::EnvelopeStatus,
        change: &crate::domain::StatusChange,
    ) -> StoreResult<bool> {
        use crate::domain::EnvelopeStatus::Pending;
        let mut s = lock(&self.state);
        let Some(e) = s.envelopes.get_mut(envelope_id).filter(|e| e.status == from) else {
            return Ok(false);
        };
        e.status = change.status;
        e.status_history.push(change.clone());
        let delta = i64::from(change.status == Pending) - i64::from(from == Pending);
        s.pending += delta;
        Ok(true)
    }

    async fn list_by_status(
        &self,
        status: crate::domain::EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<crate::ports::EnvelopePage> {
        let mut all: Vec<_> = lock(&self.state)
            .envelopes
            .values()
            .filter(|e| e.status == status)
            .cloned()
            .collect();
        all.sort_by_key(crate::domain::DlqEnvelope::age_key);
        Ok(page(all, crate::domain::DlqEnvelope::age_key, cursor, limit))
    }

    async fn list_all(&self, cursor: Option<String>, limit: usize) -> StoreResult<crate::ports::EnvelopePage> {
        let all = lock(&self.state).envelopes.values().cloned().collect();
        Ok(page(all, |e| e.envelope_id.clone(), cursor, limit))
    }

    async fn pending_count(&self) -> StoreResult<i64> {
        Ok(lock(&self.state).pending)
    }

    async fn claim(
        &self,
        envelope_id: &str,
        claim: &crate::domain::ReplayClaim,
        now: DateTime<Utc>,
        change: &crate::domain::StatusChange,
    ) -> StoreResult<bool> {
        use crate::domain::EnvelopeStatus::{Pending, Replaying};
        let mut s = lock(&self.state);
        let Some(e) = s.envelopes.get_mut(envelope_id) else {
            return Ok(false);
        };
        let from_pending = e.status == Pending;
        let expired = e.status == Replaying && e.replay.as_ref().is_some_and(|c| c.lease_until < now);
        if !from_pending && !expired {
            return Ok(false);
        }
        e.status = Replaying;
        e.replay = Some(claim.clone());
        e.status_history.push(change.clone());
        if from_pending {
            s.pending -= 1;
        }
        Ok(true)
    }

    async fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &crate::domain::StatusChange,
        record: &crate::domain::ReplayRecord,
    ) -> StoreResult<bool> {
        use crate::domain::EnvelopeStatus::{Pending, Replaying};
        let mut s = lock(&self.state);
        let Some(e) = s.envelopes.get_mut(envelope_id) else {
            return Ok(false);
        };
        if e.status != Replaying || e.replay.as_ref().is_none_or(|c| c.replay_id != replay_id) {
            return Ok(false);
        }
        e.status = change.status;
        e.status_history.push(change.clone());
        e.replays.push(record.clone());
        if change.status == Pending {
            s.pending += 1;
        }
        Ok(true)
    }

    async fn load_cursor(&self, name: &str) -> StoreResult<Option<String>> {
        Ok(lock(&self.state).cursors.get(name).cloned())
    }

    async fn save_cursor(&self, name: &str, cursor: Option<&str>) -> StoreResult<()> {
        let mut s = lock(&self.state);
        match cursor {
            Some(c) => s.cursors.insert(name.to_owned(), c.to_owned()),
            None => s.cursors.remove(name),
        };
        Ok(())
    }

    async fn set_overflow(&self, active: bool) -> StoreResult<Option<u64>> {
        let mut s = lock(&self.state);
        if s.overflow == active {
            return Ok(None);
        }
        s.overflow = active;
        if active {
            s.episodes += 1;
            return Ok(Some(s.episodes));
        }
        Ok(None)
    }
}

/// A write-once object store in memory: a second put to a key keeps the first object.
#[derive(Default)]
pub struct MemoryWorm {
    objects: Mutex<HashMap<String, Vec<u8>>>,
}

impl MemoryWorm {
    pub fn keys(&self) -> Vec<String> {
        let mut k: Vec<String> = lock(&self.objects).keys().cloned().collect();
        k.sort();
        k
    }
}

impl crate::ports::Worm for MemoryWorm {
    fn bucket(&self) -> &str {
        "memory"
    }
    async fn put(&self, key: &str, bytes: &[u8]) -> StoreResult<()> {
        lock(&self.objects)
            .entry(key.to_owned())
            .or_insert_with(|| bytes.to_vec());
        Ok(())
    }
    async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(lock(&self.objects).get(key).cloned())
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        Ok(self.keys().into_iter().filter(|k| k.starts_with(prefix)).collect())
    }
}

/// Metrics kept in memory.
#[derive(Default)]
pub struct MemoryMetrics {
    emitted: Mutex<Vec<crate::ports::Metric>>,
}

impl MemoryMetrics {
    pub fn emitted(&self) -> Vec<crate::ports::Metric> {
        lock(&self.emitted).clone()
    }
}

impl crate::ports::Metrics for MemoryMetrics {
    fn emit(&self, metric: &crate::ports::Metric) {
        lock(&self.emitted).push(metric.clone());
    }
}

/// The main queue as the replay sees it: keeps what is re-injected; its depth can be set to
/// exercise back-pressure.
#[derive(Default)]
pub struct MemoryReplayQueue {
    sent: Mutex<Vec<crate::ports::OutgoingMessage>>,
    depth: std::sync::atomic::AtomicU64,
}

impl MemoryReplayQueue {
    pub fn sent(&self) -> Vec<crate::ports::OutgoingMessage> {
        lock(&self.sent).clone()
    }
    pub fn set_depth(&self, depth: u64) {
        self.depth.store(depth, std::sync::atomic::Ordering::SeqCst);
    }
}

impl crate::ports::ReplayQueue for MemoryReplayQueue {
    async fn send_batch(&self, messages: &[crate::ports::OutgoingMessage]) -> StoreResult<Vec<Result<String, String>>> {
        let mut sent = lock(&self.sent);
        let mut ids = Vec::with_capacity(messages.len());
        for m in messages {
            sent.push(m.clone());
            ids.push(Ok(format!("replayed-{}", sent.len())));
        }
        Ok(ids)
    }
    async fn visible_depth(&self) -> StoreResult<u64> {
        Ok(self.depth.load(std::sync::atomic::Ordering::SeqCst))
    }
}
