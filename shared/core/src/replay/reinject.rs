//! Re-injection: claim each envelope, ask gate 2 again under the claim, send the originals in one
//! batch (verbatim bytes and attributes plus `replay.*` provenance) at no more than the rate
//! limit, then mark each one REPLAYED, or release it when its send was refused. A chunk's marks
//! are written while the next chunk of the page is paced, claimed and sent (the page marks its
//! last before it ends): each envelope still goes claim, send, mark, in that order.

use std::time::Duration;

use futures::StreamExt;

use super::ReplayPorts;
use super::gates::{Gate, RESUMED_HAND_OFF, ReadAhead};
use super::report::{ReplayItem, ReplayOutcome, ReplayReport, Reported, isolated, item};
use super::settle::{NOT_CLAIMED, Settlement};
use super::{Replayer, Run};
use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, TransientKind, attrs};
use crate::envelopes::original_body;
use crate::ports::{
    AuditLog, FlowResult, OutgoingMessage, ReplayQueue, Settled, StoreError, StoreResult, SweepCursors, batches,
};

/// Envelopes re-injected together when no rate limit paces them: half a page of the default size,
/// so that one half's marks are written while the other half is sent.
const UNPACED_CHUNK: usize = 50;

impl<P: ReplayPorts> Replayer<P> {
    /// The message that re-injects `e`: its original bytes and attributes, plus provenance; or
    /// why SQS would never accept it as it is.
    pub(super) fn reinjection(&self, run: &Run<'_>, e: &DlqEnvelope, body: String) -> Result<OutgoingMessage, String> {
        let mut attributes: Vec<(String, String, String)> = e
            .original
            .attributes
            .iter()
            .filter(|(name, _)| !name.starts_with("replay."))
            // A binary value travels as its base64 text (the queue adapters decode it).
            .filter_map(|(name, a)| {
                let value = a.string_value.clone().or_else(|| a.binary_value.clone())?;
                Some((name.clone(), a.data_type.clone(), value))
            })
            .collect();
        let provenance = [
            (attrs::REPLAY_OF, "String", e.envelope_id.clone()),
            (attrs::REPLAY_ID, "String", run.replay_id.clone()),
            (attrs::TRIGGERED_BY, "String", run.req.triggered_by.clone()),
            (
                attrs::REPLAY_GENERATION,
                "Number",
                (e.replay_generation + 1).to_string(),
            ),
        ];
        attributes.extend(provenance.map(|(name, kind, value)| (name.to_owned(), kind.to_owned(), value)));
        let m = OutgoingMessage {
            body,
            attributes,
            group_id: e.original.message_group_id.clone(),
            dedup_id: Some(format!("{}-{}", e.envelope_id, run.replay_id)),
            trace_header: e.original.aws_trace_header.clone(),
        };
        match m.refusal() {
            None => Ok(m),
            Some(why) => Err(format!("the original cannot be re-injected as it is: {why}")),
        }
    }

    /// Envelopes re-injected together. With a rate limit, chunks of at most ten (a batch), and
    /// never more than the limit: a second's first chunk is always let through, so a chunk above
    /// the limit would exceed it. Without one, [`UNPACED_CHUNK`]: claimed, sent (in batches, at
    /// once) and marked together, one back-pressure check and one gate-2 read for them all.
    pub(super) fn chunk_size(&self) -> usize {
        match self.config.rate_per_sec {
            0 => UNPACED_CHUNK,
            rate => usize::try_from(rate).unwrap_or(10).clamp(1, 10),
        }
    }

