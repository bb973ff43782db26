//! The queues, as each flow acts on them: the consumer hides a message for its backoff and
//! writes dead letters; the replay re-injects originals into the main queue.

use std::future::Future;
use std::sync::Arc;

use super::StoreResult;
use crate::domain::{DeadLetter, attrs};

/// The DLQ, as the consumer writes to it.
pub trait DeadLetterQueue: Send + Sync {
    fn send(&self, letter: &DeadLetter) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The queue a message was received from, as the consumer acts on it.
pub trait WorkQueue: Send + Sync {
    /// Hide a received message for `secs` seconds (the retry backoff).
    fn change_visibility(&self, receipt_handle: &str, secs: u32) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The main queue, as the replay re-injects into it.
pub trait ReplayQueue: Send + Sync {
    /// Send up to ten messages; per message, its SQS message id or why it was refused.
    fn send_batch(
        &self,
        messages: &[OutgoingMessage],
    ) -> impl Future<Output = StoreResult<Vec<Result<String, String>>>> + Send;
    /// Messages waiting to be received (back-pressure).
    fn visible_depth(&self) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// A message to send: body plus string/number attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingMessage {
    pub body: String,
    /// name -> (data type, string value)
    pub attributes: Vec<(String, String, String)>,
    /// FIFO queues only.
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
}

/// The DLQ message of a dead letter, as every [`DeadLetterQueue`] sends it: the body verbatim and
/// four attributes (code, root cause, attempts, and the JSON context).
pub fn dead_letter_message(letter: &DeadLetter) -> Result<OutgoingMessage, serde_json::Error> {
    let context = serde_json::to_string(&letter.context)?;
    Ok(OutgoingMessage {
        body: letter.body.clone(),
        attributes: vec![
            (
                attrs::FAILURE_CODE.into(),
                "String".into(),
                letter.failure_code.as_str().into(),
            ),
            (attrs::ROOT_CAUSE.into(), "String".into(), letter.root_cause.to_string()),
            (
                attrs::ATTEMPT_COUNT.into(),
                "Number".into(),
                letter.attempt_count.to_string(),
            ),
            (attrs::CONTEXT.into(), "String".into(), context),
        ],
        group_id: letter.context.message_group_id.clone(),
        // FIFO dedup id: one dead letter per delivered message and attempt.
        dedup_id: Some(
            format!("{}-{}", letter.context.source_message_id, letter.attempt_count)
                .chars()
                .take(128)
                .collect(),
        ),
    })
}

impl<T: DeadLetterQueue> DeadLetterQueue for Arc<T> {
    fn send(&self, letter: &DeadLetter) -> impl Future<Output = StoreResult<()>> + Send {
        (**self).send(letter)
    }
}

impl<T: WorkQueue> WorkQueue for Arc<T> {
    fn change_visibility(&self, receipt_handle: &str, secs: u32) -> impl Future<Output = StoreResult<()>> + Send {
        (**self).change_visibility(receipt_handle, secs)
    }
}

impl<T: ReplayQueue> ReplayQueue for Arc<T> {
    fn send_batch(
        &self,
        messages: &[OutgoingMessage],
    ) -> impl Future<Output = StoreResult<Vec<Result<String, String>>>> + Send {
        (**self).send_batch(messages)
    }
    fn visible_depth(&self) -> impl Future<Output = StoreResult<u64>> + Send {
        (**self).visible_depth()
    }
}
