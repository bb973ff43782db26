//! The consume flow against the in-memory adapters: every disposition, FIFO ordering, the
//! invocation deadline and the batch-response shape.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use recon_core::batch::Outcome;
use recon_core::consume::{Consumer, ConsumerConfig, DeferReason, Disposition};
use recon_core::decisions::RetryPolicy;
use recon_core::domain::{AuditKind, FailureCode, RootCause, TransientKind, attrs};
use recon_testkit::builders::{self, body, delivery as sqs, event, tx, with_attribute};
use recon_testkit::memory::{
    MemoryAuditLog, MemoryDeadLetterQueue, MemoryLedger, MemoryReferenceData, MemoryWorkQueue,
};
use recon_testkit::sim::faults::Fault;
use recon_testkit::sim::faulty::Faulty;
use std::sync::Arc;
use std::time::Duration;

type TestConsumer = Consumer<
    Faulty<MemoryLedger>,
    Arc<MemoryWorkQueue>,
    Arc<MemoryDeadLetterQueue>,
    MemoryReferenceData,
    Arc<MemoryAuditLog>,
>;

struct World {
    consumer: TestConsumer,
    queue: Arc<MemoryWorkQueue>,
    dlq: Arc<MemoryDeadLetterQueue>,
    audit: Arc<MemoryAuditLog>,
}

fn world() -> World {
    let queue = Arc::new(MemoryWorkQueue::default());
    let dlq = Arc::new(MemoryDeadLetterQueue::default());
    let audit = Arc::new(MemoryAuditLog::default());
    let consumer = Consumer {
        ledger: Faulty::with_outages(MemoryLedger::default(), TransientKind::Throttled),
        queue: queue.clone(),
        dlq: dlq.clone(),
        reference: MemoryReferenceData::default(),
        audit: audit.clone(),
        clock: builders::clock(),
        config: ConsumerConfig {
            retry: RetryPolicy {
                max_attempts: 3,
                backoff_base_secs: 2,
                backoff_cap_secs: 60,
            },
            ..ConsumerConfig::default()
        },
    };
    World {
        consumer,
        queue,
        dlq,
        audit,
    }
}

/// A deadline a minute after the clock's now.
fn later() -> Option<DateTime<Utc>> {
    Some(builders::now() + Duration::from_secs(60))
}

#[tokio::test]
async fn valid_message_commits_and_repeats_are_suppressed_or_acknowledged() {
    let w = world();
    let body = builders::body(&tx(1));
    assert_eq!(
        w.consumer.handle_message(&sqs("s1", &body, 1)).await,
        Disposition::Committed
    );
    // The same SQS message again (crash after commit, before the ack): acknowledged, no audit.
    assert_eq!(
        w.consumer.handle_message(&sqs("s1", &body, 2)).await,
        Disposition::RedeliveryAcknowledged
    );
    // The same body sent again by the producer, and the same economy under a new id and format.
    assert_eq!(
        w.consumer.handle_message(&sqs("s2", &body, 1)).await,
        Disposition::DuplicateSuppressed {
            committed_by: "s1".into()
        }
    );
    let mut again = tx(1);
    again.message_id = "m-1-bis".into();
    again.amount = "1.100".into();
    again.currency = "usd".into();
    assert!(matches!(
        w.consumer.handle_message(&sqs("s3", &builders::body(&again), 1)).await,
        Disposition::DuplicateSuppressed { .. }
    ));

    let postings = w.consumer.ledger.inner.postings();
    assert_eq!(postings.len(), 1);
    assert_eq!(postings[0].sqs_message_id, "s1");
    let audit = w.audit.records();
    assert_eq!(audit.len(), 2);
    assert!(audit.iter().all(|r| r.kind == AuditKind::DuplicateSuppressed
        && r.failure_code == Some(FailureCode::ReplayDuplicate)
        && r.trace_id.is_some()
        && r.source_hash.as_deref() == Some(postings[0].source_hash.as_str())
        && r.match_decision.as_deref() == Some("MATCHED")));
}

