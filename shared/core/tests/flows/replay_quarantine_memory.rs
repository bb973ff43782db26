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
    assert_eq!(stored.status_history.len(), 3, "enriched, claimed, quarantined");
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
    assert!(stored.status_history.iter().all(|c| !c.manual_journal));
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
