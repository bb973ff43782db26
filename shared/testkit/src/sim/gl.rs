//! A general ledger behind an HTTP posting API, as the claim protocol (`recon_core::claim`) meets
//! one: idempotent on its key, and slow in the ways that matter. A request may still be applied
//! after its client gave up (a timeout, a dropped connection, a crashed invocation), up to
//! `max_late` later; while it is being applied, a second request under its key gets `409` and a
//! read gets `404`; a key the GL holds answers `200` with the posting it holds, made by whichever
//! delivery got there first. Faults before and after the effect (a lost answer) come from the
//! injector in front of it, as for every port.
//!
//! Late applications are due at a virtual instant and applied when the GL is next asked anything
//! (or read by the oracle): nothing can observe the difference.

use recon_core::domain::{CommittedRef, Posting, TransientKind};
use recon_core::ports::Clock;
use recon_core::ports::{ExternalLedger, LedgerReader, LedgerScope, Posted, PostingPage, StoreError, StoreResult};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use super::exec::{SimClock, yield_now};
use super::rng::{Rng, SharedRng};
use super::trace::Trace;
use crate::memory::lock;

/// How the GL misbehaves in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlPlan {
    /// Posts the GL takes longer over than the client waits (`CLIENT_TIMEOUT`): applied up to
    /// `max_late` after they arrived, the client having given up.
    pub late_ppm: u32,
    pub max_late: Duration,
}

impl GlPlan {
    pub fn draw(rng: &mut Rng) -> Self {
        GlPlan {
            late_ppm: rng.between(0, 400_000) as u32,
            max_late: Duration::from_secs(rng.between(1, 3 * 3600)),
        }
    }
}

/// How long the client waits for an answer (the HTTP ledger's request timeout).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct GlState {
    /// Applied postings, by idempotency key.
    postings: BTreeMap<String, Posting>,
    /// Requests still being applied: key -> (due, the posting).
    in_progress: BTreeMap<String, (Duration, Posting)>,
    /// How often each key was applied (1 at most: the GL's own idempotency).
    applied: BTreeMap<String, u32>,
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

    /// Apply every request due by now.
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
                self.trace.log(
                    &self.clock,
                    format!("GL applies the late post of {key} (SQS {})", posting.sqs_message_id),
                );
                apply(s, posting);
            }
        }
    }

    /// Every posting applied, with every request still due applied first (the run is over).
    pub fn postings(&self) -> Vec<Posting> {
        let mut s = lock(&self.state);
        let pending: Vec<Posting> = std::mem::take(&mut s.in_progress)
            .into_values()
            .map(|(_, p)| p)
            .collect();
        for p in pending {
            apply(&mut s, p);
        }
        s.postings.values().cloned().collect()
    }

    /// Keys applied more than once.
    pub fn applied_twice(&self) -> Vec<(String, u32)> {
        lock(&self.state)
            .applied
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    }
}

fn apply(s: &mut GlState, posting: Posting) {
    let key = posting.source_hash.clone();
    if s.postings.contains_key(&key) {
        return;
    }
    *s.applied.entry(key.clone()).or_default() += 1;
    s.postings.insert(key, posting);
}

impl ExternalLedger for SimGl {
    async fn post(&self, posting: &Posting) -> StoreResult<Posted> {
        yield_now().await;
        let late = {
            let mut s = lock(&self.state);
            self.catch_up(&mut s);
            let key = &posting.source_hash;
            if s.postings.contains_key(key) {
                // 200: posted before under this key (by whichever delivery was first).
                return Ok(Posted::Posted);
            }
            if s.in_progress.contains_key(key) {
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
                None => apply(&mut s, posting.clone()),
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
        Ok(Posted::Posted)
    }

    async fn posted(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(LedgerReader::posting(self, source_hash).await?.map(|p| (&p).into()))
    }
}

impl LedgerReader for SimGl {
    async fn posting(&self, source_hash: &str) -> StoreResult<Option<Posting>> {
        let mut s = lock(&self.state);
        self.catch_up(&mut s);
        Ok(s.postings.get(source_hash).cloned())
    }

    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        let mut s = lock(&self.state);
        self.catch_up(&mut s);
        // As the HTTP ledger: the API does not split a read, segment 0 reads the scope.
        if scope.segment.is_some_and(|seg| seg.index > 0) {
            return Ok(PostingPage::default());
        }
        let limit = limit.max(1);
        let mut postings: Vec<Posting> = s
            .postings
            .values()
            .filter(|p| scope.covers(p) && cursor.is_none_or(|c| p.source_hash.as_str() > c))
            .take(limit + 1)
            .cloned()
            .collect();
        let more = postings.len() > limit;
        postings.truncate(limit);
        let next = more.then(|| postings.last().map(|p| p.source_hash.clone())).flatten();
        Ok(PostingPage { postings, next })
    }

    /// A general ledger knows no hand-offs: they are in the dedup table.
    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        Ok(Vec::new())
    }
}