#[tokio::test]
async fn poison_is_dead_lettered_on_the_first_receive_with_the_body_verbatim() {
    let w = world();
    let mut m = tx(2);
    m.currency = "XAU".into();
    // Odd spacing survives byte for byte.
    let body = body(&m).replace(",\"ledger_entity\"", ",  \"ledger_entity\"");
    let msg = with_attribute(sqs("s1", &body, 1), "origin", "bank-feed-7");

    let d = w.consumer.handle_message(&msg).await;
    assert_eq!(
        d,
        Disposition::DeadLettered {
            code: FailureCode::PoisonMessage,
            cause: RootCause::UnmappedCurrency("XAU".into())
        }
    );
    let letters = w.dlq.letters();
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(l.body, body);
    assert_eq!(l.attempt_count, 1);
    assert_eq!(l.root_cause.to_string(), "UNMAPPED_CURRENCY:XAU");
    assert_eq!(l.context.source_message_id, "s1");
    assert_eq!(l.context.trace_id.as_deref(), Some("trace-2"));
    assert_eq!(
        l.context.original_attributes["origin"].string_value.as_deref(),
        Some("bank-feed-7")
    );
    assert!(l.context.sent_at.is_some());
    assert!(w.queue.visibility_changes().is_empty(), "no retry budget spent");
    assert_eq!(w.audit.records()[0].kind, AuditKind::DeadLettered);
}

#[tokio::test]
async fn unidentifiable_payloads_are_unrecoverable() {
    let w = world();
    let mut no_hash: serde_json::Value = serde_json::from_str(&body(&tx(3))).unwrap();
    no_hash.as_object_mut().unwrap().remove("source_hash");
    let mismatch = body(&tx(3)).replace("3.10", "3.11");
    for (i, body) in ["{not json", &no_hash.to_string(), &mismatch].into_iter().enumerate() {
        let d = w.consumer.handle_message(&sqs(&format!("s{i}"), body, 1)).await;
        assert!(
            matches!(
                d,
                Disposition::DeadLettered {
                    code: FailureCode::UnrecoverablePayload,
                    ..
                }
            ),
            "{d:?}"
        );
    }
    let causes: Vec<String> = w.dlq.letters().iter().map(|l| l.root_cause.to_string()).collect();
    assert_eq!(causes, ["NOT_JSON", "MISSING_SOURCE_HASH", "HASH_MISMATCH"]);
}

#[tokio::test]
async fn transient_failures_back_off_then_exhaust_the_budget() {
    let w = world();
    let m = tx(4);
    w.consumer
        .ledger
        .faults
        .inject(&m.compute_hash().unwrap(), Fault::Always);
    let body = body(&m);
    let mut delays = Vec::new();
    for attempt in 1..=2 {
        match w.consumer.handle_message(&sqs("s1", &body, attempt)).await {
            Disposition::RetryScheduled { delay_secs, kind } => {
                assert_eq!(kind, TransientKind::Throttled);
                delays.push(delay_secs);
            }
            other => panic!("attempt {attempt}: {other:?}"),
        }
    }
    assert!(delays[1] > delays[0], "growing backoff: {delays:?}");
    assert_eq!(
        w.queue.visibility_changes(),
        vec![("rh-s1-1".to_string(), delays[0]), ("rh-s1-2".to_string(), delays[1])]
    );
    let d = w.consumer.handle_message(&sqs("s1", &body, 3)).await;
    assert_eq!(
        d,
        Disposition::DeadLettered {
            code: FailureCode::PoisonMessage,
            cause: RootCause::TransientExhausted(TransientKind::Throttled)
        }
    );
    assert_eq!(w.dlq.letters()[0].attempt_count, 3);
}

#[tokio::test]
async fn nothing_is_acknowledged_when_the_dlq_send_fails() {
    let w = world();
    w.dlq.set_failing(true);
    let report = w
        .consumer
        .handle_batch(&event(vec![sqs("bad", "garbage", 1)]), later())
        .await;
    assert!(matches!(report.items[0].1, Disposition::Failed { .. }));
    assert_eq!(report.response.batch_item_failures.len(), 1);
    assert_eq!(report.response.batch_item_failures[0].item_identifier, "bad");
    assert!(w.audit.records().is_empty());
}

#[tokio::test]
async fn one_bad_body_never_fails_the_batch() {
    let w = world();
    let mut records: Vec<SqsMessage> = (1..=9).map(|n| sqs(&format!("s{n}"), &body(&tx(n)), 1)).collect();
    records.insert(4, sqs("bad", "\u{0}\u{1} not a message", 1));
    let report = w.consumer.handle_batch(&event(records), later()).await;
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(w.consumer.ledger.inner.len(), 9);
    assert_eq!(w.dlq.letters().len(), 1);
    assert_eq!(report.items[4].0, "bad");
    assert!(matches!(report.items[4].1, Disposition::DeadLettered { .. }));
}

