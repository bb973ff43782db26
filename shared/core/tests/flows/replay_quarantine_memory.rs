//! The replay's quarantines on in-memory adapters: an operator's decision, originals SQS cannot
//! carry again, and manual journals, which exclude a posting of the same transaction.

use crate::common::*;

#[tokio::test]
async fn an_operator_can_quarantine_a_group_that_cannot_be_fixed() {
    let w = world();
    for n in 1..=2 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    let req = ReplayRequest {
        quarantine: true,
        reason: "counterparty closed; book by hand".into(),
        ..manual(Selector::default(), false)
    };
    let report = w.replayer(ReplayConfig::default()).run(&req, None).await.unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED", "QUARANTINED"]);
    assert!(report.items.iter().all(|i| i.gate == Some(Gate::Operator)));
    assert_eq!(w.store.pending_count().await.unwrap(), 0);
    assert!(w.queue.sent().is_empty());
}

#[tokio::test]
async fn large_originals_go_out_in_batches_sqs_accepts() {
    // Regression: ten re-injections went in one call whatever their size; three originals of
    // 400 kB exceed SQS's 1 MiB per batch, the call was refused, all were released, and the next
    // sweep did the same, forever.
    let w = world();
    add_xau(&w).await;
    for n in 1..=3 {
        w.large_envelope(&format!("s{n}"), &padded(&xau(n), 400_000)).await;
    }
    let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    assert_eq!(outcomes(&report), ["REINJECTED"; 3], "{report:#?}");
    assert_eq!(w.queue.calls(), 2, "two batches: 800 kB, then 400 kB");
}

