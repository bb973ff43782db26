//! The replay flow: re-inject fixed dead letters into the main queue, through three gates, so
//! that every replayed transaction posts exactly once and nothing reaches the ledger that must
//! not.
//!
//! One code path serves both triggers: a scheduled sweep over PENDING envelopes (resuming from a
//! persisted cursor), and a replay by hand (through the control plane) with a selector, a reason
//! and the verified caller as its actor.
//!
//! For each selected envelope, oldest first, the three gates and the replay cap decide
//! ([`gates`]).
//!
//! Every state change happens under a **claim**: a conditional `PENDING -> REPLAYING` with a replay
//! id and a lease (an expired lease can be taken over). Under the claim gate 2 is asked again,
//! then the original bytes are sent verbatim (with `replay.*` attributes), then the envelope is
//! marked `REPLAYED`. Two sweeps never both re-inject an envelope; a crash between the send and
//! the mark leaves a lease that expires, and the next sweep's gate 2 (or the consumer's
//! conditional commit) keeps the posting single.

mod approval;
mod canary;
mod edit;
pub mod escalate;
mod gates;
mod reinject;
mod report;
mod request;
mod settle;
mod sweep;

pub use approval::Assessment;
pub use gates::{Gate, MAX_RELEASES};
pub use report::{Progress, ReplayItem, ReplayOutcome, ReplayReport, pin};
pub use request::{Invocation, ReplayRequest, RequestError, Segment, Selector, parse_invocation};

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::approval::{MAX_REQUEST_ENVELOPES, Refused};
use crate::domain::canary::Canary;
use crate::domain::hash::sha256_hex;
use crate::domain::{EnvelopeStatus, ReferenceSnapshot, StatusChange};
use crate::envelopes::{check_overflow, drain_outbox};
use crate::ports::{
    ApprovalRequests, AuditLog, AuditOutbox, Backlog, Clock, Deadline, EnvelopeStore, FlowResult, Ledger, Metrics,
    ReferenceData, ReplayQueue, SweepCursors, Worm,
};

/// Heartbeat metrics (one per completed scheduled sweep, one per seal written): the template's
/// heartbeat alarms fire when they stop.
pub const SWEEP_COMPLETED: &str = "SweepCompleted";
pub const SEAL_WRITTEN: &str = "SealWritten";
/// PENDING envelopes a sweep reads, oldest first, to measure escalation.
const ESCALATION_READ: u64 = 5000;

pub const SCHEDULE_CURSOR: &str = "schedule";

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
    /// Envelopes worked on at once: their gates, then their claims and marks in a chunk of ten.
    pub concurrency: usize,
    pub page_size: usize,
    pub overflow_high_water: i64,
    /// Stop starting new work when less than this is left of the time budget.
    pub deadline_margin: Duration,
    /// What a scheduled sweep measures the PENDING backlog's age against (`crate::replay::escalate`).
    pub escalation: crate::decisions::escalation::EscalationChain,
    /// Re-injections of one group a scheduled sweep makes before it has seen such copies post
    /// (`sweep_canary`; 0: none).
    pub sweep_canary: u32,
    /// How long before an open period's planned close its PENDING dead letters escalate.
    pub period_close_warning: ChronoDuration,
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
            escalation: crate::decisions::escalation::EscalationChain::default(),
            period_close_warning: ChronoDuration::hours(48),
            sweep_canary: 0,
        }
    }
}

/// The adapters a replay runs on, named once: `(store, ledger, reference data, queue, WORM,
/// audit log, metrics)` as a tuple of types implements it, so `Replayer<(S, L, R, Q, W, A, M)>`
/// is a replay over those adapters and every part of the engine is `impl<P: ReplayPorts>`.
pub trait ReplayPorts {
    type Store: EnvelopeStore + SweepCursors + Backlog + AuditOutbox + ApprovalRequests;
    type Ledger: Ledger;
    type Reference: ReferenceData;
    type Queue: ReplayQueue;
    type Worm: Worm;
    type Audit: AuditLog;
    type Metrics: Metrics;
}

impl<S, L, R, Q, W, A, M> ReplayPorts for (S, L, R, Q, W, A, M)
where
    S: EnvelopeStore + SweepCursors + Backlog + AuditOutbox + ApprovalRequests,
    L: Ledger,
    R: ReferenceData,
    Q: ReplayQueue,
    W: Worm,
    A: AuditLog,
    M: Metrics,
{
    type Store = S;
    type Ledger = L;
    type Reference = R;
    type Queue = Q;
    type Worm = W;
    type Audit = A;
    type Metrics = M;
}

