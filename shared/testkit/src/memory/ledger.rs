//! Ledgers in memory: the reference ledger (conditional commit), the dedup table of the claim
//! protocol (same conditions as DynamoDB's), and a general ledger that counts every post.

use chrono::{DateTime, Utc};
use recon_core::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TransientKind, TxKey};
use recon_core::ports::{
    DedupTable, ExternalLedger, Ledger, LedgerReader, LedgerScope, Posted, PostingPage, ReserveOutcome, StoreError,
    StoreResult, Voided,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::lock;

/// One key per transaction, like the DynamoDB ledger's (its period and `source_hash`): a posting
/// or a hand-off.
#[derive(Clone, Debug)]
enum Entry {
    Posted(Posting),
    HandedOff(HandOff),
}

impl Entry {
    fn committed_ref(&self) -> CommittedRef {
        match self {
            Entry::Posted(p) => p.into(),
            Entry::HandedOff(h) => h.committed_ref(),
        }
    }
}

/// A key of the DynamoDB ledger: the period, then the `source_hash`. A hash has one period
/// (its value date is hashed), so a caller that names another one finds nothing there, and a
/// hand-off written under another period than the posting's does not exclude it: as on DynamoDB.
type Key = (String, String);

#[derive(Default)]
pub struct MemoryLedger {
    entries: Mutex<HashMap<Key, Entry>>,
    /// Every transaction committed (posted or handed off), in order (`journal`).
    commits: Mutex<Vec<(u64, String)>>,
    /// Every hand-off written: (its place in the journal, the envelope, the replay).
    hand_off_log: Mutex<Vec<(u64, String, String)>>,
}

impl MemoryLedger {
    /// Put `p` under its key behind the ledger's back, whatever the key held (someone with write
    /// access to the table); `None` removes what the key holds.
    pub fn overwrite(&self, key: &str, p: Option<Posting>) {
        let mut map = lock(&self.entries);
        map.retain(|(_, hash), _| hash != key);
        if let Some(p) = p {
            map.insert((p.period.clone(), key.to_owned()), Entry::Posted(p));
        }
    }

    /// What `key` finds: the item under its period, or, without one, a search of every period
    /// (DynamoDB's scan).
    fn find(&self, key: &TxKey) -> Option<Entry> {
        let map = lock(&self.entries);
        match &key.period {
            Some(period) => map.get(&(period.clone(), key.source_hash.clone())).cloned(),
            None => map
                .iter()
                .find(|((_, hash), _)| *hash == key.source_hash)
                .map(|(_, e)| e.clone()),
        }
    }

    /// Every hand-off written, in order: (journal position, envelope, replay).
    pub fn hand_off_log(&self) -> Vec<(u64, String, String)> {
        lock(&self.hand_off_log).clone()
    }

    /// When each transaction was committed (its first posting or hand-off), in order.
    pub fn commit_log(&self) -> Vec<(u64, String)> {
        lock(&self.commits).clone()
    }

    pub fn postings(&self) -> Vec<Posting> {
        lock(&self.entries)
            .values()
            .filter_map(|e| match e {
                Entry::Posted(p) => Some(p.clone()),
                Entry::HandedOff(_) => None,
            })
            .collect()
    }
    /// The transactions handed to a manual journal.
    pub fn hand_offs(&self) -> Vec<HandOff> {
        lock(&self.entries)
            .values()
            .filter_map(|e| match e {
                Entry::HandedOff(h) => Some(h.clone()),
                Entry::Posted(_) => None,
            })
            .collect()
    }
    /// Postings (hand-offs are not counted).
    pub fn len(&self) -> usize {
        self.postings().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert(&self, key: Key, entry: Entry) -> CommitOutcome {
        let mut map = lock(&self.entries);
        if let Some(existing) = map.get(&key) {
            return CommitOutcome::AlreadyCommitted(existing.committed_ref());
        }
        lock(&self.commits).push((super::journal::tick(), key.1.clone()));
        map.insert(key, entry);
        CommitOutcome::Committed
    }
}

impl LedgerReader for MemoryLedger {
    async fn posting(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        Ok(match self.find(key) {
            Some(Entry::Posted(p)) => Some(p),
            _ => None,
        })
    }

    /// In `source_hash` order, the cursor the last hash of a page; a segment holds the hashes
    /// [`recon_core::domain::Segment::holds`].
    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        let mut postings: Vec<Posting> = self
            .postings()
            .into_iter()
            .filter(|p| {
                scope.covers(p)
                    && scope.segment.is_none_or(|s| s.holds(&p.source_hash))
                    && cursor.is_none_or(|c| p.source_hash.as_str() > c)
            })
            .collect();
        postings.sort_by(|a, b| a.source_hash.cmp(&b.source_hash));
        let more = postings.len() > limit.max(1);
        postings.truncate(limit.max(1));
        let next = more.then(|| postings.last().map(|p| p.source_hash.clone())).flatten();
        Ok(PostingPage { postings, next })
    }

    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        Ok(MemoryLedger::hand_offs(self)
            .iter()
            .map(HandOff::committed_ref)
            .collect())
    }
}

