//! The local stand-in for Lambda's SQS event-source mapping (it does not exist in the local
//! stack): long-poll a queue, build a real `SqsEvent` batch with all attributes, invoke a handler
//! in-process, delete only the messages the handler did not report as failures, and leave the
//! rest to their visibility timeout — exactly what the managed poller does on AWS.

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use recon_aws::error::store_error;
use recon_aws::sqs::SqsQueue;
use recon_core::batch::{BatchHandler, Outcome};
use recon_core::domain::TransientKind;
use recon_core::ports::{StoreError, StoreResult};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// Convert a received SDK message into the Lambda event record SQS would deliver.
pub fn to_event_record(m: &Message, queue_arn: &str, region: &str) -> SqsMessage {
    let mut r = SqsMessage::default();
    r.message_id = m.message_id().map(str::to_owned);
    r.receipt_handle = m.receipt_handle().map(str::to_owned);
    r.body = m.body().map(str::to_owned);
    r.md5_of_body = m.md5_of_body().map(str::to_owned);
    r.md5_of_message_attributes = m.md5_of_message_attributes().map(str::to_owned);
    r.attributes = m
        .attributes()
        .map(|a| a.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
        .unwrap_or_default();
    r.message_attributes = m
        .message_attributes()
        .map(|attrs| {
            attrs
                .iter()
                .map(|(k, v)| {
                    let mut a = SqsMessageAttribute::default();
                    a.data_type = Some(v.data_type().to_owned());
                    a.string_value = v.string_value().map(str::to_owned);
                    a.binary_value = v.binary_value().map(|b| {
                        let mut data = Base64Data::default();
                        *data = b.as_ref().to_vec();
                        data
                    });
                    (k.clone(), a)
                })
                .collect()
        })
        .unwrap_or_default();
    r.event_source_arn = Some(queue_arn.to_owned());
    r.event_source = Some("aws:sqs".to_owned());
    r.aws_region = Some(region.to_owned());
    r
}

/// What Lambda's poller does with a queue, and the functions never do: receive and delete.
#[allow(async_fn_in_trait)]
pub trait Poll {
    /// Receive up to `max` messages with all system and message attributes.
    async fn receive(&self, max: i32, wait_secs: i32, visibility_secs: Option<i32>) -> StoreResult<Vec<Message>>;
    /// Delete messages by receipt handle, in batches of ten. Returns how many were deleted.
    async fn delete_batch(&self, receipt_handles: &[String]) -> StoreResult<usize>;
}

impl Poll for SqsQueue {
    async fn receive(&self, max: i32, wait_secs: i32, visibility_secs: Option<i32>) -> StoreResult<Vec<Message>> {
        let out = self
            .client()
            .receive_message()
            .queue_url(self.url())
            .max_number_of_messages(max.clamp(1, 10))
            .wait_time_seconds(wait_secs.clamp(0, 20))
            .set_visibility_timeout(visibility_secs)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| store_error("ReceiveMessage", e))?;
        Ok(out.messages.unwrap_or_default())
    }

    async fn delete_batch(&self, receipt_handles: &[String]) -> StoreResult<usize> {
        let mut deleted = 0;
        for chunk in receipt_handles.chunks(recon_aws::sqs::MAX_BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(r)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::infra(format!("delete entry: {e}")))?;
            let out = self
                .client()
                .delete_message_batch()
                .queue_url(self.url())
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| store_error("DeleteMessageBatch", e))?;
            deleted += out.successful().len();
        }
        Ok(deleted)
    }
}

#[derive(Clone, Debug)]
pub struct PumpOptions {
    /// Messages per batch (1-10).
    pub batch_size: i32,
    /// Long-poll wait per receive, seconds.
    pub wait_secs: i32,
    /// The emulated function timeout: the handler's deadline is receive time + this.
    pub function_timeout: Duration,
    /// Keep going until the queue is empty, delayed and in-flight messages included.
    pub until_idle: bool,
    /// Give up (with an error) after this long.
    pub max_duration: Duration,
    /// Override the queue's visibility timeout on receive (tests use short ones).
    pub visibility_secs: Option<i32>,
    /// Print a progress line to stderr every this many batches (0 = never).
    pub progress_every: u64,
}

