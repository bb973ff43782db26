//! The scheduled sweep's canary for large groups (`DLQ_SWEEP_CANARY`): of one group (failure
//! code and root cause) a sweep re-injects at most a slice before it has seen such copies post.
//! A group larger than that leaves the rest PENDING and records its canary (the slice's
//! envelopes, the sweep's replay id) in the sweep's state; a later sweep looks at what became of
//! the slice's copies:
//!
//! - every copy committed: the group is open (for [`PASSED_FOR`]), the rest re-injected;
//! - a copy dead-lettered again: the group is held for [`HELD_FOR`] (a `SWEEP_CANARY_HELD`
//!   record says why; an operator's replay of it is not held), then canaried again;
//! - otherwise (copies on their way) it waits, for at most [`STALE_AFTER`]; a canary of which
//!   less than half went out is not judged. Either way the group then gets a new slice.
//!
//! Only PENDING envelopes are gated (a crashed replay's claim taken over finishes). A group
//! no larger than the slice goes out whole unless its group is waiting or held. Manual replays
//! have their own canary (`--canary`).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::super::ReplayPorts;
use super::super::report::{ReplayOutcome, ReplayReport, item};
use super::super::{Replayer, Run};
use crate::domain::canary::{Canary, CanaryReport, CanarySlice, Fate};
use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus};
use crate::ports::{AuditLog, FlowResult, StoreResult, SweepCursors};

/// How long a canary waits for its copies to post before it no longer says anything about its
/// group (a new slice then).
pub const STALE_AFTER: Duration = Duration::hours(24);
/// How long a group whose canary failed is held.
pub const HELD_FOR: Duration = Duration::hours(24);
/// How long a passed canary keeps its group open.
pub const PASSED_FOR: Duration = Duration::hours(24);

/// A group's canary, kept in the sweep's state (a cursor item of the envelope table).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct State {
    replay_id: String,
    envelopes: Vec<String>,
    started_at: DateTime<Utc>,
    #[serde(default)]
    passed_at: Option<DateTime<Utc>>,
    #[serde(default)]
    held_until: Option<DateTime<Utc>>,
}

/// What a sweep does with a group's re-injections.
#[derive(Clone, Debug)]
pub(in crate::replay) enum GroupGate {
    /// All of them.
    Open,
    /// The first `left` (a new canary), the rest deferred.
    Slice {
        left: u32,
        ids: Vec<String>,
        deferred: bool,
    },
    /// None, for this reason.
    Closed(String),
}

fn key(e: &DlqEnvelope) -> String {
    format!("{}#{}", e.failure_code.as_str(), e.root_cause)
}

fn cursor_name(key: &str) -> String {
    format!("canary#{key}")
}

fn held(until: DateTime<Utc>) -> GroupGate {
    GroupGate::Closed(format!(
        "held until {until}: the sweep's canary of this group failed (an operator's replay is not held)"
    ))
}

impl<P: ReplayPorts> Replayer<P> {
    /// Of `list` (a page's re-injections, in order), those the groups' canaries let through; the
    /// others are reported skipped and stay PENDING, untouched.
    pub(in crate::replay) async fn canary_gate(
        &self,
        run: &mut Run<'_>,
        list: Vec<DlqEnvelope>,
        report: &mut ReplayReport,
    ) -> FlowResult<Vec<DlqEnvelope>> {
        let mut out = Vec::with_capacity(list.len());
        for e in list {
            // A crashed replay's claim taken over (REPLAYING) finishes what it started.
            if e.status != EnvelopeStatus::Pending {
                out.push(e);
                continue;
            }
            let k = key(&e);
            if !run.canaries.contains_key(&k) {
                let gate = match self.group_gate(&k).await {
                    Ok(g) => g,
                    Err(err) => {
                        // This group waits for the next sweep; the others go on.
                        tracing::warn!(group = %k, error = %err, "the sweep's canary of a group not read");
                        GroupGate::Closed(format!("the sweep's canary of this group could not be read ({err})"))
                    }
                };
                run.canaries.insert(k.clone(), gate);
            }
            match run.canaries.get_mut(&k) {
                Some(GroupGate::Open) | None => out.push(e),
                Some(GroupGate::Slice { left, ids, deferred }) => {
                    if *left > 0 {
                        *left -= 1;
                        ids.push(e.envelope_id.clone());
                        out.push(e);
                    } else {
                        *deferred = true;
                        let why = "a large group: the rest waits for its canary's copies to post (the sweep's canary)";
                        report.push(item(&e, ReplayOutcome::Skipped, None, why));
                    }
                }
                Some(GroupGate::Closed(why)) => report.push(item(&e, ReplayOutcome::Skipped, None, why.clone())),
            }
        }
        Ok(out)
    }