impl Ledger for MemoryLedger {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let key = (posting.period.clone(), posting.source_hash.clone());
        Ok(self.insert(key, Entry::Posted(posting.clone())))
    }

    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        Ok(self.find(key).as_ref().map(Entry::committed_ref))
    }

    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        let Some(period) = hand_off.period.clone() else {
            return Err(StoreError::infra(format!(
                "a hand-off of {} names no period: the ledger keeps a transaction under its period",
                hand_off.source_hash
            )));
        };
        let outcome = self.insert(
            (period, hand_off.source_hash.clone()),
            Entry::HandedOff(hand_off.clone()),
        );
        if outcome == CommitOutcome::Committed {
            lock(&self.hand_off_log).push((
                super::journal::tick(),
                hand_off.envelope_id.clone(),
                hand_off.replay_id.clone(),
            ));
        }
        Ok(outcome)
    }
}

#[derive(Clone, Debug)]
enum DedupEntry {
    Claimed {
        owner: String,
        lease_until: DateTime<Utc>,
        /// When the key was first claimed (kept across takeovers): since then a request under it
        /// may have been sent.
        first_claimed_at: DateTime<Utc>,
    },
    Committed(CommittedRef),
}

/// The dedup table of the reservation protocol, in memory (same conditions as the DynamoDB one).
#[derive(Default)]
pub struct MemoryDedupTable {
    entries: Mutex<HashMap<String, DedupEntry>>,
    /// Every mark of a transaction committed, in order (`journal`).
    commits: Mutex<Vec<(u64, String)>>,
}

impl MemoryDedupTable {
    /// When each transaction was marked committed (posted or handed off), in order.
    pub fn commit_log(&self) -> Vec<(u64, String)> {
        lock(&self.commits).clone()
    }

    /// The transactions marked handed to a manual journal (by the envelope each names).
    pub fn hand_offs(&self) -> Vec<CommittedRef> {
        lock(&self.entries)
            .values()
            .filter_map(|e| match e {
                DedupEntry::Committed(r) if r.manual_journal.is_some() => Some(r.clone()),
                _ => None,
            })
            .collect()
    }
}

impl DedupTable for MemoryDedupTable {
    async fn reserve(
        &self,
        source_hash: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        _expires_at: DateTime<Utc>,
    ) -> StoreResult<ReserveOutcome> {
        let mut e = lock(&self.entries);
        let in_doubt_since = match e.get(source_hash) {
            Some(DedupEntry::Committed(r)) => return Ok(ReserveOutcome::AlreadyCommitted(r.clone())),
            Some(DedupEntry::Claimed {
                owner: other,
                lease_until: until,
                ..
            }) if *until >= now => {
                return Ok(ReserveOutcome::HeldElsewhere {
                    owner: other.clone(),
                    lease_until: *until,
                });
            }
            Some(DedupEntry::Claimed { first_claimed_at, .. }) => Some(*first_claimed_at),
            None => None,
        };
        e.insert(
            source_hash.to_owned(),
            DedupEntry::Claimed {
                owner: owner.to_owned(),
                lease_until,
                first_claimed_at: in_doubt_since.unwrap_or(now),
            },
        );
        Ok(ReserveOutcome::Reserved { in_doubt_since })
    }