pub struct Replayer<P: ReplayPorts> {
    pub progress: Option<Progress>,
    pub store: P::Store,
    pub ledger: P::Ledger,
    pub reference: P::Reference,
    pub queue: P::Queue,
    pub worm: P::Worm,
    pub audit: P::Audit,
    pub metrics: P::Metrics,
    pub clock: Arc<dyn Clock>,
    pub config: ReplayConfig,
}

struct Run<'a> {
    req: &'a ReplayRequest,
    replay_id: String,
    snapshot: Arc<ReferenceSnapshot>,
    /// The clock's monotonic reading at the start (the rate limit counts from it).
    started: Duration,
    deadline: Option<Deadline>,
    sent: u64,
    /// Only these envelopes, each only with this fingerprint, and what pinned them (an approved
    /// request, or the policy check's own dry run).
    pinned: Option<(&'a str, &'a BTreeMap<String, String>)>,
    /// The scheduled sweep's canary, per group (`sweep_canary`).
    canaries: BTreeMap<String, canary::sweep::GroupGate>,
}

impl<'a> Run<'a> {
    fn new(
        req: &'a ReplayRequest,
        replay_id: String,
        snapshot: Arc<ReferenceSnapshot>,
        clock: &dyn Clock,
        deadline: Option<DateTime<Utc>>,
    ) -> Self {
        Run {
            req,
            replay_id,
            snapshot,
            started: clock.monotonic(),
            deadline: deadline.map(|d| Deadline::at(clock, d)),
            sent: 0,
            pinned: None,
            canaries: BTreeMap::new(),
        }
    }

    fn change(&self, status: EnvelopeStatus, at: DateTime<Utc>, reason: String, manual_journal: bool) -> StatusChange {
        StatusChange {
            status,
            at,
            actor: self.req.triggered_by.clone(),
            reason,
            manual_journal,
        }
    }

    /// This run's report, before anything is done.
    fn report(&self) -> ReplayReport {
        ReplayReport {
            replay_id: self.replay_id.clone(),
            triggered_by: self.req.triggered_by.clone(),
            invocation: self.req.invocation.clone(),
            reason: self.req.reason.clone(),
            dry_run: self.req.dry_run,
            ..ReplayReport::default()
        }
    }
}

/// A replay id unique to this run: the wall-clock instant and the monotonic reading, to the
/// nanosecond (a clock's monotonic readings never repeat: see `ports::Clock`). Derived from the
/// clock alone, so a simulated run reproduces its ids.
fn replay_id(clock: &dyn Clock) -> String {
    let seed = format!("{}|{}", clock.now().to_rfc3339(), clock.monotonic().as_nanos());
    format!("rpl_{}", &sha256_hex(seed.as_bytes())[..20])
}

impl<P: ReplayPorts> Replayer<P> {
    /// Seal the audit trail (the seal schedule's invocation). Returns the seal's key and the seal.
    pub async fn seal(&self) -> FlowResult<(String, crate::domain::seal::AuditSeal)> {
        let (key, seal) = crate::evidence::seal(&self.audit, &self.worm, self.clock.now()).await?;
        tracing::info!(seal = %key, root = %seal.root, chains = seal.heads.len(), "audit chains sealed by the seal schedule");
        self.count(SEAL_WRITTEN, 1);
        Ok((key, seal))
    }

    /// A count metric. A heartbeat's is one beat: an alarm that treats its absence as breaching
    /// pages when the schedule behind it stopped (disabled, deleted, or failing before it got here).
    fn count(&self, name: &'static str, value: u64) {
        escalate::emit(&self.metrics, name, value, "Count", None);
    }

    /// Run a replay. `deadline` is the end of the time budget (the Lambda deadline).
    ///
    /// A manual replay or quarantine is first measured against the approval policy (a dry run):
    /// above it, it is refused (`dlqctl` makes it a request for a second person); below it, it
    /// changes exactly the envelopes its dry run would have changed, each as it was then.
    pub async fn run(&self, req: &ReplayRequest, deadline: Option<DateTime<Utc>>) -> FlowResult<ReplayReport> {
        self.run_guarded(req, None, deadline).await
    }

