//! The enrich flow on in-memory adapters: envelopes from both arrivals, idempotency, quarantine,
//! large bodies, and one `DLQ_OVERFLOW` per crossing.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use chrono::Utc;
use recon_core::consume::{Consumer, ConsumerConfig};
use recon_core::domain::{AuditKind, EnvelopeStatus, FailureCode, HashKind};
use recon_core::enrich::{EnrichOutcome, Enricher, EnricherConfig};
use recon_core::envelopes::{check_overflow, drain_outbox, original_body};
use recon_core::ports::{Backlog, EnvelopeStore, Worm, dead_letter_message};
use recon_testkit::builders::{self, delivered, delivery, event, settle_by_hand, tx_in};
use recon_testkit::memory::{
    MemoryAuditLog, MemoryDeadLetterQueue, MemoryEnvelopeStore, MemoryLedger, MemoryMetrics, MemoryReferenceData,
    MemoryWorkQueue, MemoryWorm,
};

type TestEnricher = Enricher<MemoryEnvelopeStore, MemoryWorm, MemoryAuditLog, MemoryMetrics>;

fn enricher(high_water: i64) -> TestEnricher {
    Enricher {
        store: MemoryEnvelopeStore::default(),
        worm: MemoryWorm::default(),
        audit: MemoryAuditLog::default(),
        metrics: MemoryMetrics::default(),
        clock: builders::clock(),
        config: EnricherConfig {
            overflow_high_water: high_water,
            ..EnricherConfig::default()
        },
    }
}

/// A transaction in `currency` (XAU is not mapped: poison).
fn body(n: u32, currency: &str) -> String {
    builders::body(&tx_in(n, currency, &format!("{n}.5")))
}

/// Run `body` through a consumer (its records in the trail `into` the enricher's) and return
/// the DLQ delivery its dead letter becomes.
async fn dead_lettered(into: &TestEnricher, sqs_id: &str, body: &str) -> SqsMessage {
    let consumer = Consumer {
        ledger: MemoryLedger::default(),
        queue: MemoryWorkQueue::default(),
        dlq: MemoryDeadLetterQueue::default(),
        reference: MemoryReferenceData::default(),
        audit: MemoryAuditLog::default(),
        clock: builders::clock(),
        config: ConsumerConfig::default(),
    };
    consumer.handle_message(&delivery(sqs_id, body, 1)).await;
    for r in consumer.audit.records() {
        recon_core::ports::AuditLog::append(&into.audit, &r).await.unwrap();
    }
    let letter = consumer.dlq.letters().pop().expect("dead-lettered");
    delivered(&format!("dlq-{sqs_id}"), &dead_letter_message(&letter).unwrap())
}

#[tokio::test]
async fn a_dead_letter_becomes_one_envelope_with_a_worm_copy() {
    let e = enricher(100);
    let body = body(1, "XAU");
    let m = dead_lettered(&e, "s1", &body).await;
    let outcome = e.handle_message(&m).await;
    let EnrichOutcome::Enriched {
        envelope_id,
        status: EnvelopeStatus::Pending,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    let env = e.store.get(&envelope_id).await.unwrap().unwrap();
    assert_eq!(env.original.body.as_deref(), Some(body.as_str()));
    assert_eq!(env.failure_code, FailureCode::PoisonMessage);
    assert_eq!(env.root_cause, "UNMAPPED_CURRENCY:XAU");
    assert_eq!(env.attempt_count, 1);
    assert_eq!(env.source_hash_kind, HashKind::Verified);
    assert_eq!(env.original.source_message_id, "s1");
    assert_eq!(env.ledger_entity.as_deref(), Some("ACME-US"));
    assert_eq!(env.accounting_period.as_deref(), Some("2026-11"));
    let worm = env.worm.clone().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&e.worm.get(&worm.key).await.unwrap().unwrap()).unwrap();
    assert_eq!(doc["body"], body);
    assert_eq!(doc["envelope_id"], envelope_id);
    let kinds: Vec<AuditKind> = e.audit.records().iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [AuditKind::DeadLettered, AuditKind::Enriched],
        "the consumer's, then the enricher's"
    );
    assert_eq!(e.store.pending_count().await.unwrap(), 1);
    assert!(
        e.metrics
            .emitted()
            .iter()
            .any(|m| m.name == "DeadLettered" && m.dimensions == vec![("FailureCode", "POISON_MESSAGE".to_string())])
    );
}