#[tokio::test]
async fn an_original_sqs_can_never_take_is_quarantined_not_retried_forever() {
    // Regression: just under 1 MiB on its own, over it with the replay's four attributes: every
    // sweep claimed it, saw the send refused, released it, and its history grew without bound.
    let w = world();
    add_xau(&w).await;
    let e = w.large_envelope("s1", &padded(&xau(1), 1_048_576 - 60)).await;
    let r = w.replayer(ReplayConfig::default());
    let report = r.run(&sweep(), None).await.unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED"], "{report:#?}");
    assert_eq!(report.items[0].gate, Some(Gate::Transport));
    let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert!(stored.status_history.last().unwrap().manual_journal);
    assert_eq!(
        stored.status_history.len(),
        4,
        "enriched, claimed, handing off (under the claim), quarantined"
    );
    assert!(w.queue.sent().is_empty());
}

#[tokio::test]
async fn a_quarantine_never_flags_a_committed_transaction_for_a_manual_journal() {
    // Regression: an operator's quarantine (like the temporal gate's) flagged the envelope for a
    // manual journal without asking the ledger: a transaction committed meanwhile would be
    // booked twice, once by hand.
    let w = world();
    add_xau(&w).await;
    let e = w.envelope("s1", &xau(7), ChronoDuration::hours(1)).await;
    let msg = recon_core::domain::decode(e.original.body.as_deref().unwrap()).unwrap();
    let posting = recon_core::domain::Posting::from_message(&msg, "another", 1, Utc::now(), None);
    w.ledger.commit(&posting).await.unwrap();
    let req = ReplayRequest {
        quarantine: true,
        reason: "cannot be fixed: book by hand".into(),
        ..manual(Selector::default(), false)
    };
    let report = w.replayer(ReplayConfig::default()).run(&req, None).await.unwrap();
    assert_eq!(outcomes(&report), ["SUPPRESSED_DUPLICATE"]);
    let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert_eq!(stored.status, EnvelopeStatus::SuppressedDuplicate);
    assert!(!stored.left_for_manual_journal());
    assert!(!stored.status_history.last().unwrap().manual_journal);
}

#[tokio::test]
async fn a_transaction_left_for_a_manual_journal_is_never_posted_by_another_copy() {
    // Regression (simulator seeds 2228, 4345): an envelope was quarantined for a manual journal
    // while another copy of its transaction (a resend, an SQS duplicate) was still on its way;
    // that copy then posted, and the accountant would have booked the transaction a second time.
    let w = world();
    add_xau(&w).await;
    let tx = xau(7);
    let first = w.envelope("s1", &tx, ChronoDuration::hours(1)).await;
    let req = ReplayRequest {
        quarantine: true,
        reason: "counterparty closed; book by hand".into(),
        ..manual(Selector::default(), false)
    };
    let report = w.replayer(ReplayConfig::default()).run(&req, None).await.unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED"]);
    let hand_offs = w.ledger.hand_offs();
    assert_eq!(hand_offs.len(), 1);
    assert_eq!(hand_offs[0].envelope_id, first.envelope_id);

    // The other copy reaches the consumer: suppressed, not posted.
    let consumer = w.consumer();
    let mut copy = SqsMessage::default();
    copy.message_id = Some("resent".into());
    copy.body = Some(body(&tx));
    assert!(matches!(
        consumer.handle_message(&copy).await,
        Disposition::DuplicateSuppressed { .. }
    ));
    assert!(w.ledger.postings().is_empty(), "{:?}", w.ledger.postings());
    let record = consumer.audit.records().pop().unwrap();
    assert_eq!(record.kind, AuditKind::DuplicateSuppressed);
    assert!(record.detail.contains("manual journal"), "{}", record.detail);

    // A third copy in the DLQ is suppressed by the replay too.
    let third = w.envelope("s3", &tx, ChronoDuration::hours(1)).await;
    let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    assert_eq!(outcomes(&report), ["SUPPRESSED_DUPLICATE"]);
    assert_eq!(w.status(&third.envelope_id).await, EnvelopeStatus::SuppressedDuplicate);
    assert!(w.ledger.postings().is_empty());
}

#[tokio::test]
async fn a_hand_off_left_by_a_replay_that_stopped_is_finished_not_suppressed() {
    // A replay handed the transactions off, then died before settling the envelopes: the next
    // replay finds each envelope's own hand-off and finishes the quarantine — also for one whose
    // gates would say "still failing" today (regression, found by the simulator: an operator's
    // quarantine of still-poison envelopes crashed, the next sweep released them to PENDING, and
    // their transactions were left neither posted nor flagged).
    let w = world();
    let poison = w.envelope("s1", &xau(8), ChronoDuration::hours(1)).await;
    let valid = w
        .envelope("s2", &tx_in(9, "USD", "9.50"), ChronoDuration::hours(1))
        .await;
    let t0 = w.clock_now();
    w.claimed_by_a_replay_that_died(&poison, "rpl_died").await;
    for e in [&poison, &valid] {
        w.ledger
            .hand_off(&recon_core::domain::HandOff {
                source_hash: e.source_hash.clone(),
                period: e.accounting_period.clone(),
                envelope_id: e.envelope_id.clone(),
                replay_id: "rpl_died".into(),
                handed_off_at: t0,
            })
            .await
            .unwrap();
    }
    w.clock.advance(ChronoDuration::minutes(6));
    let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED", "QUARANTINED"], "{report:#?}");
    assert!(report.items.iter().all(|i| i.gate == Some(Gate::Idempotency)));
    for e in [&poison, &valid] {
        let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
        assert!(stored.left_for_manual_journal(), "{stored:#?}");
    }
    assert_eq!(w.ledger.hand_offs().len(), 2);
    assert!(w.queue.sent().is_empty());
}

#[tokio::test]
async fn a_body_that_does_not_decode_is_not_handed_off_but_never_booked_twice() {
    // A copy whose amount became a JSON number: it claims the hash of a transaction that is
    // committed. Quarantined by hand, it is suppressed (as before hand-offs); it is not handed off
    // under a hash its content does not prove.
    let w = world();
    let m = tx_in(12, "USD", "12.50");
    let mut broken: serde_json::Value = serde_json::from_str(&body(&m)).unwrap();
    broken["amount"] = serde_json::json!(12.5);
    let e = w.large_envelope("s1", &broken.to_string()).await;
    assert_eq!(e.source_hash_kind, recon_core::domain::HashKind::Claimed);
    let original = body(&m);
    let msg = recon_core::domain::decode(&original).unwrap();
    w.ledger
        .commit(&recon_core::domain::Posting::from_message(
            &msg,
            "original",
            1,
            w.clock_now(),
            None,
        ))
        .await
        .unwrap();
    let req = ReplayRequest {
        quarantine: true,
        reason: "cannot be fixed: book by hand".into(),
        ..manual(Selector::default(), false)
    };
    let report = w.replayer(ReplayConfig::default()).run(&req, None).await.unwrap();
    assert_eq!(outcomes(&report), ["SUPPRESSED_DUPLICATE"], "{report:#?}");
    assert!(w.ledger.hand_offs().is_empty());
}

/// The memory ledger, its next hand-off held back until released: an operator's laptop
/// suspended in the middle of a quarantine.
struct StallingLedger {
    inner: Arc<MemoryLedger>,
    reached: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
    armed: std::sync::atomic::AtomicBool,
}

impl Ledger for StallingLedger {
    async fn commit(
        &self,
        p: &recon_core::domain::Posting,
    ) -> recon_core::ports::StoreResult<recon_core::domain::CommitOutcome> {
        self.inner.commit(p).await
    }
    async fn lookup(
        &self,
        k: &recon_core::domain::TxKey,
    ) -> recon_core::ports::StoreResult<Option<recon_core::domain::CommittedRef>> {
        self.inner.lookup(k).await
    }
    async fn hand_off(
        &self,
        h: &recon_core::domain::HandOff,
    ) -> recon_core::ports::StoreResult<recon_core::domain::CommitOutcome> {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.reached.notify_one();
            let _ = self.release.acquire().await;
        }
        self.inner.hand_off(h).await
    }
}

/// Regression (issue 29, defect 3): an operator's quarantine stalled past its lease just before
/// its hand-off; the sweep took the claim over, found nothing posted, re-injected a copy and
/// marked the envelope REPLAYED; the stalled hand-off then landed, unfenced, and the copy was
/// suppressed as its duplicate: nothing posted, nothing left for a manual journal. Now the
/// hand-off's intent is written under the claim first: the sweep that takes it over finishes the
/// hand-off instead of re-injecting, and the late one finds its own.
#[tokio::test]
async fn a_hand_off_that_lands_after_its_claim_was_taken_over_loses_nothing() {
    let w = world();
    let e = w
        .envelope("s1", &tx_in(5, "USD", "12.50"), ChronoDuration::minutes(10))
        .await;
    let stalling = Arc::new(StallingLedger {
        inner: w.ledger.clone(),
        reached: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
        armed: std::sync::atomic::AtomicBool::new(true),
    });
    // The world's replay with the stalling ledger in its place.
    type Stalling = Replayer<(
        Arc<MemoryEnvelopeStore>,
        Arc<StallingLedger>,
        Arc<MemoryReferenceData>,
        Arc<MemoryReplayQueue>,
        Arc<MemoryWorm>,
        Arc<MemoryAuditLog>,
        MemoryMetrics,
    )>;
    let operator = Stalling {
        progress: None,
        store: w.store.clone(),
        ledger: stalling.clone(),
        reference: w.reference.clone(),
        queue: w.queue.clone(),
        worm: w.worm.clone(),
        audit: w.audit.clone(),
        metrics: MemoryMetrics::default(),
        clock: w.clock.clone(),
        config: ReplayConfig::default(),
    };
    let request = quarantine_of(&[&e.envelope_id]);
    let stalled = operator.run(&request, None);
    let meanwhile = async {
        stalling.reached.notified().await;
        // The laptop sleeps past the lease; the scheduled sweep comes by.
        w.clock
            .advance(ReplayConfig::default().lease + ChronoDuration::seconds(1));
        let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
        // The laptop wakes: its hand-off lands, its claim is gone.
        stalling.release.add_permits(1);
        report
    };
    let (late, report) = futures::join!(stalled, meanwhile);
    assert!(w.queue.sent().is_empty(), "nothing re-injected: {report:#?}");
    let late = late.unwrap();
    assert_eq!(outcomes(&late), ["SKIPPED"], "{late:#?}");

    let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert!(stored.left_for_manual_journal(), "{:?}", stored.status_history);
    let msg = recon_core::domain::decode(e.original.body.as_deref().unwrap()).unwrap();
    let held = w.ledger.lookup(&msg.key()).await.unwrap().unwrap();
    assert!(held.handed_off_by(&e.envelope_id), "{held:?}");
    assert!(w.ledger.postings().is_empty());
}

/// The body as a producer sent it, but for one unhashed field: `match_decision` missing.
fn without_match_decision(m: &NewMessage) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&body(m)).unwrap();
    v.as_object_mut().unwrap().remove("match_decision");
    v.to_string()
}

