//! The replay flow: re-inject fixed dead letters into the main queue, through three gates, so
//! that every replayed transaction posts exactly once and nothing reaches the ledger that must
//! not.
//!
//! One code path serves both triggers: a scheduled sweep over PENDING envelopes (resuming from a
//! persisted cursor), and a hand-invoked replay with a selector, a reason and an actor.
//!
//! For each selected envelope, oldest first:
//! - **gate 1, integrity**: the verbatim original decodes and its currency/scale validate with
//!   today's code and reference data (the consumer's own functions); still poison -> stays
//!   PENDING; unrecoverable -> quarantine;
//! - **gate 2, idempotency**: its `source_hash` is not committed in the ledger the consumer writes
//!   (else `REPLAY_DUPLICATE`: `SUPPRESSED_DUPLICATE`, never re-injected);
//! - **gate 3, temporal**: its accounting period is open and it is inside the replay window (else
//!   quarantine, flagged for a manual journal);
//! - a **replay cap**: an envelope whose message was already replayed `max_replays` times goes to
//!   quarantine for review.
//!
//! Every state change happens under a **claim**: a conditional `PENDING -> REPLAYING` with a replay
//! id and a lease (an expired lease can be taken over). Under the claim gate 2 is asked again,
//! then the original bytes are sent verbatim (with `replay.*` attributes), then the envelope is
//! marked `REPLAYED`. Two sweeps never both re-inject an envelope; a crash between the send and
//! the mark leaves a lease that expires, and the next sweep's gate 2 (or the consumer's
//! conditional commit) keeps the posting single.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::message::{check_currency, check_period, decode};
use crate::domain::{
    AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, FailureCode, ProcessError, ReferenceSnapshot, ReplayClaim,
    ReplayRecord, StatusChange, envelope::sha256_hex,
};
use crate::enrich::{check_overflow, envelope_audit, original_body};
use crate::ports::{
    AuditLog, Clock, EnvelopeStore, Ledger, Metric, Metrics, OutgoingMessage, ReferenceData, ReplayQueue, StoreResult,
    Worm,
};
use crate::resources::attrs;

/// Name of the persisted cursor of the scheduled sweep.
pub const SCHEDULE_CURSOR: &str = "schedule";
/// Report at most this many per-envelope lines (the counts are always complete).
pub const MAX_REPORT_ITEMS: usize = 200;
/// SQS allows ten message attributes; the replay adds four.
const MAX_ATTRIBUTES: usize = 10;

#[derive(Clone, Debug)]
pub struct ReplayConfig {
    pub actor: String,
    /// How long a claim protects a re-injection in progress.
    pub lease: ChronoDuration,
    /// Replays of one message before it goes to quarantine for review.
    pub max_replays: u32,
    /// Envelopes dead-lettered longer ago than this are quarantined, not replayed.
    pub replay_window: ChronoDuration,
    /// Re-injections per second (0: no limit).
    pub rate_per_sec: u32,
    /// Stop when the main queue has more visible messages than this.
    pub main_queue_high_water: u64,
    /// Envelopes whose gates are evaluated at once.
    pub concurrency: usize,
    pub page_size: usize,
    pub overflow_high_water: i64,
    /// Stop starting new work when less than this is left of the time budget.
    pub deadline_margin: Duration,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            actor: "replay".into(),
            lease: ChronoDuration::minutes(5),
            max_replays: 3,
            replay_window: ChronoDuration::days(90),
            rate_per_sec: 50,
            main_queue_high_water: 10_000,
            concurrency: 8,
            page_size: 100,
            overflow_high_water: crate::resources::DEFAULT_OVERFLOW_HIGH_WATER,
            deadline_margin: Duration::from_secs(5),
        }
    }
}

/// Which envelopes a replay considers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Selector {
    pub failure_code: Option<FailureCode>,
    /// Exact root cause, or a prefix ending in `*` (`UNMAPPED_CURRENCY:*`).
    pub root_cause: Option<String>,
    pub entity: Option<String>,
    pub envelope_ids: Vec<String>,
    pub max_items: Option<usize>,
}

impl Selector {
    pub fn matches(&self, e: &DlqEnvelope) -> bool {
        self.failure_code.is_none_or(|c| c == e.failure_code)
            && self.root_cause.as_deref().is_none_or(|r| match r.strip_suffix('*') {
                Some(prefix) => e.root_cause.starts_with(prefix),
                None => e.root_cause == r,
            })
            && self
                .entity
                .as_deref()
                .is_none_or(|x| e.ledger_entity.as_deref() == Some(x))
    }
}

/// A replay to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayRequest {
    pub selector: Selector,
    pub dry_run: bool,
    pub reason: String,
    pub triggered_by: String,
    /// A scheduled sweep resumes from (and saves) the persisted cursor.
    pub scheduled: bool,
    /// Operator decision: quarantine every selected envelope (for a manual journal) instead of
    /// replaying it — for records whose root cause cannot be fixed.
    pub quarantine: bool,
}