    /// Before sending `n` re-injections: never ahead of `rate_per_sec` since the run started,
    /// and never more than `rate_per_sec` in one wall-clock second across every replay of the
    /// deployment (the windows are counted in the envelope store). An error when the shared count
    /// cannot be asked, or the time budget runs out waiting for it: the batch is not sent.
    async fn pace(&self, run: &Run<'_>, n: usize) -> StoreResult<()> {
        let rate = self.config.rate_per_sec;
        if rate == 0 {
            return Ok(());
        }
        let due = Duration::from_secs_f64(run.sent as f64 / f64::from(rate));
        let elapsed = self.clock.monotonic().saturating_sub(run.started);
        if due > elapsed {
            self.clock.sleep(due - elapsed).await;
        }
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        loop {
            let now = self.clock.now();
            if self.store.take_sends(now.timestamp(), n, rate).await? {
                return Ok(());
            }
            if self.out_of_time(run) {
                return Err(StoreError::new(
                    TransientKind::Timeout,
                    "time budget used up waiting for the shared replay rate limit",
                ));
            }
            // This second is used up (by other replays): wait for the next.
            let into = u64::from(now.timestamp_subsec_millis().min(999));
            self.clock.sleep(Duration::from_millis(1000 - into)).await;
        }
    }

    /// The chunk's share of the rate limit, then: claim, re-check gate 2 under the claim, send
    /// the originals in batches SQS accepts (ten entries, 1 MiB in all). Meanwhile the copies the
    /// chunk before sent are marked (the queue and the envelope store are different services, so
    /// a chunk's sends cost no wall time of their own, and no wait for the rate limit delays a
    /// mark). Returns this chunk's copies, for the page to mark with its next chunk, or by
    /// [`Replayer::mark`] when it ends (even after an error). A store failing on one envelope
    /// skips that envelope (its lease, if it was claimed, lets the next sweep take it over); it
    /// does not stop the rest. `Ok(false)`: the rate limit could not be had (nothing of the chunk
    /// claimed); the sweep stops.
    pub(super) async fn reinject<'c>(
        &self,
        run: &mut Run<'_>,
        chunk: &'c [DlqEnvelope],
        unmarked: Unmarked<'c>,
        report: &mut ReplayReport,
    ) -> (Unmarked<'c>, FlowResult<bool>) {
        let shared: &Run<'_> = run;
        let sending = async {
            // Before any claim: no lease runs out while waiting for the limit, and an envelope
            // left out is left PENDING, untouched (a release would count towards its quarantine).
            self.pace(shared, chunk.len()).await?;
            Ok::<_, StoreError>(self.claim_and_send(shared, chunk).await)
        };
        let (sending, marked) = futures::join!(sending, self.mark(shared, unmarked));
        // The chunk before first: the report keeps the chunks' order.
        let marked = report.push_all(marked);
        let sending = match sending {
            Ok(sending) => sending,
            Err(err) => {
                report.skip_all(chunk, &format!("not claimed: {err}"));
                report.stopped = Some(format!("the replay rate limit: {err}"));
                return (Vec::new(), marked.map(|()| false));
            }
        };
        run.sent += chunk.len() as u64;
        let sent = report.push_all(sending.settled);
        report.stopped = sending.stopped.or(report.stopped.take());
        (sending.sent, marked.and(sent).map(|()| true))
    }

    /// Claim the chunk, re-check gate 2 under the claims, send the originals: the items of those
    /// settled without a send, and the sends to mark.
    async fn claim_and_send<'c>(&self, run: &Run<'_>, chunk: &'c [DlqEnvelope]) -> Sending<'c> {
        let mut sending = Sending {
            settled: (Vec::new(), Ok(())),
            sent: Vec::new(),
            stopped: None,
        };
        // The chunk's envelopes are claimed together (in a few transactions), and later marked
        // together; the report keeps the chunk's order.
        let at_once = self.config.concurrency.max(1);
        let claims: Vec<(&DlqEnvelope, FlowResult<bool>)> =
            chunk.iter().zip(self.claim_many(run, chunk).await).collect();
        // Gate 2 again, under the claims: the chunk's transactions in one read.
        let held = claims.iter().filter(|(_, c)| matches!(c, Ok(true))).map(|(e, _)| *e);
        let ahead = &ReadAhead::of(&self.ledger, held).await;
        let prepared: Vec<(&DlqEnvelope, FlowResult<Prepared>)> = futures::stream::iter(claims)
            .map(|(e, claimed)| async move {
                let p = match claimed {
                    Ok(true) => self.prepare(run, e, ahead).await,
                    Ok(false) => Ok(Prepared::Settled(item(e, ReplayOutcome::Skipped, None, NOT_CLAIMED))),
                    Err(err) => Err(err),
                };
                (e, p)
            })
            .buffered(at_once)
            .collect()
            .await;
        let mut ready: Vec<(&DlqEnvelope, OutgoingMessage)> = Vec::new();
        for (e, p) in prepared {
            match isolated(e, p) {
                Ok(Prepared::Send(m)) => ready.push((e, m)),
                Ok(Prepared::Settled(it)) => sending.settled.0.push(it),
                // The first error stops the run.
                Err(err) if sending.settled.1.is_ok() => sending.settled.1 = Err(err),
                Err(_) => {}
            }
        }
        if sending.settled.1.is_err() {
            // The others of the chunk were claimed concurrently: release them now rather than
            // leave them to their lease.
            self.release_all(run, &ready, "not sent: the replay stopped on another envelope's error")
                .await;
            return sending;
        }
        // A slow ledger (a general ledger's answers) may have used the budget up: nothing is
        // sent that could not be marked before the invocation ends.
        if self.out_of_time(run) {
            let why = "not sent: time budget used up after the claims; released";
            self.release_all(run, &ready, why).await;
            for (e, _) in &ready {
                sending.settled.0.push(item(e, ReplayOutcome::Skipped, None, why));
            }
            sending.stopped = Some(super::sweep::OUT_OF_TIME.into());
            return sending;
        }
        let (envelopes, messages): (Vec<&DlqEnvelope>, Vec<OutgoingMessage>) = ready.into_iter().unzip();
        let batches = batches(messages);
        // A FIFO queue's groups keep their order: their batches go one after another.
        let sends_at_once = if self.queue.ordered() || batches.iter().flatten().any(|m| m.group_id.is_some()) {
            1
        } else {
            at_once
        };
        let sent: Vec<Vec<Result<String, String>>> = futures::stream::iter(&batches)
            .map(|batch| async move {
                match self.queue.send_batch(batch).await {
                    Ok(r) if r.len() == batch.len() => r,
                    Ok(r) => {
                        vec![Err(format!("the queue answered {} of {} entries", r.len(), batch.len())); batch.len()]
                    }
                    Err(err) => vec![Err(err.to_string()); batch.len()],
                }
            })
            .buffered(sends_at_once)
            .collect()
            .await;
        sending.sent = envelopes.into_iter().zip(sent.into_iter().flatten()).collect();
        sending
    }

    /// Mark `sent` REPLAYED (with its audit record in the outbox, or linked into the trail by the
    /// store in the same write), release each whose send was refused, all in as few store writes
    /// as it allows; then publish the records left in the outbox together: the items in order,
    /// and an error that stops the run.
    pub(super) async fn mark(&self, run: &Run<'_>, sent: Unmarked<'_>) -> Reported {
        if sent.is_empty() {
            return (Vec::new(), Ok(()));
        }
        // Each envelope, its detail, and a copy sent: its SQS message id and re-injection record.
        let outcomes: Vec<(&DlqEnvelope, String, Option<(String, AuditRecord)>)> = sent
            .into_iter()
            .map(|(e, result)| match result {
                Ok(sqs_id) => {
                    let detail = format!("re-injected as SQS message {sqs_id}");
                    let record = self.audit_record(run, e, AuditKind::ReplayReinjected, None, detail.clone());
                    (e, detail, Some((sqs_id, record)))
                }
                Err(why) => (e, format!("send failed, released: {why}"), None),
            })
            .collect();
        let settlements = outcomes
            .iter()
            .map(|(e, detail, copy)| match copy {
                Some((sqs_id, record)) => (
                    *e,
                    Settlement {
                        copy: Some(sqs_id.clone()),
                        ..Settlement::decided(EnvelopeStatus::Replayed, detail.clone(), record)
                    },
                ),
                None => (*e, Settlement::release(detail.clone())),
            })
            .collect();
        let marked = self.finish_many(run, settlements).await;
        let (mut items, mut records, mut outcome) = (Vec::new(), Vec::new(), Ok(()));
        for ((e, detail, copy), mark) in outcomes.into_iter().zip(marked) {
            let done = match (copy, mark) {
                (_, Err(err)) => Err(err),
                (None, Ok(_)) => Ok(item(e, ReplayOutcome::Skipped, None, detail)),
                (Some((_, record)), Ok(settled)) => {
                    let recorded = match settled {
                        Settled::InOutbox => {
                            records.push(record);
                            Ok(())
                        }
                        // Linked into the trail with the mark: nothing to publish.
                        Settled::InTrail(_) => Ok(()),
                        // The lease ran out meanwhile and another replay holds the envelope; the
                        // copy is out anyway (the consumer's conditional commit keeps the posting
                        // single), and the re-injection is a fact: record it.
                        Settled::ClaimLost => self.audit.append(&record).await.map(|_| ()).map_err(Into::into),
                    };
                    recorded.map(|()| item(e, ReplayOutcome::Reinjected, None, detail))
                }
            };
            match isolated(e, done) {
                Ok(it) => items.push(it),
                Err(stop) => outcome = outcome.and(Err(stop)),
            }
        }
        self.publish_all(&records).await;
        (items, outcome)
    }

    /// Release claimed envelopes that will not be sent (each failure to release leaves its claim
    /// to its lease).
    async fn release_all(&self, run: &Run<'_>, ready: &[(&DlqEnvelope, OutgoingMessage)], why: &str) {
        let releases = ready
            .iter()
            .map(|(e, _)| (*e, Settlement::release(why.to_owned())))
            .collect();
        for ((e, _), released) in ready.iter().zip(self.finish_many(run, releases).await) {
            if let Err(release) = released {
                tracing::warn!(envelope_id = %e.envelope_id, error = %release, "claim left to its lease");
            }
        }
    }

    /// Under its claim: gate 2 again (from `ahead`, read after the claim), then the message to
    /// send (or a settlement instead).
    async fn prepare(&self, run: &Run<'_>, e: &DlqEnvelope, ahead: &ReadAhead) -> FlowResult<Prepared> {
        if let Some(c) = self.committed(e, ahead).await? {
            let settled = if c.handed_off_by(&e.envelope_id) {
                self.quarantine(run, e, Gate::Idempotency, RESUMED_HAND_OFF, true, false)
                    .await?
            } else {
                self.settle_claimed_duplicate(run, e, &c.holder()).await?
            };
            return Ok(Prepared::Settled(settled));
        }
        let body = original_body(e, &self.worm).await?.unwrap_or_default();
        match self.reinjection(run, e, body) {
            Ok(m) => Ok(Prepared::Send(m)),
            Err(why) => Ok(Prepared::Settled(
                self.quarantine(run, e, Gate::Transport, &why, true, false).await?,
            )),
        }
    }
}

/// A chunk claimed and sent: the items of those settled without a send (and an error that stops
/// the run), and each copy sent (or refused by the queue), to mark.
struct Sending<'c> {
    settled: Reported,
    sent: Unmarked<'c>,
    stopped: Option<String>,
}

/// Copies sent, not marked yet: each envelope with the queue's answer (its SQS message id, or why
/// the send failed).
pub(super) type Unmarked<'c> = Vec<(&'c DlqEnvelope, Result<String, String>)>;

/// What preparing (or sending) one envelope came to.
enum Prepared {
    Send(OutgoingMessage),
    Settled(ReplayItem),
}

impl From<ReplayItem> for Prepared {
    fn from(it: ReplayItem) -> Self {
        Prepared::Settled(it)
    }
}
