//! Ports: the traits every store and queue is reached through. The flows (`consume`, later
//! `enrich` and `replay`) are generic over them, so the same code runs against AWS, the local
//! emulators, or the in-memory adapters of unit tests and the simulator.
//!
//! Every port reports failures as [`StoreError`], which is transient by definition: a store
//! that cannot answer says nothing about the message, so the message is retried, never blamed.

use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;

use crate::domain::{
    AuditRecord, CommitOutcome, CommittedRef, CurrencyMapping, DeadLetter, PeriodRecord, Posting, ProcessError,
    ReferenceSnapshot, TransientKind, bounded_detail,
};

/// A store or queue could not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {detail}")]
pub struct StoreError {
    pub kind: TransientKind,
    pub detail: String,
}

impl StoreError {
    pub fn new(kind: TransientKind, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        StoreError {
            kind,
            detail: bounded_detail(&detail).to_owned(),
        }
    }
}

impl From<StoreError> for ProcessError {
    fn from(e: StoreError) -> Self {
        ProcessError::Transient {
            kind: e.kind,
            detail: e.detail,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Where committed transactions live. `commit` must be atomic with the dedup mark: after it
/// returns `Committed`, no later call for the same `source_hash` can commit again, and a crash
/// at any point either committed (and the next call says `AlreadyCommitted`) or did not.
pub trait Ledger: Send + Sync {
    fn commit(&self, posting: &Posting) -> impl Future<Output = StoreResult<CommitOutcome>> + Send;
    /// Is this transaction committed? (The replay gate asks the same store the consumer writes.)
    fn lookup(&self, source_hash: &str) -> impl Future<Output = StoreResult<Option<CommittedRef>>> + Send;
}

/// The DLQ, as the consumer writes to it.
pub trait DeadLetterQueue: Send + Sync {
    fn send(&self, letter: &DeadLetter) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The queue a message was received from, as the consumer acts on it.
pub trait WorkQueue: Send + Sync {
    /// Hide a received message for `secs` seconds (the retry backoff).
    fn change_visibility(&self, receipt_handle: &str, secs: u32) -> impl Future<Output = StoreResult<()>> + Send;
}

/// Reference data: currencies and accounting periods.
pub trait ReferenceData: Send + Sync {
    /// A recent view of all reference data (adapters may cache it briefly; see the README).
    fn snapshot(&self) -> impl Future<Output = StoreResult<Arc<ReferenceSnapshot>>> + Send;
    /// A snapshot at most a moment old: after a validation failed on reference data, so that a
    /// fix (a currency mapped, a period reopened) is seen at once rather than after the cache.
    fn refresh(&self) -> impl Future<Output = StoreResult<Arc<ReferenceSnapshot>>> + Send;
    fn put_currency(&self, mapping: &CurrencyMapping) -> impl Future<Output = StoreResult<()>> + Send;
    fn put_period(&self, record: &PeriodRecord) -> impl Future<Output = StoreResult<()>> + Send;
}

/// Durable audit records, hash-chained (see `domain::audit`).
pub trait AuditLog: Send + Sync {
    /// Link the record into its chain. Idempotent on `audit_id`: a second append of the same
    /// decision leaves the first record.
    fn append(&self, record: &AuditRecord) -> impl Future<Output = StoreResult<()>> + Send;
    /// Every record of one chain, in `seq` order.
    fn chain(&self, chain: &str) -> impl Future<Output = StoreResult<Vec<crate::domain::audit::ChainedRecord>>> + Send;
    /// The head of every chain that has records.
    fn heads(&self) -> impl Future<Output = StoreResult<Vec<crate::domain::audit::ChainHead>>> + Send;
    /// This trail's identity (created with the trail): seals belong to one trail, so a trail that
    /// is rebuilt (a reset local stack) is not checked against another trail's seals.
    fn trail_id(&self) -> impl Future<Output = StoreResult<String>> + Send;
}

/// Wall-clock time, injectable for tests and the simulator.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Shared references are ports too, so one adapter can be handed to several flows.
macro_rules! forward_ref {
    ($($t:ident),*) => {$(
        impl<T: $t> $t for Arc<T> {
            forward_ref!(@body $t);
        }
    )*};
    (@body Ledger) => {
        fn commit(&self, posting: &Posting) -> impl std::future::Future<Output = StoreResult<CommitOutcome>> + Send { (**self).commit(posting) }
        fn lookup(&self, h: &str) -> impl std::future::Future<Output = StoreResult<Option<CommittedRef>>> + Send { (**self).lookup(h) }
    };
    (@body DeadLetterQueue) => {
        fn send(&self, l: &DeadLetter) -> impl std::future::Future<Output = StoreResult<()>> + Send { (**self).send(l) }
    };
    (@body WorkQueue) => {
        fn change_visibility(&self, r: &str, s: u32) -> impl std::future::Future<Output = StoreResult<()>> + Send { (**self).change_visibility(r, s) }
    };
    (@body ReferenceData) => {
        fn snapshot(&self) -> impl std::future::Future<Output = StoreResult<Arc<ReferenceSnapshot>>> + Send { (**self).snapshot() }
        fn refresh(&self) -> impl std::future::Future<Output = StoreResult<Arc<ReferenceSnapshot>>> + Send { (**self).refresh() }
        fn put_currency(&self, m: &CurrencyMapping) -> impl std::future::Future<Output = StoreResult<()>> + Send { (**self).put_currency(m) }
        fn put_period(&self, p: &PeriodRecord) -> impl std::future::Future<Output = StoreResult<()>> + Send { (**self).put_period(p) }
    };
    (@body AuditLog) => {
        fn append(&self, r: &AuditRecord) -> impl std::future::Future<Output = StoreResult<()>> + Send { (**self).append(r) }
        fn chain(&self, c: &str) -> impl std::future::Future<Output = StoreResult<Vec<crate::domain::audit::ChainedRecord>>> + Send { (**self).chain(c) }
        fn heads(&self) -> impl std::future::Future<Output = StoreResult<Vec<crate::domain::audit::ChainHead>>> + Send { (**self).heads() }
        fn trail_id(&self) -> impl std::future::Future<Output = StoreResult<String>> + Send { (**self).trail_id() }
    };
}
forward_ref!(Ledger, DeadLetterQueue, WorkQueue, ReferenceData, AuditLog);

/// A user's own general ledger, behind [`crate::claim::ClaimingLedger`]. `post` must be
/// idempotent on `posting.source_hash` (the GL's idempotency key): a claim whose lease expired
/// mid-post can be taken over, and the GL is then the last line against a double posting.
pub trait ExternalLedger: Send + Sync {
    fn post(&self, posting: &Posting) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The state of a `source_hash` in the dedup table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This owner holds the claim until its lease ends.
    Claimed,
    /// Already committed: nothing to post.
    AlreadyCommitted(CommittedRef),
    /// Another owner holds a live claim.
    HeldElsewhere { owner: String, lease_until: DateTime<Utc> },
}

/// The dedup table of the claim -> post -> commit protocol. Every write is conditional.
pub trait DedupTable: Send + Sync {
    /// Claim `source_hash` for `owner` until `lease_until`, if it is free or its claim expired.
    fn claim(
        &self,
        source_hash: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> impl Future<Output = StoreResult<ClaimOutcome>> + Send;
    /// Mark committed, only if `owner` still holds the claim. `Ok(false)` when it does not.
    fn commit(&self, owner: &str, committed: &CommittedRef) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Drop the claim, only if `owner` still holds it (after a failed post).
    fn release(&self, source_hash: &str, owner: &str) -> impl Future<Output = StoreResult<()>> + Send;
    fn lookup(&self, source_hash: &str) -> impl Future<Output = StoreResult<Option<CommittedRef>>> + Send;
}

/// What creating an envelope did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// An envelope with this id was already stored (a redelivered DLQ message): here it is.
    Exists(Box<crate::domain::DlqEnvelope>),
}

/// A page of envelopes and the opaque cursor of the next one.
pub type EnvelopePage = (Vec<crate::domain::DlqEnvelope>, Option<String>);

/// The envelope table. `create` and `transition` keep the count of PENDING envelopes exact
/// (same transaction), which is what `DLQ_OVERFLOW` watches.
pub trait EnvelopeStore: Send + Sync {
    /// Store a new envelope unless one with its id exists.
    fn create(&self, envelope: &crate::domain::DlqEnvelope) -> impl Future<Output = StoreResult<CreateOutcome>> + Send;
    fn get(&self, envelope_id: &str) -> impl Future<Output = StoreResult<Option<crate::domain::DlqEnvelope>>> + Send;
    /// Move an envelope from `from` to `change.status`, appending `change` to its history, only
    /// if it is still in `from`. `Ok(false)` when it was not.
    fn transition(
        &self,
        envelope_id: &str,
        from: crate::domain::EnvelopeStatus,
        change: &crate::domain::StatusChange,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Envelopes in `status`, oldest first, a page at a time.
    fn list_by_status(
        &self,
        status: crate::domain::EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<EnvelopePage>> + Send;
    /// Every envelope, a page at a time (no order).
    fn list_all(&self, cursor: Option<String>, limit: usize) -> impl Future<Output = StoreResult<EnvelopePage>> + Send;
    fn pending_count(&self) -> impl Future<Output = StoreResult<i64>> + Send;
    /// Claim an envelope for a replay: from PENDING, or from REPLAYING whose lease ended before
    /// `now` (a replay that crashed). Sets status REPLAYING and `claim`, appends `change`.
    /// `Ok(false)` when it is neither (another replay holds it, or it is settled).
    fn claim(
        &self,
        envelope_id: &str,
        claim: &crate::domain::ReplayClaim,
        now: DateTime<Utc>,
        change: &crate::domain::StatusChange,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Settle a claimed envelope: only if it is REPLAYING under `replay_id`. Appends `change` and
    /// `record`. `Ok(false)` when the claim was lost (lease expired and taken over).
    fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &crate::domain::StatusChange,
        record: &crate::domain::ReplayRecord,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// A sweep's saved position (`None`: start from the oldest).
    fn load_cursor(&self, name: &str) -> impl Future<Output = StoreResult<Option<String>>> + Send;
    fn save_cursor(&self, name: &str, cursor: Option<&str>) -> impl Future<Output = StoreResult<()>> + Send;
    /// Set the overflow flag. Returns the episode number when this call switched it on, so that
    /// exactly one caller reports each crossing.
    fn set_overflow(&self, active: bool) -> impl Future<Output = StoreResult<Option<u64>>> + Send;
}

/// Every envelope in `status` (or every envelope), following the pages.
pub async fn all_envelopes<S: EnvelopeStore>(
    store: &S,
    status: Option<crate::domain::EnvelopeStatus>,
) -> StoreResult<Vec<crate::domain::DlqEnvelope>> {
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = match status {
            Some(s) => store.list_by_status(s, cursor, 500).await?,
            None => store.list_all(cursor, 500).await?,
        };
        all.extend(page);
        match next {
            Some(c) => cursor = Some(c),
            None => return Ok(all),
        }
    }
}

/// The write-once (Object Lock) bucket.
pub trait Worm: Send + Sync {
    fn bucket(&self) -> &str;
    /// Write `bytes` under `key` unless an object is already there (content-addressed keys make
    /// that the same content). The store verifies the SHA-256 checksum.
    fn put(&self, key: &str, bytes: &[u8]) -> impl Future<Output = StoreResult<()>> + Send;
    fn get(&self, key: &str) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send;
    /// Keys under `prefix`, sorted.
    fn list(&self, prefix: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
}

/// A metric for CloudWatch (Embedded Metric Format on Lambda).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub value: i64,
    pub unit: &'static str,
    /// dimension name -> value
    pub dimensions: Vec<(&'static str, String)>,
}

pub trait Metrics: Send + Sync {
    fn emit(&self, metric: &Metric);
}

/// The main queue, as the replay re-injects into it.
pub trait ReplayQueue: Send + Sync {
    /// Send up to ten messages; per message, its SQS message id or why it was refused.
    fn send_batch(
        &self,
        messages: &[OutgoingMessage],
    ) -> impl Future<Output = StoreResult<Vec<Result<String, String>>>> + Send;
    /// Messages waiting to be received (back-pressure).
    fn visible_depth(&self) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// A message to send: body plus string/number attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingMessage {
    pub body: String,
    /// name -> (data type, string value)
    pub attributes: Vec<(String, String, String)>,
    /// FIFO queues only.
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
}

impl<T: EnvelopeStore> EnvelopeStore for Arc<T> {
    fn create(&self, e: &crate::domain::DlqEnvelope) -> impl Future<Output = StoreResult<CreateOutcome>> + Send {
        (**self).create(e)
    }
    fn get(&self, id: &str) -> impl Future<Output = StoreResult<Option<crate::domain::DlqEnvelope>>> + Send {
        (**self).get(id)
    }
    fn transition(
        &self,
        id: &str,
        from: crate::domain::EnvelopeStatus,
        change: &crate::domain::StatusChange,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        (**self).transition(id, from, change)
    }
    fn list_by_status(
        &self,
        status: crate::domain::EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<EnvelopePage>> + Send {
        (**self).list_by_status(status, cursor, limit)
    }
    fn list_all(&self, cursor: Option<String>, limit: usize) -> impl Future<Output = StoreResult<EnvelopePage>> + Send {
        (**self).list_all(cursor, limit)
    }
    fn pending_count(&self) -> impl Future<Output = StoreResult<i64>> + Send {
        (**self).pending_count()
    }
    fn claim(
        &self,
        id: &str,
        claim: &crate::domain::ReplayClaim,
        now: DateTime<Utc>,
        change: &crate::domain::StatusChange,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        (**self).claim(id, claim, now, change)
    }
    fn finish(
        &self,
        id: &str,
        replay_id: &str,
        change: &crate::domain::StatusChange,
        record: &crate::domain::ReplayRecord,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        (**self).finish(id, replay_id, change, record)
    }
    fn load_cursor(&self, name: &str) -> impl Future<Output = StoreResult<Option<String>>> + Send {
        (**self).load_cursor(name)
    }
    fn save_cursor(&self, name: &str, cursor: Option<&str>) -> impl Future<Output = StoreResult<()>> + Send {
        (**self).save_cursor(name, cursor)
    }
    fn set_overflow(&self, active: bool) -> impl Future<Output = StoreResult<Option<u64>>> + Send {
        (**self).set_overflow(active)
    }
}

impl<T: Worm> Worm for Arc<T> {
    fn bucket(&self) -> &str {
        (**self).bucket()
    }
    fn put(&self, key: &str, bytes: &[u8]) -> impl Future<Output = StoreResult<()>> + Send {
        (**self).put(key, bytes)
    }
    fn get(&self, key: &str) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send {
        (**self).get(key)
    }
    fn list(&self, prefix: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send {
        (**self).list(prefix)
    }
}

impl<T: ReplayQueue> ReplayQueue for Arc<T> {
    fn send_batch(
        &self,
        m: &[OutgoingMessage],
    ) -> impl Future<Output = StoreResult<Vec<Result<String, String>>>> + Send {
        (**self).send_batch(m)
    }
    fn visible_depth(&self) -> impl Future<Output = StoreResult<u64>> + Send {
        (**self).visible_depth()
    }
}

impl<T: Metrics> Metrics for Arc<T> {
    fn emit(&self, metric: &Metric) {
        (**self).emit(metric)
    }
}
