//! The replay flow on in-memory adapters: gates, claims, crash recovery, dry run, cursors,
//! back-pressure, concurrent sweeps and the audit outbox.

use crate::common::*;

#[tokio::test]
async fn a_fixed_group_replays_and_commits_exactly_once() {
    let w = world();
    let mut envelopes = Vec::new();
    for n in 1..=3 {
        envelopes.push(w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await);
    }
    let r = w.replayer(ReplayConfig::default());
    // Before the fix: still poison at gate 1, nothing changes.
    let before = r.run(&manual(Selector::default(), false), None).await.unwrap();
    assert_eq!(before.still_failing, 3);
    assert!(before.items.iter().all(|i| i.gate == Some(Gate::Integrity)));
    assert_eq!(w.status(&envelopes[0].envelope_id).await, EnvelopeStatus::Pending);
    assert!(w.queue.sent().is_empty());

    add_xau(&w).await;
    let report = r
        .run(
            &manual(
                Selector {
                    root_cause: Some("UNMAPPED_CURRENCY:*".into()),
                    ..Selector::default()
                },
                false,
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(report.reinjected, 3, "{report:#?}");
    assert!(report.completed);
    let sent = w.queue.sent();
    assert_eq!(sent.len(), 3);
    for e in &envelopes {
        let m = sent
            .iter()
            .find(|m| {
                m.attributes
                    .iter()
                    .any(|(n, _, v)| n == attrs::REPLAY_OF && *v == e.envelope_id)
            })
            .expect("re-injected");
        assert_eq!(Some(&m.body), e.original.body.as_ref(), "original bytes, verbatim");
        let attr = |name: &str| {
            m.attributes
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, _, v)| v.clone())
        };
        assert_eq!(attr(attrs::TRIGGERED_BY).as_deref(), Some("alice"));
        assert_eq!(attr(attrs::REPLAY_GENERATION).as_deref(), Some("1"));
        let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
        assert_eq!(stored.status, EnvelopeStatus::Replayed);
        assert_eq!(stored.replays.len(), 1);
        assert_eq!(stored.replays[0].triggered_by, "alice");
    }
    assert_eq!(w.store.pending_count().await.unwrap(), 0);
    assert_eq!(
        w.audit
            .records()
            .iter()
            .filter(|a| a.kind == AuditKind::ReplayReinjected)
            .count(),
        3
    );

    // The consumer (same ledger, same reference data) commits each once; a second replay run
    // finds nothing pending.
    let consumer = w.consumer();
    for (i, m) in sent.iter().enumerate() {
        let mut msg = SqsMessage::default();
        msg.message_id = Some(format!("replayed-{i}"));
        msg.body = Some(m.body.clone());
        assert_eq!(consumer.handle_message(&msg).await, Disposition::Committed);
    }
    assert_eq!(w.ledger.len(), 3);
    let again = r.run(&manual(Selector::default(), false), None).await.unwrap();
    assert_eq!(again.selected, 0);
}

#[tokio::test]
async fn an_envelope_whose_hash_is_committed_is_suppressed_not_reinjected() {
    let w = world();
    add_xau(&w).await;
    let e = w.envelope("s1", &xau(7), ChronoDuration::hours(1)).await;
    let body = e.original.body.clone().unwrap();
    let msg = recon_core::domain::decode(&body).unwrap();
    let posting = recon_core::domain::Posting::from_message(&msg, "earlier", 1, Utc::now(), None);
    w.ledger.commit(&posting).await.unwrap();

    let report = w
        .replayer(ReplayConfig::default())
        .run(&manual(Selector::default(), false), None)
        .await
        .unwrap();
    assert_eq!(outcomes(&report), ["SUPPRESSED_DUPLICATE"]);
    assert_eq!(report.items[0].gate, Some(Gate::Idempotency));
    assert!(w.queue.sent().is_empty());
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::SuppressedDuplicate);
    let audit = w.audit.records();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].kind, AuditKind::ReplaySuppressed);
    assert_eq!(
        audit[0].failure_code,
        Some(recon_core::domain::FailureCode::ReplayDuplicate)
    );
}