#[tokio::test]
async fn the_same_dlq_message_delivered_twice_yields_one_envelope() {
    let e = enricher(100);
    let m = dead_lettered(&e, "s2", &body(2, "XAU")).await;
    let mut again = m.clone();
    again.attributes.insert("ApproximateReceiveCount".into(), "2".into());
    assert!(matches!(e.handle_message(&m).await, EnrichOutcome::Enriched { .. }));
    assert!(matches!(
        e.handle_message(&again).await,
        EnrichOutcome::AlreadyEnriched { .. }
    ));
    let (all, _) = e.store.list_all(None, 100).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(e.worm.keys().len(), 1, "one WORM object");
    assert_eq!(e.audit.records().len(), 2, "the consumer's record and one ENRICHED");
    assert_eq!(e.store.pending_count().await.unwrap(), 1);
}

/// A dead letter's failure is believed only from the consumer: the same attributes from another
/// sender (a producer's message redriven with `dlq.*` set, a send nobody trusted) read as a bare
/// redrive, never as a failure code and context someone chose.
#[tokio::test]
async fn dead_letter_attributes_from_anyone_but_the_consumer_are_not_believed() {
    let e = enricher(100);
    let mut m = dead_lettered(&e, "s8", &body(8, "XAU")).await;
    m.attributes.insert("SenderId".into(), "111111111111".into());
    let EnrichOutcome::Enriched { envelope_id, .. } = e.handle_message(&m).await else {
        panic!()
    };
    let env = e.store.get(&envelope_id).await.unwrap().unwrap();
    assert_eq!(env.root_cause, "REDRIVEN_BY_SQS");
    assert!(
        env.original.attributes.keys().all(|k| !k.starts_with("dlq.")),
        "{:?}",
        env.original.attributes
    );
}

#[tokio::test]
async fn a_bare_redrive_is_enveloped_as_redriven_by_sqs() {
    let e = enricher(100);
    let mut m = delivery("main-7", &body(7, "USD"), 6);
    m.attributes.insert(
        "DeadLetterQueueSourceArn".into(),
        "arn:aws:sqs:us-east-1:0:recon-dlq-main".into(),
    );
    let EnrichOutcome::Enriched { envelope_id, .. } = e.handle_message(&m).await else {
        panic!()
    };
    let env = e.store.get(&envelope_id).await.unwrap().unwrap();
    assert_eq!(env.root_cause, "REDRIVEN_BY_SQS");
    assert_eq!(env.attempt_count, 6);
    assert_eq!(env.status, EnvelopeStatus::Pending);
    assert_eq!(
        env.original.source_queue_arn.as_deref(),
        Some("arn:aws:sqs:us-east-1:0:recon-dlq-main")
    );
}

#[tokio::test]
async fn an_unidentifiable_payload_is_quarantined_with_its_bytes() {
    let e = enricher(100);
    let raw = "<Document>\u{1F4B8} not a message";
    let m = dead_lettered(&e, "s3", raw).await;
    let EnrichOutcome::Enriched {
        envelope_id,
        status: EnvelopeStatus::Quarantined,
    } = e.handle_message(&m).await
    else {
        panic!()
    };
    let env = e.store.get(&envelope_id).await.unwrap().unwrap();
    assert_eq!(env.failure_code, FailureCode::UnrecoverablePayload);
    assert!(env.source_hash.starts_with("raw:"));
    let key = env.original.body_key.clone().unwrap();
    assert_eq!(e.worm.get(&key).await.unwrap().unwrap(), raw.as_bytes());
    assert_eq!(e.store.pending_count().await.unwrap(), 0, "quarantine is not pending");
    assert_eq!(e.audit.records().last().map(|r| r.kind), Some(AuditKind::Quarantined));
}

