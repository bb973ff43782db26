//! Enrichment on the real local stack: envelopes in DynamoDB Local, WORM copies under S3 Object
//! Lock in LocalStack, triage, and DLQ_OVERFLOW.

use aws_sdk_s3::types::ObjectLockMode;
use recon_aws::s3::S3Worm;
use recon_core::decisions::triage;
use recon_core::domain::{AuditKind, EnvelopeStatus, FailureCode};
use recon_core::envelopes::{check_overflow, original_body};
use recon_core::ports::{AuditLog, Backlog, EnvelopeStore, Worm};
use recon_harness::pump::Poll;
use recon_harness::stack::{MAX_ATTEMPTS, TestStack};
use recon_testkit::builders::{settle_by_hand, tx};
use rust_decimal::Decimal;
use std::str::FromStr;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_poison_message_becomes_one_envelope_with_a_locked_worm_copy() {
    let s = TestStack::new("env").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut m = tx(1);
    m.currency = "XAU".into();
    let body = m.to_body().unwrap();
    let ids = s.send(std::slice::from_ref(&body)).await;
    s.pump(&consumer).await;
    let enricher = s.enricher(100);
    let stats = s.pump_dlq(&enricher).await;
    assert_eq!(stats.outcomes.get("ENRICHED"), Some(&1));

    let envelopes = s.envelopes().await;
    assert_eq!(envelopes.len(), 1);
    let e = &envelopes[0];
    assert_eq!(
        e.original.body.as_deref(),
        Some(body.as_str()),
        "byte-identical original"
    );
    assert_eq!(e.original.source_message_id, ids[0]);
    assert_eq!(e.failure_code, FailureCode::PoisonMessage);
    assert_eq!(e.root_cause, "UNMAPPED_CURRENCY:XAU");
    assert_eq!(e.attempt_count, 1);
    assert_eq!(e.status, EnvelopeStatus::Pending);
    assert_eq!(e.trace_id.as_deref(), Some("trace-1"));

    // The WORM copy: present, checksummed content, COMPLIANCE retention, undeletable by version.
    let worm = e.worm.clone().unwrap();
    let head = s
        .clients
        .s3
        .head_object()
        .bucket(&worm.bucket)
        .key(&worm.key)
        .send()
        .await
        .unwrap();
    assert_eq!(head.object_lock_mode(), Some(&ObjectLockMode::Compliance));
    let until = head.object_lock_retain_until_date().expect("retain-until date");
    assert!(until.secs() > chrono::Utc::now().timestamp(), "retention in the future");
    let version = head.version_id().expect("versioned").to_owned();
    let deleted = s
        .clients
        .s3
        .delete_object()
        .bucket(&worm.bucket)
        .key(&worm.key)
        .version_id(version)
        .send()
        .await;
    assert!(deleted.is_err(), "S3 must refuse to delete a locked version");
    assert_eq!(worm.bucket, s.stack.names.quarantine_bucket);
    let bytes = S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket())
        .get(&worm.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recon_core::domain::hash::sha256_hex(&bytes), worm.sha256);
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["body"], body);
    let audit = s.audit().await;
    assert_eq!(audit.iter().filter(|r| r.kind == AuditKind::Enriched).count(), 1);
    s.cleanup().await;
}

