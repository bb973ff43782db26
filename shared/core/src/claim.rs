//! Exactly-once posting to an *external* ledger (the user's own GL): claim -> post -> commit on
//! the dedup table, as a [`Ledger`] the consumer uses like the reference ledger.
//!
//! 1. **claim**: conditional put of `{source_hash, CLAIMED, owner, lease_until}` — succeeds only if
//!    the hash is unknown or its claim's lease has expired; a committed hash answers
//!    `AlreadyCommitted` (read from the failed condition, no extra request);
//! 2. **post** to the GL, keyed on `source_hash` (the GL must treat a repeat as a no-op);
//! 3. **commit**: conditional update to `COMMITTED`, only if this owner still holds the claim; if
//!    the post failed, a conditional **release** instead.
//!
//! Never "check, then post, then mark". A crash after the post and before the commit leaves a
//! claim that expires; the next delivery re-claims and re-posts, which the GL's idempotency on
//! `source_hash` absorbs. The dedup record carries a TTL that must outlive the longest possible
//! replay (see [`ClaimSettings::validate`]).

use chrono::{DateTime, Duration, Utc};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TransientKind};
use crate::ports::{ClaimOutcome, Clock, DedupTable, ExternalLedger, Ledger, Posted, StoreError, StoreResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimSettings {
    /// How long a claim protects a post in progress. Longer than the slowest GL call.
    pub lease: Duration,
    /// How long the dedup record lives (DynamoDB TTL). Must exceed the replay window.
    pub ttl: Duration,
}

impl Default for ClaimSettings {
    fn default() -> Self {
        ClaimSettings {
            lease: Duration::seconds(60),
            ttl: Duration::days(400),
        }
    }
}

impl ClaimSettings {
    /// Refuse a dedup TTL that a replay could outlive: a replay after the mark expired would
    /// post twice (the source document's 7-day TTL vs a two-week incident review).
    pub fn validate(&self, replay_window: Duration) -> Result<(), String> {
        if self.lease <= Duration::zero() {
            return Err("the claim lease must be positive".into());
        }
        if self.ttl <= replay_window + self.lease {
            return Err(format!(
                "the dedup TTL ({} days) must be longer than the replay window ({} days)",
                self.ttl.num_days(),
                replay_window.num_days()
            ));
        }
        Ok(())
    }
}

pub struct ClaimingLedger<G, D> {
    pub gl: G,
    pub dedup: D,
    pub settings: ClaimSettings,
    clock: Arc<dyn Clock>,
    /// Distinguishes the attempts of one process (owner tokens must be unique per attempt).
    attempts: AtomicU64,
    instance: String,
}

impl<G, D> ClaimingLedger<G, D> {
    pub fn new(gl: G, dedup: D, settings: ClaimSettings, clock: Arc<dyn Clock>) -> Self {
        let nanos = clock.now().timestamp_nanos_opt().unwrap_or_default();
        ClaimingLedger {
            gl,
            dedup,
            settings,
            clock,
            attempts: AtomicU64::new(0),
            instance: format!("{nanos:x}"),
        }
    }

    fn owner_token(&self, posting: &Posting) -> String {
        self.token(&format!("{}/{}", posting.sqs_message_id, posting.attempt_count))
    }

    fn token(&self, who: &str) -> String {
        let n = self.attempts.fetch_add(1, Ordering::Relaxed);
        format!("{who}/{}-{n}", self.instance)
    }
}

impl<G, D: DedupTable> ClaimingLedger<G, D> {
    /// Claim `source_hash` for `owner`: `None` when claimed, else what the table already holds.
    async fn claim_for(&self, source_hash: &str, owner: &str) -> StoreResult<Option<CommitOutcome>> {
        let now: DateTime<Utc> = self.clock.now();
        match self
            .dedup
            .claim(
                source_hash,
                owner,
                now,
                now + self.settings.lease,
                now + self.settings.ttl,
            )
            .await?
        {
            ClaimOutcome::AlreadyCommitted(r) => Ok(Some(CommitOutcome::AlreadyCommitted(r))),
            ClaimOutcome::HeldElsewhere { owner, lease_until } => Err(StoreError::new(
                TransientKind::Conflict,
                format!("being posted by {owner} (claim until {lease_until})"),
            )),
            ClaimOutcome::Claimed => Ok(None),
        }
    }
}

impl<G, D: DedupTable> ClaimingLedger<G, D> {
    /// Drop `owner`'s claim; a claim that cannot be dropped expires with its lease.
    async fn release(&self, source_hash: &str, owner: &str) {
        if let Err(e) = self.dedup.release(source_hash, owner).await {
            tracing::warn!(source_hash, error = %e, "claim not released; it expires with its lease");
        }
    }
}

impl<G: ExternalLedger, D: DedupTable> Ledger for ClaimingLedger<G, D> {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let owner = self.owner_token(posting);
        if let Some(held) = self.claim_for(&posting.source_hash, &owner).await? {
            return Ok(held);
        }
        // Not posted (or not known to be): the claim goes, and the next delivery claims and
        // posts again under the same idempotency key.
        match self.gl.post(posting).await {
            Ok(Posted::Posted) => {}
            Ok(Posted::Refused { rule, detail }) => {
                self.release(&posting.source_hash, &owner).await;
                return Ok(CommitOutcome::Refused { rule, detail });
            }
            Err(e) => {
                self.release(&posting.source_hash, &owner).await;
                return Err(e);
            }
        }
        let committed = CommittedRef {
            source_hash: posting.source_hash.clone(),
            sqs_message_id: posting.sqs_message_id.clone(),
            message_id: posting.message_id.clone(),
            committed_at: Some(self.clock.now()),
            manual_journal: None,
        };
        if self.dedup.commit(&owner, &committed).await? {
            Ok(CommitOutcome::Committed)
        } else {
            // The lease ran out during the post and someone else took the claim. The GL holds
            // one posting (idempotent on source_hash); retrying lets the next claim find out.
            Err(StoreError::new(
                TransientKind::Conflict,
                "claim lost during the post; the GL's idempotency decides",
            ))
        }
    }

    /// The dedup table's mark, else the GL itself: a post whose answer was lost (then its claim
    /// released or expired) left a posting in the GL and nothing in the table.
    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        match self.dedup.lookup(source_hash).await? {
            Some(committed) => Ok(Some(committed)),
            None => self.gl.posted(source_hash).await,
        }
    }

    /// Claim, then mark committed as a hand-off: nothing goes to the GL (an accountant books it).
    /// Under the claim the GL is asked first: a posting it holds (its answer lost) is marked
    /// committed instead, and no manual journal is booked beside it.
    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        let owner = self.token(&format!("manual-journal/{}", hand_off.envelope_id));
        if let Some(held) = self.claim_for(&hand_off.source_hash, &owner).await? {
            return Ok(held);
        }
        let in_gl = match self.gl.posted(&hand_off.source_hash).await {
            Ok(found) => found,
            Err(e) => {
                self.release(&hand_off.source_hash, &owner).await;
                return Err(e);
            }
        };
        if let Some(posting) = in_gl {
            return if self.dedup.commit(&owner, &posting).await? {
                Ok(CommitOutcome::AlreadyCommitted(posting))
            } else {
                Err(StoreError::new(
                    TransientKind::Conflict,
                    "claim lost before the GL's posting was marked; try again",
                ))
            };
        }
        if self.dedup.commit(&owner, &hand_off.committed_ref()).await? {
            Ok(CommitOutcome::Committed)
        } else {
            Err(StoreError::new(
                TransientKind::Conflict,
                "claim lost before the hand-off was marked; try again",
            ))
        }
    }
}
