//! The envelope table in memory, with the same conditions, life-cycle checks, PENDING count and
//! item limits (size, non-empty index keys: `limits`) as DynamoDB's.

use chrono::{DateTime, Utc};
use recon_core::decisions::totals::{Contribution, Totals, TotalsKey, normalized};
use recon_core::domain::approval::ApprovalRequest;
use recon_core::domain::status::{check_initial, check_transition};
use recon_core::domain::{
    AuditRecord, DlqEnvelope, EnvelopeStatus, FailureCode, ReplayClaim, ReplayRecord, StatusChange, TransientKind,
};
use recon_core::ports::{
    ApprovalRequests, AuditOutbox, Backlog, Clock, CreateOutcome, EnvelopePage, EnvelopeStore, EnvelopesOfPeriod,
    Finish, FlowResult, RequestPage, Settled, StoreError, StoreResult, SweepCursors,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::MemoryAuditLog;
use super::journal::{self, ClaimEvent};
use super::limits::{check_envelope_item, check_request_item};
use super::lock;

#[derive(Default)]
struct EnvelopeState {
    envelopes: BTreeMap<String, DlqEnvelope>,
    pending: i64,
    /// Triage's totals (`decisions::totals`), moved with `pending`.
    totals: BTreeMap<TotalsKey, Totals>,
    /// A sum would not fit: the store no longer answers with the totals (as DynamoDB's does once
    /// an item could not hold another envelope's).
    totals_lost: bool,
    overflow: bool,
    episodes: u64,
    cursors: HashMap<String, String>,
    /// Re-injections taken per wall-clock second (the shared rate limit).
    send_windows: HashMap<i64, u32>,
    /// The audit outbox, in the order records were written.
    outbox: Vec<AuditRecord>,
    /// Approval requests by id.
    requests: BTreeMap<String, ApprovalRequest>,
    /// Claims of this envelope fail as DynamoDB's do when another transaction holds an item.
    conflicted: Option<String>,
    /// The status index as DynamoDB serves a global secondary index: eventually consistent. A
    /// write reaches `index` only `delay` after it was made (on the clock's monotonic scale).
    lag: Option<IndexLag>,
    index: BTreeMap<String, DlqEnvelope>,
    /// The trail the records of settlements made together are linked into (`finish_many`), as
    /// the DynamoDB store given the trail does; `None`: through the outbox.
    trail: Option<Arc<MemoryAuditLog>>,
    unindexed: VecDeque<(Duration, DlqEnvelope)>,
    /// Every claim and renewal, in order (`journal`).
    claims: Vec<ClaimEvent>,
    /// Each envelope's claim as its last event left it.
    live: HashMap<String, ClaimEvent>,
}

struct IndexLag {
    delay: Duration,
    clock: Arc<dyn Clock>,
}

impl EnvelopeState {
    /// Store a settled envelope (and count it PENDING again when released).
    fn settle(&mut self, settled: DlqEnvelope) {
        if settled.status == EnvelopeStatus::Pending {
            self.pending += 1;
            self.count(&settled, 1);
        }
        self.indexed(&settled);
        self.envelopes.insert(settled.envelope_id.clone(), settled);
    }

    /// Add `e` to triage's totals (`sign` 1) or take it away (-1).
    fn count(&mut self, e: &DlqEnvelope, sign: i64) {
        let c = Contribution::of(e);
        if self.totals.entry(c.key.clone()).or_default().apply(&c, sign).is_err() {
            self.totals_lost = true;
        }
    }

    /// Record a write for the index.
    fn indexed(&mut self, e: &DlqEnvelope) {
        if let Some(lag) = &self.lag {
            let at = lag.clock.monotonic();
            self.unindexed.push_back((at, e.clone()));
        }
    }

    /// Apply to the index every write older than the delay.
    fn propagate(&mut self) {
        let Some(lag) = &self.lag else { return };
        let now = lag.clock.monotonic();
        while let Some((at, _)) = self.unindexed.front() {
            if now.saturating_sub(*at) < lag.delay {
                break;
            }
            if let Some((_, e)) = self.unindexed.pop_front() {
                self.index.insert(e.envelope_id.clone(), e);
            }
        }
    }
}

/// The envelope table in memory, with the same conditions and pending count as DynamoDB's.
#[derive(Default)]
pub struct MemoryEnvelopeStore {
    state: Mutex<EnvelopeState>,
}

impl MemoryEnvelopeStore {
    /// Link the audit records of settlements made together (`finish_many`) into `trail` in the
    /// step that settles their envelopes, as the DynamoDB store given the trail does (`None`:
    /// through the outbox, the default).
    pub fn link_into(&self, trail: Option<Arc<MemoryAuditLog>>) {
        lock(&self.state).trail = trail;
    }

    /// Make every claim of `envelope_id` fail with a transaction conflict (`None`: no more).
    pub fn conflict_on_claims_of(&self, envelope_id: Option<&str>) {
        lock(&self.state).conflicted = envelope_id.map(str::to_owned);
    }

    /// Serve `list_by_status` from an index that shows each write `delay` after it was made,
    /// as `clock` measures (`None`: consistent, the default).
    pub fn set_index_lag(&self, lag: Option<(Duration, Arc<dyn Clock>)>) {
        let mut s = lock(&self.state);
        s.unindexed.clear();
        s.index = s.envelopes.clone();
        s.lag = lag.map(|(delay, clock)| IndexLag { delay, clock });
    }

    /// How many times the overflow flag was switched on (each crossing of the high-water mark).
    /// Every claim and renewal written, in order.
    pub fn claim_log(&self) -> Vec<ClaimEvent> {
        lock(&self.state).claims.clone()
    }

    pub fn overflow_episodes(&self) -> u64 {
        lock(&self.state).episodes
    }
}

/// A record into the outbox, once (a decision written again keeps its first record).
fn put_in_outbox(outbox: &mut Vec<AuditRecord>, record: &AuditRecord) {
    if !outbox.iter().any(|r| r.audit_id == record.audit_id) {
        outbox.push(record.clone());
    }
}

/// One page of `all` (already in order) after the item whose key is `cursor`, like DynamoDB's
/// `ExclusiveStartKey`: items that leave the listing between pages do not shift the next page.
fn page(
    all: Vec<DlqEnvelope>,
    key: impl Fn(&DlqEnvelope) -> String,
    cursor: Option<String>,
    limit: usize,
) -> EnvelopePage {
    let items: Vec<_> = all
        .into_iter()
        .filter(|e| cursor.as_ref().is_none_or(|c| key(e) > *c))
        .collect();
    let more = items.len() > limit.max(1);
    let items: Vec<_> = items.into_iter().take(limit.max(1)).collect();
    let next = if more { items.last().map(&key) } else { None };
    (items, next)
}

impl EnvelopeStore for MemoryEnvelopeStore {
    async fn create(&self, envelope: &DlqEnvelope) -> FlowResult<CreateOutcome> {
        check_initial(envelope.status)?;
        check_envelope_item(envelope)?;
        let mut s = lock(&self.state);
        if let Some(existing) = s.envelopes.get(&envelope.envelope_id) {
            return Ok(CreateOutcome::Exists(Box::new(existing.clone())));
        }
        if envelope.status == EnvelopeStatus::Pending {
            s.pending += 1;
            s.count(envelope, 1);
        }
        s.envelopes.insert(envelope.envelope_id.clone(), envelope.clone());
        s.indexed(envelope);
        Ok(CreateOutcome::Created)
    }

    async fn get(&self, envelope_id: &str) -> StoreResult<Option<DlqEnvelope>> {
        Ok(lock(&self.state).envelopes.get(envelope_id).cloned())
    }

    async fn list_by_status(
        &self,
        status: EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<EnvelopePage> {
        let mut s = lock(&self.state);
        s.propagate();
        let view = if s.lag.is_none() { &s.envelopes } else { &s.index };
        let mut all: Vec<_> = view.values().filter(|e| e.status == status).cloned().collect();
        all.sort_by_key(DlqEnvelope::age_key);
        Ok(page(all, DlqEnvelope::age_key, cursor, limit))
    }

    async fn list_by_cause(
        &self,
        code: FailureCode,
        cause: &str,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<EnvelopePage> {
        let mut all: Vec<_> = lock(&self.state)
            .envelopes
            .values()
            .filter(|e| e.failure_code == code && e.root_cause == cause)
            .cloned()
            .collect();
        all.sort_by_key(|e| e.index_keys().cause);
        Ok(page(all, |e| e.index_keys().cause, cursor, limit))
    }

    fn cursor_after(&self, e: &DlqEnvelope, group: Option<(FailureCode, &str)>) -> String {
        match group {
            Some(_) => e.index_keys().cause,
            None => e.age_key(),
        }
    }

    async fn list_all(&self, cursor: Option<String>, limit: usize) -> StoreResult<EnvelopePage> {
        let all = lock(&self.state).envelopes.values().cloned().collect();
        Ok(page(all, |e| e.envelope_id.clone(), cursor, limit))
    }

    async fn claim(
        &self,
        envelope_id: &str,
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
        seen: Option<usize>,
    ) -> FlowResult<bool> {
        use EnvelopeStatus::{Pending, Replaying};
        check_transition(Pending, change.status)?;
        let mut s = lock(&self.state);
        if s.conflicted.as_deref() == Some(envelope_id) {
            return Err(StoreError::new(
                TransientKind::Conflict,
                "TransactionCanceledException: [None, TransactionConflict] (injected)",
            )
            .into());
        }
        let Some(e) = s.envelopes.get_mut(envelope_id) else {
            return Ok(false);
        };
        let from_pending = e.status == Pending;
        let expired = e.status == Replaying && e.replay.as_ref().is_some_and(|c| c.lease_until < now);
        if (!from_pending && !expired) || seen.is_some_and(|n| n != e.status_history.len()) {
            return Ok(false);
        }
        let mut claimed = e.clone();
        claimed.status = Replaying;
        claimed.replay = Some(claim.clone());
        claimed.status_history.push(change.clone());
        check_envelope_item(&claimed)?;
        *e = claimed.clone();
        s.indexed(&claimed);
        if from_pending {
            s.pending -= 1;
            s.count(&claimed, -1);
        }
        let event = ClaimEvent {
            at: journal::tick(),
            envelope_id: envelope_id.to_owned(),
            replay_id: claim.replay_id.clone(),
            now,
            lease_until: claim.lease_until,
            renewal: false,
            intent: change.manual_journal,
            took_over: if expired {
                s.live.get(envelope_id).cloned().map(Box::new)
            } else {
                None
            },
        };
        s.claims.push(event.clone());
        s.live.insert(envelope_id.to_owned(), event);
        Ok(true)
    }

    async fn renew(
        &self,
        envelope_id: &str,
        replay_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        change: &StatusChange,
    ) -> FlowResult<bool> {
        recon_core::domain::status::check_renewal(change.status)?;
        let mut s = lock(&self.state);
        let Some(e) = s.envelopes.get_mut(envelope_id) else {
            return Ok(false);
        };
        let ours = e.status == EnvelopeStatus::Replaying
            && e.replay
                .as_ref()
                .is_some_and(|c| c.replay_id == replay_id && c.lease_until >= now);
        if !ours {
            return Ok(false);
        }
        let mut renewed = e.clone();
        renewed.status_history.push(change.clone());
        if let Some(c) = renewed.replay.as_mut() {
            c.lease_until = lease_until;
        }
        check_envelope_item(&renewed)?;
        *e = renewed.clone();
        s.indexed(&renewed);
        let event = ClaimEvent {
            at: journal::tick(),
            envelope_id: envelope_id.to_owned(),
            replay_id: replay_id.to_owned(),
            now,
            lease_until,
            renewal: true,
            intent: change.manual_journal,
            took_over: None,
        };
        s.claims.push(event.clone());
        s.live.insert(envelope_id.to_owned(), event);
        Ok(true)
    }

    async fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &StatusChange,
        record: &ReplayRecord,
        audit: Option<&AuditRecord>,
    ) -> FlowResult<bool> {
        check_transition(EnvelopeStatus::Replaying, change.status)?;
        let mut s = lock(&self.state);
        let Some(settled) = settled(&s, envelope_id, replay_id, change, record)? else {
            return Ok(false);
        };
        s.settle(settled);
        if let Some(r) = audit {
            put_in_outbox(&mut s.outbox, r);
        }
        Ok(true)
    }

    async fn finish_many(&self, replay_id: &str, settlements: &[Finish<'_>]) -> Vec<FlowResult<Settled>> {
        let trail = lock(&self.state).trail.clone();
        let mut answers = Vec::with_capacity(settlements.len());
        for f in settlements {
            let id = &f.envelope.envelope_id;
            answers.push(match (&trail, f.audit) {
                (Some(trail), Some(r)) => self.finish_linked(id, replay_id, f.change, f.record, trail, r),
                _ => self
                    .finish(id, replay_id, f.change, f.record, f.audit)
                    .await
                    .map(Settled::in_outbox),
            });
        }
        answers
    }
}

impl MemoryEnvelopeStore {
    /// [`EnvelopeStore::finish`] with the record linked into `trail` in the same step: both or
    /// neither. A record already in the trail goes to the outbox (its publication finds it there).
    fn finish_linked(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &StatusChange,
        record: &ReplayRecord,
        trail: &MemoryAuditLog,
        audit: &AuditRecord,
    ) -> FlowResult<Settled> {
        check_transition(EnvelopeStatus::Replaying, change.status)?;
        let mut s = lock(&self.state);
        let Some(settled) = settled(&s, envelope_id, replay_id, change, record)? else {
            return Ok(Settled::ClaimLost);
        };
        let linked = trail.append_now(audit)?;
        s.settle(settled);
        Ok(match linked {
            Some(seq) => Settled::InTrail(seq),
            None => {
                put_in_outbox(&mut s.outbox, audit);
                Settled::InOutbox
            }
        })
    }
}

/// The envelope as `change` settles it, if it is REPLAYING under `replay_id` (`None`: the claim
/// was lost); nothing written.
fn settled(
    s: &EnvelopeState,
    envelope_id: &str,
    replay_id: &str,
    change: &StatusChange,
    record: &ReplayRecord,
) -> FlowResult<Option<DlqEnvelope>> {
    let Some(e) = s.envelopes.get(envelope_id) else {
        return Ok(None);
    };
    if e.status != EnvelopeStatus::Replaying || e.replay.as_ref().is_none_or(|c| c.replay_id != replay_id) {
        return Ok(None);
    }
    let mut settled = e.clone();
    settled.status = change.status;
    settled.status_history.push(change.clone());
    settled.replays.push(record.clone());
    check_envelope_item(&settled)?;
    Ok(Some(settled))
}

impl EnvelopesOfPeriod for MemoryEnvelopeStore {
    async fn envelopes_of_period(&self, period: Option<&str>) -> StoreResult<Vec<DlqEnvelope>> {
        let s = lock(&self.state);
        Ok(s.envelopes
            .values()
            .filter(|e| e.accounting_period.as_deref() == period)
            .cloned()
            .collect())
    }
    /// Every envelope is found by its period here (there is no index to lag or to backfill).
    async fn periods_indexed(&self) -> StoreResult<bool> {
        Ok(true)
    }
}

impl SweepCursors for MemoryEnvelopeStore {
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

    async fn take_sends(&self, second: i64, n: u32, limit: u32) -> StoreResult<bool> {
        let mut s = lock(&self.state);
        let taken = s.send_windows.entry(second).or_default();
        // The same condition as the DynamoDB item's: the first take, or room for all n.
        if *taken == 0 || taken.saturating_add(n) <= limit {
            *taken = taken.saturating_add(n);
            return Ok(true);
        }
        Ok(false)
    }
}

impl Backlog for MemoryEnvelopeStore {
    async fn pending_count(&self) -> StoreResult<i64> {
        Ok(lock(&self.state).pending)
    }

    async fn triage_totals(&self) -> StoreResult<Option<BTreeMap<TotalsKey, Totals>>> {
        let s = lock(&self.state);
        Ok((!s.totals_lost).then(|| normalized(s.totals.clone())))
    }

    async fn raise_overflow(&self, record: &(dyn Fn(u64) -> AuditRecord + Sync)) -> StoreResult<Option<u64>> {
        let mut s = lock(&self.state);
        if s.overflow {
            return Ok(None);
        }
        s.overflow = true;
        s.episodes += 1;
        let episode = s.episodes;
        put_in_outbox(&mut s.outbox, &record(episode));
        Ok(Some(episode))
    }

    async fn clear_overflow(&self) -> StoreResult<()> {
        lock(&self.state).overflow = false;
        Ok(())
    }
}

impl AuditOutbox for MemoryEnvelopeStore {
    async fn pending_records(&self, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        Ok(lock(&self.state).outbox.iter().take(limit).cloned().collect())
    }

    async fn record_written(&self, audit_id: &str) -> StoreResult<()> {
        lock(&self.state).outbox.retain(|r| r.audit_id != audit_id);
        Ok(())
    }
}

impl ApprovalRequests for MemoryEnvelopeStore {
    async fn create_request(&self, r: &ApprovalRequest, record: &AuditRecord) -> StoreResult<bool> {
        check_request_item(r)?;
        let mut s = lock(&self.state);
        if s.requests.contains_key(&r.request_id) {
            return Ok(false);
        }
        s.requests.insert(r.request_id.clone(), r.clone());
        put_in_outbox(&mut s.outbox, record);
        Ok(true)
    }

    async fn get_request(&self, id: &str) -> StoreResult<Option<ApprovalRequest>> {
        Ok(lock(&self.state).requests.get(id).cloned())
    }

    async fn list_requests(&self, cursor: Option<String>, limit: usize) -> StoreResult<RequestPage> {
        let s = lock(&self.state);
        let mut all: Vec<&ApprovalRequest> = s.requests.values().collect();
        all.sort_by(|a, b| (b.created_at, &b.request_id).cmp(&(a.created_at, &a.request_id)));
        let skip: usize = cursor.as_deref().and_then(|c| c.parse().ok()).unwrap_or(0);
        let page: Vec<ApprovalRequest> = all.iter().skip(skip).take(limit.max(1)).map(|r| (*r).clone()).collect();
        let next = (skip + page.len() < all.len()).then(|| (skip + page.len()).to_string());
        Ok((page, next))
    }

    async fn update_request(&self, r: &ApprovalRequest, record: Option<&AuditRecord>) -> StoreResult<bool> {
        check_request_item(r)?;
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        match s.requests.get_mut(&r.request_id) {
            Some(stored) if stored.version + 1 == r.version => {
                *stored = r.clone();
                if let Some(record) = record {
                    put_in_outbox(&mut s.outbox, record);
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
