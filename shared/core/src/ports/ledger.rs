//! Where committed transactions live: the ledger the consumer commits to and the replay's
//! idempotency gate asks, and, for a user's own general ledger, the dedup table of the
//! reserve -> post -> commit protocol (`crate::reservation`).

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::future::Future;

use super::{StoreError, StoreResult};
use crate::domain::{CommitOutcome, CommittedRef, HandOff, Posting, Segment, TransientKind, TxKey};

/// Lookups the default [`Ledger::lookup_many`] has in flight at once.
pub const LOOKUPS_AT_ONCE: usize = 8;

/// Which postings a read covers: one accounting period, one ledger entity, both, or all; and
/// optionally one segment of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerScope {
    pub period: Option<String>,
    pub entity: Option<String>,
    /// One of `of` parts of the scope, so that `of` readers (tasks, or invocations of a
    /// fan-out) can each read one at once. Each ledger splits its own way — by an index's
    /// shards, by a scan's segments, by a hash — but for one `of` the segments are disjoint and
    /// together cover the scope; a ledger that cannot split gives segment 0 everything.
    pub segment: Option<Segment>,
}

impl LedgerScope {
    pub fn period(period: impl Into<String>) -> Self {
        LedgerScope {
            period: Some(period.into()),
            ..LedgerScope::default()
        }
    }

    /// This scope, narrowed to one segment.
    pub fn segment(&self, segment: Segment) -> Self {
        LedgerScope {
            segment: Some(segment),
            ..self.clone()
        }
    }

    /// Whether `posting` is in this scope's period and entity (its segment is the ledger's to
    /// say).
    pub fn covers(&self, posting: &Posting) -> bool {
        self.period.as_ref().is_none_or(|p| *p == posting.period)
            && self.entity.as_ref().is_none_or(|e| *e == posting.ledger_entity)
    }
}

/// One page of postings, and where the next one starts (`None`: this was the last).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostingPage {
    pub postings: Vec<Posting>,
    /// Opaque to the caller: pass it back to read the next page.
    pub next: Option<String>,
}

/// What a general ledger answered a post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Posted {
    /// Applied now (HTTP `201`).
    Applied,
    /// Held under this key before (HTTP `200`), by whichever delivery was first: nothing applied
    /// again. Who holds it is the GL's posting to say ([`ExternalLedger::posted`]), not this call.
    Before,
    /// Refused by a rule of the GL's own (it would refuse it again): poison, `LEDGER_REFUSED:<rule>`.
    Refused { rule: String, detail: String },
}

/// What a general ledger answered a void.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Voided {
    /// The key is void: nothing under it will ever be applied.
    Voided,
    /// The key holds a posting already (it cannot be voided): the transaction is posted.
    Posted(CommittedRef),
    /// The GL has no void call.
    Unsupported,
}

/// The state of a `source_hash` in the dedup table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// This owner holds the reservation until its lease ends. `in_doubt_since`: it took over
    /// from an earlier one (expired, or left in doubt after a post with no definite answer), so a
    /// request under the key may have been sent since then and may still be applied.
    Reserved { in_doubt_since: Option<DateTime<Utc>> },
    /// Already committed: nothing to post.
    AlreadyCommitted(CommittedRef),
    /// Another owner holds a live reservation.
    HeldElsewhere { owner: String, lease_until: DateTime<Utc> },
}

impl ReserveOutcome {
    /// Reserved, with no request under the key before it.
    pub const FRESH: ReserveOutcome = ReserveOutcome::Reserved { in_doubt_since: None };
}

