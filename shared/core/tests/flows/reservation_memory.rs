//! The reserve -> post -> commit protocol for an external ledger, on the in-memory dedup table.

use chrono::{Duration, TimeZone, Utc};
use recon_core::consume::{Consumer, ConsumerConfig, Disposition};
use recon_core::domain::{CommitOutcome, HandOff, MatchDecision, Posting, TransientKind, TxKey};
use recon_core::ports::{Clock, DedupTable, Ledger, ReserveOutcome};
use recon_core::reservation::{ReservationSettings, ReservingLedger};
use recon_testkit::builders;
use recon_testkit::memory::{
    FixedClock, MemoryAuditLog, MemoryDeadLetterQueue, MemoryDedupTable, MemoryGeneralLedger, MemoryReferenceData,
    MemoryWorkQueue,
};
use rust_decimal::Decimal;
use std::sync::Arc;

fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock::new(Utc.with_ymd_and_hms(2026, 12, 2, 9, 0, 0).unwrap()))
}

fn posting(sqs_id: &str) -> Posting {
    Posting {
        source_hash: "aa".repeat(32),
        sqs_message_id: sqs_id.into(),
        message_id: "m-1".into(),
        trace_id: "t-1".into(),
        ledger_entity: "ACME-US".into(),
        currency: "USD".into(),
        amount: Decimal::new(1050, 2),
        value_date: chrono::NaiveDate::from_ymd_opt(2026, 11, 30).unwrap(),
        period: "2026-11".into(),
        match_decision: MatchDecision::Matched,
        external_ref: "R".into(),
        counterparty: String::new(),
        attempt_count: 1,
        committed_at: Utc::now(),
        replay_of: None,
    }
}

fn ledger(c: Arc<FixedClock>) -> ReservingLedger<MemoryGeneralLedger, MemoryDedupTable> {
    ReservingLedger::new(
        MemoryGeneralLedger::default(),
        MemoryDedupTable::default(),
        ReservationSettings::default(),
        c,
    )
}

fn hand_off(envelope: &str) -> HandOff {
    HandOff {
        source_hash: "aa".repeat(32),
        period: Some("2026-11".into()),
        envelope_id: envelope.into(),
        replay_id: "rpl_1".into(),
        handed_off_at: Utc::now(),
    }
}