/// The consumer's `DEAD_LETTERED` record missing from the trail (its write failed after the DLQ
/// send, and SQS's redrive moved the message on): the enricher writes it from the envelope, under
/// the consumer's id and actor, and only when it is missing.
#[tokio::test]
async fn a_dead_letter_whose_consumer_record_is_missing_gets_it_from_the_enricher() {
    let e = enricher(100);
    let m = dead_lettered(&e, "s5", &body(5, "XAU")).await;
    e.audit.tamper(|records| records.clear());
    assert!(matches!(e.handle_message(&m).await, EnrichOutcome::Enriched { .. }));
    let records = e.audit.records();
    let dl = records
        .iter()
        .find(|r| r.kind == AuditKind::DeadLettered)
        .expect("written by the enricher");
    assert_eq!(dl.audit_id, "DEAD_LETTERED#s5");
    assert_eq!(dl.actor, "consumer");
    assert_eq!(dl.sqs_message_id, "s5");
    assert_eq!(dl.root_cause.as_deref(), Some("UNMAPPED_CURRENCY:XAU"));
    assert!(
        dl.detail.contains("found the consumer's own record missing"),
        "{}",
        dl.detail
    );
    // Delivered again: nothing written twice.
    let mut again = m.clone();
    again.attributes.insert("ApproximateReceiveCount".into(), "2".into());
    e.handle_message(&again).await;
    assert_eq!(
        e.audit
            .records()
            .iter()
            .filter(|r| r.kind == AuditKind::DeadLettered)
            .count(),
        1
    );
}

#[tokio::test]
async fn a_body_too_large_for_an_item_lives_in_the_bucket() {
    let e = enricher(100);
    let mut m = tx_in(8, "XAU", "8.5");
    m.counterparty = "x".repeat(200);
    let mut v: serde_json::Value = serde_json::from_str(&builders::body(&m)).unwrap();
    v["statement_narrative"] = "Ü".repeat(250_000).into();
    let body = v.to_string();
    assert!(body.len() > 400_000);
    let dl = dead_lettered(&e, "s4", &body).await;
    let EnrichOutcome::Enriched { envelope_id, .. } = e.handle_message(&dl).await else {
        panic!()
    };
    let env = e.store.get(&envelope_id).await.unwrap().unwrap();
    assert_eq!(env.original.body, None);
    assert_eq!(env.original.body_bytes, body.len() as u64);
    assert_eq!(
        original_body(&env, &e.worm).await.unwrap().as_deref(),
        Some(body.as_str())
    );
}

#[tokio::test]
async fn dlq_overflow_is_raised_once_per_crossing() {
    let e = enricher(3);
    let overflows = |e: &TestEnricher| {
        e.audit
            .records()
            .iter()
            .filter(|r| r.kind == AuditKind::DlqOverflow)
            .count()
    };
    let mut ids = Vec::new();
    for n in 0..5 {
        let m = dead_lettered(&e, &format!("o{n}"), &body(10 + n, "XAU")).await;
        if let EnrichOutcome::Enriched { envelope_id, .. } = e.handle_message(&m).await {
            ids.push(envelope_id);
        }
        assert_eq!(overflows(&e), usize::from(n >= 3), "after {} envelopes", n + 1);
    }
    // Fall back below the mark (three leave PENDING), then cross again.
    for id in &ids[..3] {
        settle_by_hand(&e.store, id, EnvelopeStatus::Quarantined).await;
    }
    assert_eq!(e.store.pending_count().await.unwrap(), 2);
    check_overflow(&e.store, &e.audit, &e.metrics, 3, "test", Utc::now())
        .await
        .unwrap();
    for n in 5..7 {
        let m = dead_lettered(&e, &format!("o{n}"), &body(10 + n, "XAU")).await;
        e.handle_message(&m).await;
    }
    assert_eq!(e.store.pending_count().await.unwrap(), 4);
    assert_eq!(overflows(&e), 2, "a second crossing, a second DLQ_OVERFLOW");
    assert_eq!(
        e.metrics.emitted().iter().filter(|m| m.name == "DlqOverflow").count(),
        2
    );
}

#[tokio::test]
async fn a_batch_reports_only_what_could_not_be_enriched() {
    let e = enricher(100);
    let ok = dead_lettered(&e, "s9", &body(9, "XAU")).await;
    let event = event(vec![ok]);
    // No time left: handed back, nothing written.
    let late = e.handle_batch(&event, Some(builders::now())).await;
    assert_eq!(late.response.batch_item_failures.len(), 1);
    assert!(e.store.list_all(None, 10).await.unwrap().0.is_empty());
    let out = e.handle_batch(&event, None).await;
    assert!(out.response.batch_item_failures.is_empty());
    assert_eq!(out.names(), ["ENRICHED"]);
}

