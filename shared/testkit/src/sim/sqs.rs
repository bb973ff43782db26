//! SQS as AWS runs it, for the simulator: at-least-once delivery (a message in flight may be
//! delivered again), visibility timeouts that expire while a handler still runs, receipt handles
//! that go stale, `ApproximateReceiveCount`, the redrive policy (moved on the receive after
//! `maxReceiveCount`, keeping its message id and its original enqueue time), retention, FIFO
//! groups, and the limits: 1 MiB per message and per batch (body and attributes), ten entries per
//! batch, ten attributes per message, characters SQS accepts, non-empty attribute values. The
//! local emulator enforces only some of these.

use aws_lambda_events::event::sqs::SqsMessage;
use recon_core::domain::DeadLetter;
use recon_core::domain::TransientKind;
use recon_core::domain::attrs::MAX_PER_MESSAGE;
use recon_core::domain::sqs::{LOCAL_ACCOUNT, SENDER_ID};
use recon_core::ports::{
    Clock, DeadLetterQueue, OutgoingMessage, ReplayQueue, StoreError, StoreResult, WorkQueue, dead_letter_message,
};
use recon_core::resources::MAX_MESSAGE_BYTES;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::clock::SimClock;
use super::rng::SharedRng;
use crate::builders::attribute;

/// Entries per batch call.
pub const MAX_BATCH: usize = 10;
/// SQS's longest visibility timeout.
const MAX_VISIBILITY_SECS: u32 = 43_200;

#[derive(Clone, Debug)]
pub struct QueueSpec {
    pub name: String,
    pub arn: String,
    pub fifo: bool,
    pub visibility: Duration,
    pub retention: Duration,
    /// Dead-letter queue name and `maxReceiveCount`.
    pub redrive: Option<(String, u32)>,
}

#[derive(Clone, Debug)]
struct Msg {
    id: String,
    body: String,
    /// name -> (data type, value)
    attributes: BTreeMap<String, (String, String)>,
    group: Option<String>,
    sent_ms: i64,
    /// Virtual time it was first enqueued (kept when the redrive policy moves it).
    enqueued: Duration,
    receive_count: u32,
    first_receive_ms: Option<i64>,
    visible_at: Duration,
    receipt: Option<String>,
    source_arn: Option<String>,
}

struct Queue {
    spec: QueueSpec,
    messages: BTreeMap<u64, Msg>,
}

#[derive(Default)]
struct State {
    queues: BTreeMap<String, Queue>,
    seq: u64,
    receipts: u64,
    /// Messages in flight that the next receive of their queue delivers again (at-least-once).
    again: Vec<(String, u64)>,
    /// Messages dropped at the end of their retention: (queue, message id, body).
    expired: Vec<(String, String, String)>,
    /// Every copy a replay sent (`replay.of` set), in the journal's order.
    reinjections: Vec<Reinjection>,
}

/// A copy a replay sent, as the queue took it.
#[derive(Clone, Debug)]
pub struct Reinjection {
    pub at: u64,
    pub message_id: String,
    /// `replay.of`: the envelope it was re-injected from.
    pub envelope_id: String,
    /// `replay.id`: the replay (its claim) that sent it.
    pub replay_id: String,
    pub body: String,
}

/// Counts of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Depth {
    pub visible: u64,
    pub in_flight: u64,
}

impl Depth {
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight
    }
}

pub struct SqsModel {
    clock: SimClock,
    rng: SharedRng,
    /// Chance, per delivery, that the message is delivered once more while in flight.
    duplicate_ppm: u32,
    state: Mutex<State>,
}

fn invalid(code: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::new(TransientKind::Infrastructure, format!("{code}: {detail}"))
}

/// The bytes SQS counts for a message: the body and every attribute's name, type and value.
pub fn message_bytes(m: &OutgoingMessage) -> usize {
    m.body.len()
        + m.attributes
            .iter()
            .map(|(n, t, v)| n.len() + t.len() + v.len())
            .sum::<usize>()
}

