//! The consume path on the real local stack: SQS (LocalStack) and DynamoDB (DynamoDB Local).

use recon_aws::sqs::SqsQueue;
use recon_core::domain::attrs;
use recon_core::domain::{AuditKind, DeadLetterContext, FailureCode, TransientKind};
use recon_core::ports::{StoreResult, WorkQueue};
use recon_harness::pump::Poll;
use recon_harness::stack::{MAX_ATTEMPTS, TestStack, attribute};
use recon_testkit::builders::tx;
use recon_testkit::sim::faults::Fault;
use recon_testkit::sim::faulty::Faulty;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The main queue, recording every backoff it is asked for.
struct RecordingQueue {
    inner: SqsQueue,
    delays: Mutex<Vec<u32>>,
}

impl WorkQueue for RecordingQueue {
    async fn change_visibility(&self, receipt_handle: &str, secs: u32) -> StoreResult<()> {
        self.delays.lock().unwrap().push(secs);
        self.inner.change_visibility(receipt_handle, secs).await
    }
}

#[tokio::test]
async fn a_valid_message_posts_once_and_repeats_are_audited_as_duplicates() {
    let s = TestStack::new("valid").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let body = tx(1).to_body().unwrap();
    let mut same_economy = tx(1);
    same_economy.message_id = "m-1-resent".into();
    same_economy.amount = "1.100".into();
    same_economy.currency = "usd".into();
    let ids = s.send(&[body.clone(), body, same_economy.to_body().unwrap()]).await;
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.deleted, 3);

    let postings = s.postings().await;
    assert_eq!(postings.len(), 1, "exactly one posting");
    let audit = s.audit().await;
    let dups: Vec<_> = audit
        .iter()
        .filter(|r| r.kind == AuditKind::DuplicateSuppressed)
        .collect();
    assert_eq!(dups.len(), 2, "both repeats audited: {audit:?}");
    for d in &dups {
        assert_ne!(d.sqs_message_id, postings[0].sqs_message_id);
        assert!(ids.contains(&d.sqs_message_id));
        assert_eq!(d.source_hash.as_deref(), Some(postings[0].source_hash.as_str()));
        assert_eq!(d.failure_code, Some(FailureCode::ReplayDuplicate));
        assert!(d.trace_id.is_some() && d.match_decision.is_some());
    }
    s.cleanup().await;
}

#[tokio::test]
async fn unmapped_currency_is_in_the_dlq_after_the_first_receive() {
    let s = TestStack::new("poison").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut m = tx(2);
    m.currency = "XAU".into();
    let body = m.to_body().unwrap();
    let ids = s.send(std::slice::from_ref(&body)).await;
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.received, 1, "one receive, no retries");

    let dlq = s.dlq_messages().await;
    assert_eq!(dlq.len(), 1);
    let d = &dlq[0];
    assert_eq!(d.body(), Some(body.as_str()), "original body byte for byte");
    assert_eq!(attribute(d, attrs::FAILURE_CODE), Some("POISON_MESSAGE"));
    assert_eq!(attribute(d, attrs::ROOT_CAUSE), Some("UNMAPPED_CURRENCY:XAU"));
    assert_eq!(attribute(d, attrs::ATTEMPT_COUNT), Some("1"));
    let ctx: DeadLetterContext = serde_json::from_str(attribute(d, attrs::CONTEXT).unwrap()).unwrap();
    assert_eq!(ctx.source_message_id, ids[0]);
    assert_eq!(ctx.source_queue_arn.as_deref(), Some(s.stack.main_queue_arn.as_str()));
    assert_eq!(ctx.trace_id.as_deref(), Some("trace-2"));
    assert!(ctx.error_detail.contains("XAU"));
    assert!(s.postings().await.is_empty());
    s.cleanup().await;
}

