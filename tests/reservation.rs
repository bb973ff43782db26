//! The dedup table of the reserve -> post -> commit protocol on DynamoDB Local: the conditions
//! hold under concurrency.

use recon_aws::dynamodb::DynamoDedupTable;
use recon_core::domain::{CommitOutcome, CommittedRef, HandOff};
use recon_core::ports::{DedupTable, Ledger, ReserveOutcome};
use recon_harness::stack::TestStack;
use std::sync::Arc;

fn committed(hash: &str, sqs: &str) -> CommittedRef {
    CommittedRef {
        source_hash: hash.into(),
        sqs_message_id: sqs.into(),
        message_id: format!("m-{sqs}"),
        committed_at: Some(chrono::Utc::now()),
        manual_journal: None,
    }
}

#[tokio::test]
async fn concurrent_reservations_have_one_winner_and_only_the_owner_commits() {
    let s = TestStack::new("reservation").await;
    let table = Arc::new(DynamoDedupTable::new(
        s.clients.dynamodb.clone(),
        &s.stack.names.dedup_table,
    ));
    let hash = "ab".repeat(32);
    let now = chrono::Utc::now();
    let lease = now + chrono::Duration::seconds(60);
    let ttl = now + chrono::Duration::days(400);

    let mut tasks = Vec::new();
    for i in 0..8 {
        let (t, h) = (table.clone(), hash.clone());
        tasks.push(tokio::spawn(async move {
            (i, t.reserve(&h, &format!("worker-{i}"), now, lease, ttl).await)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (i, r) = task.await.unwrap();
        match r.unwrap() {
            ReserveOutcome::Reserved { .. } => winners.push(i),
            ReserveOutcome::HeldElsewhere { owner, lease_until } => {
                assert!(owner.starts_with("worker-"));
                assert_eq!(lease_until.timestamp_millis(), lease.timestamp_millis());
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one reservation wins: {winners:?}");
    let winner = format!("worker-{}", winners[0]);
    let loser = format!("worker-{}", (winners[0] + 1) % 8);

    assert!(
        table.lookup(&hash).await.unwrap().is_none(),
        "a reservation is not a commit"
    );
    assert!(
        !table.commit(&loser, &committed(&hash, "x")).await.unwrap(),
        "only the owner commits"
    );
    table.release(&hash, &loser).await.unwrap();
    assert!(table.commit(&winner, &committed(&hash, "s1")).await.unwrap());
    assert_eq!(table.lookup(&hash).await.unwrap().unwrap().sqs_message_id, "s1");
    match table.reserve(&hash, "late", now, lease, ttl).await.unwrap() {
        ReserveOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "s1"),
        other => panic!("{other:?}"),
    }
    s.cleanup().await;
}

#[tokio::test]
async fn an_expired_reservation_is_taken_over_in_doubt_and_a_released_one_is_free() {
    let s = TestStack::new("lease").await;
    let table = DynamoDedupTable::new(s.clients.dynamodb.clone(), &s.stack.names.dedup_table);
    let hash = "cd".repeat(32);
    let t0 = chrono::Utc::now();
    let ttl = t0 + chrono::Duration::days(400);
    assert_eq!(
        table
            .reserve(&hash, "a", t0, t0 + chrono::Duration::seconds(30), ttl)
            .await
            .unwrap(),
        ReserveOutcome::FRESH
    );
    let later = t0 + chrono::Duration::seconds(31);
    // Taken over: in doubt since the key was first reserved (a's request may still be applied).
    let first = chrono::DateTime::from_timestamp_millis(t0.timestamp_millis());
    assert_eq!(
        table
            .reserve(&hash, "b", later, later + chrono::Duration::seconds(30), ttl)
            .await
            .unwrap(),
        ReserveOutcome::Reserved { in_doubt_since: first }
    );
    assert!(
        !table.commit("a", &committed(&hash, "sa")).await.unwrap(),
        "the expired owner lost it"
    );
    // Left in doubt (b's post had no definite answer): the next reservation takes over at once,
    // still
    // in doubt since the first reservation.
    table.leave_in_doubt(&hash, "b", later).await.unwrap();
    assert_eq!(
        table
            .reserve(&hash, "c", later, later + chrono::Duration::seconds(30), ttl)
            .await
            .unwrap(),
        ReserveOutcome::Reserved { in_doubt_since: first }
    );
    // Released (a definite answer: nothing applied), the key is free and in no doubt.
    table.release(&hash, "c").await.unwrap();
    assert_eq!(
        table
            .reserve(&hash, "d", later, later + chrono::Duration::seconds(30), ttl)
            .await
            .unwrap(),
        ReserveOutcome::FRESH
    );
    s.cleanup().await;
}

#[tokio::test]
async fn a_hand_off_to_a_manual_journal_round_trips_and_shuts_out_a_posting() {
    // The dedup table keeps which envelope handed the transaction to a manual journal; the
    // reference ledger keeps it under the posting's own key, outside its postings.
    let s = TestStack::new("handoff").await;
    let table = DynamoDedupTable::new(s.clients.dynamodb.clone(), &s.stack.names.dedup_table);
    let hash = "ef".repeat(32);
    let t0 = chrono::Utc::now();
    let until = t0 + chrono::Duration::seconds(30);
    assert_eq!(
        table
            .reserve(&hash, "mj", t0, until, t0 + chrono::Duration::days(400))
            .await
            .unwrap(),
        ReserveOutcome::FRESH
    );
    let handed = CommittedRef {
        manual_journal: Some("env_1".into()),
        ..committed(&hash, "")
    };
    assert!(table.commit("mj", &handed).await.unwrap());
    let found = table.lookup(&hash).await.unwrap().unwrap();
    assert!(found.handed_off_by("env_1"), "{found:?}");
    match table.reserve(&hash, "later", t0, until, t0).await.unwrap() {
        ReserveOutcome::AlreadyCommitted(r) => assert!(r.handed_off_by("env_1"), "{r:?}"),
        other => panic!("{other:?}"),
    }

    let ledger = s.dynamo_ledger();
    let mut posting = recon_core::domain::Posting::from_message(
        &recon_core::domain::decode(&recon_testkit::builders::tx(1).to_body().unwrap()).unwrap(),
        "s1",
        1,
        t0,
        None,
    );
    posting.source_hash = hash.clone();
    let hand_off = HandOff {
        source_hash: hash.clone(),
        period: Some(posting.period.clone()),
        envelope_id: "env_2".into(),
        replay_id: "rpl_1".into(),
        handed_off_at: t0,
    };
    assert_eq!(ledger.hand_off(&hand_off).await.unwrap(), CommitOutcome::Committed);
    match ledger.commit(&posting).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => {
            assert!(r.handed_off_by("env_2"), "{r:?}");
            assert_eq!(r.committed_at, Some(t0));
        }
        other => panic!("{other:?}"),
    }
    assert!(ledger.scan().await.unwrap().is_empty(), "a hand-off is not a posting");
    assert_eq!(ledger.hand_offs().await.unwrap().len(), 1);

    // Posted first: the hand-off answers the posting (read after the failed condition).
    posting.source_hash = "0f".repeat(32);
    assert_eq!(ledger.commit(&posting).await.unwrap(), CommitOutcome::Committed);
    let late = HandOff {
        source_hash: posting.source_hash.clone(),
        ..hand_off
    };
    match ledger.hand_off(&late).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => {
            assert_eq!(r.sqs_message_id, "s1");
            assert!(r.manual_journal.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ledger.hand_offs().await.unwrap().len(), 1);
    s.cleanup().await;
}

/// The ledger conformance suite on DynamoDB Local: the reference ledger the consumer commits to,
/// and the reservation protocol over a general ledger with the DynamoDB dedup table.
#[tokio::test]
async fn the_dynamodb_ledger_and_the_reservation_protocol_keep_each_transaction_once() {
    use recon_testkit::conformance::ledger_keeps_each_transaction_once;
    let s = TestStack::new("cf-ledger").await;
    ledger_keeps_each_transaction_once(&s.dynamo_ledger(), "dynamodb").await;
    recon_testkit::conformance::ledger_reads_by_period(&s.dynamo_ledger(), "dynamodb").await;
    let claiming = recon_core::reservation::ReservingLedger::new(
        recon_testkit::memory::MemoryGeneralLedger::default(),
        DynamoDedupTable::new(s.clients.dynamodb.clone(), &s.stack.names.dedup_table),
        recon_core::reservation::ReservationSettings::default(),
        Arc::new(recon_core::ports::SystemClock),
    );
    ledger_keeps_each_transaction_once(&claiming, "claiming").await;
    // DynamoDB that cannot be reached (nothing listens on port 1).
    let gone = recon_aws::AwsClients::connect_with(
        recon_aws::Target::Local {
            edge_url: "http://127.0.0.1:1".into(),
            dynamodb_url: "http://127.0.0.1:1".into(),
        },
        recon_aws::ClientTimeouts {
            connect: std::time::Duration::from_millis(300),
            attempt: std::time::Duration::from_millis(500),
            operation: std::time::Duration::from_secs(2),
        },
    )
    .await;
    recon_testkit::conformance::ledger_fails_transiently_when_unreachable(
        &recon_aws::dynamodb::DynamoLedger::new(gone.dynamodb.clone(), &s.stack.names.ledger_table),
        "dynamodb-gone",
    )
    .await;
    s.cleanup().await;
}

/// A ledger table from before the ledger was keyed by period (one item per `source_hash`) is
/// copied by `rekey_from`: each posting under its period, a hand-off under its envelope's; a key
/// the new table holds otherwise (another delivery's posting) is left as it is and named, and a
/// hand-off whose envelope is gone is named, not guessed; a second run copies nothing.
#[tokio::test]
async fn a_ledger_from_before_the_period_key_is_rekeyed_once() {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    use recon_aws::dynamodb::Rekeyed;
    use recon_core::domain::TxKey;
    use recon_core::ports::{EnvelopeStore, LedgerScope, read_postings};
    use recon_testkit::conformance::posting;
    let s = TestStack::new("rekey").await;
    let ddb = &s.clients.dynamodb;
    let old = format!("{}-old", s.stack.names.ledger_table);
    ddb.create_table()
        .table_name(&old)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("source_hash")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("source_hash")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let put_old = |item: recon_aws::item::Item| ddb.put_item().table_name(&old).set_item(Some(item)).send();
    let mut september = posting("rekey", 1, "sqs-1");
    september.period = "2026-09".into();
    let october = posting("rekey", 2, "sqs-2");
    for p in [&september, &october] {
        put_old(recon_aws::item::to_item(p).unwrap()).await.unwrap();
    }
    let store = s.envelope_store();
    let mut handing = recon_testkit::builders::envelope("env_rekey");
    handing.accounting_period = Some("2026-08".into());
    store.create(&handing).await.unwrap();
    let handed = posting("rekey", 3, "x").source_hash;
    let orphan = posting("rekey", 4, "x").source_hash;
    for (hash, envelope) in [(&handed, "env_rekey"), (&orphan, "env_gone")] {
        let item = recon_aws::item::Item::from([
            (
                "source_hash".to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S(hash.to_string()),
            ),
            (
                "manual_journal".to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S(envelope.to_string()),
            ),
            (
                "replay_id".to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S("rp-old".to_string()),
            ),
            (
                "committed_at".to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S("2026-08-31T00:00:00Z".to_string()),
            ),
        ]);
        put_old(item).await.unwrap();
    }
    let ledger = s.dynamo_ledger();
    // Committed in the new table already, by another delivery (the consumer let run before the
    // copy): left as it is, and named.
    let mut again = october.clone();
    again.sqs_message_id = "sqs-new".into();
    assert_eq!(ledger.commit(&again).await.unwrap(), CommitOutcome::Committed);

    let mut heard = Vec::new();
    let done = ledger
        .rekey_from(&old, &store, |d| heard.push(d.clone()))
        .await
        .unwrap();
    assert_eq!(
        done,
        Rekeyed {
            copied: 2,
            present: 0,
            conflicts: vec![october.source_hash.clone()],
            unplaced: vec![orphan.clone()]
        }
    );
    assert_eq!(heard.last(), Some(&done));
    let september_read = read_postings(&ledger, &LedgerScope::period("2026-09")).await.unwrap();
    assert_eq!(september_read, vec![september.clone()]);
    assert_eq!(
        ledger.lookup(&october.key()).await.unwrap().map(|c| c.sqs_message_id),
        Some("sqs-new".to_owned())
    );
    let held = ledger
        .lookup(&TxKey::new(&handed, Some("2026-08".into())))
        .await
        .unwrap();
    assert!(held.is_some_and(|c| c.handed_off_by("env_rekey")));
    let second = ledger.rekey_from(&old, &store, |_| {}).await.unwrap();
    assert_eq!(
        (second.copied, second.present, second.conflicts.len()),
        (0, 2, 1),
        "a second run copies nothing"
    );
    ddb.delete_table().table_name(&old).send().await.unwrap();
    s.cleanup().await;
}