#[tokio::test]
async fn closed_periods_and_stale_envelopes_go_to_quarantine_for_a_manual_journal() {
    let w = world();
    add_xau(&w).await;
    w.reference
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-11".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        })
        .await
        .unwrap();
    let closed = w.envelope("s1", &xau(1), ChronoDuration::hours(1)).await;
    let mut december = xau(2);
    december.value_date = "2026-12-01".into();
    let stale = w.envelope("s2", &december, ChronoDuration::days(120)).await;

    let report = w
        .replayer(ReplayConfig::default())
        .run(&manual(Selector::default(), false), None)
        .await
        .unwrap();
    assert_eq!(report.quarantined, 2, "{report:#?}");
    assert!(report.items.iter().all(|i| i.gate == Some(Gate::Temporal)));
    assert!(w.queue.sent().is_empty());
    for e in [&closed, &stale] {
        let stored = w.store.get(&e.envelope_id).await.unwrap().unwrap();
        assert_eq!(stored.status, EnvelopeStatus::Quarantined);
        assert!(stored.status_history.last().unwrap().manual_journal);
        let prefix = format!("quarantine/{}/", e.envelope_id);
        assert!(
            w.worm.keys().iter().any(|k| k.starts_with(&prefix)),
            "WORM quarantine record"
        );
    }
    assert!(report.items.iter().any(|i| i.detail.contains("120 days ago")));
}

#[tokio::test]
async fn a_repeat_offender_is_quarantined_for_review() {
    let w = world();
    add_xau(&w).await;
    let mut e = w.envelope("s1", &xau(3), ChronoDuration::hours(1)).await;
    e.envelope_id = "env_repeat".into();
    e.replay_generation = 3;
    w.store.create(&e).await.unwrap();
    let report = w
        .replayer(ReplayConfig::default())
        .run(
            &manual(
                Selector {
                    envelope_ids: vec!["env_repeat".into()],
                    ..Selector::default()
                },
                false,
            ),
            None,
        )
        .await
        .unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED"]);
    assert_eq!(report.items[0].gate, Some(Gate::ReplayCap));
}

#[tokio::test]
async fn a_dry_run_changes_nothing() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=4 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    let before = w.store.list_all(None, 100).await.unwrap().0;
    let report = w
        .replayer(ReplayConfig::default())
        .run(&manual(Selector::default(), true), None)
        .await
        .unwrap();
    assert_eq!(outcomes(&report), ["WOULD_REINJECT"; 4]);
    assert_eq!(w.store.list_all(None, 100).await.unwrap().0, before);
    assert!(w.queue.sent().is_empty());
    assert!(w.audit.records().is_empty());
    assert_eq!(w.store.pending_count().await.unwrap(), 4);
}

#[tokio::test]
async fn a_crash_between_reinjection_and_the_status_update_still_posts_once() {
    let w = world();
    add_xau(&w).await;
    let e = w.envelope("s1", &xau(4), ChronoDuration::hours(1)).await;
    // A replay claimed it, sent the copy, and died before marking it REPLAYED; the consumer then
    // committed the copy.
    let t0 = w.clock_now();
    w.claimed_by_a_replay_that_died(&e, "rpl_crashed").await;
    let msg = recon_core::domain::decode(e.original.body.as_deref().unwrap()).unwrap();
    w.ledger
        .commit(&recon_core::domain::Posting::from_message(&msg, "copy-1", 1, t0, None))
        .await
        .unwrap();

    let r = w.replayer(ReplayConfig::default());
    // While the lease holds, nobody touches it.
    let early = r.run(&sweep(), None).await.unwrap();
    assert_eq!(early.selected, 0);
    w.clock.advance(ChronoDuration::minutes(6));
    let report = r.run(&sweep(), None).await.unwrap();
    assert_eq!(outcomes(&report), ["SUPPRESSED_DUPLICATE"]);
    assert!(w.queue.sent().is_empty(), "not re-injected a second time");
    assert_eq!(w.ledger.len(), 1);
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::SuppressedDuplicate);
}

#[tokio::test]
async fn back_pressure_stops_the_sweep_before_sending() {
    let w = world();
    add_xau(&w).await;
    let e = w.envelope("s1", &xau(5), ChronoDuration::hours(1)).await;
    w.queue.set_depth(50_000);
    let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    assert!(report.stopped.as_deref().unwrap().starts_with("back-pressure"));
    assert!(!report.completed);
    assert!(w.queue.sent().is_empty());
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::Pending);
}

#[tokio::test]
async fn a_sweep_with_a_small_time_budget_resumes_from_its_cursor() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=12 {
        w.envelope(
            &format!("s{n:02}"),
            &xau(n),
            ChronoDuration::minutes(i64::from(100 - n)),
        )
        .await;
    }
    // 20 re-injections a second, pages of two, 5 s margin + 0.3 s of budget per invocation.
    let config = ReplayConfig {
        page_size: 2,
        deadline_margin: Duration::from_secs(5),
        ..ReplayConfig::default()
    };
    let r = TestReplayer {
        config: ReplayConfig {
            rate_per_sec: 20,
            ..config
        },
        ..w.replayer(ReplayConfig::default())
    };
    let mut invocations = 0;
    loop {
        invocations += 1;
        let report = r
            .run(&sweep(), Some(w.clock_now() + Duration::from_millis(5300)))
            .await
            .unwrap();
        eprintln!(
            "invocation {invocations}: {} reinjected, stopped {:?}, completed {}",
            report.reinjected, report.stopped, report.completed
        );
        if report.completed {
            break;
        }
        assert!(report.stopped.as_deref().unwrap().starts_with("time budget"));
        assert!(invocations < 50, "no progress");
    }
    assert!(invocations > 1, "the budget forced several invocations");
    let sent = w.queue.sent();
    assert_eq!(sent.len(), 12, "each envelope re-injected once");
    let mut bodies: Vec<&str> = sent.iter().map(|m| m.body.as_str()).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 12);
    assert_eq!(
        w.store.load_cursor("schedule").await.unwrap(),
        None,
        "a finished sweep clears its cursor"
    );
}

