//! Canary replays (`domain::canary`): of a pinned set, re-inject a first slice, wait for what
//! became of its copies — committed (the transaction is in the ledger) or dead-lettered again
//! (the copy's own envelope exists) — and re-inject the rest only while the failure share stays
//! within the canary's threshold. Otherwise the run stops with the canary's report; nothing of
//! the rest is touched.

pub(super) mod sweep;

use std::collections::BTreeMap;
use std::time::Duration;

use super::ReplayPorts;
use super::{ReplayOutcome, ReplayReport, ReplayRequest, Replayer, Selector};
use crate::domain::TxKey;
use crate::domain::approval::ChangeSet;
use crate::domain::canary::{Canary, CanaryReport, Fate};
use crate::domain::envelope::envelope_id;
use crate::ports::{EnvelopeStore, FlowResult, Ledger, StoreResult};

/// How often the canary looks at its copies.
const LOOK_EVERY: Duration = Duration::from_secs(1);

impl<P: ReplayPorts> Replayer<P> {
    /// Run `req` over `set` (each envelope only while its fingerprint holds; `what` names what
    /// pinned it), behind `canary` when there is one and its slice is not the whole of the
    /// re-injections.
    pub(super) async fn run_set(
        &self,
        req: &ReplayRequest,
        set: &ChangeSet,
        what: &str,
        canary: Option<&Canary>,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> FlowResult<ReplayReport> {
        let all = set.expected();
        let reinjections: Vec<&str> = set
            .changes
            .iter()
            .filter(|c| c.outcome == ReplayOutcome::WouldReinject.as_str())
            .map(|c| c.envelope_id.as_str())
            .collect();
        let size = canary.map_or(0, |c| c.slice.of(reinjections.len()));
        let (Some(canary), true) = (canary, size > 0 && size < reinjections.len()) else {
            return self.run_pinned(req, &all, what, deadline).await;
        };
        let (first, rest): (BTreeMap<String, String>, BTreeMap<String, String>) = all
            .into_iter()
            .partition(|(id, _)| reinjections[..size].contains(&id.as_str()));
        let mut report = self.run_pinned(req, &first, what, deadline).await?;
        if first.is_empty() {
            return Ok(report);
        }
        let copies = self.copies(&report.replay_id, first.keys()).await?;
        let verdict = self.await_fates(&copies, first.len() as u64, canary, deadline).await?;
        tracing::info!(replay_id = %report.replay_id, canary = %verdict, "canary slice decided");
        let passed = verdict.passed;
        if !passed {
            report.stopped = Some(format!("{verdict}; the rest ({} envelopes) not touched", rest.len()));
        }
        report.canary = Some(verdict);
        if passed && !rest.is_empty() {
            report.merge(self.run_pinned(req, &rest, what, deadline).await?);
        }
        Ok(report)
    }

    /// `req` on exactly the envelopes of `set`, each only while its fingerprint holds (`what`
    /// pinned them); nothing for none (a selector naming no envelope would sweep them all).
    async fn run_pinned(
        &self,
        req: &ReplayRequest,
        set: &BTreeMap<String, String>,
        what: &str,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> FlowResult<ReplayReport> {
        if set.is_empty() {
            return Ok(ReplayReport::default());
        }
        let selector = Selector {
            envelope_ids: set.keys().cloned().collect(),
            ..Selector::default()
        };
        let req = ReplayRequest {
            selector,
            ..req.clone()
        };
        self.run_with(&req, Some((what, set)), deadline).await
    }

    /// Look at the copies every second until each has an outcome, the canary's wait is over, or
    /// the time budget is.
    async fn await_fates(
        &self,
        copies: &[(String, TxKey)],
        intended: u64,
        canary: &Canary,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> StoreResult<CanaryReport> {
        let clock = &*self.clock;
        let started = clock.monotonic();
        let wait = Duration::from_secs(u64::from(canary.wait_secs));
        let deadline = deadline.map(|d| crate::ports::Deadline::at(clock, d));
        let mut fates = vec![Fate::Unknown; copies.len()];
        loop {
            for (fate, (copy, key)) in fates.iter_mut().zip(copies) {
                if *fate == Fate::Unknown {
                    *fate = self.fate(copy, key).await?;
                }
            }
            let waited = clock.monotonic().saturating_sub(started);
            let out_of_time = deadline.is_some_and(|d| d.within(clock, self.config.deadline_margin + LOOK_EVERY));
            if !fates.contains(&Fate::Unknown) || waited >= wait || out_of_time {
                return Ok(CanaryReport::of(
                    &fates,
                    intended,
                    canary,
                    u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                ));
            }
            clock.sleep(LOOK_EVERY).await;
            // Let whatever else this task runs (a local pump) take its turn.
            tokio::task::yield_now().await;
        }
    }

    /// The copies replay `replay_id` re-injected of `ids`: each one's SQS message id and
    /// transaction.
    pub(super) async fn copies(
        &self,
        replay_id: &str,
        ids: impl Iterator<Item = &String>,
    ) -> StoreResult<Vec<(String, TxKey)>> {
        let mut copies = Vec::new();
        for id in ids {
            let Some(e) = self.store.get(id).await? else { continue };
            let copy = e
                .replays
                .iter()
                .rev()
                .find(|r| r.replay_id == replay_id)
                .and_then(|r| r.sqs_message_id.clone());
            if let Some(copy) = copy {
                // The envelope's own key when its body decoded to its hash at enrichment; else the
                // transaction its body identifies now (it was re-injected: its body decodes).
                // (Boxed: the control plane's futures nest deep, and this one reads the body.)
                let mut key = e.decoded_key();
                if key.period.is_none() {
                    key = Box::pin(self.identified_transaction(&e)).await?.unwrap_or(key);
                }
                copies.push((copy, key));
            }
        }
        Ok(copies)
    }

    pub(super) async fn fate(&self, copy: &str, key: &TxKey) -> StoreResult<Fate> {
        if self.store.get(&envelope_id(copy)).await?.is_some() {
            return Ok(Fate::DeadLettered);
        }
        // A hand-off to a manual journal is no posting: not what the canary waits for.
        Ok(match self.ledger.lookup(key).await? {
            Some(c) if c.manual_journal.is_none() => Fate::Committed,
            _ => Fate::Unknown,
        })
    }
}
