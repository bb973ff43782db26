//! A general ledger behind an HTTP posting API, as the reservation protocol
//! (`recon_core::reservation`) meets one: idempotent on its key, and slow in the ways that matter.
//! A request may still be applied after its client gave up (a timeout, a dropped connection, a
//! crashed invocation), up to `max_late` later; while it is being applied, a second request under
//! its key gets `409` and a read gets `404`; a key the GL holds answers `200` (the posting it holds
//! was made by whichever delivery got there first). It keeps a key for a retention of its own, at
//! least as long as the contract asks; a post under a forgotten key is applied again. It may void
//! keys, or not. Faults before and after the effect (a lost answer) come from the injector in front
//! of it.
//!
//! Late applications are due at a virtual instant and applied when the GL is next asked anything
//! (or read by the oracle): nothing can observe the difference.

use recon_core::domain::{CommittedRef, Posting, TransientKind, TxKey};
use recon_core::ports::Clock;
use recon_core::ports::{
    ExternalLedger, LedgerReader, LedgerScope, Posted, PostingPage, StoreError, StoreResult, Voided,
};
use recon_core::reservation::IN_DOUBT_HOURS;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use super::clock::SimClock;
use super::exec::yield_now;
use super::rng::{Rng, SharedRng};
use super::trace::Trace;
use crate::memory::lock;

/// How the GL misbehaves in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlPlan {
    /// Posts the GL takes longer over than the client waits (`CLIENT_TIMEOUT`): applied up to
    /// `max_late` after they arrived, the client having given up. Within the contract:
    /// `max_late` is at most the reservation protocol's `in_doubt_for`.
    pub late_ppm: u32,
    pub max_late: Duration,
    /// Whether the GL has the void call.
    pub voids: bool,
    /// How long it keeps an idempotency key after applying it (at least `in_doubt_for`, as the
    /// contract asks): a post under an older key is applied again.
    pub key_retention: Duration,
}

impl GlPlan {
    pub fn draw(rng: &mut Rng) -> Self {
        let in_doubt = IN_DOUBT_HOURS as u64 * 3600;
        GlPlan {
            late_ppm: rng.between(0, 400_000) as u32,
            max_late: Duration::from_secs(rng.between(1, in_doubt)),
            voids: rng.chance(700_000),
            key_retention: Duration::from_secs(rng.between(in_doubt, 10 * 24 * 3600)),
        }
    }
}

/// How long the client waits for an answer (the HTTP ledger's request timeout).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct GlState {
    /// Applied postings, in order (a key applied again after its retention is a second one).
    postings: Vec<Posting>,
    /// Idempotency keys: key -> when applied (forgotten after the retention).
    keys: BTreeMap<String, Duration>,
    /// Requests still being applied: key -> (due, the posting).
    in_progress: BTreeMap<String, (Duration, Posting)>,
    /// Keys voided: nothing under them is applied.
    voided: BTreeSet<String>,
    /// Every key applied, in order (`journal`).
    applied: Vec<(u64, String)>,
}

pub struct SimGl {
    clock: SimClock,
    rng: SharedRng,
    trace: Trace,
    plan: GlPlan,
    state: Mutex<GlState>,
}

impl SimGl {
    pub fn new(clock: SimClock, rng: SharedRng, trace: Trace, plan: GlPlan) -> Self {
        SimGl {
            clock,
            rng,
            trace,
            plan,
            state: Mutex::default(),
        }
    }

    /// Apply every request due by now, and forget the keys past their retention.
    fn catch_up(&self, s: &mut GlState) {
        let now = self.clock.elapsed();
        let due: Vec<String> = s
            .in_progress
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some((_, posting)) = s.in_progress.remove(&key) {
                let what = if s.voided.contains(&key) {
                    "refuses (voided)"
                } else {
                    "applies"
                };
                self.trace.log(
                    &self.clock,
                    format!("GL {what} the late post of {key} (SQS {})", posting.sqs_message_id),
                );
                self.apply(s, posting, now);
            }
        }
        let retention = self.plan.key_retention;
        s.keys.retain(|_, at| now.saturating_sub(*at) < retention);
    }

    fn apply(&self, s: &mut GlState, posting: Posting, now: Duration) {
        let key = posting.source_hash.clone();
        if s.voided.contains(&key) || s.keys.contains_key(&key) {
            return;
        }
        s.applied.push((crate::memory::journal::tick(), key.clone()));
        s.keys.insert(key, now);
        s.postings.push(posting);
    }

    /// When each key was applied, in order (requests still due not applied).
    pub fn commit_log(&self) -> Vec<(u64, String)> {
        lock(&self.state).applied.clone()
    }

    /// Every posting applied, with every request still due applied first (the run is over).
    pub fn postings(&self) -> Vec<Posting> {
        let mut s = lock(&self.state);
        let pending: Vec<Posting> = std::mem::take(&mut s.in_progress)
            .into_values()
            .map(|(_, p)| p)
            .collect();
        let now = self.clock.elapsed();
        for p in pending {
            self.apply(&mut s, p, now);
        }
        s.postings.clone()
    }

    /// Post `p` behind the API's back (an outsider with access to the GL), its key or not.
    pub fn insert(&self, p: Posting) {
        let mut s = lock(&self.state);
        s.postings.push(p);
    }

    /// Remove the postings under `key` behind the API's back; whether there were any.
    pub fn remove(&self, key: &str) -> bool {
        let mut s = lock(&self.state);
        let before = s.postings.len();
        s.postings.retain(|p| p.source_hash != key);
        before != s.postings.len()
    }

    /// The postings applied so far (requests in progress left so).
    pub fn postings_now(&self) -> Vec<Posting> {
        lock(&self.state).postings.clone()
    }
}