#[tokio::test]
async fn the_sample_dlq_event_in_events_enriches_as_documented() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/enricher-dlq-batch.json");
    let event: SqsEvent = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let e = enricher(100);
    let out = e.handle_batch(&event, None).await;
    assert_eq!(out.names(), ["ENRICHED", "QUARANTINED", "ENRICHED"]);
    let (all, _) = e.store.list_all(None, 10).await.unwrap();
    let mut causes: Vec<String> = all.iter().map(|e| e.root_cause.clone()).collect();
    causes.sort();
    assert_eq!(causes, ["NOT_JSON", "REDRIVEN_BY_SQS", "UNMAPPED_CURRENCY:XAU"]);
    assert!(out.response.batch_item_failures.is_empty());
}

#[tokio::test]
async fn the_memory_envelope_store_keeps_the_life_cycle() {
    recon_testkit::conformance::envelope_store_keeps_the_life_cycle(&MemoryEnvelopeStore::default(), "env_life").await;
    recon_testkit::conformance::a_claim_is_renewed_only_by_its_live_holder(
        &MemoryEnvelopeStore::default(),
        "env_renew",
    )
    .await;
}

#[tokio::test]
async fn the_memory_envelope_store_claims_and_settles_at_once() {
    let no_trail: Option<&recon_testkit::memory::MemoryAuditLog> = None;
    recon_testkit::conformance::envelopes_are_claimed_and_settled_at_once(
        &MemoryEnvelopeStore::default(),
        no_trail,
        "many",
    )
    .await;
}

#[tokio::test]
async fn the_memory_envelope_store_links_the_records_of_settlements_into_the_trail() {
    let trail = std::sync::Arc::new(recon_testkit::memory::MemoryAuditLog::default());
    let store = MemoryEnvelopeStore::default();
    store.link_into(Some(trail.clone()));
    recon_testkit::conformance::envelopes_are_claimed_and_settled_at_once(&store, Some(&trail), "linked").await;
}

#[tokio::test]
async fn the_memory_envelope_store_claims_an_envelope_named_twice_once() {
    recon_testkit::conformance::an_envelope_named_twice_is_claimed_once(&MemoryEnvelopeStore::default(), "twice").await;
}

#[tokio::test]
async fn a_dead_letter_with_an_empty_entity_label_still_becomes_an_envelope() {
    // Regression: an empty string in a field that feeds an index key (the ledger entity) made
    // the table refuse the envelope, and the DLQ message was retried until its retention ran out.
    let e = enricher(100);
    let mut v: serde_json::Value = serde_json::from_str(&body(21, "USD")).unwrap();
    v["ledger_entity"] = "".into();
    let m = dead_lettered(&e, "s21", &v.to_string()).await;
    let outcome = e.handle_message(&m).await;
    let EnrichOutcome::Enriched { envelope_id, .. } = outcome else {
        panic!("{outcome:?}")
    };
    let env = e.store.get(&envelope_id).await.unwrap().unwrap();
    assert_eq!(env.root_cause, "SCHEMA_VIOLATION:ledger_entity");
    assert_eq!(env.ledger_entity, None, "an empty label is no label");
}

#[tokio::test]
async fn an_overflow_whose_record_fails_is_not_lost() {
    // Regression: the flag was raised, the DLQ_OVERFLOW append failed, and the crossing was never
    // reported (the flag stays raised, so no later call reports it).
    let e = enricher(0);
    e.audit.fail_appends_of(Some(AuditKind::DlqOverflow));
    let m = dead_lettered(&e, "o1", &body(40, "XAU")).await;
    assert!(matches!(e.handle_message(&m).await, EnrichOutcome::Failed { .. }));
    assert_eq!(e.store.overflow_episodes(), 1);
    e.audit.fail_appends_of(None);
    // The DLQ delivers the message again: its envelope exists, and the crossing is already
    // raised; the record waits in the outbox, which the next drain publishes.
    assert!(matches!(
        e.handle_message(&m).await,
        EnrichOutcome::AlreadyEnriched { .. }
    ));
    drain_outbox(&e.store, &e.audit, &e.metrics).await.unwrap();
    let overflows = e
        .audit
        .records()
        .iter()
        .filter(|r| r.kind == AuditKind::DlqOverflow)
        .count();
    assert_eq!(overflows, 1);
    assert_eq!(
        e.metrics.emitted().iter().filter(|m| m.name == "DlqOverflow").count(),
        1
    );
}