/// SQS accepts #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF.
fn acceptable(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Why SQS would refuse this message on its own (`None`: it accepts it).
pub fn refusal(m: &OutgoingMessage) -> Option<StoreError> {
    if m.body.is_empty() {
        return Some(invalid("InvalidParameterValue", "the message body is empty"));
    }
    if let Some(c) = m.body.chars().find(|c| !acceptable(*c)) {
        return Some(invalid(
            "InvalidMessageContents",
            format!("invalid character U+{:04X} in the body", u32::from(c)),
        ));
    }
    if m.attributes.len() > MAX_PER_MESSAGE {
        return Some(invalid(
            "InvalidParameterValue",
            format!("{} message attributes, at most {MAX_PER_MESSAGE}", m.attributes.len()),
        ));
    }
    if let Some((n, _, _)) = m
        .attributes
        .iter()
        .find(|(n, t, v)| n.is_empty() || t.is_empty() || v.is_empty())
    {
        return Some(invalid(
            "InvalidParameterValue",
            format!("message attribute `{n}` is empty"),
        ));
    }
    let bytes = message_bytes(m);
    if bytes > MAX_MESSAGE_BYTES as usize {
        return Some(invalid(
            "InvalidParameterValue",
            format!("message of {bytes} bytes, longer than {MAX_MESSAGE_BYTES}"),
        ));
    }
    None
}

impl SqsModel {
    pub fn new(clock: SimClock, rng: SharedRng, duplicate_ppm: u32, queues: Vec<QueueSpec>) -> Self {
        let queues = queues
            .into_iter()
            .map(|spec| {
                (
                    spec.name.clone(),
                    Queue {
                        spec,
                        messages: BTreeMap::new(),
                    },
                )
            })
            .collect();
        SqsModel {
            clock,
            rng,
            duplicate_ppm,
            state: Mutex::new(State {
                queues,
                ..State::default()
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn arn(&self, queue: &str) -> String {
        self.state()
            .queues
            .get(queue)
            .map(|q| q.spec.arn.clone())
            .unwrap_or_default()
    }

    fn enqueue(&self, s: &mut State, queue: &str, m: &OutgoingMessage) -> StoreResult<String> {
        if let Some(e) = refusal(m) {
            return Err(e);
        }
        let now = self.clock.elapsed();
        let sent_ms = self.clock.now().timestamp_millis();
        s.seq += 1;
        let seq = s.seq;
        let q = s
            .queues
            .get_mut(queue)
            .ok_or_else(|| invalid("AWS.SimpleQueueService.NonExistentQueue", queue))?;
        if q.spec.fifo && m.group_id.is_none() {
            return Err(invalid(
                "MissingParameter",
                "MessageGroupId is required on a FIFO queue",
            ));
        }
        let id = format!("{}-{seq:06}", &q.spec.name[..1]);
        let attr = |name: &str| {
            m.attributes
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, _, v)| v.clone())
        };
        if let Some(envelope_id) = attr(recon_core::domain::attrs::REPLAY_OF) {
            s.reinjections.push(Reinjection {
                at: crate::memory::journal::tick(),
                message_id: id.clone(),
                envelope_id,
                replay_id: attr(recon_core::domain::attrs::REPLAY_ID).unwrap_or_default(),
                body: m.body.clone(),
            });
        }
        q.messages.insert(
            seq,
            Msg {
                id: id.clone(),
                body: m.body.clone(),
                attributes: m
                    .attributes
                    .iter()
                    .map(|(n, t, v)| (n.clone(), (t.clone(), v.clone())))
                    .collect(),
                group: m.group_id.clone().filter(|_| q.spec.fifo),
                sent_ms,
                enqueued: now,
                receive_count: 0,
                first_receive_ms: None,
                visible_at: now,
                receipt: None,
                source_arn: None,
            },
        );
        Ok(id)
    }

    /// SendMessage.
    pub fn send(&self, queue: &str, m: &OutgoingMessage) -> StoreResult<String> {
        let mut s = self.state();
        self.enqueue(&mut s, queue, m)
    }

    /// SendMessageBatch: the whole call fails above ten entries or 1 MiB in all; otherwise per
    /// entry, its message id or why it was refused.
    pub fn send_batch(&self, queue: &str, messages: &[OutgoingMessage]) -> StoreResult<Vec<Result<String, String>>> {
        if messages.is_empty() || messages.len() > MAX_BATCH {
            return Err(invalid(
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                format!("{} entries", messages.len()),
            ));
        }
        let total: usize = messages.iter().map(message_bytes).sum();
        if total > MAX_MESSAGE_BYTES as usize {
            return Err(invalid(
                "AWS.SimpleQueueService.BatchRequestTooLong",
                format!("{total} bytes in the batch, at most {MAX_MESSAGE_BYTES}"),
            ));
        }
        let mut s = self.state();
        Ok(messages
            .iter()
            .map(|m| self.enqueue(&mut s, queue, m).map_err(|e| e.to_string()))
            .collect())
    }

    /// ReceiveMessage (all attributes): up to `max` messages, as Lambda's event-source mapping
    /// receives them. Messages past their retention are dropped first; a message received
    /// `maxReceiveCount` times moves to the dead-letter queue instead of being delivered.
    pub fn receive(&self, queue: &str, max: usize) -> Vec<SqsMessage> {
        let now = self.clock.elapsed();
        let now_ms = self.clock.now().timestamp_millis();
        let mut s = self.state();
        let State {
            queues,
            receipts,
            again,
            expired,
            seq,
            ..
        } = &mut *s;
        let Some(q) = queues.get_mut(queue) else {
            return Vec::new();
        };
        let retention = q.spec.retention;
        let gone: Vec<u64> = q
            .messages
            .iter()
            .filter(|(_, m)| now.saturating_sub(m.enqueued) >= retention)
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            if let Some(m) = q.messages.remove(&k) {
                expired.push((queue.to_owned(), m.id, m.body));
            }
        }
        let busy_groups: Vec<String> = q
            .messages
            .values()
            .filter(|m| m.visible_at > now)
            .filter_map(|m| m.group.clone())
            .collect();
        let mut visible: Vec<u64> = q
            .messages
            .iter()
            .filter(|(_, m)| m.visible_at <= now && m.group.as_ref().is_none_or(|g| !busy_groups.contains(g)))
            .map(|(k, _)| *k)
            .collect();
        if !q.spec.fifo {
            // A standard queue keeps no order.
            let mut g = self.rng.get();
            for i in (1..visible.len()).rev() {
                let j = g.below(i as u64 + 1) as usize;
                visible.swap(i, j);
            }
        }
        let spec = q.spec.clone();
        let mut moved: Vec<Msg> = Vec::new();
        let mut delivered = Vec::new();
        let mut delivered_keys = Vec::new();
        for k in visible {
            if delivered.len() >= max {
                break;
            }
            let Some(m) = q.messages.get_mut(&k) else { continue };
            if let Some((_, max_receives)) = &spec.redrive
                && m.receive_count >= *max_receives
            {
                if let Some(mut m) = q.messages.remove(&k) {
                    m.source_arn = Some(spec.arn.clone());
                    moved.push(m);
                }
                continue;
            }
            *receipts += 1;
            m.receive_count += 1;
            m.first_receive_ms.get_or_insert(now_ms);
            m.visible_at = now + spec.visibility;
            m.receipt = Some(format!("rh-{receipts}"));
            delivered.push(record(m, &spec.arn));
            delivered_keys.push(k);
        }
        // At-least-once: a message delivered earlier may come again while still in flight, under
        // a new receipt (the earlier receipt goes stale).
        let due: Vec<u64> = again.iter().filter(|(qn, _)| qn == queue).map(|(_, k)| *k).collect();
        again.retain(|(qn, _)| qn != queue);
        for k in due {
            if delivered.len() >= max {
                break;
            }
            if let Some(m) = q
                .messages
                .get_mut(&k)
                .filter(|m| m.visible_at > now && m.receipt.is_some())
            {
                *receipts += 1;
                m.receive_count += 1;
                m.visible_at = now + spec.visibility;
                m.receipt = Some(format!("rh-{receipts}"));
                delivered.push(record(m, &spec.arn));
            }
        }
        if !spec.fifo {
            let mut g = self.rng.get();
            for k in delivered_keys {
                if g.chance(self.duplicate_ppm) {
                    again.push((queue.to_owned(), k));
                }
            }
        }
        if let Some((dlq, _)) = &spec.redrive
            && let Some(d) = queues.get_mut(dlq)
        {
            for mut m in moved {
                m.receive_count = 0;
                m.first_receive_ms = None;
                m.visible_at = now;
                m.receipt = None;
                // Retention counts from the original enqueue time (standard queues).
                *seq += 1;
                d.messages.insert(*seq, m);
            }
        }
        delivered
    }

    /// DeleteMessage: removes the message only if `receipt` is its latest receipt handle (an
    /// older one succeeds and deletes nothing, as on AWS).
    pub fn delete(&self, queue: &str, receipt: &str) -> bool {
        let mut s = self.state();
        let Some(q) = s.queues.get_mut(queue) else { return false };
        let key = q
            .messages
            .iter()
            .find(|(_, m)| m.receipt.as_deref() == Some(receipt))
            .map(|(k, _)| *k);
        key.and_then(|k| q.messages.remove(&k)).is_some()
    }

    /// ChangeMessageVisibility, for a message in flight under its latest receipt.
    pub fn change_visibility(&self, queue: &str, receipt: &str, secs: u32) -> StoreResult<()> {
        if secs > MAX_VISIBILITY_SECS {
            return Err(invalid("InvalidParameterValue", format!("visibility timeout {secs} s")));
        }
        let now = self.clock.elapsed();
        let mut s = self.state();
        let q = s
            .queues
            .get_mut(queue)
            .ok_or_else(|| invalid("AWS.SimpleQueueService.NonExistentQueue", queue))?;
        match q.messages.values_mut().find(|m| m.receipt.as_deref() == Some(receipt)) {
            Some(m) if m.visible_at > now => {
                m.visible_at = now + Duration::from_secs(u64::from(secs));
                Ok(())
            }
            Some(_) => Err(invalid("AWS.SimpleQueueService.MessageNotInflight", receipt)),
            None => Err(invalid("ReceiptHandleIsInvalid", receipt)),
        }
    }

    pub fn depth(&self, queue: &str) -> Depth {
        let now = self.clock.elapsed();
        let s = self.state();
        let Some(q) = s.queues.get(queue) else {
            return Depth::default();
        };
        let in_flight = q.messages.values().filter(|m| m.visible_at > now).count() as u64;
        Depth {
            visible: q.messages.len() as u64 - in_flight,
            in_flight,
        }
    }

    /// Every copy a replay sent, in order.
    pub fn reinjections(&self) -> Vec<Reinjection> {
        self.state().reinjections.clone()
    }

    /// Messages dropped at the end of their retention so far.
    pub fn expired(&self) -> Vec<(String, String, String)> {
        self.state().expired.clone()
    }
}

/// A delivered message as Lambda's event carries it.
fn record(m: &Msg, arn: &str) -> SqsMessage {
    let mut r = SqsMessage::default();
    r.message_id = Some(m.id.clone());
    r.receipt_handle = m.receipt.clone();
    r.body = Some(m.body.clone());
    r.event_source_arn = Some(arn.to_owned());
    r.event_source = Some("aws:sqs".into());
    r.aws_region = Some("us-east-1".into());
    let a = &mut r.attributes;
    a.insert("ApproximateReceiveCount".into(), m.receive_count.to_string());
    a.insert("SentTimestamp".into(), m.sent_ms.to_string());
    // Every sender is the one account, as on the local stack (who may send what is the queue
    // policies' and the template's: `tests/iam_offline.rs`).
    a.insert(SENDER_ID.into(), LOCAL_ACCOUNT.into());
    if let Some(f) = m.first_receive_ms {
        a.insert("ApproximateFirstReceiveTimestamp".into(), f.to_string());
    }
    if let Some(g) = &m.group {
        a.insert("MessageGroupId".into(), g.clone());
    }
    if let Some(src) = &m.source_arn {
        a.insert("DeadLetterQueueSourceArn".into(), src.clone());
    }
    for (name, (data_type, value)) in &m.attributes {
        r.message_attributes.insert(name.clone(), attribute(data_type, value));
    }
    r
}

/// One queue of the model, as the flows' ports see it.
#[derive(Clone)]
pub struct SimQueue {
    pub model: Arc<SqsModel>,
    pub name: String,
}

impl WorkQueue for SimQueue {
    async fn change_visibility(&self, receipt_handle: &str, secs: u32) -> StoreResult<()> {
        self.model.change_visibility(&self.name, receipt_handle, secs)
    }
}

impl DeadLetterQueue for SimQueue {
    async fn send(&self, letter: &DeadLetter) -> StoreResult<()> {
        let m = dead_letter_message(letter)
            .map_err(|e| StoreError::new(TransientKind::Infrastructure, format!("dead-letter context: {e}")))?;
        self.model.send(&self.name, &m).map(|_| ())
    }
}

impl ReplayQueue for SimQueue {
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<Vec<Result<String, String>>> {
        self.model.send_batch(&self.name, messages)
    }
    async fn visible_depth(&self) -> StoreResult<u64> {
        Ok(self.model.depth(&self.name).visible)
    }
}