    /// A group's gate for this sweep, from its recorded canary (if any).
    async fn group_gate(&self, k: &str) -> FlowResult<GroupGate> {
        let now = self.clock.now();
        let fresh = GroupGate::Slice {
            left: self.config.sweep_canary,
            ids: Vec::new(),
            deferred: false,
        };
        let Some(text) = self.store.load_cursor(&cursor_name(k)).await? else {
            return Ok(fresh);
        };
        let Ok(mut state) = serde_json::from_str::<State>(&text) else {
            tracing::warn!(group = k, "the sweep's canary state does not read: a new slice");
            return Ok(fresh);
        };
        if let Some(until) = state.held_until {
            return Ok(if now < until { held(until) } else { fresh });
        }
        if let Some(at) = state.passed_at {
            return Ok(if now - at < PASSED_FOR { GroupGate::Open } else { fresh });
        }
        let waited = now - state.started_at;
        if waited >= STALE_AFTER {
            // Never judged (its copies never all posted, nor one dead-lettered again): what it
            // says is no longer about this group's backlog.
            return Ok(fresh);
        }
        let copies = self.copies(&state.replay_id, state.envelopes.iter()).await?;
        if copies.len() * 2 < state.envelopes.len() {
            // Less than half the slice went out (claims lost, sends refused): too little to judge.
            return Ok(fresh);
        }
        let mut fates = Vec::with_capacity(copies.len());
        for (copy, key) in &copies {
            fates.push(self.fate(copy, key).await?);
        }
        // Held only on a copy dead-lettered again; a copy still on its way (retries, a backed-up
        // queue) keeps the group waiting, at most until the state is stale.
        if fates.contains(&Fate::Unknown) && !fates.contains(&Fate::DeadLettered) {
            return Ok(GroupGate::Closed(
                "waiting for its canary's copies to post (the sweep's canary)".into(),
            ));
        }
        let canary = Canary {
            slice: CanarySlice::Count(u32::try_from(copies.len()).unwrap_or(u32::MAX)),
            max_failure_percent: 0,
            wait_secs: u32::try_from(STALE_AFTER.num_seconds()).unwrap_or(u32::MAX),
        };
        let verdict = CanaryReport::of(
            &fates,
            copies.len() as u64,
            &canary,
            u64::try_from(waited.num_milliseconds()).unwrap_or(0),
        );
        if verdict.passed {
            state.passed_at = Some(now);
            self.save_state(k, &state).await?;
            tracing::info!(group = k, canary = %verdict, "the sweep's canary passed: the group is open");
            return Ok(GroupGate::Open);
        }
        let until = now + HELD_FOR;
        state.held_until = Some(until);
        let detail = format!(
            "the scheduled sweep's canary of group {k} failed ({verdict}): the rest of the group is held until {until}; replay it by hand once its cause is fixed"
        );
        let record = AuditRecord::system(
            AuditKind::SweepCanaryHeld,
            &format!("{k}#{}", state.replay_id),
            now,
            &self.config.actor,
            detail,
        );
        self.audit.append(&record).await?;
        self.save_state(k, &state).await?;
        tracing::warn!(group = k, canary = %verdict, "the sweep's canary failed: the group is held");
        Ok(held(until))
    }

    async fn save_state(&self, k: &str, state: &State) -> StoreResult<()> {
        let text = serde_json::to_string(state).unwrap_or_default();
        self.store.save_cursor(&cursor_name(k), Some(&text)).await
    }

    /// After a sweep: each group that deferred envelopes behind a new slice records that canary.
    pub(in crate::replay) async fn record_canaries(&self, run: &Run<'_>) -> StoreResult<()> {
        let now = self.clock.now();
        for (k, g) in &run.canaries {
            let ids = match g {
                GroupGate::Slice {
                    ids, deferred: true, ..
                } if !ids.is_empty() => ids,
                _ => continue,
            };
            let state = State {
                replay_id: run.replay_id.clone(),
                envelopes: ids.clone(),
                started_at: now,
                passed_at: None,
                held_until: None,
            };
            self.save_state(k, &state).await?;
            tracing::info!(group = %k, slice = ids.len(), replay_id = %run.replay_id, "the sweep's canary started");
        }
        Ok(())
    }
}