#[tokio::test]
async fn unidentifiable_payloads_are_dead_lettered_and_never_retried() {
    let s = TestStack::new("unrecov").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut no_hash: serde_json::Value = serde_json::from_str(&tx(3).to_body().unwrap()).unwrap();
    no_hash.as_object_mut().unwrap().remove("source_hash");
    let mismatch = tx(3).to_body().unwrap().replace("3.10", "3.11");
    s.send(&["not json at all".to_string(), no_hash.to_string(), mismatch])
        .await;
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.received, 3, "each received once");
    assert!(!stats.outcomes.contains_key("RETRY_SCHEDULED"));

    let mut causes: Vec<(String, String, String)> = s
        .dlq_messages()
        .await
        .iter()
        .map(|m| {
            (
                attribute(m, attrs::FAILURE_CODE).unwrap().to_owned(),
                attribute(m, attrs::ROOT_CAUSE).unwrap().to_owned(),
                attribute(m, attrs::ATTEMPT_COUNT).unwrap().to_owned(),
            )
        })
        .collect();
    causes.sort();
    let expected = ["HASH_MISMATCH", "MISSING_SOURCE_HASH", "NOT_JSON"]
        .map(|c| ("UNRECOVERABLE_PAYLOAD".to_owned(), c.to_owned(), "1".to_owned()));
    assert_eq!(causes, expected);
    s.cleanup().await;
}

#[tokio::test]
async fn two_transient_failures_then_commit_on_attempt_three_with_growing_backoff() {
    let s = TestStack::new("transient").await;
    let m = tx(4);
    let ledger = Faulty::with_outages(s.ledger(), TransientKind::Throttled);
    ledger.faults.inject(&m.compute_hash().unwrap(), Fault::Times(2));
    let queue = RecordingQueue {
        inner: s.main_queue(),
        delays: Mutex::new(Vec::new()),
    };
    let consumer = s.consumer_with(ledger, queue);
    s.send(&[m.to_body().unwrap()]).await;
    let started = Instant::now();
    let stats = s.pump(&consumer).await;
    let elapsed = started.elapsed();

    let postings = s.postings().await;
    assert_eq!(postings.len(), 1);
    assert_eq!(postings[0].attempt_count, 3, "committed on SQS's third receive");
    let delays = consumer.queue.delays.lock().unwrap().clone();
    assert_eq!(delays.len(), 2);
    assert!(delays[1] > delays[0], "growing visibility timeouts: {delays:?}");
    assert!(
        elapsed >= Duration::from_secs(u64::from(delays[0] + delays[1])),
        "SQS held the message for the backoff: {elapsed:?} for {delays:?}"
    );
    assert_eq!(stats.outcomes.get("RETRY_SCHEDULED"), Some(&2));
    assert!(s.dlq_messages().await.is_empty());
    s.cleanup().await;
}

#[tokio::test]
async fn always_transient_is_dead_lettered_at_the_last_attempt() {
    let s = TestStack::new("exhaust").await;
    let m = tx(5);
    let ledger = Faulty::with_outages(s.ledger(), TransientKind::Throttled);
    ledger.faults.inject(&m.compute_hash().unwrap(), Fault::Always);
    let consumer = s.consumer_with(ledger, s.main_queue());
    let body = m.to_body().unwrap();
    s.send(std::slice::from_ref(&body)).await;
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.received, u64::from(MAX_ATTEMPTS));

    let dlq = s.dlq_messages().await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].body(), Some(body.as_str()));
    assert_eq!(attribute(&dlq[0], attrs::FAILURE_CODE), Some("POISON_MESSAGE"));
    assert_eq!(
        attribute(&dlq[0], attrs::ROOT_CAUSE),
        Some("TRANSIENT_EXHAUSTED:THROTTLED")
    );
    assert_eq!(
        attribute(&dlq[0], attrs::ATTEMPT_COUNT),
        Some(MAX_ATTEMPTS.to_string().as_str())
    );
    assert!(s.postings().await.is_empty());
    s.cleanup().await;
}