impl ExternalLedger for SimGl {
    async fn post(&self, posting: &Posting) -> StoreResult<Posted> {
        yield_now().await;
        let late = {
            let mut s = lock(&self.state);
            self.catch_up(&mut s);
            let key = &posting.source_hash;
            if s.voided.contains(key) {
                return Ok(Posted::Refused {
                    rule: "HTTP422:key_voided".into(),
                    detail: "this key was voided".into(),
                });
            }
            if s.keys.contains_key(key) {
                // 200: posted before under this key (by whichever delivery was first).
                return Ok(Posted::Before);
            }
            if s.in_progress.contains_key(key) {
                // The request in progress may finish first, and this one is answered from the key.
                if self.rng.get().chance(500_000)
                    && let Some((_, earlier)) = s.in_progress.remove(key)
                {
                    self.apply(&mut s, earlier, self.clock.elapsed());
                    return Ok(Posted::Before);
                }
                return Err(StoreError::new(
                    TransientKind::Conflict,
                    "POST /postings: HTTP 409 (a request with this key is in progress)",
                ));
            }
            let late = {
                let mut g = self.rng.get();
                g.chance(self.plan.late_ppm).then(|| {
                    let by = Duration::from_millis(g.between(1, self.plan.max_late.as_millis() as u64));
                    self.clock.elapsed() + by
                })
            };
            match late {
                Some(due) => {
                    s.in_progress.insert(key.clone(), (due, posting.clone()));
                }
                None => self.apply(&mut s, posting.clone(), self.clock.elapsed()),
            }
            late
        };
        if late.is_some() {
            // The client waits, then gives up; the GL goes on (and applies it when it is due).
            self.clock.sleep(CLIENT_TIMEOUT).await;
            return Err(StoreError::new(
                TransientKind::Timeout,
                "POST /postings: operation timed out",
            ));
        }
        Ok(Posted::Applied)
    }

    async fn posted(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(LedgerReader::posting(self, &TxKey::hash_only(source_hash))
            .await?
            .map(|p| (&p).into()))
    }

    async fn void(&self, source_hash: &str) -> StoreResult<Voided> {
        yield_now().await;
        if !self.plan.voids {
            return Ok(Voided::Unsupported);
        }
        let mut s = lock(&self.state);
        self.catch_up(&mut s);
        if let Some(p) = s.postings.iter().find(|p| p.source_hash == source_hash) {
            return Ok(Voided::Posted(p.into()));
        }
        s.voided.insert(source_hash.to_owned());
        Ok(Voided::Voided)
    }
}

/// A general ledger keeps a posting under its idempotency key alone: the period is not asked.
impl LedgerReader for SimGl {
    async fn posting(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        let mut s = lock(&self.state);
        self.catch_up(&mut s);
        Ok(s.postings.iter().find(|p| p.source_hash == key.source_hash).cloned())
    }

    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        let mut s = lock(&self.state);
        self.catch_up(&mut s);
        // As the HTTP ledger: the API does not split a read, segment 0 reads the scope.
        if scope.segment.is_some_and(|seg| seg.index > 0) {
            return Ok(PostingPage::default());
        }
        let limit = limit.max(1);
        // In (source_hash, order applied) order; the cursor is `<hash>/<index>`.
        let mut all: Vec<(String, &Posting)> = s
            .postings
            .iter()
            .enumerate()
            .filter(|(_, p)| scope.covers(p))
            .map(|(i, p)| (format!("{}/{i:08}", p.source_hash), p))
            .filter(|(k, _)| cursor.is_none_or(|c| k.as_str() > c))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let more = all.len() > limit;
        all.truncate(limit);
        let next = more.then(|| all.last().map(|(k, _)| k.clone())).flatten();
        Ok(PostingPage {
            postings: all.into_iter().map(|(_, p)| p.clone()).collect(),
            next,
        })
    }

    /// A general ledger knows no hand-offs: they are in the dedup table.
    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        Ok(Vec::new())
    }
}