/// The payload of a hand-invoked replay. Unknown fields are refused: a typo in a selector must
/// not silently widen a replay.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManualReplay {
    pub reason: String,
    pub triggered_by: String,
    #[serde(default)]
    pub failure_code: Option<FailureCode>,
    #[serde(default)]
    pub root_cause: Option<String>,
    #[serde(default)]
    pub entity: Option<String>,
    #[serde(default)]
    pub envelope_ids: Vec<String>,
    #[serde(default)]
    pub max_items: Option<usize>,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid replay request: {0}")]
pub struct RequestError(pub String);

impl ManualReplay {
    pub fn into_request(self) -> Result<ReplayRequest, RequestError> {
        if self.reason.trim().is_empty() {
            return Err(RequestError(
                "`reason` must say why this replay is run (it is audited)".into(),
            ));
        }
        if self.triggered_by.trim().is_empty() {
            return Err(RequestError(
                "`triggered_by` must name who runs this replay (it is audited)".into(),
            ));
        }
        if self.max_items == Some(0) {
            return Err(RequestError("`max_items` must be at least 1".into()));
        }
        Ok(ReplayRequest {
            selector: Selector {
                failure_code: self.failure_code,
                root_cause: self.root_cause,
                entity: self.entity,
                envelope_ids: self.envelope_ids,
                max_items: self.max_items,
            },
            dry_run: self.dry_run,
            reason: self.reason,
            triggered_by: self.triggered_by,
            scheduled: false,
            quarantine: false,
        })
    }
}

/// Read a Lambda payload: an EventBridge scheduled event starts a sweep; anything else must be a
/// [`ManualReplay`].
pub fn parse_invocation(payload: &serde_json::Value) -> Result<ReplayRequest, RequestError> {
    if payload.get("detail-type").and_then(|d| d.as_str()) == Some("Scheduled Event") {
        let rule = payload
            .get("resources")
            .and_then(|r| r.get(0))
            .and_then(|r| r.as_str())
            .or_else(|| payload.get("source").and_then(|s| s.as_str()))
            .unwrap_or("schedule");
        return Ok(ReplayRequest {
            selector: Selector::default(),
            dry_run: false,
            reason: "scheduled sweep".into(),
            triggered_by: format!("schedule:{rule}"),
            scheduled: true,
            quarantine: false,
        });
    }
    let manual: ManualReplay = serde_json::from_value(payload.clone()).map_err(|e| RequestError(e.to_string()))?;
    manual.into_request()
}

/// Which gate decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Gate {
    Integrity,
    Idempotency,
    Temporal,
    ReplayCap,
    /// An operator quarantined it by hand.
    Operator,
}

/// What the gates say about an envelope (read-only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Reinject,
    Duplicate {
        committed_by: String,
    },
    StillFailing {
        gate: Gate,
        detail: String,
    },
    Quarantine {
        gate: Gate,
        detail: String,
        manual_journal: bool,
    },
}

/// What happened to one envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayItem {
    pub envelope_id: String,
    /// `REINJECTED`, `SUPPRESSED_DUPLICATE`, `STILL_FAILING`, `QUARANTINED`, `SKIPPED` (dry runs
    /// say `WOULD_REINJECT`, `WOULD_SUPPRESS`, `WOULD_QUARANTINE`).
    pub outcome: &'static str,
    pub gate: Option<Gate>,
    pub detail: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub replay_id: String,
    pub triggered_by: String,
    pub reason: String,
    pub dry_run: bool,
    pub selected: u64,
    pub reinjected: u64,
    pub suppressed_duplicate: u64,
    pub still_failing: u64,
    pub quarantined: u64,
    pub skipped: u64,
    /// True when the sweep reached the end of the selection.
    pub completed: bool,
    /// Why it stopped early (time budget, back-pressure, max_items).
    pub stopped: Option<String>,
    pub items: Vec<ReplayItem>,
    pub items_truncated: bool,
}

impl ReplayReport {
    fn push(&mut self, item: ReplayItem) {
        match item.outcome {
            "REINJECTED" | "WOULD_REINJECT" => self.reinjected += 1,
            "SUPPRESSED_DUPLICATE" | "WOULD_SUPPRESS" => self.suppressed_duplicate += 1,
            "STILL_FAILING" => self.still_failing += 1,
            "QUARANTINED" | "WOULD_QUARANTINE" => self.quarantined += 1,
            _ => self.skipped += 1,
        }
        if self.items.len() < MAX_REPORT_ITEMS {
            self.items.push(item);
        } else {
            self.items_truncated = true;
        }
    }
}

