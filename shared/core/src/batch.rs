//! One SQS batch in, Lambda's partial-batch response out: the shape both SQS-triggered flows
//! (consume, enrich) share. The Lambda mains return its `response`; the local event-source pump
//! (`recon-testkit`) and the tests read its per-message outcomes.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;

/// What happened to one message of a batch.
pub trait Outcome {
    /// Was the message acknowledged (SQS deletes it)? Otherwise it is reported as a batch item
    /// failure and SQS delivers it again.
    fn acknowledged(&self) -> bool;
    /// Its stable name, as logs, reports and the pump's counts show it.
    fn name(&self) -> &'static str;
}

/// The response for Lambda plus what happened to each message, in batch order.
#[derive(Clone, Debug)]
pub struct BatchReport<O> {
    pub response: SqsBatchResponse,
    /// `(SQS message id, outcome)`, in the order of the batch.
    pub items: Vec<(String, O)>,
}

impl<O: Outcome> BatchReport<O> {
    /// The report of `event` whose messages ended in `outcomes` (same order): every message not
    /// acknowledged is a batch item failure.
    pub fn new(event: &SqsEvent, outcomes: Vec<O>) -> Self {
        let mut response = SqsBatchResponse::default();
        let mut items = Vec::with_capacity(outcomes.len());
        for (m, o) in event.records.iter().zip(outcomes) {
            let id = m.message_id.clone().unwrap_or_default();
            if !o.acknowledged() {
                let mut f = BatchItemFailure::default();
                f.item_identifier = id.clone();
                response.batch_item_failures.push(f);
            }
            items.push((id, o));
        }
        BatchReport { response, items }
    }

    /// The outcome names, in batch order.
    pub fn names(&self) -> Vec<&'static str> {
        self.items.iter().map(|(_, o)| o.name()).collect()
    }
}

/// A Lambda handler of SQS batches (the consumer, the enricher), as the Lambda runtime and the
/// local pump invoke it. `deadline` is when the invocation times out (Lambda's context).
pub trait BatchHandler {
    type Outcome: Outcome;
    fn handle(
        &self,
        event: &SqsEvent,
        deadline: Option<DateTime<Utc>>,
    ) -> impl Future<Output = BatchReport<Self::Outcome>>;
}

impl<T: BatchHandler> BatchHandler for Arc<T> {
    type Outcome = T::Outcome;
    fn handle(
        &self,
        event: &SqsEvent,
        deadline: Option<DateTime<Utc>>,
    ) -> impl Future<Output = BatchReport<Self::Outcome>> {
        (**self).handle(event, deadline)
    }
}
