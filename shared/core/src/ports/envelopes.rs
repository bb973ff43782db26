//! The envelope table, in three roles: the envelopes themselves (created once, then changed only
//! under a replay's claim, as `domain::status` allows), the sweep cursors, and the backlog (the
//! exact PENDING count that `DLQ_OVERFLOW` watches, and the overflow flag).
//!
//! Every implementation checks `domain::status::check_initial` / `check_transition` before it
//! writes, and keeps the PENDING count in the same transaction as the status change.

use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;

use super::{FlowResult, StoreResult};
use crate::domain::{DlqEnvelope, EnvelopeStatus, ReplayClaim, ReplayRecord, StatusChange};

/// What creating an envelope did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// An envelope with this id was already stored (a redelivered DLQ message): here it is.
    Exists(Box<DlqEnvelope>),
}

/// A page of envelopes and the opaque cursor of the next one.
pub type EnvelopePage = (Vec<DlqEnvelope>, Option<String>);

pub trait EnvelopeStore: Send + Sync {
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
    /// Every envelope, a page at a time (no order).
    fn list_all(&self, cursor: Option<String>, limit: usize) -> impl Future<Output = StoreResult<EnvelopePage>> + Send;
    /// Claim an envelope for a replay: from PENDING, or from REPLAYING whose lease ended before
    /// `now` (a replay that crashed). Sets status REPLAYING and `claim`, appends `change`.
    /// `Ok(false)` when it is neither (another replay holds it, or it is settled).
    fn claim(
        &self,
        envelope_id: &str,
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
    ) -> impl Future<Output = FlowResult<bool>> + Send;
    /// Settle a claimed envelope in `change.status`: only if it is REPLAYING under `replay_id`.
    /// Appends `change` and `record`. `Ok(false)` when the claim was lost (lease expired and
    /// taken over).
    fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &StatusChange,
        record: &ReplayRecord,
    ) -> impl Future<Output = FlowResult<bool>> + Send;
}

/// Where a sweep left off, by name.
pub trait SweepCursors: Send + Sync {
    /// A sweep's saved position (`None`: start from the oldest).
    fn load_cursor(&self, name: &str) -> impl Future<Output = StoreResult<Option<String>>> + Send;
    fn save_cursor(&self, name: &str, cursor: Option<&str>) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The backlog of envelopes awaiting remediation.
pub trait Backlog: Send + Sync {
    /// PENDING envelopes, exactly (kept in the same transaction as every status change).
    fn pending_count(&self) -> impl Future<Output = StoreResult<i64>> + Send;
    /// Set the overflow flag. Returns the episode number when this call switched it on, so that
    /// exactly one caller reports each crossing.
    fn set_overflow(&self, active: bool) -> impl Future<Output = StoreResult<Option<u64>>> + Send;
}

/// Every envelope in `status` (or every envelope), following the pages.
pub async fn all_envelopes<S: EnvelopeStore>(
    store: &S,
    status: Option<EnvelopeStatus>,
) -> StoreResult<Vec<DlqEnvelope>> {
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

impl<T: EnvelopeStore> EnvelopeStore for Arc<T> {
    fn create(&self, envelope: &DlqEnvelope) -> impl Future<Output = FlowResult<CreateOutcome>> + Send {
        (**self).create(envelope)
    }
    fn get(&self, envelope_id: &str) -> impl Future<Output = StoreResult<Option<DlqEnvelope>>> + Send {
        (**self).get(envelope_id)
    }
    fn list_by_status(
        &self,
        status: EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> impl Future<Output = StoreResult<EnvelopePage>> + Send {
        (**self).list_by_status(status, cursor, limit)
    }
    fn list_all(&self, cursor: Option<String>, limit: usize) -> impl Future<Output = StoreResult<EnvelopePage>> + Send {
        (**self).list_all(cursor, limit)
    }
    fn claim(
        &self,
        envelope_id: &str,
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
    ) -> impl Future<Output = FlowResult<bool>> + Send {
        (**self).claim(envelope_id, claim, now, change)
    }
    fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &StatusChange,
        record: &ReplayRecord,
    ) -> impl Future<Output = FlowResult<bool>> + Send {
        (**self).finish(envelope_id, replay_id, change, record)
    }
}

impl<T: SweepCursors> SweepCursors for Arc<T> {
    fn load_cursor(&self, name: &str) -> impl Future<Output = StoreResult<Option<String>>> + Send {
        (**self).load_cursor(name)
    }
    fn save_cursor(&self, name: &str, cursor: Option<&str>) -> impl Future<Output = StoreResult<()>> + Send {
        (**self).save_cursor(name, cursor)
    }
}

impl<T: Backlog> Backlog for Arc<T> {
    fn pending_count(&self) -> impl Future<Output = StoreResult<i64>> + Send {
        (**self).pending_count()
    }
    fn set_overflow(&self, active: bool) -> impl Future<Output = StoreResult<Option<u64>>> + Send {
        (**self).set_overflow(active)
    }
}