#[tokio::test]
async fn a_crash_after_commit_before_the_ack_still_posts_once() {
    let s = TestStack::new("crash").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.send(&[tx(6).to_body().unwrap(), tx(7).to_body().unwrap()]).await;
    // First delivery: the handler commits, then the "function" dies before the poller deletes.
    let (event, _) = s.receive_event(&s.main_queue(), 2, 1).await;
    let report = consumer
        .handle_batch(&event, Some(chrono::Utc::now() + Duration::from_secs(30)))
        .await;
    assert_eq!(report.names(), ["COMMITTED", "COMMITTED"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Redelivery: acknowledged without a second posting.
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.outcomes.get("REDELIVERY_ACKNOWLEDGED"), Some(&2));
    assert_eq!(s.postings().await.len(), 2);
    assert_eq!(s.main_queue().depth().await.unwrap().total(), 0);
    s.cleanup().await;
}

#[tokio::test]
async fn a_batch_of_ten_with_one_bad_body_commits_nine_and_reports_no_failure() {
    let s = TestStack::new("batch").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut bodies: Vec<String> = (10..19).map(|n| tx(n).to_body().unwrap()).collect();
    bodies.insert(3, "{\"truncated\": ".into());
    s.send(&bodies).await;
    let (event, received) = s.receive_event(&s.main_queue(), 10, 30).await;
    assert_eq!(event.records.len(), 10, "one batch of ten");
    let report = consumer
        .handle_batch(&event, Some(chrono::Utc::now() + Duration::from_secs(30)))
        .await;
    assert!(report.response.batch_item_failures.is_empty(), "{:?}", report.response);
    let handles: Vec<String> = received
        .iter()
        .filter_map(|m| m.receipt_handle().map(str::to_owned))
        .collect();
    s.main_queue().delete_batch(&handles).await.unwrap();
    assert_eq!(s.postings().await.len(), 9);
    let dlq = s.dlq_messages().await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(attribute(&dlq[0], attrs::ROOT_CAUSE), Some("NOT_JSON"));
    s.cleanup().await;
}

#[tokio::test]
async fn the_redrive_policy_catches_a_message_whose_consumer_keeps_crashing() {
    let s = TestStack::new("redrive").await;
    let body = tx(20).to_body().unwrap();
    s.send(std::slice::from_ref(&body)).await;
    // The consumer "crashes" on every receive: nothing is deleted, the visibility expires.
    let main = s.main_queue();
    let mut receives = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && s.dlq().depth().await.unwrap().visible == 0 {
        receives += main.receive(1, 1, Some(1)).await.unwrap().len();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        receives, MAX_ATTEMPTS as usize,
        "maxReceiveCount receives, then SQS moves it"
    );
    let dlq = s.dlq_messages().await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].body(), Some(body.as_str()));
    assert_eq!(
        attribute(&dlq[0], attrs::FAILURE_CODE),
        None,
        "a bare redrive carries no context"
    );
    s.cleanup().await;
}