    async fn commit(&self, owner: &str, committed: &CommittedRef) -> StoreResult<bool> {
        let mut e = lock(&self.entries);
        match e.get(&committed.source_hash) {
            Some(DedupEntry::Claimed { owner: o, .. }) if o == owner => {
                e.insert(committed.source_hash.clone(), DedupEntry::Committed(committed.clone()));
                lock(&self.commits).push((super::journal::tick(), committed.source_hash.clone()));
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

    async fn leave_in_doubt(&self, source_hash: &str, owner: &str, now: DateTime<Utc>) -> StoreResult<()> {
        let mut e = lock(&self.entries);
        if let Some(DedupEntry::Claimed {
            owner: o, lease_until, ..
        }) = e.get_mut(source_hash)
            && o == owner
        {
            // Ended: the next claim takes over at once, in doubt.
            *lease_until = now - chrono::Duration::milliseconds(1);
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

/// A general ledger in memory, idempotent on its key like the HTTP contract asks: it counts how
/// often each key was applied (how tests see a double posting), and can fail before applying,
/// lose the answer after applying, hold a request to apply it later (the client gave up), and
/// void keys (or not support voiding).
#[derive(Default)]
pub struct MemoryGeneralLedger {
    state: Mutex<GlState>,
    failing: AtomicBool,
}

#[derive(Default)]
struct GlState {
    postings: HashMap<String, Posting>,
    applied: HashMap<String, u32>,
    /// Requests received and not applied yet: their client saw a timeout.
    held: Vec<Posting>,
    hold_next: bool,
    lose_next_answer: bool,
    voided: std::collections::HashSet<String>,
    no_void: bool,
}

impl MemoryGeneralLedger {
    /// How often a posting under `source_hash` was applied (1 at most, if all is well).
    pub fn posts(&self, source_hash: &str) -> u32 {
        lock(&self.state).applied.get(source_hash).copied().unwrap_or(0)
    }
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
    /// The next post is received and held: its client times out, and the GL applies it when
    /// [`Self::apply_held`] is called.
    pub fn hold_next_post(&self) {
        lock(&self.state).hold_next = true;
    }
    /// Apply the held requests, unless their key was voided meanwhile (then refused).
    pub fn apply_held(&self) {
        let mut s = lock(&self.state);
        for p in std::mem::take(&mut s.held) {
            if !s.voided.contains(&p.source_hash) {
                apply(&mut s, p);
            }
        }
    }
    /// The next post is applied and its answer lost (the client sees a timeout).
    pub fn lose_next_answer(&self) {
        lock(&self.state).lose_next_answer = true;
    }
    /// A GL without the void call.
    pub fn without_void(&self) {
        lock(&self.state).no_void = true;
    }
    /// A posting put behind the API's back (made by `p.sqs_message_id`), as another client would.
    pub fn insert(&self, p: &Posting) {
        apply(&mut lock(&self.state), p.clone());
    }
}

fn apply(s: &mut GlState, p: Posting) {
    if s.postings.contains_key(&p.source_hash) {
        return;
    }
    *s.applied.entry(p.source_hash.clone()).or_default() += 1;
    s.postings.insert(p.source_hash.clone(), p);
}

fn timeout() -> StoreError {
    StoreError::new(TransientKind::Timeout, "GL: operation timed out (injected)")
}

impl ExternalLedger for MemoryGeneralLedger {
    async fn post(&self, posting: &Posting) -> StoreResult<Posted> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::new(
                TransientKind::ServiceUnavailable,
                "GL unavailable (injected)",
            ));
        }
        let mut s = lock(&self.state);
        let key = &posting.source_hash;
        if s.voided.contains(key) {
            return Ok(Posted::Refused {
                rule: "key_voided".into(),
                detail: "this key was voided".into(),
            });
        }
        if s.postings.contains_key(key) {
            return Ok(Posted::Before);
        }
        if s.held.iter().any(|p| p.source_hash == *key) {
            return Err(StoreError::new(
                TransientKind::Conflict,
                "GL: a request with this key is in progress",
            ));
        }
        if std::mem::take(&mut s.hold_next) {
            s.held.push(posting.clone());
            return Err(timeout());
        }
        apply(&mut s, posting.clone());
        if std::mem::take(&mut s.lose_next_answer) {
            return Err(timeout());
        }
        Ok(Posted::Applied)
    }

    async fn posted(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(lock(&self.state).postings.get(source_hash).map(CommittedRef::from))
    }

    async fn void(&self, source_hash: &str) -> StoreResult<Voided> {
        let mut s = lock(&self.state);
        if s.no_void {
            return Ok(Voided::Unsupported);
        }
        if let Some(p) = s.postings.get(source_hash) {
            return Ok(Voided::Posted(p.into()));
        }
        s.voided.insert(source_hash.to_owned());
        Ok(Voided::Voided)
    }
}
