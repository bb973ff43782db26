//! SQS adapters: the main queue (visibility backoff, sends; the local pump receives through
//! `recon_harness::pump::Poll`) and the DLQ (dead letters with their failure context as message attributes).

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeNameForSends, MessageSystemAttributeValue, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use std::collections::HashMap;

use crate::error::store_error;
use recon_core::domain::DeadLetter;
use recon_core::ports::{DeadLetterQueue, StoreError, StoreResult, WorkQueue, dead_letter_message, is_binary};

/// SQS allows at most 10 entries per batch call.
pub const MAX_BATCH: usize = 10;

/// Approximate counts of a queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

impl QueueDepth {
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

pub use recon_core::ports::OutgoingMessage;

/// An attribute as SQS takes it: a `Binary` one's value is the base64 of its bytes.
fn attr(data_type: &str, value: &str) -> StoreResult<MessageAttributeValue> {
    let builder = MessageAttributeValue::builder().data_type(data_type);
    let builder = if is_binary(data_type) {
        let bytes = aws_smithy_types::base64::decode(value)
            .map_err(|e| StoreError::infra(format!("binary message attribute: {e}")))?;
        builder.binary_value(aws_smithy_types::Blob::new(bytes))
    } else {
        builder.string_value(value)
    };
    builder
        .build()
        .map_err(|e| StoreError::infra(format!("message attribute: {e}")))
}

/// One SQS queue, by URL.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: Client,
    url: String,
    /// The DLQ and the queue behind it, whose depths [`ReplayQueue::queued`] adds (a
    /// reconciliation's).
    dead_letters: Option<(String, String)>,
}

impl SqsQueue {
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        SqsQueue {
            client,
            url: url.into(),
            dead_letters: None,
        }
    }

    /// This queue, seeing its DLQ at `dlq` and the queue behind it at `parked` too: what
    /// [`ReplayQueue::queued`] counts.
    pub fn with_dead_letters(mut self, dlq: impl Into<String>, parked: impl Into<String>) -> Self {
        self.dead_letters = Some((dlq.into(), parked.into()));
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn is_fifo(&self) -> bool {
        self.url.ends_with(".fifo")
    }

    /// Send up to [`MAX_BATCH`] messages in one call. Returns, per entry in order, the SQS message
    /// id or the error for that entry.
    pub async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<Vec<Result<String, String>>> {
        let mut entries = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let mut e = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(&m.body);
            for (name, data_type, value) in &m.attributes {
                e = e.message_attributes(name, attr(data_type, value)?);
            }
            if let Some(header) = &m.trace_header {
                e = e.message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, trace(header)?);
            }
            if self.is_fifo() {
                e = e
                    .message_group_id(m.group_id.clone().unwrap_or_else(|| "default".into()))
                    .set_message_deduplication_id(m.dedup_id.clone());
            }
            entries.push(e.build().map_err(|e| StoreError::infra(format!("batch entry: {e}")))?);
        }
        let out = self
            .client
            .send_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| store_error("SendMessageBatch", e))?;
        let mut results: Vec<Result<String, String>> = vec![Err("no result".into()); messages.len()];
        let answers = out
            .successful()
            .iter()
            .map(|ok| (ok.id(), Ok(ok.message_id().to_owned())));
        let refusals = out.failed().iter().map(|f| {
            let why = format!("{}: {}", f.code(), f.message().unwrap_or(""));
            (f.id(), Err(why))
        });
        for (id, result) in answers.chain(refusals) {
            if let Some(slot) = id.parse::<usize>().ok().and_then(|i| results.get_mut(i)) {
                *slot = result;
            }
        }
        Ok(results)
    }

    /// Approximate depth (visible, in flight, delayed).
    pub async fn depth(&self) -> StoreResult<QueueDepth> {
        self.depth_of(&self.url).await
    }

    async fn depth_of(&self, url: &str) -> StoreResult<QueueDepth> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| store_error("GetQueueAttributes", e))?;
        let attrs: HashMap<QueueAttributeName, String> = out.attributes.unwrap_or_default();
        let get = |n: QueueAttributeName| attrs.get(&n).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Ok(QueueDepth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }

    /// One attribute of the queue (e.g. `QueueArn`, `RedrivePolicy`).
    pub async fn attribute(&self, name: QueueAttributeName) -> StoreResult<Option<String>> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(name.clone())
            .send()
            .await
            .map_err(|e| store_error("GetQueueAttributes", e))?;
        Ok(out.attributes.and_then(|mut a| a.remove(&name)))
    }
}

impl WorkQueue for SqsQueue {
    async fn change_visibility(&self, receipt_handle: &str, secs: u32) -> StoreResult<()> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(i32::try_from(secs).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| store_error("ChangeMessageVisibility", e))?;
        Ok(())
    }
}

/// The `AWSTraceHeader` system attribute: the X-Ray trace the message continues.
fn trace(header: &str) -> StoreResult<MessageSystemAttributeValue> {
    MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(header)
        .build()
        .map_err(|e| StoreError::infra(format!("trace header: {e}")))
}

impl DeadLetterQueue for SqsQueue {
    async fn send(&self, letter: &DeadLetter) -> StoreResult<()> {
        let m = dead_letter_message(letter).map_err(|e| StoreError::infra(format!("dead-letter context: {e}")))?;
        let mut req = self.client.send_message().queue_url(&self.url).message_body(&m.body);
        for (name, data_type, value) in &m.attributes {
            req = req.message_attributes(name, attr(data_type, value)?);
        }
        if let Some(header) = &m.trace_header {
            req = req.message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, trace(header)?);
        }
        if self.is_fifo() {
            req = req
                .message_group_id(m.group_id.unwrap_or_else(|| "dead-letters".into()))
                .set_message_deduplication_id(m.dedup_id);
        }
        req.send().await.map_err(|e| store_error("SendMessage(DLQ)", e))?;
        Ok(())
    }
}

impl recon_core::ports::ReplayQueue for SqsQueue {
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<Vec<Result<String, String>>> {
        SqsQueue::send_batch(self, messages).await
    }
    async fn visible_depth(&self) -> StoreResult<u64> {
        Ok(self.depth().await?.visible)
    }
    fn ordered(&self) -> bool {
        self.is_fifo()
    }
    async fn queued(&self) -> StoreResult<Option<recon_core::ports::Queued>> {
        let Some((dlq, parked)) = &self.dead_letters else {
            return Ok(None);
        };
        Ok(Some(recon_core::ports::Queued {
            main: self.depth().await?.total(),
            dead_letters: self.depth_of(dlq).await?.total(),
            parked: self.depth_of(parked).await?.total(),
        }))
    }
}
