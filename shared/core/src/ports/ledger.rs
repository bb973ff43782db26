//! Where committed transactions live: the ledger the consumer commits to and the replay's
//! idempotency gate asks, and, for a user's own general ledger, the dedup table of the
//! claim -> post -> commit protocol (`crate::claim`).

use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;

use super::StoreResult;
use crate::domain::{CommitOutcome, CommittedRef, HandOff, Posting};

/// `commit` must be atomic with the dedup mark: after it returns `Committed`, no later call for
/// the same `source_hash` can commit again, and a crash at any point either committed (and the
/// next call says `AlreadyCommitted`) or did not.
pub trait Ledger: Send + Sync {
    fn commit(&self, posting: &Posting) -> impl Future<Output = StoreResult<CommitOutcome>> + Send;
    /// Is this transaction committed? (The replay gate asks the same store the consumer writes.)
    fn lookup(&self, source_hash: &str) -> impl Future<Output = StoreResult<Option<CommittedRef>>> + Send;
    /// Hand the transaction to a manual journal, under the same condition as `commit`:
    /// `Committed` when this call wrote the hand-off, `AlreadyCommitted` when a posting or a
    /// hand-off was there first (then `lookup` and every later `commit` answer it too).
    fn hand_off(&self, hand_off: &HandOff) -> impl Future<Output = StoreResult<CommitOutcome>> + Send;
}

impl<T: Ledger> Ledger for Arc<T> {
    fn commit(&self, posting: &Posting) -> impl Future<Output = StoreResult<CommitOutcome>> + Send {
        (**self).commit(posting)
    }
    fn lookup(&self, source_hash: &str) -> impl Future<Output = StoreResult<Option<CommittedRef>>> + Send {
        (**self).lookup(source_hash)
    }
    fn hand_off(&self, hand_off: &HandOff) -> impl Future<Output = StoreResult<CommitOutcome>> + Send {
        (**self).hand_off(hand_off)
    }
}

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
