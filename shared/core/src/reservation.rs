//! Exactly-once posting to an *external* ledger (the user's own GL): reserve -> post -> commit on
//! the dedup table, as a [`Ledger`] the consumer uses like the reference ledger.
//!
//! 1. **reserve**: conditional write of `{source_hash, CLAIMED, owner, lease_until}` (the stored
//!    state keeps its old name) — succeeds only if the hash is unknown or its reservation's lease
//!    has ended; a committed hash answers `AlreadyCommitted` (read from the failed condition, no
//!    extra request). A reservation that takes over an earlier one is **in doubt**: that owner
//!    may have sent a request the GL can still apply;
//! 2. in doubt, **ask** the GL first (`posted`): a posting there is marked committed under the
//!    delivery the GL names; else **post**, keyed on `source_hash` (the GL answers a repeat from
//!    its key). `201` applied; `200` posted before — by whom, the GL's posting says, read back;
//! 3. **commit**: conditional update to `COMMITTED`, only if this owner still holds the
//!    reservation. A definite refusal **releases** the reservation; a post with no definite
//!    answer (a timeout, a dropped connection, a `5xx`, a `409` while another request under the
//!    key is being applied) **leaves it in doubt**: never "not posted".
//!
//! A **hand-off** to a manual journal (a transaction that must never post) first voids the key
//! at the GL, which then refuses every request under it, a late one included; a GL without a void
//! call is asked whether it posted, and a hash in doubt is handed off only once
//! [`ReservationSettings::in_doubt_for`] has passed since the first request under it could be sent.
//!
//! Never "check, then post, then mark". The dedup record carries a TTL that must outlive the
//! longest possible replay (see [`ReservationSettings::validate`]); the GL must keep a key at least
//! [`ReservationSettings::in_doubt_for`] (after that, a delivery asks it before posting again).

