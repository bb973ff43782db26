//! What a replay did: one outcome per envelope (an enum with stable names, as operators see them
//! in reports and `--json`), counts that always add up, and a bounded list of items.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::ReplayRequest;
use super::gates::{Gate, Verdict};
use crate::domain::DlqEnvelope;
use crate::domain::approval::{Change, ChangeSet, Exposure, MAX_REQUEST_ENVELOPES};
use crate::domain::canary::CanaryReport;
use crate::domain::named;
use crate::ports::{FlowError, FlowResult};

/// Report at most this many per-envelope lines (the counts are always complete).
pub const MAX_REPORT_ITEMS: usize = 200;

named! {
    /// What happened to one envelope.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum ReplayOutcome {
        /// Its original was sent to the main queue again.
        Reinjected = "REINJECTED",
        /// Its transaction is committed: never re-injected (`REPLAY_DUPLICATE`).
        SuppressedDuplicate = "SUPPRESSED_DUPLICATE",
        /// Gate 1 still fails: it stays PENDING.
        StillFailing = "STILL_FAILING",
        /// Settled in quarantine (a gate, the replay cap, or an operator).
        Quarantined = "QUARANTINED",
        /// Not decided by this replay (claimed elsewhere, time budget, back-pressure, send refused).
        Skipped = "SKIPPED",
        /// Dry runs: what would have happened.
        WouldReinject = "WOULD_REINJECT",
        WouldSuppress = "WOULD_SUPPRESS",
        WouldQuarantine = "WOULD_QUARANTINE",
    }
}

/// What happened to one envelope, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayItem {
    pub envelope_id: String,
    pub outcome: ReplayOutcome,
    pub gate: Option<Gate>,
    pub detail: String,
}

/// What a replay did (or, dry, would do). Read back by `dlqctl` from the control plane's answer:
/// the fields skipped there (`changes`) come back empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    pub replay_id: String,
    pub triggered_by: String,
    /// The invocation that ran it (its audit records name it too).
    #[serde(default)]
    pub invocation: Option<String>,
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
    /// Dry runs: what would change — every envelope counted, with its amounts.
    #[serde(default, skip_serializing_if = "is_nothing")]
    pub exposure: Exposure,
    /// Dry runs: the envelopes that would change, each with its state, up to
    /// [`MAX_REQUEST_ENVELOPES`] (an approval request's set).
    #[serde(skip)]
    pub changes: ChangeSet,
    /// More envelopes would change than `changes` holds.
    #[serde(skip)]
    pub changes_truncated: bool,
    /// Envelopes of a pinned set (an approved request's) skipped because they changed since.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_since: Vec<String>,
    /// A canary's slice and what became of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryReport>,
}

fn is_nothing(x: &Exposure) -> bool {
    x.count == 0
}

impl ReplayReport {
    /// Every envelope of `chunk` skipped for `detail`, none of it claimed.
    pub(super) fn skip_all(&mut self, chunk: &[DlqEnvelope], detail: &str) {
        for e in chunk {
            self.push(item(e, ReplayOutcome::Skipped, None, detail));
        }
    }

    /// A dry run's envelope that would change: counted in the exposure, kept for a request's set.
    pub(super) fn would_change(&mut self, change: Change) {
        self.exposure.add(&change);
        if self.changes.len() < MAX_REQUEST_ENVELOPES {
            self.changes.changes.push(change);
        } else {
            self.changes_truncated = true;
        }
    }

    /// Add a later run over other envelopes (a canary's rest) to this one.
    pub(super) fn merge(&mut self, other: ReplayReport) {
        self.selected += other.selected;
        self.reinjected += other.reinjected;
        self.suppressed_duplicate += other.suppressed_duplicate;
        self.still_failing += other.still_failing;
        self.quarantined += other.quarantined;
        self.skipped += other.skipped;
        self.completed = other.completed;
        self.stopped = other.stopped;
        self.changed_since.extend(other.changed_since);
        other.items.into_iter().for_each(|i| self.keep(i));
        self.items_truncated |= other.items_truncated;
    }

    /// Envelopes it changed (or, a dry run, would change): re-injected, suppressed, quarantined.
    pub fn changed(&self) -> u64 {
        self.reinjected + self.suppressed_duplicate + self.quarantined
    }

    /// The counts, one line (an approval request's dry run and execution summaries).
    pub fn summary(&self) -> String {
        let verb = if self.dry_run { "would be " } else { "" };
        format!(
            "{} selected: {} {verb}re-injected, {} {verb}suppressed as duplicates, {} {verb}quarantined, {} still failing, {} skipped{}",
            self.selected,
            self.reinjected,
            self.suppressed_duplicate,
            self.quarantined,
            self.still_failing,
            self.skipped,
            self.stopped
                .as_deref()
                .map(|s| format!(" (stopped: {s})"))
                .unwrap_or_default()
        )
    }