/// On DynamoDB one conditional put per committed message (two write units: the posting and its
/// period-index entry); on PostgreSQL one statement, and no DynamoDB request but the reference
/// data's one load; on the HTTP ledger one post, and the claim and its commit in the dedup table.
#[tokio::test]
async fn the_happy_path_costs_one_ledger_write_per_message() {
    let s = TestStack::new("cost").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let bodies: Vec<String> = (100..120).map(|n| tx(n).to_body().unwrap()).collect();
    s.send(&bodies).await;
    let before = s.clients.requests.snapshot();
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.outcomes.get("COMMITTED"), Some(&20));
    let after = s.clients.requests.snapshot();
    let delta = |op: &str| after.get(op).copied().unwrap_or(0) - before.get(op).copied().unwrap_or(0);
    assert_eq!(delta("DynamoDB:Scan"), 1, "reference data loaded once, then cached");
    let dynamodb_total: u64 = after
        .iter()
        .filter(|(k, _)| k.starts_with("DynamoDB:"))
        .map(|(k, _)| delta(k))
        .sum();
    let (cost, unit) = consumer.ledger.cost();
    match consumer.ledger.kind() {
        "dynamodb" => {
            assert_eq!(
                delta("DynamoDB:PutItem"),
                20,
                "one conditional put per committed message"
            );
            assert_eq!(dynamodb_total, 21, "{after:?}");
            assert_eq!(unit, "write units");
            // The posting alone, under its period's key: one write unit per commit (an index
            // would add one per commit; DynamoDB Local reports what AWS would charge).
            assert!((cost - 20.0).abs() < 1e-9, "{cost} {unit}");
        }
        "postgres" => {
            assert_eq!(dynamodb_total, 1, "{after:?}");
            assert_eq!(unit, "statements");
            assert!((cost - 20.0).abs() < 1e-9, "{cost} {unit}");
        }
        _ => {
            // The reservation protocol: a conditional update to claim, one to commit, one post.
            assert_eq!(
                (delta("DynamoDB:PutItem"), delta("DynamoDB:UpdateItem")),
                (0, 40),
                "{after:?}"
            );
            assert_eq!(dynamodb_total, 41, "{after:?}");
            assert_eq!(unit, "HTTP requests");
            assert!((cost - 20.0).abs() < 1e-9, "{cost} {unit}");
        }
    }
    s.cleanup().await;
}

#[tokio::test]
async fn a_valid_body_behind_a_byte_order_mark_commits() {
    let s = TestStack::new("bom").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.send(&[format!("\u{feff}{}", tx(41).to_body().unwrap())]).await;
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.outcomes.get("COMMITTED"), Some(&1), "{stats:?}");
    s.cleanup().await;
}

/// Whose attributes the functions believe, by SQS's own `SenderId`: a sender of another account
/// (LocalStack takes a 12-digit access key as that account) may put `replay.*` on a bank-feed
/// message and `dlq.*` on a dead letter, and neither is believed: the posting is the producer's
/// own, and the dead letter reads as a bare redrive.
#[tokio::test]
async fn replay_and_dead_letter_attributes_from_an_untrusted_sender_are_not_believed() {
    use aws_sdk_sqs::types::MessageAttributeValue;
    let s = TestStack::new("untrusted").await;
    let foreign = s.clients.with_credentials(aws_sdk_dynamodb::config::Credentials::new(
        "111111111111",
        "not-ours",
        None,
        None,
        "another-account",
    ));
    let text = |v: &str| {
        MessageAttributeValue::builder()
            .data_type("String")
            .string_value(v)
            .build()
            .unwrap()
    };
    let m = tx(31);
    foreign
        .sqs
        .send_message()
        .queue_url(&s.stack.main_queue_url)
        .message_body(m.to_body().unwrap())
        .message_attributes(attrs::REPLAY_OF, text("env_forged"))
        .send()
        .await
        .unwrap();
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.pump(&consumer).await;
    let posted = s.postings().await;
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].replay_of, None, "a producer's replay.of was believed");

    foreign
        .sqs
        .send_message()
        .queue_url(&s.stack.dlq_url)
        .message_body(tx(32).to_body().unwrap())
        .message_attributes(attrs::FAILURE_CODE, text("UNRECOVERABLE_PAYLOAD"))
        .message_attributes(attrs::ROOT_CAUSE, text("FORGED"))
        .send()
        .await
        .unwrap();
    s.pump_dlq(&s.enricher(10_000)).await;
    let envelopes = s.envelopes().await;
    assert_eq!(envelopes.len(), 1);
    assert_eq!(envelopes[0].root_cause, "REDRIVEN_BY_SQS", "{:?}", envelopes[0]);
    s.cleanup().await;
}
