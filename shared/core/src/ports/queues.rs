//! The queues, as each flow acts on them: the consumer hides a message for its backoff and
//! writes dead letters; the replay re-injects originals into the main queue.

use std::future::Future;

use super::StoreResult;
use crate::domain::{DeadLetter, attrs};
use crate::resources::MAX_MESSAGE_BYTES;

port! {
    /// The DLQ, as the consumer writes to it.
    pub trait DeadLetterQueue {
        fn send(&self, letter: &DeadLetter) -> impl Future<Output = StoreResult<()>> + Send;
    }

    /// The queue a message was received from, as the consumer acts on it.
    pub trait WorkQueue {
        /// Hide a received message for `secs` seconds (the retry backoff).
        fn change_visibility(&self, receipt_handle: &str, secs: u32) -> impl Future<Output = StoreResult<()>> + Send;
    }

    /// The main queue, as the replay re-injects into it.
    pub trait ReplayQueue {
        /// Send up to ten messages; per message, its SQS message id or why it was refused.
        fn send_batch(
            &self,
            messages: &[OutgoingMessage],
        ) -> impl Future<Output = StoreResult<Vec<Result<String, String>>>> + Send;
        /// Messages waiting to be received (back-pressure).
        fn visible_depth(&self) -> impl Future<Output = StoreResult<u64>> + Send;
        /// Whether the queue keeps an order (a FIFO queue): its batches are then sent one after
        /// another, never at once.
        fn ordered(&self) -> bool {
            false
        }
        /// The messages still in the pipeline's queues, the main queue's, the DLQ's and those
        /// parked behind it (visible, in flight or delayed): what a reconciliation waits on before
        /// it can settle. `None`: this queue does not see them, and nothing reconciles through it.
        fn queued(&self) -> impl Future<Output = StoreResult<Option<Queued>>> + Send {
            async { Ok(None) }
        }
    }
}

/// Messages still in the pipeline's queues (visible, in flight or delayed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queued {
    pub main: u64,
    pub dead_letters: u64,
    /// Behind the DLQ: dead letters the enricher kept failing on (never enveloped until sent back).
    pub parked: u64,
}

impl Queued {
    pub fn total(&self) -> u64 {
        self.main.saturating_add(self.dead_letters).saturating_add(self.parked)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingMessage {
    pub body: String,
    /// name -> (data type, value): the text of a `String` or `Number` attribute, the base64 of
    /// the bytes of a `Binary` one (see [`is_binary`]).
    pub attributes: Vec<(String, String, String)>,
    /// FIFO queues only.
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
    /// The X-Ray trace header to send as SQS's `AWSTraceHeader` system attribute (not counted
    /// against the message's size).
    pub trace_header: Option<String>,
}

/// Does an attribute of this data type (`Binary`, `Binary.<label>`) carry bytes?
pub fn is_binary(data_type: &str) -> bool {
    data_type == "Binary" || data_type.starts_with("Binary.")
}

impl OutgoingMessage {
    /// The bytes SQS counts against its 1 MiB limit: the body and every attribute's name, data
    /// type and value.
    pub fn bytes(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(name, data_type, value)| name.len() + data_type.len() + value.len())
                .sum::<usize>()
    }

    /// Why SQS would refuse this message whatever the retry (`None`: within its limits).
    pub fn refusal(&self) -> Option<String> {
        if self.attributes.len() > attrs::MAX_PER_MESSAGE {
            return Some(format!(
                "{} message attributes, SQS takes {}",
                self.attributes.len(),
                attrs::MAX_PER_MESSAGE
            ));
        }
        let bytes = self.bytes();
        (bytes > MAX_MESSAGE_BYTES as usize)
            .then(|| format!("{bytes} bytes with its attributes, SQS takes {MAX_MESSAGE_BYTES}"))
    }
}

/// `messages` in batches SQS accepts: at most ten entries and 1 MiB in all per call (a message
/// over the limit on its own gets a batch of its own, for SQS to refuse it alone).
pub fn batches(messages: Vec<OutgoingMessage>) -> Vec<Vec<OutgoingMessage>> {
    let mut out: Vec<Vec<OutgoingMessage>> = Vec::new();
    let mut bytes = 0;
    for m in messages {
        let size = m.bytes();
        match out.last_mut() {
            Some(batch) if batch.len() < 10 && bytes + size <= MAX_MESSAGE_BYTES as usize => {
                bytes += size;
                batch.push(m);
            }
            _ => {
                bytes = size;
                out.push(vec![m]);
            }
        }
    }
    out
}

/// The DLQ message of a dead letter, as every [`DeadLetterQueue`] sends it: the body verbatim and
/// four attributes (code, root cause, attempts, and the JSON context).
pub fn dead_letter_message(letter: &DeadLetter) -> Result<OutgoingMessage, serde_json::Error> {
    let attributes = [
        (attrs::FAILURE_CODE, "String", letter.failure_code.as_str().to_owned()),
        (attrs::ROOT_CAUSE, "String", letter.root_cause.to_string()),
        (attrs::ATTEMPT_COUNT, "Number", letter.attempt_count.to_string()),
        (attrs::CONTEXT, "String", serde_json::to_string(&letter.context)?),
    ];
    Ok(OutgoingMessage {
        body: letter.body.clone(),
        attributes: attributes
            .map(|(name, kind, value)| (name.to_owned(), kind.to_owned(), value))
            .into(),
        group_id: letter.context.message_group_id.clone(),
        trace_header: letter.context.aws_trace_header.clone(),
        // FIFO dedup id: one dead letter per delivered message and attempt.
        dedup_id: Some(
            format!("{}-{}", letter.context.source_message_id, letter.attempt_count)
                .chars()
                .take(128)
                .collect(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(bytes: usize) -> OutgoingMessage {
        OutgoingMessage {
            body: "x".repeat(bytes),
            ..OutgoingMessage::default()
        }
    }

    #[test]
    fn batches_respect_ten_entries_and_one_mebibyte() {
        let sizes = [400_000, 400_000, 400_000, 10, 10];
        let b = batches(sizes.iter().map(|n| message(*n)).collect());
        let lens: Vec<usize> = b.iter().map(Vec::len).collect();
        assert_eq!(lens, [2, 3], "the third 400 kB message starts a batch");
        let b = batches((0..25).map(|_| message(10)).collect());
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
        for batch in b {
            assert!(batch.iter().map(OutgoingMessage::bytes).sum::<usize>() <= MAX_MESSAGE_BYTES as usize);
        }
    }

    #[test]
    fn a_message_over_the_limit_is_refused_before_sending() {
        let mut m = message(MAX_MESSAGE_BYTES as usize - 10);
        assert_eq!(m.refusal(), None);
        m.attributes.push(("replay.of".into(), "String".into(), "env_x".into()));
        assert!(m.refusal().is_some_and(|r| r.contains("bytes")));
        let many = OutgoingMessage {
            body: "{}".into(),
            attributes: (0..11)
                .map(|i| (format!("a{i}"), "String".into(), "v".into()))
                .collect(),
            ..OutgoingMessage::default()
        };
        assert!(many.refusal().is_some_and(|r| r.contains("attributes")));
    }
}