#[tokio::test]
async fn the_same_dlq_message_delivered_twice_yields_one_envelope() {
    let s = TestStack::new("twice").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut m = tx(2);
    m.currency = "XAU".into();
    s.send(&[m.to_body().unwrap()]).await;
    s.pump(&consumer).await;
    let enricher = s.enricher(100);
    // First delivery: enriched, but the "function" dies before the poller deletes it.
    let (event, _) = s.receive_event(&s.dlq(), 1, 1).await;
    let first = enricher.handle_batch(&event, None).await;
    assert_eq!(first.names(), ["ENRICHED"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stats = s.pump_dlq(&enricher).await;
    assert_eq!(stats.outcomes.get("ALREADY_ENRICHED"), Some(&1));
    assert_eq!(s.envelopes().await.len(), 1);
    assert_eq!(
        s.audit().await.iter().filter(|r| r.kind == AuditKind::Enriched).count(),
        1
    );
    let store = &enricher.store;
    assert_eq!(store.pending_count().await.unwrap(), 1, "counted once");
    s.cleanup().await;
}

#[tokio::test]
async fn a_bare_redrive_is_enveloped_as_redriven_by_sqs() {
    let s = TestStack::new("bare").await;
    let body = tx(3).to_body().unwrap();
    let ids = s.send(std::slice::from_ref(&body)).await;
    // A consumer that crashes on every receive: SQS's redrive policy moves the message.
    let main = s.main_queue();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && s.dlq().depth().await.unwrap().visible == 0 {
        main.receive(1, 1, Some(1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let enricher = s.enricher(100);
    s.pump_dlq(&enricher).await;
    let envelopes = s.envelopes().await;
    assert_eq!(envelopes.len(), 1);
    let e = &envelopes[0];
    assert_eq!(e.root_cause, "REDRIVEN_BY_SQS");
    assert_eq!(e.failure_code, FailureCode::PoisonMessage);
    assert!(
        e.attempt_count >= MAX_ATTEMPTS,
        "attempts from ApproximateReceiveCount: {}",
        e.attempt_count
    );
    assert_eq!(
        e.original.source_message_id, ids[0],
        "SQS keeps the message id on redrive"
    );
    assert_eq!(e.original.body.as_deref(), Some(body.as_str()));
    assert_eq!(e.status, EnvelopeStatus::Pending);
    s.cleanup().await;
}

#[tokio::test]
async fn an_unidentifiable_payload_is_quarantined_with_its_bytes_in_the_bucket() {
    let s = TestStack::new("quar").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let raw = "<?xml version=\"1.0\"?><Document><BkToCstmrStmt>truncated — €";
    s.send(&[raw.to_string()]).await;
    s.pump(&consumer).await;
    let enricher = s.enricher(100);
    let stats = s.pump_dlq(&enricher).await;
    assert_eq!(stats.outcomes.get("QUARANTINED"), Some(&1));
    let e = &s.envelopes().await[0];
    assert_eq!(e.status, EnvelopeStatus::Quarantined);
    assert_eq!(e.failure_code, FailureCode::UnrecoverablePayload);
    let key = e.original.body_key.clone().expect("payload in the bucket");
    let bytes = S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket())
        .get(&key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bytes, raw.as_bytes());
    assert_eq!(enricher.store.pending_count().await.unwrap(), 0);
    s.cleanup().await;
}

#[tokio::test]
async fn a_body_larger_than_a_dynamodb_item_is_kept_whole_in_the_bucket() {
    let s = TestStack::new("large").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut m = tx(4);
    m.currency = "XAU".into();
    let mut v: serde_json::Value = serde_json::from_str(&m.to_body().unwrap()).unwrap();
    v["statement_narrative"] = "Überweisung ".repeat(40_000).into();
    let body = v.to_string();
    assert!(body.len() > 400 * 1024, "{} bytes", body.len());
    s.send(std::slice::from_ref(&body)).await;
    s.pump(&consumer).await;
    let enricher = s.enricher(100);
    s.pump_dlq(&enricher).await;
    let e = &s.envelopes().await[0];
    assert_eq!(e.original.body, None);
    assert_eq!(e.original.body_bytes, body.len() as u64);
    let worm = S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket());
    assert_eq!(
        original_body(e, &worm).await.unwrap().as_deref(),
        Some(body.as_str()),
        "byte for byte"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn triage_groups_five_root_causes_with_exact_counts_and_amounts() {
    let s = TestStack::new("triage").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut bodies = Vec::new();
    let mut n = 100;
    let mut next = || {
        n += 1;
        tx(n)
    };
    for amount in ["1.5", "2.25", "3"] {
        let mut m = next();
        m.currency = "XAU".into();
        m.amount = amount.into();
        bodies.push(m.to_body().unwrap());
    }
    for amount in ["100.5", "7.25"] {
        let mut m = next();
        m.currency = "JPY".into();
        m.amount = amount.into();
        bodies.push(m.to_body().unwrap());
    }
    for _ in 0..2 {
        let mut v: serde_json::Value = serde_json::from_str(&next().to_body().unwrap()).unwrap();
        v["amount"] = "1,000.00".into();
        bodies.push(v.to_string());
    }
    let mut schema_total = Decimal::ZERO;
    for _ in 0..4 {
        let m = next();
        schema_total += Decimal::from_str(&m.amount).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&m.to_body().unwrap()).unwrap();
        v["match_decision"] = "MAYBE".into();
        bodies.push(v.to_string());
    }
    bodies.push("not json".into());
    s.send(&bodies).await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(100)).await;

    let groups = triage(&s.envelopes().await);
    let by_cause: std::collections::BTreeMap<&str, &recon_core::decisions::TriageGroup> =
        groups.iter().map(|g| (g.root_cause.as_str(), g)).collect();
    assert_eq!(groups.len(), 5, "{groups:#?}");
    let xau = by_cause["UNMAPPED_CURRENCY:XAU"];
    assert_eq!(xau.tally.count, 3);
    assert_eq!(xau.tally.amounts["XAU"], Decimal::from_str("6.75").unwrap());
    let jpy = by_cause["SCALE_EXCEEDS_CURRENCY:JPY"];
    assert_eq!(jpy.tally.count, 2);
    assert_eq!(jpy.tally.amounts["JPY"], Decimal::from_str("107.75").unwrap());
    assert_eq!(by_cause["INVALID_DECIMAL"].tally.count, 2);
    assert_eq!(by_cause["INVALID_DECIMAL"].tally.without_amount, 2);
    let schema = by_cause["SCHEMA_VIOLATION:match_decision"];
    assert_eq!(schema.tally.count, 4);
    assert_eq!(schema.tally.amounts["USD"], schema_total);
    assert_eq!(by_cause["NOT_JSON"].failure_code, FailureCode::UnrecoverablePayload);
    s.cleanup().await;
}

#[tokio::test]
async fn dlq_overflow_is_emitted_once_per_crossing() {
    let s = TestStack::new("overflow").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let enricher = s.enricher(3);
    let poison = |n: u32| {
        let mut m = tx(n);
        m.currency = "XAU".into();
        m.to_body().unwrap()
    };
    let overflows =
        |audit: &[recon_core::domain::AuditRecord]| audit.iter().filter(|r| r.kind == AuditKind::DlqOverflow).count();

    s.send(&(200..205).map(poison).collect::<Vec<_>>()).await;
    s.pump(&consumer).await;
    s.pump_dlq(&enricher).await;
    assert_eq!(enricher.store.pending_count().await.unwrap(), 5);
    assert_eq!(
        overflows(&s.audit().await),
        1,
        "five above a mark of three: one crossing"
    );

    // Fall back below the mark, then cross it again.
    for e in s.envelopes().await.iter().take(3) {
        settle_by_hand(&enricher.store, &e.envelope_id, EnvelopeStatus::Quarantined).await;
    }
    assert_eq!(enricher.store.pending_count().await.unwrap(), 2);
    check_overflow(
        &enricher.store,
        &enricher.audit,
        &enricher.metrics,
        3,
        "it",
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    s.send(&(205..207).map(poison).collect::<Vec<_>>()).await;
    s.pump(&consumer).await;
    s.pump_dlq(&enricher).await;
    assert_eq!(enricher.store.pending_count().await.unwrap(), 4);
    let audit = s.audit().await;
    assert_eq!(overflows(&audit), 2, "a second crossing, a second DLQ_OVERFLOW");
    assert!(audit.iter().any(|r| r.audit_id == "DLQ_OVERFLOW#2"));
    assert_eq!(
        enricher
            .metrics
            .emitted()
            .iter()
            .filter(|m| m.name == "DlqOverflow")
            .count(),
        2
    );
    s.cleanup().await;
}

#[tokio::test]
async fn pending_envelopes_page_through_the_status_index_oldest_first() {
    let s = TestStack::new("index").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut bodies: Vec<String> = (300..305)
        .map(|n| {
            let mut m = tx(n);
            m.currency = "XAU".into();
            m.to_body().unwrap()
        })
        .collect();
    bodies.push("not json".into());
    s.send(&bodies).await;
    s.pump(&consumer).await;
    let enricher = s.enricher(100);
    s.pump_dlq(&enricher).await;

    let mut listed = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let (page, next) = enricher
            .store
            .list_by_status(EnvelopeStatus::Pending, cursor, 2)
            .await
            .unwrap();
        pages += 1;
        listed.extend(page);
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(listed.len(), 5, "the quarantined one is not PENDING");
    assert!(pages >= 3, "pages of two: {pages}");
    assert!(
        listed
            .windows(2)
            .all(|w| w[0].dead_lettered_at <= w[1].dead_lettered_at),
        "oldest first"
    );
    assert!(listed.iter().all(|e| e.status == EnvelopeStatus::Pending));
    s.cleanup().await;
}

#[tokio::test]
async fn setup_adds_the_triage_indexes_to_an_older_envelope_table() {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    use recon_harness::provision::{StackSettings, ensure_stack};
    let s = TestStack::new("upgrade").await;
    let table = s.stack.names.envelope_table.clone();
    let ddb = &s.clients.dynamodb;
    ddb.delete_table().table_name(&table).send().await.unwrap();
    ddb.create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("envelope_id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("envelope_id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    ensure_stack(
        &s.clients,
        &s.stack.names,
        &StackSettings {
            max_receive_count: MAX_ATTEMPTS,
            ..StackSettings::default()
        },
    )
    .await
    .unwrap();
    let described = ddb.describe_table().table_name(&table).send().await.unwrap();
    let mut names: Vec<(String, String)> = described
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .filter_map(|g| {
            let projection = g.projection()?.projection_type()?.as_str().to_owned();
            Some((g.index_name()?.to_owned(), projection))
        })
        .collect();
    names.sort();
    let all = |name: &str| (name.to_owned(), "ALL".to_owned());
    assert_eq!(
        names,
        [
            all("by_entity"),
            all("by_failure_cause"),
            ("by_period".to_owned(), "KEYS_ONLY".to_owned()),
            all("by_status_age")
        ]
    );
    s.cleanup().await;
}

#[tokio::test]
async fn the_dynamodb_stores_read_a_periods_exceptions_through_their_indexes() {
    let s = TestStack::new("exc-period").await;
    recon_testkit::conformance::exceptions_are_read_by_period(&s.envelope_store(), &s.audit_log(), "dynamodb").await;
    s.cleanup().await;
}

/// Envelopes and records written before the period indexes are outside them until
/// `index_periods` gives them their entry: a record from before records carried their period
/// under no period, which every period reads. A second run finds none.
#[tokio::test]
async fn exceptions_from_before_the_period_indexes_are_indexed_once() {
    use recon_core::ports::AuditLog;
    use recon_core::reconcile::exceptions_of_period;
    use recon_testkit::conformance::{envelope_of_period, record_of_period};
    let s = TestStack::new("exc-backfill").await;
    let (store, audit) = (s.envelope_store(), s.audit_log());
    let old = envelope_of_period("env_old", Some("2026-11"), None);
    store.create(&old).await.unwrap();
    audit
        .append(&record_of_period(AuditKind::DuplicateSuppressed, "dup-old", None, None))
        .await
        .unwrap();
    audit
        .append(&record_of_period(AuditKind::ReplayReinjected, "rpl-old", None, None))
        .await
        .unwrap();
    // As the stores wrote them before the indexes: no period_shard.
    let forget = |table: &str, pk: &str, id: &str| {
        s.clients
            .dynamodb
            .update_item()
            .table_name(table)
            .key(pk, aws_sdk_dynamodb::types::AttributeValue::S(id.to_owned()))
            .update_expression("REMOVE period_shard")
            .send()
    };
    forget(&s.stack.names.envelope_table, "envelope_id", "env_old")
        .await
        .unwrap();
    forget(&s.stack.names.audit_table, "audit_id", "DUPLICATE_SUPPRESSED#dup-old")
        .await
        .unwrap();
    let read = exceptions_of_period(&store, &audit, "2026-11").await.unwrap();
    assert!(read.envelopes.is_empty() && read.audit.is_empty(), "{read:?}");

    let mut seen = Vec::new();
    assert_eq!(store.index_periods(|n| seen.push(n)).await.unwrap(), 1);
    assert_eq!(seen.last(), Some(&1));
    assert_eq!(
        audit.index_periods(|_| {}).await.unwrap(),
        1,
        "the duplicate, not the replay's record"
    );
    let read = exceptions_of_period(&store, &audit, "2026-11").await.unwrap();
    assert_eq!(
        read.envelopes
            .iter()
            .map(|e| e.envelope_id.as_str())
            .collect::<Vec<_>>(),
        ["env_old"]
    );
    assert_eq!(
        read.audit.iter().map(|r| r.sqs_message_id.as_str()).collect::<Vec<_>>(),
        ["dup-old"]
    );
    assert_eq!(store.index_periods(|_| {}).await.unwrap(), 0, "a second run finds none");
    assert_eq!(audit.index_periods(|_| {}).await.unwrap(), 0, "a second run finds none");
    s.cleanup().await;
}

#[tokio::test]
async fn the_dynamodb_envelope_store_keeps_the_life_cycle() {
    let s = TestStack::new("life").await;
    recon_testkit::conformance::envelope_store_keeps_the_life_cycle(&s.envelope_store(), "env_life").await;
    recon_testkit::conformance::a_claim_is_renewed_only_by_its_live_holder(&s.envelope_store(), "env_renew").await;
    s.cleanup().await;
}

/// Claims and settlements grouped into transactions (DynamoDB's 100 items and 4 MB each), with
/// the envelopes a group is refused for answered on their own.
#[tokio::test]
async fn the_dynamodb_envelope_store_claims_and_settles_at_once() {
    let s = TestStack::new("many").await;
    let transactions = || {
        let counts = s.clients.requests.snapshot();
        counts
            .iter()
            .filter(|(k, _)| k.ends_with(":TransactWriteItems"))
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    let before = transactions();
    let no_trail: Option<&recon_aws::dynamodb::DynamoAuditLog> = None;
    recon_testkit::conformance::envelopes_are_claimed_and_settled_at_once(&s.envelope_store(), no_trail, "many").await;
    // Grouped, not one at a time: 130 creates and 8 writes setting the stage; the claims in a
    // few transactions (sent again without the envelopes refused) and the five refused asked
    // again alone (two requests each); a takeover (two); the settlements in a few (156 in all
    // when written). One at a time it would be 130 + 8 + 131 + 5 + 2 + 126 = 402 or more.
    let sent = transactions() - before;
    println!("TransactWriteItems sent: {sent}");
    assert!(
        sent <= 180,
        "{sent} transactions: the claims and settlements were not grouped"
    );
    recon_testkit::conformance::an_envelope_named_twice_is_claimed_once(&s.envelope_store(), "twice").await;
    s.cleanup().await;
}

/// Given the trail, the store links the settlements' records into it in the transactions that
/// settle their envelopes: each record once, the chains unbroken, nothing in the outbox.
#[tokio::test]
async fn the_dynamodb_envelope_store_links_the_records_of_settlements_into_the_trail() {
    let s = TestStack::new("linked").await;
    let trail = s.audit_log();
    // A record already in a chain: the links start from the heads as they are.
    let earlier = recon_core::domain::AuditRecord::system(
        AuditKind::DlqOverflow,
        "linked-earlier",
        chrono::Utc::now(),
        "test",
        "before the settlements".into(),
    );
    assert_eq!(trail.append(&earlier).await.map(|seq| seq.is_some()), Ok(true));
    let store = s.envelope_store().with_trail(trail.clone());
    recon_testkit::conformance::envelopes_are_claimed_and_settled_at_once(&store, Some(&trail), "linked").await;
    s.cleanup().await;
}

#[tokio::test]
async fn a_dead_letter_with_an_empty_entity_label_still_becomes_an_envelope() {
    let s = TestStack::new("empty-label").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut v: serde_json::Value = serde_json::from_str(&tx(31).to_body().unwrap()).unwrap();
    v["ledger_entity"] = "".into();
    s.send(&[v.to_string()]).await;
    s.pump(&consumer).await;
    let enricher = s.enricher(100);
    let (event, _) = s.receive_event(&s.dlq(), 1, 30).await;
    let report = enricher.handle_batch(&event, None).await;
    assert_eq!(report.names(), ["ENRICHED"], "{:?}", report.items);
    assert_eq!(s.envelopes().await[0].ledger_entity, None);
    s.cleanup().await;
}