port! {
    /// `commit` must be atomic with the dedup mark: after it returns `Committed`, no later call for
    /// the same `source_hash` can commit again, and a crash at any point either committed (and the
    /// next call says `AlreadyCommitted`) or did not.
    pub trait Ledger {
        fn commit(&self, posting: &Posting) -> impl Future<Output = StoreResult<CommitOutcome>> + Send;
        /// Is this transaction committed? (The replay gate asks the same store the consumer writes.)
        fn lookup(&self, key: &TxKey) -> impl Future<Output = StoreResult<Option<CommittedRef>>> + Send;
        /// Hand the transaction to a manual journal, under the same condition as `commit`:
        /// `Committed` when this call wrote the hand-off, `AlreadyCommitted` when a posting or a
        /// hand-off was there first (then `lookup` and every later `commit` answer it too).
        fn hand_off(&self, hand_off: &HandOff) -> impl Future<Output = StoreResult<CommitOutcome>> + Send;
        /// [`Ledger::lookup`] of several transactions: the committed ones (or handed off), by
        /// `source_hash`; a hash absent from the answer is not committed. A ledger that can read
        /// several keys in one request (DynamoDB's `BatchGetItem`) answers in one; the default asks
        /// each on its own, [`LOOKUPS_AT_ONCE`] at a time (a general ledger's answers take a round
        /// trip each).
        fn lookup_many(&self, keys: &[TxKey]) -> impl Future<Output = StoreResult<HashMap<String, CommittedRef>>> + Send {
            async move {
                let mut found = HashMap::new();
                for chunk in keys.chunks(LOOKUPS_AT_ONCE) {
                    let answers = futures::future::join_all(chunk.iter().map(|key| self.lookup(key))).await;
                    for (key, answer) in chunk.iter().zip(answers) {
                        if let Some(c) = answer? {
                            found.insert(key.source_hash.clone(), c);
                        }
                    }
                }
                Ok(found)
            }
        }
    }

    /// Reading a ledger: what reconcile, stats, `audit show` and evidence export need from any
    /// ledger, so that they work on yours as on ours.
    pub trait LedgerReader {
        /// The posting of one transaction (`None` when nothing, or a hand-off, holds its key; a
        /// hand-off is answered by [`Ledger::lookup`]).
        fn posting(&self, key: &TxKey) -> impl Future<Output = StoreResult<Option<Posting>>> + Send;
        /// [`LedgerReader::posting`] of several transactions: the postings found (hand-offs and
        /// unknown ones are not). The default asks each on its own, [`LOOKUPS_AT_ONCE`] at a
        /// time; a ledger that reads several keys in one request (or has to search for keys
        /// without a period, DynamoDB's) answers in fewer.
        fn postings_of(&self, keys: &[TxKey]) -> impl Future<Output = StoreResult<Vec<Posting>>> + Send {
            async move {
                let mut found = Vec::new();
                for chunk in keys.chunks(LOOKUPS_AT_ONCE) {
                    for answer in futures::future::join_all(chunk.iter().map(|key| self.posting(key))).await {
                        found.extend(answer?);
                    }
                }
                Ok(found)
            }
        }
        /// One page of the postings in `scope` (at most `limit`, maybe fewer on a page that is not the
        /// last), from `cursor` (`None`: the first page). Every posting in scope is on exactly one
        /// page of a full read, whatever is committed meanwhile.
        fn postings_page(
            &self,
            scope: &LedgerScope,
            cursor: Option<&str>,
            limit: usize,
        ) -> impl Future<Output = StoreResult<PostingPage>> + Send;
        /// Every transaction handed to a manual journal (hand-offs carry no period).
        fn hand_offs(&self) -> impl Future<Output = StoreResult<Vec<CommittedRef>>> + Send;
    }

    /// A user's own general ledger, behind [`crate::reservation::ReservingLedger`]. `post` must be
    /// idempotent on `posting.source_hash` (the GL's idempotency key) for as long as a request under
    /// it may still be applied ([`crate::reservation::ReservationSettings::in_doubt_for`]): a post whose answer was
    /// lost is asked about (`posted`) and, if not there, sent again under the same key.
    pub trait ExternalLedger {
        fn post(&self, posting: &Posting) -> impl Future<Output = StoreResult<Posted>> + Send;
        /// The posting the GL holds under this key, if any (whichever delivery made it): asked when
        /// the dedup table knows nothing (a post whose answer was lost leaves no mark there), before
        /// a transaction is called uncommitted or handed to a manual journal, and to learn who holds
        /// a key a post found posted before.
        fn posted(&self, source_hash: &str) -> impl Future<Output = StoreResult<Option<CommittedRef>>> + Send;
        /// Void the key: from now on the GL refuses every request under it, one still being applied
        /// included, so a transaction handed to a manual journal can never post late. A GL without
        /// such a call answers [`Voided::Unsupported`]: a request in doubt is then only settled by time
        /// ([`crate::reservation::ReservationSettings::in_doubt_for`]).
        fn void(&self, source_hash: &str) -> impl Future<Output = StoreResult<Voided>> + Send;
    }

    /// The dedup table of the reserve -> post -> commit protocol. Every write is conditional.
    pub trait DedupTable {
        /// Reserve `source_hash` for `owner` until `lease_until`, if it is free or its reservation
        /// expired.
        /// The table keeps when the key was first claimed across takeovers: a takeover answers it as
        /// `in_doubt_since`.
        fn reserve(
            &self,
            source_hash: &str,
            owner: &str,
            now: DateTime<Utc>,
            lease_until: DateTime<Utc>,
            expires_at: DateTime<Utc>,
        ) -> impl Future<Output = StoreResult<ReserveOutcome>> + Send;
        /// Mark committed, only if `owner` still holds the claim. `Ok(false)` when it does not.
        fn commit(&self, owner: &str, committed: &CommittedRef) -> impl Future<Output = StoreResult<bool>> + Send;
        /// Drop the claim, only if `owner` still holds it: nothing under the key was ever sent, or
        /// the GL answered definitely that nothing was applied.
        fn release(&self, source_hash: &str, owner: &str) -> impl Future<Output = StoreResult<()>> + Send;
        /// End `owner`'s lease now but keep the claim, and with it the doubt: a request under the key
        /// may still be applied. The next claim takes over at once and is told since when.
        fn leave_in_doubt(
            &self,
            source_hash: &str,
            owner: &str,
            now: DateTime<Utc>,
        ) -> impl Future<Output = StoreResult<()>> + Send;
        fn lookup(&self, source_hash: &str) -> impl Future<Output = StoreResult<Option<CommittedRef>>> + Send;
    }
}

