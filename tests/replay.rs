//! Replay on the real local stack: gates, claims under concurrency, crash recovery, dry run and
//! resumable sweeps, against LocalStack (SQS, S3) and DynamoDB Local.

use aws_lambda_events::event::sqs::{SqsMessage, SqsMessageAttribute};
use recon_aws::s3::S3Worm;
use recon_core::domain::attrs;
use recon_core::domain::{
    AuditKind, AuditRecord, EnvelopeStatus, NewMessage, PeriodRecord, PeriodStatus, ReplayClaim, StatusChange,
    envelope_from_dlq_message,
};
use recon_core::ports::{AuditOutbox, Backlog, EnvelopeStore, LedgerReader, ReferenceData, Worm};
use recon_core::replay::{Gate, ReplayOutcome, ReplayRequest, Selector};
use recon_harness::pump::Poll;
use recon_harness::stack::TestStack;
use recon_testkit::builders::tx;
use std::collections::HashSet;
use std::time::Duration;

fn xau(n: u32) -> NewMessage {
    let mut m = tx(n);
    m.currency = "XAU".into();
    m.amount = format!("{n}.0625");
    m
}

fn manual(selector: Selector) -> ReplayRequest {
    ReplayRequest {
        selector,
        dry_run: false,
        reason: "root cause fixed".into(),
        triggered_by: "integration-test".into(),
        invocation: None,
        scheduled: false,
        quarantine: false,
    }
}

fn sweep() -> ReplayRequest {
    recon_testkit::builders::sweep_request()
}

/// Dead-letter `bodies` through the consumer and the enricher; returns the envelopes.
async fn dead_letter(s: &TestStack, bodies: &[String]) {
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.send(bodies).await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(10_000)).await;
}

