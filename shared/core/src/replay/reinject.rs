//! Re-injection: claim each envelope, ask gate 2 again under the claim, send the originals in one
//! batch (verbatim bytes and attributes plus `replay.*` provenance) at no more than the rate
//! limit, then mark each one REPLAYED, or release it when its send was refused.

use std::time::Duration;

use super::report::{ReplayItem, ReplayOutcome, ReplayReport, item};
use super::settle::{NOT_CLAIMED, Settlement};
use super::{Replayer, Run};
use crate::domain::{AuditKind, DlqEnvelope, EnvelopeStatus, attrs, decode};
use crate::envelopes::original_body;
use crate::ports::{
    AuditLog, AuditOutbox, EnvelopeStore, FlowResult, Ledger, Metrics, OutgoingMessage, ReplayQueue, Worm,
};

impl<S, L, R, Q, W, A, M> Replayer<S, L, R, Q, W, A, M>
where
    S: EnvelopeStore + AuditOutbox,
    L: Ledger,
    Q: ReplayQueue,
    W: Worm,
    A: AuditLog,
    M: Metrics,
{
    /// The message that re-injects `e`: its original bytes and attributes, plus provenance.
    /// `None` when the original carries too many attributes to add the replay's four.
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
        (attributes.len() <= attrs::MAX_PER_MESSAGE).then(|| OutgoingMessage {
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

    /// Never ahead of `rate_per_sec` since the run started.
    async fn pace(&self, run: &Run<'_>) {
        if self.config.rate_per_sec == 0 {
            return;
        }
        let due = Duration::from_secs_f64(run.sent as f64 / f64::from(self.config.rate_per_sec));
        let elapsed = self.clock.monotonic().saturating_sub(run.started);
        if due > elapsed {
            self.clock.sleep(due - elapsed).await;
        }
    }

    /// Claim, re-check gate 2 under the claim, send the originals in one batch, mark them.
    pub(super) async fn reinject(
        &self,
        run: &mut Run<'_>,
        chunk: &[DlqEnvelope],
        report: &mut ReplayReport,
    ) -> FlowResult<()> {
        let mut batch: Vec<(DlqEnvelope, OutgoingMessage)> = Vec::new();
        for e in chunk {
            if !self.claim(run, e).await? {
                report.push(item(e, ReplayOutcome::Skipped, None, NOT_CLAIMED));
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
                    self.finish(run, e, Settlement::release(why.clone())).await?;
                    report.push(item(e, ReplayOutcome::Skipped, None, why));
                }
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.pace(run).await;
        let messages: Vec<OutgoingMessage> = batch.iter().map(|(_, m)| m.clone()).collect();
        let results = match self.queue.send_batch(&messages).await {
            Ok(r) => r,
            Err(err) => vec![Err(err.to_string()); messages.len()],
        };
        run.sent += messages.len() as u64;
        for ((e, _), result) in batch.iter().zip(results) {
            report.push(self.record_send(run, e, result).await?);
        }
        Ok(())
    }

    /// After the send: mark the envelope REPLAYED (with its audit record), or release it.
    async fn record_send(
        &self,
        run: &Run<'_>,
        e: &DlqEnvelope,
        sent: Result<String, String>,
    ) -> FlowResult<ReplayItem> {
        match sent {
            Ok(sqs_id) => {
                let detail = format!("re-injected as SQS message {sqs_id}");
                let record = self.audit_record(run, e, AuditKind::ReplayReinjected, None, detail.clone());
                let settled = Settlement {
                    copy: Some(sqs_id),
                    ..Settlement::decided(EnvelopeStatus::Replayed, detail.clone(), &record)
                };
                if self.finish(run, e, settled).await? {
                    self.publish(&record).await?;
                } else {
                    // The lease ran out meanwhile and another replay holds the envelope; the copy
                    // is out anyway (the consumer's conditional commit keeps the posting single),
                    // and the re-injection is a fact: record it.
                    self.audit.append(&record).await?;
                }
                Ok(item(e, ReplayOutcome::Reinjected, None, detail))
            }
            Err(why) => {
                let detail = format!("send failed, released: {why}");
                self.finish(run, e, Settlement::release(detail.clone())).await?;
                Ok(item(e, ReplayOutcome::Skipped, None, detail))
            }
        }
    }
}