    /// [`Replayer::run`], behind a canary when one is given (`domain::canary`): its first slice
    /// of re-injections, their outcomes awaited, then the rest only if it passed.
    pub async fn run_guarded(
        &self,
        req: &ReplayRequest,
        canary: Option<&Canary>,
        deadline: Option<DateTime<Utc>>,
    ) -> FlowResult<ReplayReport> {
        let unguarded = canary.is_none() && self.reference.snapshot().await?.approval().is_empty();
        if req.scheduled || req.dry_run || unguarded {
            return self.run_with(req, None, deadline).await;
        }
        let assessed = self.assess(req, deadline).await?;
        if !assessed.why.is_empty() {
            return Err(approval::needs_approval(req, &assessed.why).into());
        }
        if assessed.preview.changes_truncated {
            // Under a policy (or a canary) a run changes exactly what its dry run would: a set
            // of at most MAX_REQUEST_ENVELOPES.
            return Err(Refused(format!(
                "{} envelopes would change: under an approval policy or a canary a run changes exactly the envelopes its dry run names, at most {MAX_REQUEST_ENVELOPES} (narrow the selector or pass --max-items)",
                assessed.preview.exposure.count
            ))
            .into());
        }
        if req.quarantine && canary.is_some() {
            return Err(Refused("a quarantine re-injects nothing: a canary would have nothing to watch".into()).into());
        }
        if assessed.preview.changes.is_empty() {
            // Nothing would change: nothing is done.
            return Ok(ReplayReport {
                dry_run: false,
                ..assessed.preview
            });
        }
        self.run_set(req, &assessed.preview.changes, "its dry run", canary, deadline)
            .await
    }

    async fn run_with(
        &self,
        req: &ReplayRequest,
        pinned: Option<(&str, &BTreeMap<String, String>)>,
        deadline: Option<DateTime<Utc>>,
    ) -> FlowResult<ReplayReport> {
        let clock = &*self.clock;
        let id = replay_id(clock);
        let snapshot = self.reference.snapshot().await?;
        let mut run = Run {
            pinned,
            ..Run::new(req, id, snapshot, clock, deadline)
        };
        let mut report = run.report();
        tracing::info!(replay_id = %run.replay_id, triggered_by = %req.triggered_by, invocation = ?req.invocation, reason = %req.reason, dry_run = req.dry_run, selector = ?req.selector, "replay started");
        if !req.dry_run {
            // Records of earlier decisions whose publication failed or never ran.
            if let Err(e) = drain_outbox(&self.store, &self.audit, &self.metrics).await {
                tracing::warn!(error = %e, "audit outbox not drained; the next replay tries again");
            }
        }

        let selected = if req.selector.envelope_ids.is_empty() {
            self.sweep(&mut run, &mut report).await
        } else {
            self.by_ids(&mut run, &mut report).await
        };
        if let Err(e) = &selected {
            tracing::error!(replay_id = %run.replay_id, error = %e, "replay stopped early");
        }
        if !run.canaries.is_empty()
            && let Err(e) = self.record_canaries(&run).await
        {
            // Not recorded: the next sweep starts another slice of those groups.
            tracing::warn!(error = %e, "the sweep's canaries not recorded");
        }

        // Whatever the selection came to, a scheduled sweep seals the audit chains into the WORM
        // bucket, and the backlog is measured.
        if req.scheduled && !req.dry_run {
            // What is still PENDING after the sweep, against the escalation chain (before the
            // seal, so that its records are sealed with the sweep's).
            let now = self.clock.now();
            let escalated = escalate::escalate(
                &self.store,
                &self.audit,
                &self.metrics,
                &self.config.escalation,
                escalate::closing(&run.snapshot, now, self.config.period_close_warning),
                now,
                &self.config.actor,
                ESCALATION_READ,
            )
            .await;
            if let Err(e) = escalated {
                tracing::warn!(error = %e, "escalation not measured; the next sweep tries again");
            }
            let (key, seal) = crate::evidence::seal(&self.audit, &self.worm, self.clock.now()).await?;
            tracing::info!(seal = %key, root = %seal.root, chains = seal.heads.len(), "audit chains sealed");
            self.count(SEAL_WRITTEN, 1);
            self.count(SWEEP_COMPLETED, 1);
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
            self.count("ReplayReinjected", report.reinjected);
            self.count("ReplayQuarantined", report.quarantined);
        }
        selected?;
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
}