#[tokio::test]
async fn concurrent_sweeps_reinject_each_envelope_at_most_once() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=200 {
        w.envelope(&format!("s{n:03}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    let config = ReplayConfig {
        page_size: 25,
        ..ReplayConfig::default()
    };
    let rs: Vec<TestReplayer> = (0..4).map(|_| w.replayer(config.clone())).collect();
    let req = sweep();
    let reports = futures::future::join_all(rs.iter().map(|r| r.run(&req, None))).await;
    let reinjected: u64 = reports.iter().map(|r| r.as_ref().unwrap().reinjected).sum();
    assert_eq!(reinjected, 200);
    let sent = w.queue.sent();
    assert_eq!(sent.len(), 200);
    let mut ofs: Vec<String> = sent
        .iter()
        .map(|m| {
            m.attributes
                .iter()
                .find(|(n, _, _)| n == attrs::REPLAY_OF)
                .unwrap()
                .2
                .clone()
        })
        .collect();
    ofs.sort();
    ofs.dedup();
    assert_eq!(ofs.len(), 200, "no envelope re-injected twice");
}

#[tokio::test]
async fn a_decision_whose_audit_append_fails_gets_its_record_from_the_outbox() {
    // Regression: a replay settled an envelope and its audit append failed: the decision had no
    // record, ever. The record now goes into the outbox with the settlement.
    let w = world();
    add_xau(&w).await;
    let e = w.envelope("s1", &xau(1), ChronoDuration::hours(1)).await;
    let r = w.replayer(ReplayConfig::default());
    w.audit.fail_appends_of(Some(AuditKind::ReplayReinjected));
    let report = r.run(&manual(Selector::default(), false), None).await.unwrap();
    assert_eq!(outcomes(&report), ["REINJECTED"]);
    assert_eq!(
        w.status(&e.envelope_id).await,
        EnvelopeStatus::Replayed,
        "the decision took effect"
    );
    assert!(w.audit.records().iter().all(|a| a.kind != AuditKind::ReplayReinjected));
    assert_eq!(
        w.store.pending_records(10).await.unwrap().len(),
        1,
        "its record waits in the outbox"
    );

    w.audit.fail_appends_of(None);
    r.run(&sweep(), None).await.unwrap();
    let replay_id = &w.store.get(&e.envelope_id).await.unwrap().unwrap().replays[0].replay_id;
    let expected = format!("REPLAY_REINJECTED#{}#{replay_id}", e.envelope_id);
    assert!(
        w.audit.records().iter().any(|a| a.audit_id == expected),
        "published by the next replay"
    );
    assert!(w.store.pending_records(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_reinjected_copy_keeps_binary_attributes_and_its_fifo_group() {
    // Regression: re-injection dropped binary message attributes, and read the FIFO group from
    // the message attributes (where SQS never puts it) instead of the dead letter's context.
    let w = world();
    add_xau(&w).await;
    let mut letter = delivery("s1", &body(&xau(1)), 1);
    letter.attributes.insert("MessageGroupId".into(), "ACME-US".into());
    let mut signature = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
    signature.data_type = Some("Binary".into());
    let mut bytes = aws_lambda_events::encodings::Base64Data::default();
    *bytes = vec![0, 159, 146, 150];
    signature.binary_value = Some(bytes);
    letter.message_attributes.insert("signature".into(), signature);
    // Through the consumer, as on AWS: the dead letter carries the original's attributes and
    // group in its context.
    let consumer = Consumer {
        ledger: MemoryLedger::default(),
        queue: MemoryWorkQueue::default(),
        dlq: MemoryDeadLetterQueue::default(),
        reference: MemoryReferenceData::default(),
        audit: MemoryAuditLog::default(),
        clock: w.clock.clone(),
        config: ConsumerConfig::default(),
    };
    consumer.handle_message(&letter).await;
    let sent = recon_core::ports::dead_letter_message(&consumer.dlq.letters()[0]).unwrap();
    let e = envelope_from_dlq_message(&builders::delivered("d1", &sent), w.clock_now(), "test");
    w.store.create(&e).await.unwrap();

    let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    assert_eq!(outcomes(&report), ["REINJECTED"]);
    let copy = &w.queue.sent()[0];
    assert_eq!(copy.group_id.as_deref(), Some("ACME-US"));
    assert!(
        copy.attributes
            .iter()
            .any(|(n, t, v)| n == "signature" && t == "Binary" && v == "AJ+Slg=="),
        "{:?}",
        copy.attributes
    );
}

#[tokio::test]
async fn a_conflict_on_one_envelope_does_not_stop_the_sweep() {
    // Regression: a transaction conflict (the PENDING counter is in every status change) on one
    // envelope aborted the whole sweep, and the envelopes after it waited for the next one.
    let w = world();
    add_xau(&w).await;
    let first = w.envelope("s1", &xau(1), ChronoDuration::hours(3)).await;
    for n in 2..=4 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    w.store.conflict_on_claims_of(Some(&first.envelope_id));
    let report = w.replayer(ReplayConfig::default()).run(&sweep(), None).await.unwrap();
    assert_eq!(report.reinjected, 3, "{report:#?}");
    assert_eq!(report.skipped, 1);
    assert!(report.items.iter().any(|i| i.detail.contains("TransactionConflict")));
    assert_eq!(
        w.status(&first.envelope_id).await,
        EnvelopeStatus::Pending,
        "the next sweep takes it"
    );
}

#[tokio::test]
async fn a_sweep_reads_an_eventually_consistent_index() {
    // DynamoDB's status index is a global secondary index: a new envelope may be missing from a
    // query for a while, a settled one may still show PENDING. The sweep must only be late,
    // never wrong: a stale PENDING copy is selected, its claim refused, nothing sent twice.
    let w = world();
    add_xau(&w).await;
    w.store
        .set_index_lag(Some((Duration::from_secs(1), w.clock.clone() as Arc<dyn Clock>)));
    let e = w.envelope("s1", &xau(3), ChronoDuration::hours(1)).await;
    let r = w.replayer(ReplayConfig::default());
    let mut runs = Vec::new();
    for _ in 0..6 {
        runs.push(outcomes(&r.run(&sweep(), None).await.unwrap()));
        w.clock.advance(ChronoDuration::milliseconds(600));
    }
    assert_eq!(runs[0], Vec::<&str>::new(), "not in the index yet: {runs:?}");
    assert_eq!(
        runs.iter().flatten().filter(|o| **o == "REINJECTED").count(),
        1,
        "{runs:?}"
    );
    assert!(
        runs.iter().flatten().any(|o| *o == "SKIPPED"),
        "a stale copy was selected: {runs:?}"
    );
    assert_eq!(w.queue.sent().len(), 1);
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::Replayed);
}

/// Chunks of a page are marked while the next is sent, and a page marks its last before it ends:
/// when each page is reported every copy sent so far is marked REPLAYED with its record, and the
/// report keeps the envelopes' order.
#[tokio::test]
async fn every_chunk_sent_is_marked_before_its_page_is_reported() {
    let w = world();
    add_xau(&w).await;
    let mut ids = Vec::new();
    for n in 0..25u32 {
        let age = ChronoDuration::minutes(i64::from(60 - n));
        ids.push(w.envelope(&format!("p{n:02}"), &xau(n + 1), age).await.envelope_id);
    }
    let mut r = w.replayer(ReplayConfig {
        page_size: 10,
        ..ReplayConfig::default()
    });
    // Chunks of four: three in each page of ten (four, four, two).
    r.config.rate_per_sec = 4;
    let seen: Arc<std::sync::Mutex<Vec<(usize, u64)>>> = Arc::default();
    let (queue, log) = (w.queue.clone(), seen.clone());
    r.progress = Some(Arc::new(move |report: &recon_core::replay::ReplayReport| {
        log.lock().unwrap().push((queue.sent().len(), report.reinjected));
    }));
    let report = r.run(&manual(Selector::default(), false), None).await.unwrap();
    assert_eq!(report.reinjected, 25, "{report:#?}");
    let pages = seen.lock().unwrap().clone();
    assert_eq!(pages, [(10, 10), (20, 20), (25, 25)], "sent and marked at each page");
    let reported: Vec<&str> = report.items.iter().map(|i| i.envelope_id.as_str()).collect();
    assert_eq!(reported, ids.iter().map(String::as_str).collect::<Vec<_>>());
    for id in &ids {
        assert_eq!(w.status(id).await, EnvelopeStatus::Replayed, "{id}");
    }
    let records = w.audit.records();
    assert_eq!(
        records.iter().filter(|r| r.kind == AuditKind::ReplayReinjected).count(),
        25
    );
}