/// How many postings one page read asks for.
pub const READ_PAGE: usize = 500;

/// Every posting in `scope`, page by page.
pub async fn read_postings<R: LedgerReader + ?Sized>(reader: &R, scope: &LedgerScope) -> StoreResult<Vec<Posting>> {
    let mut out = Vec::new();
    each_page(reader, scope, |page| out.extend(page)).await?;
    Ok(out)
}

/// Count and exact amount per currency of the postings in `scope`, one page in memory at a time.
pub async fn tally_postings<R: LedgerReader + ?Sized>(
    reader: &R,
    scope: &LedgerScope,
) -> StoreResult<std::collections::BTreeMap<String, crate::domain::Tally>> {
    let mut totals: std::collections::BTreeMap<String, crate::domain::Tally> = Default::default();
    each_page(reader, scope, |page| {
        for p in page {
            totals
                .entry(p.currency.clone())
                .or_default()
                .add_parts(Some(&p.currency), Some(p.amount));
        }
    })
    .await?;
    Ok(totals)
}

/// Every page of `scope`, in order, handed to `f` one at a time.
pub async fn each_page<R: LedgerReader + ?Sized>(
    reader: &R,
    scope: &LedgerScope,
    mut f: impl FnMut(Vec<Posting>),
) -> StoreResult<()> {
    let mut cursor = Cursor::new("ledger read");
    while let Some(at) = cursor.at() {
        let page = reader.postings_page(scope, at.as_deref(), READ_PAGE).await?;
        f(page.postings);
        cursor.follow(page.next)?;
    }
    Ok(())
}

/// A store's opaque page cursor, followed from the first page to the one that names no next:
/// `while let Some(at) = cursor.at()`, read the page at `at`, then `cursor.follow(next)?`.
pub struct Cursor {
    /// What is read, for the error.
    what: &'static str,
    /// Where the next page starts (`Some(None)`: the first); `None` once the last was read.
    at: Option<Option<String>>,
}

impl Cursor {
    pub fn new(what: &'static str) -> Self {
        Cursor { what, at: Some(None) }
    }

    pub fn at(&self) -> Option<Option<String>> {
        self.at.clone()
    }

    /// Take the cursor the page just read returned. One that does not move would read forever: a
    /// store's bug, reported.
    pub fn follow(&mut self, next: Option<String>) -> StoreResult<()> {
        if let Some(n) = next
            .as_ref()
            .filter(|n| self.at.as_ref().and_then(Option::as_ref) == Some(*n))
        {
            let detail = format!("{}: the cursor did not move past {n}", self.what);
            return Err(StoreError::new(TransientKind::Infrastructure, detail));
        }
        self.at = next.map(Some);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn a_cursor_is_followed_to_the_end_and_one_that_does_not_move_is_refused() {
        let mut c = Cursor::new("x read");
        assert_eq!(c.at(), Some(None));
        c.follow(Some("a".into())).unwrap();
        assert_eq!(c.at(), Some(Some("a".into())));
        let stuck = c.follow(Some("a".into())).unwrap_err();
        assert_eq!(stuck.detail, "x read: the cursor did not move past a");
        c.follow(Some("b".into())).unwrap();
        c.follow(None).unwrap();
        assert_eq!(c.at(), None);
    }
}