    /// Push `items` in order; their error.
    pub(super) fn push_all(&mut self, (items, outcome): Reported) -> FlowResult<()> {
        items.into_iter().for_each(|it| self.push(it));
        outcome
    }

    pub(super) fn push(&mut self, item: ReplayItem) {
        let count = match item.outcome {
            ReplayOutcome::Reinjected | ReplayOutcome::WouldReinject => &mut self.reinjected,
            ReplayOutcome::SuppressedDuplicate | ReplayOutcome::WouldSuppress => &mut self.suppressed_duplicate,
            ReplayOutcome::StillFailing => &mut self.still_failing,
            ReplayOutcome::Quarantined | ReplayOutcome::WouldQuarantine => &mut self.quarantined,
            ReplayOutcome::Skipped => &mut self.skipped,
        };
        *count += 1;
        self.keep(item);
    }

    fn keep(&mut self, item: ReplayItem) {
        if self.items.len() < MAX_REPORT_ITEMS {
            self.items.push(item);
        } else {
            self.items_truncated = true;
        }
    }
}

impl ReplayItem {
    /// A dry run's item that would change its envelope.
    pub fn changes(&self) -> bool {
        matches!(
            self.outcome,
            ReplayOutcome::WouldReinject | ReplayOutcome::WouldSuppress | ReplayOutcome::WouldQuarantine
        )
    }
}

/// Report items in order, and an error that stops the run.
pub(super) type Reported = (Vec<ReplayItem>, FlowResult<()>);

/// Called after every page with the report so far (progress display).
pub type Progress = Arc<dyn Fn(&ReplayReport) + Send + Sync>;

pub(super) fn item(
    e: &DlqEnvelope,
    outcome: ReplayOutcome,
    gate: Option<Gate>,
    detail: impl Into<String>,
) -> ReplayItem {
    ReplayItem {
        envelope_id: e.envelope_id.clone(),
        outcome,
        gate,
        detail: detail.into(),
    }
}

/// What a dry run reports for a verdict.
pub(super) fn dry_item(e: &DlqEnvelope, v: &Verdict) -> ReplayItem {
    match v {
        Verdict::Reinject => item(e, ReplayOutcome::WouldReinject, None, "all gates pass"),
        Verdict::Duplicate { committed_by } => item(
            e,
            ReplayOutcome::WouldSuppress,
            Some(Gate::Idempotency),
            format!("already committed by {committed_by}"),
        ),
        Verdict::StillFailing { gate, detail } => item(e, ReplayOutcome::StillFailing, Some(*gate), detail.clone()),
        Verdict::Quarantine { gate, detail, .. } => {
            item(e, ReplayOutcome::WouldQuarantine, Some(*gate), detail.clone())
        }
    }
}

/// One envelope's store failure becomes a skipped item; a defect (an illegal transition) stops.
pub(super) fn isolated<T: From<ReplayItem>>(e: &DlqEnvelope, r: FlowResult<T>) -> FlowResult<T> {
    match r {
        Err(FlowError::Store(err)) => Ok(T::from(item(
            e,
            ReplayOutcome::Skipped,
            None,
            format!("not settled, a store failed: {err}"),
        ))),
        other => other,
    }
}

/// A selection limited to what `preview` (its dry run) selected: by id when the preview listed
/// every envelope, else no more than it counted. What was looked at is what runs, not whatever
/// the selector matches by then (a flood landing in between is not swept in unseen).
pub fn pin(envelope_ids: &mut Vec<String>, max_items: &mut Option<usize>, preview: &ReplayReport) {
    if preview.items_truncated {
        *max_items = Some(usize::try_from(preview.selected).unwrap_or(usize::MAX));
    } else {
        *envelope_ids = preview.items.iter().map(|i| i.envelope_id.clone()).collect();
    }
}

impl ReplayRequest {
    /// This request limited to what `preview` selected ([`pin`]).
    pub fn pinned_to(mut self, preview: &ReplayReport) -> Self {
        pin(&mut self.selector.envelope_ids, &mut self.selector.max_items, preview);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_serialise_with_the_names_operators_see() {
        for o in ReplayOutcome::ALL {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
            assert_eq!(serde_json::from_value::<ReplayOutcome>(o.as_str().into()).unwrap(), o);
        }
    }

    #[test]
    fn every_outcome_is_counted_once() {
        let mut r = ReplayReport::default();
        for (i, o) in [
            ReplayOutcome::Reinjected,
            ReplayOutcome::WouldSuppress,
            ReplayOutcome::StillFailing,
            ReplayOutcome::WouldQuarantine,
            ReplayOutcome::Skipped,
        ]
        .into_iter()
        .enumerate()
        {
            r.push(ReplayItem {
                envelope_id: format!("env_{i}"),
                outcome: o,
                gate: None,
                detail: String::new(),
            });
        }
        assert_eq!(
            (
                r.reinjected,
                r.suppressed_duplicate,
                r.still_failing,
                r.quarantined,
                r.skipped
            ),
            (1, 1, 1, 1, 1)
        );
    }
}