use chrono::{DateTime, Duration, Utc};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TransientKind, TxKey};
use crate::ports::{
    Clock, DedupTable, ExternalLedger, Ledger, Posted, ReserveOutcome, StoreError, StoreResult, Voided,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservationSettings {
    /// How long a reservation protects a post in progress. Longer than the slowest GL call.
    pub lease: Duration,
    /// How long the dedup record lives (DynamoDB TTL). Must exceed the replay window.
    pub ttl: Duration,
    /// How long after it was sent a request the GL did not answer definitely may still be
    /// applied: the GL's contract. A hash in doubt is handed to a manual journal only after this,
    /// unless the GL voids its key.
    pub in_doubt_for: Duration,
}

impl Default for ReservationSettings {
    fn default() -> Self {
        ReservationSettings {
            lease: Duration::seconds(60),
            ttl: Duration::days(400),
            in_doubt_for: Duration::hours(IN_DOUBT_HOURS),
        }
    }
}

/// [`ReservationSettings::in_doubt_for`] by default: the HTTP ledger contract's longest request.
pub const IN_DOUBT_HOURS: i64 = 4;

impl ReservationSettings {
    /// Refuse a dedup TTL that a replay could outlive: a replay after the mark expired would
    /// post twice (the source document's 7-day TTL vs a two-week incident review).
    pub fn validate(&self, replay_window: Duration) -> Result<(), String> {
        if self.lease <= Duration::zero() {
            return Err("the reservation lease must be positive".into());
        }
        if self.in_doubt_for < self.lease {
            return Err("a request may be in doubt for at least a reservation's lease".into());
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

pub struct ReservingLedger<G, D> {
    pub gl: G,
    pub dedup: D,
    pub settings: ReservationSettings,
    clock: Arc<dyn Clock>,
    /// Distinguishes the attempts of one process (owner tokens must be unique per attempt).
    attempts: AtomicU64,
    instance: String,
}

impl<G, D> ReservingLedger<G, D> {
    pub fn new(gl: G, dedup: D, settings: ReservationSettings, clock: Arc<dyn Clock>) -> Self {
        let nanos = clock.now().timestamp_nanos_opt().unwrap_or_default();
        ReservingLedger {
            gl,
            dedup,
            settings,
            clock,
            attempts: AtomicU64::new(0),
            instance: format!("{nanos:x}"),
        }
    }

    fn token(&self, who: &str) -> String {
        let n = self.attempts.fetch_add(1, Ordering::Relaxed);
        format!("{who}/{}-{n}", self.instance)
    }
}

/// What a reservation gave: the hash, and whether a request under it may still be applied.
struct Held {
    owner: String,
    in_doubt_since: Option<DateTime<Utc>>,
}

impl<G: ExternalLedger, D: DedupTable> ReservingLedger<G, D> {
    /// Reserve `source_hash` for `owner`: the reservation, or what the table already holds.
    async fn reserve(&self, source_hash: &str, owner: String) -> StoreResult<Result<Held, CommitOutcome>> {
        let now = self.clock.now();
        let (lease_until, expires_at) = (now + self.settings.lease, now + self.settings.ttl);
        match self
            .dedup
            .reserve(source_hash, &owner, now, lease_until, expires_at)
            .await?
        {
            ReserveOutcome::AlreadyCommitted(r) => Ok(Err(CommitOutcome::AlreadyCommitted(r))),
            ReserveOutcome::HeldElsewhere { owner, lease_until } => Err(StoreError::new(
                TransientKind::Conflict,
                format!("being posted by {owner} (reservation until {lease_until})"),
            )),
            ReserveOutcome::Reserved { in_doubt_since } => Ok(Ok(Held { owner, in_doubt_since })),
        }
    }

    /// Give the reservation back: released when nothing under the key can still be applied (no
    /// request of this reservation's is `in_doubt`, and none was before it), else left in doubt for
    /// the next reservation. A reservation that cannot be given back expires with its lease (and is
    /// in doubt then).
    async fn give_back(&self, source_hash: &str, held: &Held, in_doubt: bool) {
        let result = if in_doubt || held.in_doubt_since.is_some() {
            self.dedup
                .leave_in_doubt(source_hash, &held.owner, self.clock.now())
                .await
        } else {
            self.dedup.release(source_hash, &held.owner).await
        };
        if let Err(e) = result {
            tracing::warn!(source_hash, error = %e, "reservation not given back; it expires with its lease");
        }
    }

    /// `request`'s answer, the reservation given back first ([`Self::give_back`]) when it is an error.
    async fn or_give_back<T>(
        &self,
        request: impl Future<Output = StoreResult<T>>,
        hash: &str,
        held: &Held,
        in_doubt: bool,
    ) -> StoreResult<T> {
        let result = request.await;
        if result.is_err() {
            self.give_back(hash, held, in_doubt).await;
        }
        result
    }

    /// Mark `committed` under the reservation; a transient conflict if this owner no longer holds
    /// it.
    async fn mark(&self, held: &Held, committed: &CommittedRef) -> StoreResult<()> {
        if self.dedup.commit(&held.owner, committed).await? {
            Ok(())
        } else {
            // The lease ran out and someone else took the reservation over; they find out the same.
            Err(StoreError::new(
                TransientKind::Conflict,
                "reservation lost before the transaction was marked; the next attempt finds out",
            ))
        }
    }

    /// The GL's own posting under `source_hash`, marked committed under the reservation: who holds
    /// it is the GL's to say (a delivery whose answer was lost, maybe another than this one).
    async fn mark_gl_posting(&self, held: &Held, found: CommittedRef) -> StoreResult<CommitOutcome> {
        self.mark(held, &found).await?;
        Ok(CommitOutcome::AlreadyCommitted(found))
    }

    /// The GL's posting under a key it says it posted before.
    async fn posted_before(&self, source_hash: &str) -> StoreResult<CommittedRef> {
        self.gl.posted(source_hash).await?.ok_or_else(|| {
            StoreError::new(
                TransientKind::Infrastructure,
                "the GL answered a post as posted before, yet holds no posting under its key",
            )
        })
    }
}

impl<G: ExternalLedger, D: DedupTable> Ledger for ReservingLedger<G, D> {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let hash = &posting.source_hash;
        let owner = self.token(&format!("{}/{}", posting.sqs_message_id, posting.attempt_count));
        let held = match self.reserve(hash, owner).await? {
            Ok(held) => held,
            Err(outcome) => return Ok(outcome),
        };
        // In doubt: an earlier request may have been applied (its answer lost). Ask first.
        if held.in_doubt_since.is_some()
            && let Some(found) = self.or_give_back(self.gl.posted(hash), hash, &held, true).await?
        {
            return self.mark_gl_posting(&held, found).await;
        }
        // No definite answer: it may still be applied. Never "not posted".
        let committed = match self.or_give_back(self.gl.post(posting), hash, &held, true).await? {
            Posted::Applied => CommittedRef {
                source_hash: hash.clone(),
                sqs_message_id: posting.sqs_message_id.clone(),
                message_id: posting.message_id.clone(),
                committed_at: Some(self.clock.now()),
                manual_journal: None,
            },
            Posted::Before => {
                let found = self.or_give_back(self.posted_before(hash), hash, &held, true).await?;
                return self.mark_gl_posting(&held, found).await;
            }
            Posted::Refused { rule, detail } => {
                self.give_back(hash, &held, false).await;
                return Ok(CommitOutcome::Refused { rule, detail });
            }
        };
        self.mark(&held, &committed).await?;
        Ok(CommitOutcome::Committed)
    }

    /// The dedup table's mark, else the GL itself: a post whose answer was lost (then its
    /// reservation left in doubt or expired) left a posting in the GL and nothing in the table.
    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        match self.dedup.lookup(&key.source_hash).await? {
            Some(committed) => Ok(Some(committed)),
            None => self.gl.posted(&key.source_hash).await,
        }
    }

    /// Reserve, void the key at the GL (so nothing under it is ever applied, a late request
    /// included), then mark committed as a hand-off: nothing goes to the GL (an accountant books
    /// it). A posting the GL holds (its answer lost) is marked committed instead, and no manual
    /// journal is booked beside it. A GL that cannot void is asked whether it posted; while a
    /// request under the key may still be applied ([`ReservationSettings::in_doubt_for`]), the
    /// hand-off waits (`InDoubt`, until when) and the hash stays in doubt.
    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        let hash = &hand_off.source_hash;
        let owner = self.token(&format!("manual-journal/{}", hand_off.envelope_id));
        let held = match self.reserve(hash, owner).await? {
            Ok(held) => held,
            Err(outcome) => return Ok(outcome),
        };
        match self.or_give_back(self.gl.void(hash), hash, &held, false).await? {
            Voided::Voided => {}
            Voided::Posted(found) => return self.mark_gl_posting(&held, found).await,
            Voided::Unsupported => {
                if let Some(found) = self.or_give_back(self.gl.posted(hash), hash, &held, false).await? {
                    return self.mark_gl_posting(&held, found).await;
                }
                if let Some(since) = held.in_doubt_since
                    && self.clock.now() < since + self.settings.in_doubt_for
                {
                    self.give_back(hash, &held, true).await;
                    return Ok(CommitOutcome::InDoubt {
                        until: since + self.settings.in_doubt_for,
                    });
                }
            }
        }
        self.mark(&held, &hand_off.committed_ref()).await?;
        Ok(CommitOutcome::Committed)
    }
}