#[tokio::test]
async fn a_hand_off_to_a_manual_journal_excludes_a_gl_posting_and_the_reverse() {
    // Handed off first: nothing reaches the GL, and a later delivery finds the manual journal.
    let l = ledger(clock());
    assert_eq!(l.hand_off(&hand_off("env_1")).await.unwrap(), CommitOutcome::Committed);
    match l.commit(&posting("s1")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert!(r.handed_off_by("env_1"), "{r:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(l.gl.posts(&posting("s1").source_hash), 0);
    // The same envelope again (a replay resuming) sees its own hand-off.
    match l.hand_off(&hand_off("env_1")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert!(r.handed_off_by("env_1")),
        other => panic!("{other:?}"),
    }

    // Posted first: the hand-off answers the posting.
    let l = ledger(clock());
    assert_eq!(l.commit(&posting("s1")).await.unwrap(), CommitOutcome::Committed);
    match l.hand_off(&hand_off("env_2")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => {
            assert_eq!(r.sqs_message_id, "s1");
            assert!(r.manual_journal.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(l.gl.posts(&posting("s1").source_hash), 1);
}

#[tokio::test]
async fn a_transaction_posts_once_and_the_repeat_finds_it_committed() {
    let l = ledger(clock());
    assert_eq!(l.commit(&posting("s1")).await.unwrap(), CommitOutcome::Committed);
    match l.commit(&posting("s2")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "s1"),
        other => panic!("{other:?}"),
    }
    assert_eq!(l.gl.posts(&posting("s1").source_hash), 1);
    assert!(l.lookup(&posting("s1").key()).await.unwrap().is_some());
}

#[tokio::test]
async fn a_post_applied_after_its_client_gave_up_is_never_booked_beside_a_manual_journal() {
    let hash = posting("s1").source_hash;
    let key = TxKey::hash_only(&hash);
    // The GL takes the post, the client times out, the GL applies it later. A hand-off (a closed
    // period's, an operator's) meanwhile voids the key first: the late request is refused.
    let l = ledger(clock());
    l.gl.hold_next_post();
    assert_eq!(l.commit(&posting("s1")).await.unwrap_err().kind, TransientKind::Timeout);
    assert_eq!(l.hand_off(&hand_off("env_1")).await.unwrap(), CommitOutcome::Committed);
    l.gl.apply_held();
    assert_eq!(l.gl.posts(&hash), 0, "a voided key is never applied");
    assert!(l.lookup(&key).await.unwrap().unwrap().handed_off_by("env_1"));

    // A GL that cannot void: while the request may still be applied, no hand-off.
    let c = clock();
    let l = ledger(c.clone());
    l.gl.without_void();
    l.gl.hold_next_post();
    assert_eq!(l.commit(&posting("s1")).await.unwrap_err().kind, TransientKind::Timeout);
    let until = c.now() + l.settings.in_doubt_for;
    assert_eq!(
        l.hand_off(&hand_off("env_1")).await.unwrap(),
        CommitOutcome::InDoubt { until },
        "no hand-off while the request may still be applied"
    );
    // The GL applies it (within its contract): the hand-off finds the posting, books nothing.
    l.gl.apply_held();
    match l.hand_off(&hand_off("env_1")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "s1"),
        other => panic!("{other:?}"),
    }
    assert_eq!(l.gl.posts(&hash), 1);

    // Never applied: once the contract's time has passed, the hand-off goes through.
    let c = clock();
    let l = ledger(c.clone());
    l.gl.without_void();
    l.gl.hold_next_post();
    assert!(l.commit(&posting("s1")).await.is_err());
    assert!(matches!(
        l.hand_off(&hand_off("env_1")).await.unwrap(),
        CommitOutcome::InDoubt { .. }
    ));
    c.advance(l.settings.in_doubt_for + Duration::seconds(1));
    assert_eq!(l.hand_off(&hand_off("env_1")).await.unwrap(), CommitOutcome::Committed);
}

#[tokio::test]
async fn a_key_posted_before_is_marked_with_the_delivery_the_gl_names() {
    let hash = posting("s1").source_hash;
    let key = TxKey::hash_only(&hash);
    // s1's post was applied and its answer lost; s2, another message of the same transaction,
    // comes next: the GL's own posting says who holds it, not the delivery asking.
    let l = ledger(clock());
    l.gl.lose_next_answer();
    assert_eq!(l.commit(&posting("s1")).await.unwrap_err().kind, TransientKind::Timeout);
    match l.commit(&posting("s2")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "s1"),
        other => panic!("{other:?}"),
    }
    assert_eq!(l.lookup(&key).await.unwrap().unwrap().sqs_message_id, "s1");
    assert_eq!(l.gl.posts(&hash), 1);

    // A posting the dedup table never heard of (its mark gone): the `200` is read back.
    let l = ledger(clock());
    l.gl.insert(&posting("s7"));
    match l.commit(&posting("s8")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "s7"),
        other => panic!("{other:?}"),
    }
    assert_eq!(l.lookup(&key).await.unwrap().unwrap().sqs_message_id, "s7");
}

#[tokio::test]
async fn a_failed_post_leaves_the_hash_in_doubt_and_the_next_attempt_asks_first() {
    let l = ledger(clock());
    l.gl.set_failing(true);
    let err = l.commit(&posting("s1")).await.unwrap_err();
    assert_eq!(err.kind, TransientKind::ServiceUnavailable);
    assert!(l.lookup(&posting("s1").key()).await.unwrap().is_none());
    l.gl.set_failing(false);
    assert_eq!(l.commit(&posting("s1")).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(l.gl.posts(&posting("s1").source_hash), 1);
}

#[tokio::test]
async fn a_live_reservation_elsewhere_is_a_transient_conflict_and_an_expired_one_is_taken_over() {
    let c = clock();
    let l = ledger(c.clone());
    let hash = posting("s1").source_hash;
    let key = TxKey::hash_only(&hash);
    // Another worker reserved and crashed mid-post (its reservation is never committed nor
    // released).
    let now = c.now();
    let reserved = l
        .dedup
        .reserve(
            &hash,
            "crashed-worker",
            now,
            now + Duration::seconds(60),
            now + Duration::days(400),
        )
        .await;
    assert_eq!(reserved.unwrap(), ReserveOutcome::FRESH);
    let err = l.commit(&posting("s2")).await.unwrap_err();
    assert_eq!(err.kind, TransientKind::Conflict);
    assert_eq!(l.gl.posts(&hash), 0);
    // After the lease, the reservation is taken over and the transaction posts.
    c.advance(Duration::seconds(61));
    assert_eq!(l.commit(&posting("s2")).await.unwrap(), CommitOutcome::Committed);
    // The crashed worker coming back cannot commit over it.
    let stale = recon_core::domain::CommittedRef::from(&posting("s1"));
    assert!(!l.dedup.commit("crashed-worker", &stale).await.unwrap());
    assert_eq!(l.lookup(&key).await.unwrap().unwrap().sqs_message_id, "s2");
}

#[tokio::test]
async fn the_consumer_runs_unchanged_on_an_external_ledger() {
    let c = clock();
    let consumer = Consumer {
        ledger: ledger(c.clone()),
        queue: MemoryWorkQueue::default(),
        dlq: MemoryDeadLetterQueue::default(),
        reference: MemoryReferenceData::default(),
        audit: MemoryAuditLog::default(),
        clock: c,
        config: ConsumerConfig::default(),
    };
    let body = builders::body(&builders::tx(9));
    let msg = |id: &str| builders::delivery(id, &body, 1);
    assert_eq!(consumer.handle_message(&msg("s1")).await, Disposition::Committed);
    assert_eq!(
        consumer.handle_message(&msg("s1")).await,
        Disposition::RedeliveryAcknowledged
    );
    assert!(matches!(
        consumer.handle_message(&msg("s2")).await,
        Disposition::DuplicateSuppressed { .. }
    ));
    let hash = recon_core::domain::decode(&body).unwrap().source_hash;
    assert_eq!(consumer.ledger.gl.posts(&hash), 1);
}

#[test]
fn a_dedup_ttl_shorter_than_the_replay_window_is_refused() {
    let week = ReservationSettings {
        ttl: Duration::days(7),
        ..ReservationSettings::default()
    };
    let err = week.validate(Duration::days(14)).unwrap_err();
    assert!(err.contains("7 days") && err.contains("14 days"), "{err}");
    assert!(ReservationSettings::default().validate(Duration::days(90)).is_ok());
}

/// The ledger conformance suite on the memory ledger and on the reservation protocol over a general
/// ledger (the same suite runs on DynamoDB and PostgreSQL on the local stack).
#[tokio::test]
async fn the_memory_ledger_and_the_reservation_protocol_keep_each_transaction_once() {
    use recon_testkit::conformance::ledger_keeps_each_transaction_once;
    ledger_keeps_each_transaction_once(&recon_testkit::memory::MemoryLedger::default(), "memory").await;
    recon_testkit::conformance::ledger_reads_by_period(&recon_testkit::memory::MemoryLedger::default(), "memory").await;
    ledger_keeps_each_transaction_once(&ledger(clock()), "claiming").await;
}

/// The reservation protocol over the memory general ledger and dedup table.
type MemoryReserving = Arc<ReservingLedger<MemoryGeneralLedger, MemoryDedupTable>>;

/// A replay over the reservation protocol (the world's other stores in memory).
type ReservingReplayer = recon_core::replay::Replayer<(
    Arc<recon_testkit::memory::MemoryEnvelopeStore>,
    MemoryReserving,
    Arc<MemoryReferenceData>,
    Arc<recon_testkit::memory::MemoryReplayQueue>,
    Arc<recon_testkit::memory::MemoryWorm>,
    Arc<MemoryAuditLog>,
    recon_testkit::memory::MemoryMetrics,
)>;

fn replay_over(w: &crate::common::World, ledger: MemoryReserving) -> ReservingReplayer {
    ReservingReplayer {
        progress: None,
        store: w.store.clone(),
        ledger,
        reference: w.reference.clone(),
        queue: w.queue.clone(),
        worm: w.worm.clone(),
        audit: w.audit.clone(),
        metrics: Default::default(),
        clock: w.clock.clone(),
        config: recon_core::replay::ReplayConfig::default(),
    }
}

#[tokio::test]
async fn a_hand_off_in_doubt_waits_unclaimed_and_goes_through_once_the_doubt_is_over() {
    use crate::common::{ChronoDuration, EnvelopeStatus, EnvelopeStore, outcomes, quarantine_of, world, xau};
    let w = world();
    let ledger = Arc::new(ReservingLedger::new(
        MemoryGeneralLedger::default(),
        MemoryDedupTable::default(),
        ReservationSettings::default(),
        w.clock.clone(),
    ));
    ledger.gl.without_void();
    let e = w.envelope("s1", &xau(1), ChronoDuration::minutes(5)).await;
    // A post of its transaction whose client gave up: the GL may still apply it.
    let msg = recon_core::domain::decode(e.original.body.as_deref().unwrap()).unwrap();
    ledger.gl.hold_next_post();
    let p = Posting::from_message(&msg, "s0", 1, w.clock.now(), None);
    assert!(ledger.commit(&p).await.is_err());

    let r = replay_over(&w, ledger.clone());
    let report = r.run(&quarantine_of(&[&e.envelope_id]), None).await.unwrap();
    assert_eq!(outcomes(&report), ["STILL_FAILING"], "{report:#?}");
    assert!(report.items[0].detail.contains("waits until"), "{report:#?}");
    let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert_eq!(stored.status, EnvelopeStatus::Pending);
    let changes = stored.status_history.len();

    // Asked again before then: not even claimed.
    w.clock.advance(Duration::hours(1));
    let report = r.run(&quarantine_of(&[&e.envelope_id]), None).await.unwrap();
    assert_eq!(outcomes(&report), ["STILL_FAILING"]);
    let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert_eq!(stored.status_history.len(), changes, "no claim while it waits");

    // The contract's time over (the request never applied): handed off, left for a journal.
    w.clock.advance(ledger.settings.in_doubt_for);
    let report = r.run(&quarantine_of(&[&e.envelope_id]), None).await.unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED"], "{report:#?}");
    assert!(
        w.store
            .get(&e.envelope_id)
            .await
            .unwrap()
            .unwrap()
            .left_for_manual_journal()
    );
    assert!(
        ledger
            .lookup(&msg.key())
            .await
            .unwrap()
            .unwrap()
            .handed_off_by(&e.envelope_id)
    );
}