impl Default for PumpOptions {
    fn default() -> Self {
        PumpOptions {
            batch_size: 10,
            wait_secs: 1,
            function_timeout: recon_core::resources::CONSUMER_TIMEOUT,
            until_idle: true,
            max_duration: Duration::from_secs(600),
            visibility_secs: None,
            progress_every: 0,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PumpStats {
    pub batches: u64,
    pub received: u64,
    pub deleted: u64,
    pub reported_failed: u64,
    /// Count per outcome name (e.g. `COMMITTED`, `RETRY_SCHEDULED`).
    pub outcomes: BTreeMap<String, u64>,
    /// The handler's own time, every batch (what Lambda bills).
    pub handler_time: Duration,
    /// Batches of the full batch size, and the handler's time on them.
    pub full_batches: u64,
    pub full_batch_time: Duration,
    /// Time in the queue calls of the batches: their receive and their delete.
    pub queue_time: Duration,
    /// From the start to the end of the last batch (the idle polls after it left out).
    pub busy: Duration,
}

/// Poll `queue` and feed batches to `handler`, as Lambda's SQS trigger would invoke it, until
/// idle (or once, when `until_idle` is off).
pub async fn pump<H: BatchHandler>(
    queue: &SqsQueue,
    queue_arn: &str,
    region: &str,
    opts: &PumpOptions,
    handler: &H,
) -> StoreResult<PumpStats> {
    let started = Instant::now();
    let mut stats = PumpStats::default();
    let mut idle_checks = 0;
    loop {
        if started.elapsed() > opts.max_duration {
            return Err(StoreError::new(
                TransientKind::Timeout,
                format!(
                    "queue not idle after {:?}: {} messages still there",
                    opts.max_duration,
                    queue.depth().await?.total()
                ),
            ));
        }
        let receiving = Instant::now();
        let messages = queue
            .receive(opts.batch_size, opts.wait_secs, opts.visibility_secs)
            .await?;
        let received = receiving.elapsed();
        if messages.is_empty() {
            if !opts.until_idle {
                return Ok(stats);
            }
            // Idle only when nothing is visible, in flight (backing off) or delayed, twice in a row.
            if queue.depth().await?.total() == 0 {
                idle_checks += 1;
                if idle_checks >= 2 {
                    return Ok(stats);
                }
            } else {
                idle_checks = 0;
            }
            continue;
        }
        idle_checks = 0;
        let mut event = SqsEvent::default();
        event.records = messages.iter().map(|m| to_event_record(m, queue_arn, region)).collect();
        let deadline = chrono::Utc::now() + opts.function_timeout;
        let handling = Instant::now();
        let out = handler.handle(&event, Some(deadline)).await;
        let handled = handling.elapsed();

        let failed: HashSet<&str> = out
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        let to_delete: Vec<String> = messages
            .iter()
            .filter(|m| !failed.contains(m.message_id().unwrap_or("")))
            .filter_map(|m| m.receipt_handle().map(str::to_owned))
            .collect();
        stats.batches += 1;
        stats.received += messages.len() as u64;
        stats.reported_failed += failed.len() as u64;
        let deleting = Instant::now();
        stats.deleted += queue.delete_batch(&to_delete).await? as u64;
        stats.queue_time += received + deleting.elapsed();
        stats.handler_time += handled;
        if messages.len() == usize::try_from(opts.batch_size).unwrap_or(usize::MAX) {
            stats.full_batches += 1;
            stats.full_batch_time += handled;
        }
        stats.busy = started.elapsed();
        for (_, o) in &out.items {
            *stats.outcomes.entry(o.name().to_owned()).or_default() += 1;
        }
        if opts.progress_every > 0 && stats.batches % opts.progress_every == 0 {
            eprintln!(
                "  pumped {} batches: {} received, {} deleted, {} handed back",
                stats.batches, stats.received, stats.deleted, stats.reported_failed
            );
        }
        if !opts.until_idle {
            return Ok(stats);
        }
    }
}