#[tokio::test]
async fn batch_response_lists_only_real_failures_in_lambdas_shape() {
    let w = world();
    let flaky = tx(7);
    w.consumer
        .ledger
        .faults
        .inject(&flaky.compute_hash().unwrap(), Fault::Times(1));
    let records = vec![
        sqs("ok", &body(&tx(6)), 1),
        sqs("flaky", &body(&flaky), 1),
        sqs("poison", "[]", 1),
    ];
    let report = w.consumer.handle_batch(&event(records), later()).await;
    let json = serde_json::to_value(&report.response).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": "flaky"}]})
    );
}

#[tokio::test]
async fn fifo_group_stops_after_a_failure_other_groups_go_on() {
    let w = world();
    let blocked = tx(8);
    w.consumer
        .ledger
        .faults
        .inject(&blocked.compute_hash().unwrap(), Fault::Times(1));
    let with_group = |mut m: SqsMessage, g: &str| {
        m.attributes.insert("MessageGroupId".into(), g.into());
        m
    };
    let records = vec![
        with_group(sqs("a1", &body(&blocked), 1), "A"),
        with_group(sqs("b1", &body(&tx(9)), 1), "B"),
        with_group(sqs("a2", &body(&tx(10)), 1), "A"),
        with_group(sqs("b2", &body(&tx(11)), 1), "B"),
    ];
    let report = w.consumer.handle_batch(&event(records), later()).await;
    let by_id: std::collections::HashMap<_, _> = report.items.iter().cloned().collect();
    assert!(matches!(by_id["a1"], Disposition::RetryScheduled { .. }));
    assert_eq!(by_id["a2"], Disposition::Deferred(DeferReason::GroupBlocked));
    assert_eq!(by_id["b1"], Disposition::Committed);
    assert_eq!(by_id["b2"], Disposition::Committed);
    let failed: Vec<_> = report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["a1", "a2"]);
    assert_eq!(w.consumer.ledger.inner.len(), 2, "a2 must not overtake a1");
}

#[tokio::test]
async fn near_the_deadline_messages_are_handed_back_unprocessed() {
    let w = world();
    let records = vec![sqs("s1", &body(&tx(12)), 1), sqs("s2", &body(&tx(13)), 1)];
    // One second left, three seconds of margin: nothing may start.
    let deadline = Some(builders::now() + Duration::from_secs(1));
    let report = w.consumer.handle_batch(&event(records), deadline).await;
    assert!(
        report
            .items
            .iter()
            .all(|(_, d)| *d == Disposition::Deferred(DeferReason::Deadline))
    );
    assert_eq!(report.response.batch_item_failures.len(), 2);
    assert!(w.consumer.ledger.inner.is_empty());
}

#[tokio::test]
async fn a_replayed_message_records_its_provenance() {
    let w = world();
    let m = with_attribute(sqs("s1", &body(&tx(14)), 1), attrs::REPLAY_OF, "env-123");
    assert_eq!(w.consumer.handle_message(&m).await, Disposition::Committed);
    assert_eq!(
        w.consumer.ledger.inner.postings()[0].replay_of.as_deref(),
        Some("env-123")
    );
}

/// A producer cannot make its message a replay's copy: `replay.*` from a sender the consumer
/// does not trust is dropped, and the posting stands as the producer's own.
#[tokio::test]
async fn a_replay_attribute_from_a_producer_is_not_believed() {
    let w = world();
    let mut m = with_attribute(sqs("s1", &body(&tx(15)), 1), attrs::REPLAY_OF, "env-123");
    m.attributes
        .insert("SenderId".into(), "AROABANKFEED0000001:feed".into());
    assert_eq!(w.consumer.handle_message(&m).await, Disposition::Committed);
    assert_eq!(w.consumer.ledger.inner.postings()[0].replay_of, None);
}

#[tokio::test]
async fn the_sample_event_in_events_decides_as_documented() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/consumer-sqs-batch.json");
    let event: SqsEvent = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let w = world();
    let report = w.consumer.handle_batch(&event, later()).await;
    let names: Vec<&str> = report.items.iter().map(|(_, d)| d.name()).collect();
    assert_eq!(
        names,
        ["COMMITTED", "DUPLICATE_SUPPRESSED", "DEAD_LETTERED", "DEAD_LETTERED"]
    );
    let causes: Vec<String> = w.dlq.letters().iter().map(|l| l.root_cause.to_string()).collect();
    assert_eq!(causes, ["UNMAPPED_CURRENCY:XAU", "NOT_JSON"]);
    assert!(report.response.batch_item_failures.is_empty());
}

#[tokio::test]
async fn a_valid_body_behind_a_byte_order_mark_commits() {
    let w = world();
    let b = format!("\u{feff}{}", builders::body(&tx(15)));
    assert_eq!(
        w.consumer.handle_message(&sqs("s1", &b, 1)).await,
        Disposition::Committed
    );
}