/// Receive everything in the main queue (hidden for a minute), without deleting it.
async fn main_queue_messages(s: &TestStack) -> Vec<aws_sdk_sqs::types::Message> {
    let mut all = Vec::new();
    loop {
        let batch = s.main_queue().receive(10, 1, Some(60)).await.unwrap();
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

#[tokio::test]
async fn a_fixed_group_replays_and_every_record_commits_exactly_once() {
    let s = TestStack::new("rp-fixed").await;
    dead_letter(&s, &(1..=5).map(|n| xau(n).to_body().unwrap()).collect::<Vec<_>>()).await;
    let r = s.replayer();
    let before = r.run(&manual(Selector::default()), None).await.unwrap();
    assert_eq!(before.still_failing, 5);
    s.map_currency("XAU", 4).await;
    let selector = Selector {
        root_cause: Some("UNMAPPED_CURRENCY:XAU".into()),
        ..Selector::default()
    };
    let report = r.run(&manual(selector), None).await.unwrap();
    assert_eq!(report.reinjected, 5, "{report:#?}");

    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.outcomes.get("COMMITTED"), Some(&5));
    let postings = s.postings().await;
    assert_eq!(postings.len(), 5);
    let envelopes = s.envelopes().await;
    for e in &envelopes {
        assert_eq!(e.status, EnvelopeStatus::Replayed);
        assert!(
            postings
                .iter()
                .any(|p| p.replay_of.as_deref() == Some(e.envelope_id.as_str())),
            "provenance"
        );
    }
    assert_eq!(
        s.audit()
            .await
            .iter()
            .filter(|a| a.kind == AuditKind::ReplayReinjected)
            .count(),
        5
    );
    // Replaying again finds nothing to do.
    assert_eq!(r.run(&manual(Selector::default()), None).await.unwrap().selected, 0);
    s.cleanup().await;
}

#[tokio::test]
async fn an_envelope_whose_hash_is_committed_is_suppressed_and_not_reinjected() {
    let s = TestStack::new("rp-dup").await;
    let body = xau(6).to_body().unwrap();
    dead_letter(&s, std::slice::from_ref(&body)).await;
    // The currency gets mapped and the producer re-sends the transaction: it commits directly.
    s.map_currency("XAU", 4).await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.send(std::slice::from_ref(&body)).await;
    s.pump(&consumer).await;
    assert_eq!(s.postings().await.len(), 1);

    let report = s.replayer().run(&manual(Selector::default()), None).await.unwrap();
    assert_eq!(report.suppressed_duplicate, 1, "{report:#?}");
    assert_eq!(report.items[0].gate, Some(Gate::Idempotency));
    assert_eq!(s.main_queue().depth().await.unwrap().total(), 0, "nothing re-injected");
    assert_eq!(s.envelopes().await[0].status, EnvelopeStatus::SuppressedDuplicate);
    assert_eq!(s.postings().await.len(), 1);
    s.cleanup().await;
}

#[tokio::test]
async fn a_transaction_left_for_a_manual_journal_is_not_posted_when_the_producer_resends_it() {
    let s = TestStack::new("rp-mj").await;
    let body = xau(11).to_body().unwrap();
    dead_letter(&s, std::slice::from_ref(&body)).await;
    let report = s
        .replayer()
        .run(
            &ReplayRequest {
                quarantine: true,
                reason: "counterparty closed; book by hand".into(),
                ..manual(Selector::default())
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(report.quarantined, 1, "{report:#?}");
    let envelope = s.envelopes().await.remove(0);
    assert!(envelope.left_for_manual_journal());
    let hand_offs = s.ledger().hand_offs().await.unwrap();
    assert_eq!(hand_offs.len(), 1);
    assert!(hand_offs[0].handed_off_by(&envelope.envelope_id));
    assert!(
        LedgerReader::posting(&s.ledger(), &envelope.decoded_key())
            .await
            .unwrap()
            .is_none(),
        "a hand-off reads as no posting, not as a broken one"
    );

    // The currency gets mapped and the producer re-sends the transaction: it does not post.
    s.map_currency("XAU", 4).await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.send(std::slice::from_ref(&body)).await;
    s.pump(&consumer).await;
    assert!(s.postings().await.is_empty());
    let audit = s.audit().await;
    let suppressed: Vec<_> = audit
        .iter()
        .filter(|r| r.kind == recon_core::domain::AuditKind::DuplicateSuppressed)
        .collect();
    assert_eq!(suppressed.len(), 1, "{audit:#?}");
    assert!(
        suppressed[0].detail.contains("manual journal"),
        "{}",
        suppressed[0].detail
    );
    assert_eq!(s.main_queue().depth().await.unwrap().total(), 0);
    s.cleanup().await;
}

#[tokio::test]
async fn closed_periods_and_envelopes_beyond_the_window_are_quarantined_in_worm() {
    let s = TestStack::new("rp-quar").await;
    let mut october = xau(7);
    october.value_date = "2026-10-15".into();
    dead_letter(&s, &[october.to_body().unwrap(), xau(8).to_body().unwrap()]).await;
    s.map_currency("XAU", 4).await;
    s.reference()
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        })
        .await
        .unwrap();
    let mut r = s.replayer();
    // Everything older than a second is beyond this replay window.
    r.config.replay_window = chrono::Duration::seconds(1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = r.run(&manual(Selector::default()), None).await.unwrap();
    assert_eq!(report.quarantined, 2, "{report:#?}");
    assert!(report.items.iter().all(|i| i.gate == Some(Gate::Temporal)));
    assert!(report.items.iter().any(|i| i.detail.contains("closed")));
    assert!(report.items.iter().any(|i| i.detail.contains("replay window")));
    let worm = S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket());
    for e in s.envelopes().await {
        assert_eq!(e.status, EnvelopeStatus::Quarantined);
        let last = e.status_history.last().unwrap();
        assert!(last.manual_journal, "flagged for a manual journal");
        let key = last
            .reason
            .split("s3://")
            .nth(1)
            .and_then(|k| k.split_once('/'))
            .map(|(_, k)| k.to_owned())
            .unwrap();
        let record = worm.get(&key).await.unwrap().expect("WORM quarantine record");
        let doc: serde_json::Value = serde_json::from_slice(&record).unwrap();
        assert_eq!(doc["envelope_id"], e.envelope_id);
        assert_eq!(doc["manual_journal"], true);
    }
    assert_eq!(s.main_queue().depth().await.unwrap().total(), 0);
    s.cleanup().await;
}

#[tokio::test]
async fn a_still_poison_record_stays_pending_and_the_report_names_gate_one() {
    let s = TestStack::new("rp-poison").await;
    dead_letter(&s, &[xau(9).to_body().unwrap()]).await;
    let report = s.replayer().run(&manual(Selector::default()), None).await.unwrap();
    assert_eq!(report.still_failing, 1);
    assert_eq!(report.items[0].outcome, ReplayOutcome::StillFailing);
    assert_eq!(report.items[0].gate, Some(Gate::Integrity));
    assert!(report.items[0].detail.contains("UNMAPPED_CURRENCY:XAU"));
    assert_eq!(s.envelopes().await[0].status, EnvelopeStatus::Pending);
    s.cleanup().await;
}

#[tokio::test]
async fn a_dry_run_changes_nothing() {
    let s = TestStack::new("rp-dry").await;
    dead_letter(&s, &(10..14).map(|n| xau(n).to_body().unwrap()).collect::<Vec<_>>()).await;
    s.map_currency("XAU", 4).await;
    let before = table_and_queues(&s).await;
    let audit_before = s.audit().await.len();
    let report = s
        .replayer()
        .run(
            &ReplayRequest {
                dry_run: true,
                ..manual(Selector::default())
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(report.reinjected, 4, "the dry run says what would happen");
    assert!(report.items.iter().all(|i| i.outcome == ReplayOutcome::WouldReinject));
    assert_eq!(table_and_queues(&s).await, before, "table and queues identical");
    assert_eq!(s.audit().await.len(), audit_before);
    s.cleanup().await;
}

/// Every item of the envelope table (as canonical JSON, sorted) and the queue depths.
async fn table_and_queues(s: &TestStack) -> (Vec<String>, u64, u64) {
    let items = recon_aws::dynamodb::scan_all(&s.clients.dynamodb, &s.stack.names.envelope_table, None)
        .await
        .unwrap();
    let mut rows: Vec<String> = items
        .iter()
        .map(|i| recon_aws::item::from_item::<serde_json::Value>(i).unwrap().to_string())
        .collect();
    rows.sort();
    (
        rows,
        s.main_queue().depth().await.unwrap().total(),
        s.dlq().depth().await.unwrap().total(),
    )
}

/// Store `n` PENDING envelopes of valid XAU transactions directly (fast setup for big tests).
async fn seed_envelopes(s: &TestStack, from: u32, n: u32) {
    let store = &s.enricher(1_000_000).store;
    let now = chrono::Utc::now();
    for i in from..from + n {
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("seed-{i}"));
        m.body = Some(xau(i).to_body().unwrap());
        for (k, v) in [
            (attrs::FAILURE_CODE, "POISON_MESSAGE"),
            (attrs::ROOT_CAUSE, "UNMAPPED_CURRENCY:XAU"),
        ] {
            let mut a = SqsMessageAttribute::default();
            a.data_type = Some("String".into());
            a.string_value = Some(v.into());
            m.message_attributes.insert(k.into(), a);
        }
        let e = envelope_from_dlq_message(&m, now + chrono::Duration::milliseconds(i64::from(i)), "seed");
        store.create(&e).await.unwrap();
    }
}

#[tokio::test]
async fn four_concurrent_sweeps_reinject_each_of_500_envelopes_at_most_once() {
    let s = TestStack::new("rp-conc").await;
    seed_envelopes(&s, 1000, 500).await;
    s.map_currency("XAU", 4).await;
    let replayers: Vec<_> = (0..4).map(|_| s.replayer()).collect();
    let req = sweep();
    let reports = futures::future::join_all(replayers.iter().map(|r| r.run(&req, None))).await;
    let reinjected: u64 = reports.iter().map(|r| r.as_ref().unwrap().reinjected).sum();
    assert_eq!(
        reinjected,
        500,
        "{:?}",
        reports
            .iter()
            .map(|r| r.as_ref().unwrap().reinjected)
            .collect::<Vec<_>>()
    );

    let messages = main_queue_messages(&s).await;
    assert_eq!(messages.len(), 500);
    let replay_of: HashSet<&str> = messages
        .iter()
        .filter_map(|m| m.message_attributes()?.get(attrs::REPLAY_OF)?.string_value())
        .collect();
    assert_eq!(replay_of.len(), 500, "each envelope re-injected once");
    let handles: Vec<String> = messages
        .iter()
        .filter_map(|m| m.receipt_handle().map(str::to_owned))
        .collect();
    // Put them back to be consumed: make them visible again.
    for h in &handles {
        s.clients
            .sqs
            .change_message_visibility()
            .queue_url(&s.stack.main_queue_url)
            .receipt_handle(h)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.pump(&consumer).await;
    let postings = s.postings().await;
    assert_eq!(postings.len(), 500);
    let hashes: HashSet<&str> = postings.iter().map(|p| p.source_hash.as_str()).collect();
    assert_eq!(hashes.len(), 500, "no duplicate posting");
    s.cleanup().await;
}

#[tokio::test]
async fn a_crash_between_reinjection_and_the_status_update_still_posts_once() {
    let s = TestStack::new("rp-crash").await;
    seed_envelopes(&s, 2000, 1).await;
    s.map_currency("XAU", 4).await;
    let e = s.envelopes().await.remove(0);
    let store = &s.enricher(1000).store;
    // A replay claims the envelope, sends the copy, and dies before marking it REPLAYED; the
    // consumer then commits the copy.
    let t0 = chrono::Utc::now();
    let claim = ReplayClaim {
        replay_id: "rpl_crashed".into(),
        triggered_by: "schedule".into(),
        reason: "sweep".into(),
        claimed_at: t0,
        lease_until: t0 + chrono::Duration::seconds(1),
    };
    let change = StatusChange {
        status: EnvelopeStatus::Replaying,
        at: t0,
        actor: "x".into(),
        reason: "claimed".into(),
        manual_journal: false,
    };
    assert!(store.claim(&e.envelope_id, &claim, t0, &change, None).await.unwrap());
    s.send(&[e.original.body.clone().unwrap()]).await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.pump(&consumer).await;
    assert_eq!(s.postings().await.len(), 1);

    tokio::time::sleep(Duration::from_millis(1200)).await;
    let report = s.replayer().run(&sweep(), None).await.unwrap();
    assert_eq!(report.suppressed_duplicate, 1, "{report:#?}");
    s.pump(&consumer).await;
    assert_eq!(s.postings().await.len(), 1, "still one posting");
    assert_eq!(s.envelopes().await[0].status, EnvelopeStatus::SuppressedDuplicate);
    s.cleanup().await;
}

#[tokio::test]
async fn a_sweep_with_a_tiny_time_budget_resumes_from_its_cursor() {
    let s = TestStack::new("rp-cursor").await;
    seed_envelopes(&s, 3000, 30).await;
    s.map_currency("XAU", 4).await;
    let mut r = s.replayer();
    r.config.page_size = 5;
    r.config.rate_per_sec = 15;
    let mut invocations = 0;
    loop {
        invocations += 1;
        let budget = chrono::Utc::now() + r.config.deadline_margin + Duration::from_millis(700);
        let report = r.run(&sweep(), Some(budget)).await.unwrap();
        if report.completed {
            break;
        }
        assert!(
            report.stopped.as_deref().unwrap().starts_with("time budget"),
            "{report:#?}"
        );
        assert!(invocations < 60, "no progress");
    }
    assert!(invocations > 1, "the budget forced several invocations");
    let replay_of: Vec<String> = main_queue_messages(&s)
        .await
        .iter()
        .filter_map(|m| {
            Some(
                m.message_attributes()?
                    .get(attrs::REPLAY_OF)?
                    .string_value()?
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(replay_of.len(), 30);
    assert_eq!(replay_of.iter().collect::<HashSet<_>>().len(), 30);
    assert!(s.envelopes().await.iter().all(|e| e.status == EnvelopeStatus::Replayed));
    s.cleanup().await;
}

#[tokio::test]
async fn a_record_left_in_the_audit_outbox_is_published_by_the_next_replay() {
    // A crossing raised in DynamoDB with its record in the outbox, as if the invocation died
    // before publishing it.
    let s = TestStack::new("outbox").await;
    let store = s.envelope_store();
    let record = |episode: u64| {
        AuditRecord::system(
            AuditKind::DlqOverflow,
            &episode.to_string(),
            chrono::Utc::now(),
            "it",
            format!("episode {episode}"),
        )
    };
    assert_eq!(store.raise_overflow(&record).await.unwrap(), Some(1));
    assert_eq!(store.raise_overflow(&record).await.unwrap(), None, "raised once");
    assert_eq!(store.pending_records(10).await.unwrap().len(), 1);
    assert!(s.audit().await.iter().all(|r| r.kind != AuditKind::DlqOverflow));

    s.replayer()
        .run(&recon_testkit::builders::sweep_request(), None)
        .await
        .unwrap();
    let overflow: Vec<_> = s
        .audit()
        .await
        .into_iter()
        .filter(|r| r.kind == AuditKind::DlqOverflow)
        .collect();
    assert_eq!(overflow.len(), 1);
    assert_eq!(overflow[0].audit_id, "DLQ_OVERFLOW#1");
    assert!(
        store.pending_records(10).await.unwrap().is_empty(),
        "the outbox is drained"
    );
    s.cleanup().await;
}

/// A PENDING unmapped-currency envelope whose original (`bytes` long) is kept in the WORM bucket,
/// as the enricher stores a large body.
async fn large_envelope(s: &TestStack, n: u32, bytes: usize) -> recon_core::domain::DlqEnvelope {
    let mut m = tx(n);
    m.currency = "XAU".into();
    let mut v: serde_json::Value = serde_json::from_str(&m.to_body().unwrap()).unwrap();
    v["statement_narrative"] = "x".repeat(bytes - m.to_body().unwrap().len() - 30).into();
    let body = v.to_string();
    let mut msg = SqsMessage::default();
    msg.message_id = Some(format!("large-{n}"));
    msg.body = Some(body.clone());
    for (k, val) in [
        (attrs::FAILURE_CODE, "POISON_MESSAGE"),
        (attrs::ROOT_CAUSE, "UNMAPPED_CURRENCY:XAU"),
    ] {
        let mut a = SqsMessageAttribute::default();
        a.data_type = Some("String".into());
        a.string_value = Some(val.into());
        msg.message_attributes.insert(k.into(), a);
    }
    let mut e = envelope_from_dlq_message(&msg, chrono::Utc::now(), "it");
    let key = e.payload_key();
    S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket())
        .put(&key, body.as_bytes())
        .await
        .unwrap();
    e.original.body_key = Some(key);
    e.original.body = None;
    s.envelope_store().create(&e).await.unwrap();
    e
}

fn batch_calls(s: &TestStack) -> u64 {
    s.clients
        .requests
        .snapshot()
        .get("SQS:SendMessageBatch")
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn large_originals_are_reinjected_in_batches_sqs_accepts() {
    // LocalStack does not enforce SQS's 1 MiB per batch; AWS refuses such a call whole.
    let s = TestStack::new("batches").await;
    for n in 1..=3 {
        large_envelope(&s, n, 400_000).await;
    }
    s.map_currency("XAU", 4).await;
    let before = batch_calls(&s);
    let report = s
        .replayer()
        .run(&recon_testkit::builders::sweep_request(), None)
        .await
        .unwrap();
    assert_eq!(report.reinjected, 3, "{report:#?}");
    assert_eq!(batch_calls(&s) - before, 2, "800 kB, then 400 kB");
    assert_eq!(s.main_queue().depth().await.unwrap().total(), 3);
    s.cleanup().await;
}

#[tokio::test]
async fn an_original_sqs_can_never_take_is_quarantined_before_any_send() {
    let s = TestStack::new("too-large").await;
    let e = large_envelope(&s, 1, 1_048_576 - 60).await;
    s.map_currency("XAU", 4).await;
    let before = batch_calls(&s);
    let report = s
        .replayer()
        .run(&recon_testkit::builders::sweep_request(), None)
        .await
        .unwrap();
    assert_eq!(report.quarantined, 1, "{report:#?}");
    assert_eq!(report.items[0].gate, Some(Gate::Transport));
    assert_eq!(batch_calls(&s), before, "nothing sent");
    let stored = s.envelope_store().get(&e.envelope_id).await.unwrap().unwrap();
    assert_eq!(stored.status, EnvelopeStatus::Quarantined);
    assert!(stored.status_history.last().unwrap().manual_journal);
    s.cleanup().await;
}

#[tokio::test]
async fn a_reinjected_copy_keeps_its_binary_attributes() {
    // Regression: re-injection dropped binary message attributes (only string values were kept).
    let s = TestStack::new("binary").await;
    let mut m = tx(51);
    m.currency = "XAU".into();
    let original = recon_core::ports::OutgoingMessage {
        body: m.to_body().unwrap(),
        attributes: vec![("signature".into(), "Binary".into(), "AJ+Slg==".into())],
        ..Default::default()
    };
    s.main_queue().send_batch(&[original]).await.unwrap()[0]
        .clone()
        .unwrap();
    s.pump(&s.consumer_with(s.ledger(), s.main_queue())).await;
    s.pump_dlq(&s.enricher(100)).await;
    s.map_currency("XAU", 4).await;
    let report = s
        .replayer()
        .run(&recon_testkit::builders::sweep_request(), None)
        .await
        .unwrap();
    assert_eq!(report.reinjected, 1, "{report:#?}");
    let copy = s.main_queue().receive(1, 2, Some(30)).await.unwrap();
    let signature = copy[0]
        .message_attributes()
        .and_then(|a| a.get("signature"))
        .expect("kept");
    assert_eq!(signature.data_type(), "Binary");
    assert_eq!(
        signature.binary_value().map(|b| b.as_ref().to_vec()),
        Some(vec![0, 159, 146, 150])
    );
    s.cleanup().await;
}