/// Regression (issue 29, defect 4): a malformed send (an unhashed field missing; every hashed
/// field right) quarantined for a manual journal wrote no hand-off, and the producer's corrected
/// resend then posted: booked twice. Its hashed fields identify the transaction: it is handed
/// off under the hash it claims, and the corrected resend is a duplicate.
#[tokio::test]
async fn a_malformed_send_left_for_a_manual_journal_keeps_its_corrected_resend_from_posting() {
    let w = world();
    let sent = tx_in(8, "USD", "40.00");
    let mut delivered = delivery("s1", &without_match_decision(&sent), 1);
    delivered = with_attribute(delivered, attrs::FAILURE_CODE, "POISON_MESSAGE");
    delivered = with_attribute(delivered, attrs::ROOT_CAUSE, "SCHEMA_VIOLATION:match_decision");
    let e = envelope_from_dlq_message(&delivered, w.clock_now(), "enricher");
    assert_eq!(e.source_hash, sent.compute_hash().unwrap());
    w.store.create(&e).await.unwrap();

    let report = w
        .replayer(ReplayConfig::default())
        .run(&quarantine_of(&[&e.envelope_id]), None)
        .await
        .unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED"], "{report:#?}");
    let held = w.ledger.lookup(&e.decoded_key()).await.unwrap();
    assert!(
        held.as_ref().is_some_and(|c| c.handed_off_by(&e.envelope_id)),
        "handed off under the hash its content reproduces: {held:?}"
    );
    // The producer corrects it and sends it again: never posted beside the manual journal.
    let again = w.consumer().handle_message(&delivery("s2", &body(&sent), 1)).await;
    assert!(matches!(again, Disposition::DuplicateSuppressed { .. }), "{again:?}");
    assert!(w.ledger.postings().is_empty());
}

#[tokio::test]
async fn a_malformed_send_whose_transaction_posted_is_suppressed_not_left_for_a_manual_journal() {
    let w = world();
    let sent = tx_in(9, "USD", "41.00");
    let mut delivered = delivery("s1", &without_match_decision(&sent), 1);
    delivered = with_attribute(delivered, attrs::FAILURE_CODE, "POISON_MESSAGE");
    let malformed = envelope_from_dlq_message(&delivered, w.clock_now(), "enricher");
    w.store.create(&malformed).await.unwrap();
    // The corrected resend posted first.
    assert_eq!(
        w.consumer().handle_message(&delivery("s2", &body(&sent), 1)).await,
        Disposition::Committed
    );
    // The sweep settles the malformed one as a duplicate (its hashed fields name a committed
    // transaction), whatever its missing field says.
    let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    let stored = w.store.get(&malformed.envelope_id).await.unwrap().unwrap();
    assert_eq!(stored.status, EnvelopeStatus::SuppressedDuplicate, "{report:#?}");
    assert!(!stored.left_for_manual_journal());
}

/// Regression (issue 29): an approved quarantine's execution claimed an envelope and died; its
/// resumption skips it (changed since the request), and the sweep taking the claim over
/// re-injected it: the copy posted what was approved for a manual journal. A quarantine's claim
/// now carries its decision, and whoever takes it over finishes the quarantine.
#[tokio::test]
async fn a_quarantine_claim_taken_over_is_quarantined_never_reinjected() {
    let w = world();
    // What a quarantine run's claim writes.
    let done = w
        .envelope("s0", &tx_in(3, "USD", "3.00"), ChronoDuration::minutes(10))
        .await;
    let report = w
        .replayer(ReplayConfig::default())
        .run(&quarantine_of(&[&done.envelope_id]), None)
        .await
        .unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED"]);
    let stored = w.store.get(&done.envelope_id).await.unwrap().unwrap();
    let claim = &stored.status_history[1];
    assert_eq!(claim.status, EnvelopeStatus::Replaying);
    assert!(claim.manual_journal, "the claim carries the decision: {claim:?}");

    // Such a claim, left by a run that died, taken over by the sweep once its lease ended.
    let e = w
        .envelope("s1", &tx_in(4, "USD", "4.00"), ChronoDuration::minutes(10))
        .await;
    let t0 = w.clock_now();
    let died = ReplayClaim {
        replay_id: "rpl_died".into(),
        triggered_by: "dlqctl:approver".into(),
        reason: "book by hand (approved request apr_1)".into(),
        claimed_at: t0,
        lease_until: t0 + ChronoDuration::minutes(5),
    };
    let change = StatusChange {
        manual_journal: true,
        ..claim.clone()
    };
    assert!(w.store.claim(&e.envelope_id, &died, t0, &change, None).await.unwrap());
    w.clock.advance(ChronoDuration::minutes(6));
    let swept = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    assert!(w.queue.sent().is_empty(), "never re-injected: {swept:#?}");
    let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert!(stored.left_for_manual_journal(), "{:?}", stored.status_history);
}

/// Regression (found by the simulator, seed 62576490921): an operator quarantined a copy whose
/// amount was altered after hashing (it claims the transaction's hash; its content does not
/// reproduce it), then the valid original. The copy could not be handed off, so it was flagged
/// for a manual journal with nothing in the ledger; the original was then handed off too: one
/// transaction left for two manual journals, and reconcile held. A body that does not identify
/// its transaction is quarantined for review, never for a manual journal.
#[tokio::test]
async fn a_tampered_copy_quarantined_by_hand_is_never_a_second_manual_journal() {
    let w = world();
    let m = xau(14);
    let mut tampered: serde_json::Value = serde_json::from_str(&body(&m)).unwrap();
    tampered["amount"] = "0.01".into();
    let copy = w.large_envelope("s1", &tampered.to_string()).await;
    let original = w.envelope("s2", &m, ChronoDuration::hours(1)).await;
    assert_eq!(copy.source_hash, original.source_hash);
    let replayer = w.replayer(ReplayConfig::default());
    for id in [&copy.envelope_id, &original.envelope_id] {
        let report = replayer.run(&quarantine_of(&[id]), None).await.unwrap();
        assert_eq!(outcomes(&report), ["QUARANTINED"], "{report:#?}");
    }
    let copy = w.store.get(&copy.envelope_id).await.unwrap().unwrap();
    assert!(!copy.left_for_manual_journal(), "{:#?}", copy.status_history);
    let last = copy
        .status_history
        .last()
        .map(|c| c.reason.as_str())
        .unwrap_or_default();
    assert!(last.contains("not for a manual journal"), "{last}");
    let original = w.store.get(&original.envelope_id).await.unwrap().unwrap();
    assert!(original.left_for_manual_journal());
    let held = w.ledger.lookup(&original.decoded_key()).await.unwrap();
    assert!(held.is_some_and(|c| c.handed_off_by(&original.envelope_id)));
}