/// Called after every page with the report so far (progress display).
pub type Progress = Arc<dyn Fn(&ReplayReport) + Send + Sync>;

pub struct Replayer<S, L, R, Q, W, A, M> {
    pub progress: Option<Progress>,
    pub store: S,
    pub ledger: L,
    pub reference: R,
    pub queue: Q,
    pub worm: W,
    pub audit: A,
    pub metrics: M,
    pub clock: Arc<dyn Clock>,
    pub config: ReplayConfig,
}

/// Per-run context.
struct Run<'a> {
    req: &'a ReplayRequest,
    replay_id: String,
    snapshot: Arc<ReferenceSnapshot>,
    started: Instant,
    deadline: Option<Instant>,
    sent: u64,
}

fn item(e: &DlqEnvelope, outcome: &'static str, gate: Option<Gate>, detail: impl Into<String>) -> ReplayItem {
    ReplayItem {
        envelope_id: e.envelope_id.clone(),
        outcome,
        gate,
        detail: detail.into(),
    }
}

impl<S, L, R, Q, W, A, M> Replayer<S, L, R, Q, W, A, M>
where
    S: EnvelopeStore,
    L: Ledger,
    R: ReferenceData,
    Q: ReplayQueue,
    W: Worm,
    A: AuditLog,
    M: Metrics,
{
    async fn verdict_for(
        &self,
        req: &ReplayRequest,
        e: &DlqEnvelope,
        snapshot: &ReferenceSnapshot,
        now: DateTime<Utc>,
    ) -> StoreResult<Verdict> {
        if req.quarantine {
            return Ok(Verdict::Quarantine {
                gate: Gate::Operator,
                detail: req.reason.clone(),
                manual_journal: true,
            });
        }
        self.verdict(e, snapshot, now).await
    }

    /// Evaluate the gates for one envelope (reads only).
    pub async fn verdict(
        &self,
        e: &DlqEnvelope,
        snapshot: &ReferenceSnapshot,
        now: DateTime<Utc>,
    ) -> StoreResult<Verdict> {
        if e.replay_generation >= self.config.max_replays {
            return Ok(Verdict::Quarantine {
                gate: Gate::ReplayCap,
                detail: format!(
                    "already replayed {} times: a repeat offender, review by hand",
                    e.replay_generation
                ),
                manual_journal: false,
            });
        }
        let Some(body) = original_body(e, &self.worm).await? else {
            return Ok(Verdict::Quarantine {
                gate: Gate::Integrity,
                detail: "the original body is missing".into(),
                manual_journal: false,
            });
        };
        let msg = match decode(&body) {
            Ok(m) => m,
            Err(ProcessError::Unrecoverable { cause, detail }) => {
                return Ok(Verdict::Quarantine {
                    gate: Gate::Integrity,
                    detail: format!("{cause}: {detail}"),
                    manual_journal: false,
                });
            }
            Err(e) => {
                return Ok(Verdict::StillFailing {
                    gate: Gate::Integrity,
                    detail: e.to_string(),
                });
            }
        };
        if let Err(err) = check_currency(&msg, snapshot) {
            return Ok(Verdict::StillFailing {
                gate: Gate::Integrity,
                detail: err.to_string(),
            });
        }
        if let Some(committed) = self.ledger.lookup(&msg.source_hash).await? {
            return Ok(Verdict::Duplicate {
                committed_by: committed.sqs_message_id,
            });
        }
        if let Err(err) = check_period(&msg, snapshot) {
            return Ok(Verdict::Quarantine {
                gate: Gate::Temporal,
                detail: err.to_string(),
                manual_journal: true,
            });
        }
        if now - e.dead_lettered_at > self.config.replay_window {
            return Ok(Verdict::Quarantine {
                gate: Gate::Temporal,
                detail: format!(
                    "dead-lettered {} days ago, beyond the replay window of {} days",
                    (now - e.dead_lettered_at).num_days(),
                    self.config.replay_window.num_days()
                ),
                manual_journal: true,
            });
        }
        Ok(Verdict::Reinject)
    }

    /// Run a replay. `deadline` is the end of the time budget (the Lambda deadline).
    pub async fn run(&self, req: &ReplayRequest, deadline: Option<Instant>) -> StoreResult<ReplayReport> {
        let now = self.clock.now();
        let replay_id = format!(
            "rpl_{}",
            &sha256_hex(format!("{}{:?}", now.to_rfc3339(), Instant::now()).as_bytes())[..20]
        );
        let mut run = Run {
            req,
            replay_id: replay_id.clone(),
            snapshot: self.reference.snapshot().await?,
            started: Instant::now(),
            deadline,
            sent: 0,
        };
        let mut report = ReplayReport {
            replay_id,
            triggered_by: req.triggered_by.clone(),
            reason: req.reason.clone(),
            dry_run: req.dry_run,
            ..ReplayReport::default()
        };
        tracing::info!(replay_id = %run.replay_id, triggered_by = %req.triggered_by, reason = %req.reason, dry_run = req.dry_run, selector = ?req.selector, "replay started");

        if !req.selector.envelope_ids.is_empty() {
            let mut page = Vec::new();
            for id in &req.selector.envelope_ids {
                match self.store.get(id).await? {
                    Some(e) => page.push(e),
                    None => report.push(ReplayItem {
                        envelope_id: id.clone(),
                        outcome: "SKIPPED",
                        gate: None,
                        detail: "no such envelope".into(),
                    }),
                }
            }
            let page: Vec<DlqEnvelope> = page.into_iter().filter(|e| req.selector.matches(e)).collect();
            self.process_page(&mut run, page, &mut report).await?;
            report.completed = report.stopped.is_none();
        } else {
            self.sweep(&mut run, &mut report).await?;
        }

        if req.scheduled && !req.dry_run {
            // Each scheduled sweep also seals the audit chains into the WORM bucket.
            let (key, seal) = crate::evidence::seal(&self.audit, &self.worm, self.clock.now()).await?;
            tracing::info!(seal = %key, root = %seal.root, chains = seal.heads.len(), "audit chains sealed");
        }
        if !req.dry_run {
            check_overflow(
                &self.store,
                &self.audit,
                &self.metrics,
                self.config.overflow_high_water,
                &self.config.actor,
                self.clock.now(),
            )
            .await?;
            for (name, value) in [
                ("ReplayReinjected", report.reinjected),
                ("ReplayQuarantined", report.quarantined),
            ] {
                self.metrics.emit(&Metric {
                    name,
                    value: i64::try_from(value).unwrap_or(i64::MAX),
                    unit: "Count",
                    dimensions: vec![],
                });
            }
        }
        tracing::info!(
            replay_id = %report.replay_id,
            selected = report.selected,
            reinjected = report.reinjected,
            suppressed_duplicate = report.suppressed_duplicate,
            still_failing = report.still_failing,
            quarantined = report.quarantined,
            skipped = report.skipped,
            completed = report.completed,
            stopped = report.stopped.as_deref().unwrap_or(""),
            "replay finished"
        );
        Ok(report)
    }

    fn out_of_time(&self, run: &Run<'_>) -> bool {
        run.deadline
            .is_some_and(|d| d.saturating_duration_since(Instant::now()) < self.config.deadline_margin)
    }

    async fn sweep(&self, run: &mut Run<'_>, report: &mut ReplayReport) -> StoreResult<()> {
        let req = run.req;
        let persist = req.scheduled && !req.dry_run;
        let mut cursor = if req.scheduled {
            self.store.load_cursor(SCHEDULE_CURSOR).await?
        } else {
            None
        };
        // A fresh pass first takes over replays whose lease expired (a crashed replay).
        if cursor.is_none() {
            let now = self.clock.now();
            let mut c = None;
            loop {
                let (page, next) = self
                    .store
                    .list_by_status(EnvelopeStatus::Replaying, c, self.config.page_size)
                    .await?;
                let expired: Vec<DlqEnvelope> = page
                    .into_iter()
                    .filter(|e| e.replay.as_ref().is_some_and(|r| r.lease_until < now) && req.selector.matches(e))
                    .collect();
                self.process_page(run, expired, report).await?;
                if report.stopped.is_some() {
                    return Ok(());
                }
                match next {
                    Some(n) => c = Some(n),
                    None => break,
                }
            }
        }
        loop {
            if self.out_of_time(run) {
                report.stopped = Some("time budget used up; the next sweep resumes from the saved cursor".into());
                return Ok(());
            }
            let (page, next) = self
                .store
                .list_by_status(EnvelopeStatus::Pending, cursor.clone(), self.config.page_size)
                .await?;
            let page: Vec<DlqEnvelope> = page.into_iter().filter(|e| req.selector.matches(e)).collect();
            self.process_page(run, page, report).await?;
            if report.stopped.is_some() {
                // The page is not finished: resume from its start next time (claims are
                // conditional, so going over settled envelopes again is harmless).
                return Ok(());
            }
            cursor = next;
            if persist {
                self.store.save_cursor(SCHEDULE_CURSOR, cursor.as_deref()).await?;
            }
            if cursor.is_none() {
                report.completed = true;
                return Ok(());
            }
        }
    }

    /// Gates for a page (at once, order kept), then act in order: oldest first per entity.
    async fn process_page(
        &self,
        run: &mut Run<'_>,
        mut page: Vec<DlqEnvelope>,
        report: &mut ReplayReport,
    ) -> StoreResult<()> {
        if let Some(max) = run.req.selector.max_items {
            let left = max.saturating_sub(usize::try_from(report.selected).unwrap_or(usize::MAX));
            if page.len() >= left {
                page.truncate(left);
                report.stopped = Some(format!("max_items {max} reached"));
            }
        }
        if page.is_empty() {
            return Ok(());
        }
        report.selected += page.len() as u64;
        let now = self.clock.now();
        let snapshot = run.snapshot.clone();
        let req = run.req;
        let verdicts: Vec<StoreResult<Verdict>> = futures::stream::iter(&page)
            .map(|e| {
                let snapshot = snapshot.clone();
                async move { self.verdict_for(req, e, &snapshot, now).await }
            })
            .buffered(self.config.concurrency.max(1))
            .collect()
            .await;

        let mut to_send: Vec<DlqEnvelope> = Vec::new();
        for (e, verdict) in page.into_iter().zip(verdicts) {
            let verdict = verdict?;
            if run.req.dry_run {
                report.push(dry_item(&e, &verdict));
                continue;
            }
            match verdict {
                Verdict::Reinject => to_send.push(e),
                other => {
                    let it = self.settle(run, &e, other).await?;
                    report.push(it);
                }
            }
        }
        for chunk in to_send.chunks(10) {
            if self.out_of_time(run) {
                for e in chunk {
                    report.push(item(e, "SKIPPED", None, "time budget used up before re-injection"));
                }
                report.stopped = Some("time budget used up; the next sweep resumes from the saved cursor".into());
                continue;
            }
            let depth = self.queue.visible_depth().await?;
            if depth > self.config.main_queue_high_water {
                for e in chunk {
                    report.push(item(
                        e,
                        "SKIPPED",
                        None,
                        format!("back-pressure: main queue holds {depth} messages"),
                    ));
                }
                report.stopped = Some(format!(
                    "back-pressure: the main queue holds {depth} messages (high-water mark {})",
                    self.config.main_queue_high_water
                ));
                continue;
            }
            self.reinject(run, chunk, report).await?;
        }
        if let Some(progress) = &self.progress {
            progress(report);
        }
        Ok(())
    }

    fn claim_for(&self, run: &Run<'_>, now: DateTime<Utc>) -> (ReplayClaim, StatusChange) {
        let claim = ReplayClaim {
            replay_id: run.replay_id.clone(),
            triggered_by: run.req.triggered_by.clone(),
            reason: run.req.reason.clone(),
            claimed_at: now,
            lease_until: now + self.config.lease,
        };
        let change = StatusChange {
            status: EnvelopeStatus::Replaying,
            at: now,
            actor: run.req.triggered_by.clone(),
            reason: format!("claimed by replay {} ({})", run.replay_id, run.req.reason),
            manual_journal: false,
        };
        (claim, change)
    }

    /// Finish a claimed envelope in `status`, with its provenance record.
    async fn finish(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        status: EnvelopeStatus,
        reason: String,
        manual_journal: bool,
        sqs_message_id: Option<String>,
    ) -> StoreResult<bool> {
        let now = self.clock.now();
        let change = StatusChange {
            status,
            at: now,
            actor: run.req.triggered_by.clone(),
            reason,
            manual_journal,
        };
        let record = ReplayRecord {
            replay_id: run.replay_id.clone(),
            triggered_by: run.req.triggered_by.clone(),
            reason: run.req.reason.clone(),
            at: now,
            outcome: status,
            sqs_message_id,
        };
        self.store
            .finish(&e.envelope_id, &run.replay_id, &change, &record)
            .await
    }

    fn audit_record(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        kind: AuditKind,
        code: Option<FailureCode>,
        detail: String,
    ) -> AuditRecord {
        let mut r = envelope_audit(
            e,
            kind,
            &format!("{} ({})", run.req.triggered_by, run.req.reason),
            detail,
        );
        r.audit_id = AuditRecord::id_for(kind, &format!("{}#{}", e.envelope_id, run.replay_id));
        r.at = self.clock.now();
        if code.is_some() {
            r.failure_code = code;
        }
        r
    }

    /// Apply a verdict other than re-injection.
    async fn settle(&self, run: &Run<'_>, e: &DlqEnvelope, verdict: Verdict) -> StoreResult<ReplayItem> {
        if let Verdict::StillFailing { gate, detail } = &verdict {
            // Nothing changes, unless a crashed replay left it REPLAYING: take it back to PENDING.
            if e.status == EnvelopeStatus::Replaying {
                let (claim, change) = self.claim_for(run, self.clock.now());
                if self
                    .store
                    .claim(&e.envelope_id, &claim, self.clock.now(), &change)
                    .await?
                {
                    self.finish(
                        run,
                        e,
                        EnvelopeStatus::Pending,
                        format!("still failing: {detail}"),
                        false,
                        None,
                    )
                    .await?;
                }
            }
            return Ok(item(e, "STILL_FAILING", Some(*gate), detail.clone()));
        }
        let now = self.clock.now();
        let (claim, change) = self.claim_for(run, now);
        if !self.store.claim(&e.envelope_id, &claim, now, &change).await? {
            return Ok(item(
                e,
                "SKIPPED",
                None,
                "claimed by another replay, or no longer pending",
            ));
        }
        match verdict {
            Verdict::Duplicate { committed_by } => {
                let detail = format!("already committed by SQS message {committed_by}: not re-injected");
                if !self
                    .finish(run, e, EnvelopeStatus::SuppressedDuplicate, detail.clone(), false, None)
                    .await?
                {
                    return Ok(item(e, "SKIPPED", None, "claim lost before the outcome was recorded"));
                }
                let record = self.audit_record(
                    run,
                    e,
                    AuditKind::ReplaySuppressed,
                    Some(FailureCode::ReplayDuplicate),
                    detail.clone(),
                );
                self.audit.append(&record).await?;
                Ok(item(e, "SUPPRESSED_DUPLICATE", Some(Gate::Idempotency), detail))
            }
            Verdict::Quarantine {
                gate,
                detail,
                manual_journal,
            } => self.quarantine(run, e, gate, &detail, manual_journal).await,
            Verdict::Reinject | Verdict::StillFailing { .. } => {
                // Not reached: re-injection is batched, still-failing returned above.
                self.finish(run, e, EnvelopeStatus::Pending, "released".into(), false, None)
                    .await?;
                Ok(item(e, "SKIPPED", None, "released"))
            }
        }
    }

    async fn quarantine(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        gate: Gate,
        detail: &str,
        manual_journal: bool,
    ) -> StoreResult<ReplayItem> {
        // The quarantine decision itself goes to the WORM bucket next to the envelope's copy.
        let doc = serde_json::json!({
            "schema": "recon-dlq/quarantine/v1",
            "envelope_id": e.envelope_id,
            "source_hash": e.source_hash,
            "gate": gate,
            "reason": detail,
            "manual_journal": manual_journal,
            "replay_id": run.replay_id,
            "triggered_by": run.req.triggered_by,
            "at": self.clock.now(),
            "envelope_worm_key": e.worm.as_ref().map(|w| w.key.clone()),
        })
        .to_string();
        let key = format!("quarantine/{}/{}.json", e.envelope_id, sha256_hex(doc.as_bytes()));
        self.worm.put(&key, doc.as_bytes()).await?;
        let reason = format!(
            "quarantined by the {gate:?} gate: {detail}; WORM s3://{}/{key}",
            self.worm.bucket()
        );
        if !self
            .finish(
                run,
                e,
                EnvelopeStatus::Quarantined,
                reason.clone(),
                manual_journal,
                None,
            )
            .await?
        {
            return Ok(item(e, "SKIPPED", None, "claim lost before the outcome was recorded"));
        }
        self.audit
            .append(&self.audit_record(run, e, AuditKind::Quarantined, None, reason))
            .await?;
        Ok(item(e, "QUARANTINED", Some(gate), detail))
    }

    /// The message that re-injects `e`: its original bytes and attributes, plus provenance.
    fn reinjection(&self, run: &Run<'_>, e: &DlqEnvelope, body: String) -> Option<OutgoingMessage> {
        let mut attributes: Vec<(String, String, String)> = e
            .original
            .attributes
            .iter()
            .filter(|(name, _)| !name.starts_with("replay."))
            .filter_map(|(name, a)| Some((name.clone(), a.data_type.clone(), a.string_value.clone()?)))
            .collect();
        attributes.extend([
            (attrs::REPLAY_OF.to_owned(), "String".to_owned(), e.envelope_id.clone()),
            (attrs::REPLAY_ID.to_owned(), "String".to_owned(), run.replay_id.clone()),
            (
                attrs::TRIGGERED_BY.to_owned(),
                "String".to_owned(),
                run.req.triggered_by.clone(),
            ),
            (
                attrs::REPLAY_GENERATION.to_owned(),
                "Number".to_owned(),
                (e.replay_generation + 1).to_string(),
            ),
        ]);
        (attributes.len() <= MAX_ATTRIBUTES).then(|| OutgoingMessage {
            body,
            attributes,
            group_id: e
                .original
                .attributes
                .get("MessageGroupId")
                .and_then(|a| a.string_value.clone()),
            dedup_id: Some(format!("{}-{}", e.envelope_id, run.replay_id)),
        })
    }

    /// Claim, re-check gate 2 under the claim, send the originals in one batch, mark them.
    async fn reinject(&self, run: &mut Run<'_>, chunk: &[DlqEnvelope], report: &mut ReplayReport) -> StoreResult<()> {
        let mut batch: Vec<(DlqEnvelope, OutgoingMessage)> = Vec::new();
        for e in chunk {
            let now = self.clock.now();
            let (claim, change) = self.claim_for(run, now);
            if !self.store.claim(&e.envelope_id, &claim, now, &change).await? {
                report.push(item(
                    e,
                    "SKIPPED",
                    None,
                    "claimed by another replay, or no longer pending",
                ));
                continue;
            }
            let body = original_body(e, &self.worm).await?.unwrap_or_default();
            if let Ok(msg) = decode(&body) {
                if let Some(c) = self.ledger.lookup(&msg.source_hash).await? {
                    let it = self.settle_claimed_duplicate(run, e, &c.sqs_message_id).await?;
                    report.push(it);
                    continue;
                }
            }
            match self.reinjection(run, e, body) {
                Some(m) => batch.push((e.clone(), m)),
                None => {
                    let why = "the original carries too many message attributes to add the replay's four".to_string();
                    self.finish(run, e, EnvelopeStatus::Pending, why.clone(), false, None)
                        .await?;
                    report.push(item(e, "SKIPPED", None, why));
                }
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        // Rate limit: never ahead of `rate_per_sec` since the run started.
        if self.config.rate_per_sec > 0 {
            let due = Duration::from_secs_f64(run.sent as f64 / f64::from(self.config.rate_per_sec));
            let elapsed = run.started.elapsed();
            if due > elapsed {
                tokio::time::sleep(due - elapsed).await;
            }
        }
        let messages: Vec<OutgoingMessage> = batch.iter().map(|(_, m)| m.clone()).collect();
        let results = match self.queue.send_batch(&messages).await {
            Ok(r) => r,
            Err(err) => vec![Err(err.to_string()); messages.len()],
        };
        run.sent += messages.len() as u64;
        for ((e, _), result) in batch.iter().zip(results) {
            match result {
                Ok(sqs_id) => {
                    let detail = format!("re-injected as SQS message {sqs_id}");
                    // If the mark is lost (lease expired meanwhile), the copy is out anyway; the
                    // consumer's conditional commit keeps the posting single.
                    self.finish(run, e, EnvelopeStatus::Replayed, detail.clone(), false, Some(sqs_id))
                        .await?;
                    self.audit
                        .append(&self.audit_record(run, e, AuditKind::ReplayReinjected, None, detail.clone()))
                        .await?;
                    report.push(item(e, "REINJECTED", None, detail));
                }
                Err(why) => {
                    let detail = format!("send failed, released: {why}");
                    self.finish(run, e, EnvelopeStatus::Pending, detail.clone(), false, None)
                        .await?;
                    report.push(item(e, "SKIPPED", None, detail));
                }
            }
        }
        Ok(())
    }

    async fn settle_claimed_duplicate(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        committed_by: &str,
    ) -> StoreResult<ReplayItem> {
        let detail = format!("already committed by SQS message {committed_by}: not re-injected");
        self.finish(run, e, EnvelopeStatus::SuppressedDuplicate, detail.clone(), false, None)
            .await?;
        let record = self.audit_record(
            run,
            e,
            AuditKind::ReplaySuppressed,
            Some(FailureCode::ReplayDuplicate),
            detail.clone(),
        );
        self.audit.append(&record).await?;
        Ok(item(e, "SUPPRESSED_DUPLICATE", Some(Gate::Idempotency), detail))
    }
}

fn dry_item(e: &DlqEnvelope, v: &Verdict) -> ReplayItem {
    match v {
        Verdict::Reinject => item(e, "WOULD_REINJECT", None, "all gates pass"),
        Verdict::Duplicate { committed_by } => item(
            e,
            "WOULD_SUPPRESS",
            Some(Gate::Idempotency),
            format!("already committed by SQS message {committed_by}"),
        ),
        Verdict::StillFailing { gate, detail } => item(e, "STILL_FAILING", Some(*gate), detail.clone()),
        Verdict::Quarantine { gate, detail, .. } => item(e, "WOULD_QUARANTINE", Some(*gate), detail.clone()),
    }
}

/// The replay wired to AWS (or the local stack); metrics in EMF unless said otherwise.
pub type AwsReplayer<M = crate::telemetry::EmfMetrics> = Replayer<
    crate::adapters::aws::dynamodb::DynamoEnvelopeStore,
    crate::adapters::aws::dynamodb::DynamoLedger,
    crate::adapters::aws::dynamodb::DynamoReferenceData,
    crate::adapters::aws::sqs::SqsQueue,
    crate::adapters::aws::s3::S3Worm,
    crate::adapters::aws::dynamodb::DynamoAuditLog,
    M,
>;

impl<M: Metrics> AwsReplayer<M> {
    pub fn with_metrics(
        clients: &crate::adapters::aws::AwsClients,
        s: &crate::config::ReplaySettings,
        actor: &str,
        metrics: M,
    ) -> Self {
        use crate::adapters::aws::dynamodb::{DynamoAuditLog, DynamoEnvelopeStore, DynamoLedger, DynamoReferenceData};
        Replayer {
            progress: None,
            store: DynamoEnvelopeStore::new(clients.dynamodb.clone(), &s.envelope_table),
            ledger: DynamoLedger::new(clients.dynamodb.clone(), &s.ledger_table),
            // Gate 1 must see today's reference data: no cache.
            reference: DynamoReferenceData::new(clients.dynamodb.clone(), &s.reference_table, Duration::ZERO),
            queue: crate::adapters::aws::sqs::SqsQueue::new(clients.sqs.clone(), &s.main_queue_url),
            worm: crate::adapters::aws::s3::S3Worm::new(clients.s3.clone(), &s.quarantine_bucket),
            audit: DynamoAuditLog::new(clients.dynamodb.clone(), &s.audit_table),
            metrics,
            clock: Arc::new(crate::ports::SystemClock),
            config: ReplayConfig {
                actor: actor.to_owned(),
                lease: ChronoDuration::seconds(s.lease_secs),
                max_replays: s.max_replays,
                replay_window: ChronoDuration::days(s.window_days),
                rate_per_sec: s.rate_per_sec,
                main_queue_high_water: s.main_queue_high_water,
                concurrency: 8,
                page_size: s.page_size,
                overflow_high_water: s.overflow_high_water,
                deadline_margin: s.deadline_margin,
            },
        }
    }
}

impl AwsReplayer {
    pub fn from_settings(
        clients: &crate::adapters::aws::AwsClients,
        s: &crate::config::ReplaySettings,
        actor: &str,
    ) -> Self {
        let metrics = crate::telemetry::EmfMetrics {
            namespace: s.metrics_namespace.clone(),
        };
        AwsReplayer::with_metrics(clients, s, actor, metrics)
    }
}

/// A Lambda deadline (wall clock) as an `Instant` time budget.
pub fn budget_until(deadline: std::time::SystemTime) -> Instant {
    Instant::now()
        + deadline
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_payload_needs_a_reason_and_refuses_unknown_fields() {
        let ok = parse_invocation(&serde_json::json!({
            "reason": "XAU mapped", "triggered_by": "alice", "root_cause": "UNMAPPED_CURRENCY:XAU", "dry_run": true
        }))
        .unwrap();
        assert!(ok.dry_run && !ok.scheduled);
        assert_eq!(ok.selector.root_cause.as_deref(), Some("UNMAPPED_CURRENCY:XAU"));

        let err = parse_invocation(&serde_json::json!({"triggered_by": "alice"})).unwrap_err();
        assert!(err.0.contains("missing field `reason`"), "{err}");
        let err =
            parse_invocation(&serde_json::json!({"reason": "x", "triggered_by": "a", "rootcause": "X"})).unwrap_err();
        assert!(err.0.contains("unknown field `rootcause`"), "{err}");
        let err = parse_invocation(&serde_json::json!({"reason": " ", "triggered_by": "a"})).unwrap_err();
        assert!(err.0.contains("reason"), "{err}");
        let err = parse_invocation(&serde_json::json!({"reason": "r", "triggered_by": "a", "failure_code": "NOPE"}))
            .unwrap_err();
        assert!(err.0.contains("NOPE"), "{err}");
    }

    #[test]
    fn a_scheduled_event_starts_a_sweep() {
        let r = parse_invocation(&serde_json::json!({
            "version": "0", "id": "x", "detail-type": "Scheduled Event", "source": "aws.events",
            "resources": ["arn:aws:events:us-east-1:0:rule/recon-dlq-sweep"], "detail": {}
        }))
        .unwrap();
        assert!(r.scheduled);
        assert_eq!(
            r.triggered_by,
            "schedule:arn:aws:events:us-east-1:0:rule/recon-dlq-sweep"
        );
    }

    #[test]
    fn selectors_match_code_cause_prefix_and_entity() {
        let e = crate::domain::envelope_from_dlq_message(
            &{
                let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
                m.message_id = Some("x".into());
                m.body = Some("{}".into());
                m
            },
            Utc::now(),
            "t",
        );
        assert!(Selector::default().matches(&e));
        assert!(
            Selector {
                root_cause: Some("REDRIVEN_*".into()),
                ..Selector::default()
            }
            .matches(&e)
        );
        assert!(
            !Selector {
                root_cause: Some("REDRIVEN".into()),
                ..Selector::default()
            }
            .matches(&e)
        );
        assert!(
            !Selector {
                failure_code: Some(FailureCode::UnrecoverablePayload),
                ..Selector::default()
            }
            .matches(&e)
        );
        assert!(
            !Selector {
                entity: Some("E".into()),
                ..Selector::default()
            }
            .matches(&e)
        );
    }
}
