//! Selection and order: a sweep takes over expired claims first, then walks the PENDING envelopes
//! oldest first, a page at a time, from a persisted cursor (scheduled sweeps), within the time
//! budget and under back-pressure from the main queue. Each page: the gates at once (bounded
//! concurrency, order kept), then the decisions in order.

use futures::StreamExt;

use super::ReplayPorts;
use super::gates::{ReadAhead, Verdict};
use super::report::{ReplayItem, ReplayOutcome, ReplayReport, dry_item, isolated};
use super::{Replayer, Run, SCHEDULE_CURSOR};
use crate::domain::approval::{Change, fingerprint};
use crate::domain::edit::EDIT_CLAIM_PREFIX;
use crate::domain::{DlqEnvelope, EnvelopeStatus, PeriodStatus};
use crate::ports::{EnvelopeStore, FlowResult, ReplayQueue, StoreResult, SweepCursors};

pub(super) const OUT_OF_TIME: &str = "time budget used up; the next sweep resumes from the saved cursor";

impl<P: ReplayPorts> Replayer<P> {
    pub(super) fn out_of_time(&self, run: &Run<'_>) -> bool {
        run.deadline
            .is_some_and(|d| d.within(&*self.clock, self.config.deadline_margin))
    }

    /// The envelopes named by id (those that exist and match the selector).
    pub(super) async fn by_ids(&self, run: &mut Run<'_>, report: &mut ReplayReport) -> FlowResult<()> {
        let mut page = Vec::new();
        let mut named = std::collections::BTreeSet::new();
        // An id named twice is one envelope (and one item of a transaction).
        for id in run.req.selector.envelope_ids.iter().filter(|id| named.insert(*id)) {
            let skipped = |detail: String| ReplayItem {
                envelope_id: id.clone(),
                outcome: ReplayOutcome::Skipped,
                gate: None,
                detail,
            };
            match self.store.get(id).await? {
                // A pinned set (an approved request's, or what a policy check assessed): each
                // envelope only while it is as it was then.
                Some(e) if run.pinned.is_some_and(|(_, set)| set.get(id) != Some(&fingerprint(&e))) => {
                    let by = run.pinned.map_or("", |(what, _)| what);
                    report.changed_since.push(id.clone());
                    report.push(skipped(format!("changed since {by}: not touched")));
                }
                Some(e) => page.push(e),
                None => report.push(skipped("no such envelope".into())),
            }
        }
        let page: Vec<DlqEnvelope> = page.into_iter().filter(|e| run.req.selector.matches(e)).collect();
        self.process_page(run, page, report).await?;
        report.completed = report.stopped.is_none();
        Ok(())
    }

    pub(super) async fn sweep(&self, run: &mut Run<'_>, report: &mut ReplayReport) -> FlowResult<()> {
        let req = run.req;
        let persist = req.scheduled && !req.dry_run;
        let mut cursor = if req.scheduled {
            self.store.load_cursor(SCHEDULE_CURSOR).await?
        } else {
            None
        };
        // A fresh pass first takes over replays whose lease expired (a crashed replay); never an
        // approved edit's claim (its request's resumption finishes it).
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
                    .filter(|e| {
                        e.replay
                            .as_ref()
                            .is_some_and(|r| r.lease_until < now && !r.replay_id.starts_with(EDIT_CLAIM_PREFIX))
                            && req.selector.matches(e)
                    })
                    .collect();
                self.process_page(run, expired, report).await?;
                if report.stopped.is_some() {
                    return Ok(());
                }
                let Some(n) = next else { break };
                c = Some(n);
            }
        }
        loop {
            if self.out_of_time(run) {
                report.stopped = Some(OUT_OF_TIME.into());
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
    ) -> FlowResult<()> {
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
        // Gate 2 for the whole page in one read (an operator's quarantine asks none).
        let ahead = if req.quarantine {
            ReadAhead::default()
        } else {
            ReadAhead::of(&self.ledger, &page).await
        };
        let ahead = &ahead;
        let verdicts: Vec<StoreResult<Verdict>> = futures::stream::iter(&page)
            .map(|e| {
                let snapshot = snapshot.clone();
                async move { self.verdict_for(req, e, &snapshot, now, ahead).await }
            })
            .buffered(self.config.concurrency.max(1))
            .collect()
            .await;

        let mut to_send: Vec<DlqEnvelope> = Vec::new();
        for (e, verdict) in page.into_iter().zip(verdicts) {
            // One envelope whose store read or write fails is skipped (the next sweep tries it
            // again); the page goes on.
            let verdict = match verdict {
                Ok(v) => v,
                Err(err) => {
                    report.push(isolated(&e, Err::<ReplayItem, _>(err.into()))?);
                    continue;
                }
            };
            if run.req.dry_run {
                let item = dry_item(&e, &verdict);
                if item.changes() {
                    let closed = matches!((&e.ledger_entity, &e.accounting_period), (Some(entity), Some(period))
                        if snapshot.period_status(entity, period) == PeriodStatus::Closed);
                    report.would_change(Change::of(&e, item.outcome.as_str(), closed));
                }
                report.push(item);
                continue;
            }
            match verdict {
                Verdict::Reinject => to_send.push(e),
                other => report.push(isolated(&e, self.settle(run, &e, other).await)?),
            }
        }
        // A scheduled sweep re-injects a large group only behind its canary.
        if run.req.scheduled && self.config.sweep_canary > 0 {
            to_send = self.canary_gate(run, to_send, report).await?;
        }
        let mut halted = false;
        // What the chunk before sent, marked while the next is sent; an error stops the page.
        let (mut unmarked, mut stop) = (Vec::new(), Ok(()));
        for chunk in to_send.chunks(self.chunk_size()) {
            if halted {
                report.skip_all(chunk, "not claimed: the replay rate limit");
                continue;
            }
            if self.out_of_time(run) {
                report.skip_all(chunk, "time budget used up before re-injection");
                report.stopped = Some(OUT_OF_TIME.into());
                continue;
            }
            let depth = match self.queue.visible_depth().await {
                Ok(depth) => depth,
                Err(err) => {
                    stop = Err(err.into());
                    break;
                }
            };
            if depth > self.config.main_queue_high_water {
                report.skip_all(chunk, &format!("back-pressure: main queue holds {depth} messages"));
                report.stopped = Some(format!(
                    "back-pressure: the main queue holds {depth} messages (high-water mark {})",
                    self.config.main_queue_high_water
                ));
                continue;
            }
            let (sent, go) = self.reinject(run, chunk, std::mem::take(&mut unmarked), report).await;
            unmarked = sent;
            match go {
                Ok(go) => halted = !go,
                Err(err) => {
                    stop = Err(err);
                    break;
                }
            }
        }
        // What the page's last chunk sent is marked before anything else (the next page's read,
        // its gates, its settlements), whatever stopped the page.
        let marked = report.push_all(self.mark(run, unmarked).await);
        stop.and(marked)?;
        if let Some(progress) = &self.progress {
            progress(report);
        }
        Ok(())
    }
}
