//! Sweeping a large backlog with several replays at once, on the local stack: segments split it
//! so that each envelope is re-injected exactly once, and one rate limit holds across them
//! (each wall-clock second's re-injections counted in the envelope table).

use aws_sdk_dynamodb::types::AttributeValue;
use recon_aws::s3::S3Worm;
use recon_aws::wiring;
use recon_core::domain::{AuditKind, EnvelopeStatus, NewMessage};
use recon_core::evidence::{VerifyOptions, verify_trail};
use recon_core::ports::AuditOutbox;
use recon_core::replay::{ReplayRequest, Segment, Selector};
use recon_core::resources::keys;
use recon_harness::stack::TestStack;
use recon_testkit::builders::{body, tx};
use recon_testkit::memory::MemoryMetrics;
use std::collections::BTreeSet;

fn xau(n: u32) -> NewMessage {
    NewMessage {
        currency: "XAU".into(),
        amount: format!("{n}.0625"),
        ..tx(n)
    }
}

fn segment(index: u32, of: u32) -> ReplayRequest {
    ReplayRequest {
        selector: Selector {
            segment: Some(Segment { index, of }),
            ..Selector::default()
        },
        dry_run: false,
        reason: "XAU mapped".into(),
        triggered_by: "integration-test".into(),
        invocation: None,
        scheduled: false,
        quarantine: false,
    }
}

/// The re-injections counted per second in the envelope table.
async fn rate_windows(s: &TestStack) -> Vec<u64> {
    let out = s
        .clients
        .dynamodb
        .scan()
        .table_name(&s.stack.names.envelope_table)
        .filter_expression("begins_with(#pk, :rate)")
        .expression_attribute_names("#pk", keys::ENVELOPE_PK)
        .expression_attribute_values(":rate", AttributeValue::S(keys::ENVELOPE_RATE_PREFIX.into()))
        .send()
        .await
        .expect("scan the rate windows");
    out.items()
        .iter()
        .map(|i| {
            i.get("taken")
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok())
                .expect("a window counts its re-injections")
        })
        .collect()
}

/// `count` envelopes of a fixed cause swept by `replays` replays at once, one segment each, each
/// with the rate limit `limit`: each envelope is re-injected exactly once, and together they keep
/// to `limit` in every wall-clock second, as one replay would.
async fn sweep_at_once(test: &str, count: u32, replays: u32, limit: u32) {
    let s = TestStack::new(test).await;
    let bodies: Vec<String> = (0..count).map(|n| body(&xau(n))).collect();
    s.send(&bodies).await;
    s.pump(&s.consumer_with(s.ledger(), s.main_queue())).await;
    s.pump_dlq(&s.enricher(10_000)).await;
    assert_eq!(s.envelopes().await.len(), count as usize);
    s.map_currency("XAU", 4).await;

    let mut settings = s.replay_settings();
    settings.rate_per_sec = limit;
    // Sealed on the append path every few records: the records the envelope store links with
    // the marks count too.
    settings.seal.every_records = SEAL_EVERY;
    let replayers: Vec<_> = (0..replays)
        .map(|_| wiring::replayer(&s.clients, &settings, "integration-test", MemoryMetrics::default()))
        .collect();
    let requests: Vec<ReplayRequest> = (0..replays).map(|i| segment(i, replays)).collect();
    let reports = futures::future::join_all(replayers.iter().zip(&requests).map(|(r, q)| r.run(q, None))).await;
    let reports: Vec<_> = reports.into_iter().map(|r| r.expect("a replay")).collect();

    // Disjoint: no replay met an envelope another one holds, and together they did them all.
    assert!(reports.iter().all(|r| r.skipped == 0), "{reports:#?}");
    assert!(
        reports.iter().all(|r| r.selected > 0),
        "each segment holds some: {reports:#?}"
    );
    assert_eq!(reports.iter().map(|r| r.reinjected).sum::<u64>(), u64::from(count));
    let envelopes = s.envelopes().await;
    assert!(envelopes.iter().all(|e| e.status == EnvelopeStatus::Replayed));
    assert_eq!(s.main_queue().depth().await.unwrap().total(), u64::from(count));

    // One rate: every second's count is within the limit, and they add up.
    let windows = rate_windows(&s).await;
    assert_eq!(windows.iter().sum::<u64>(), u64::from(count), "{windows:?}");
    assert!(
        windows.iter().all(|&w| w <= u64::from(limit)),
        "a second took more than {limit}: {windows:?}"
    );

    // Each re-injection's record is in the trail once, linked with its mark (nothing waits in
    // the outbox); the chains verify, and each re-injection's record at a multiple of
    // `SEAL_EVERY` sealed the trail (the consumer's and enricher's here append without sealing).
    assert_eq!(s.envelope_store().pending_records(100).await.expect("outbox"), []);
    let trail = s.audit_log().scan_chained().await.expect("the trail");
    let reinjected: Vec<_> = trail
        .iter()
        .filter(|c| c.record.kind == AuditKind::ReplayReinjected)
        .collect();
    let ids: BTreeSet<&str> = reinjected.iter().map(|c| c.record.audit_id.as_str()).collect();
    assert_eq!(ids.len(), count as usize, "one record per re-injection");
    let worm = S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket());
    let report = verify_trail(&s.audit_log(), &worm, &VerifyOptions::default())
        .await
        .expect("verify");
    assert!(report.intact(), "{report:?}");
    for c in reinjected.iter().filter(|c| c.seq % SEAL_EVERY == 0) {
        let unsealed = report
            .unsealed
            .iter()
            .any(|t| t.chain == c.chain && t.from_seq <= c.seq);
        assert!(!unsealed, "{} {} not sealed: {report:?}", c.chain, c.seq);
    }
    s.cleanup().await;
}

/// Records between seals on the append path, in these sweeps.
const SEAL_EVERY: u64 = 5;

#[tokio::test]
async fn concurrent_replays_over_segments_reinject_each_envelope_once_within_one_shared_rate() {
    // Three replays, 12 per second each: together 12 per second as well, not 36.
    sweep_at_once("replay-segments", 36, 3, 12).await;
}

#[tokio::test]
async fn a_rate_below_a_batch_is_kept_too() {
    // 3 per second: chunks of three, never a batch of ten in one second. Sixteen envelopes, so
    // that both segments hold some but once in 30,000 runs (nine: once in 256).
    sweep_at_once("replay-slow", 16, 2, 3).await;
}

/// Marks whose records are linked into the trail while another writer keeps moving the chains'
/// heads: each settles (in the trail, or through the outbox when its group kept meeting moved
/// heads), and once the outbox is drained each record is in the trail exactly once, the chains
/// unbroken.
#[tokio::test]
async fn records_linked_while_another_writer_moves_the_heads_are_each_in_the_trail_once() {
    use futures::StreamExt;
    use recon_core::domain::{AuditRecord, ReplayRecord, StatusChange};
    use recon_core::ports::{AuditLog, Backlog, EnvelopeStore, Finish, Settled};
    let s = TestStack::new("linked-busy").await;
    let trail = s.audit_log();
    let store = s.envelope_store().with_trail(trail.clone());
    let now = chrono::Utc::now();
    let change = |status| StatusChange {
        status,
        at: now,
        actor: "test".into(),
        reason: "busy trail".into(),
        manual_journal: false,
    };
    let mut envelopes = Vec::new();
    for n in 0..150 {
        let e = recon_testkit::builders::envelope(&format!("busy{n:03}"));
        store.create(&e).await.expect("create");
        envelopes.push(e);
    }
    let claim = recon_testkit::builders::claim("ours", "busy trail", now, chrono::Duration::minutes(5));
    let asked: Vec<_> = envelopes.iter().collect();
    let claimed = store
        .claim_many(&asked, &claim, now, &change(EnvelopeStatus::Replaying))
        .await;
    assert!(claimed.iter().all(|c| c == &Ok(true)), "{claimed:?}");
    let replayed = change(EnvelopeStatus::Replayed);
    let provenance = ReplayRecord {
        replay_id: "ours".into(),
        triggered_by: "test".into(),
        reason: "busy trail".into(),
        at: now,
        outcome: EnvelopeStatus::Replayed,
        sqs_message_id: Some("copy".into()),
        copy_source_hash: None,
        copy_period: None,
        in_doubt_until: None,
    };
    let records: Vec<AuditRecord> = envelopes
        .iter()
        .map(|e| AuditRecord::system(AuditKind::ReplayReinjected, &e.envelope_id, now, "test", String::new()))
        .collect();
    let settlements: Vec<Finish<'_>> = envelopes
        .iter()
        .zip(&records)
        .map(|(e, r)| Finish {
            envelope: e,
            change: &replayed,
            record: &provenance,
            audit: Some(r),
        })
        .collect();
    // Another writer appends all along, four at once.
    let other = |n: u32| {
        let trail = &trail;
        async move {
            let r = AuditRecord::system(
                AuditKind::ReferenceChanged,
                &format!("other{n}"),
                now,
                "it",
                String::new(),
            );
            trail.append(&r).await.expect("the other writer's append")
        }
    };
    let (answers, _) = tokio::join!(
        store.finish_many("ours", &settlements),
        futures::stream::iter(0..200)
            .map(other)
            .buffer_unordered(4)
            .collect::<Vec<_>>()
    );
    let in_trail = answers.iter().filter(|a| matches!(a, Ok(Settled::InTrail(_)))).count();
    let in_outbox = answers.iter().filter(|a| a == &&Ok(Settled::InOutbox)).count();
    println!("linked with the marks: {in_trail}; through the outbox: {in_outbox}");
    assert_eq!(in_trail + in_outbox, 150, "{answers:?}");
    assert_eq!(store.pending_count().await.expect("pending"), 0);
    recon_core::envelopes::drain_outbox(&store, &trail, &MemoryMetrics::default())
        .await
        .expect("drain the outbox");
    assert_eq!(store.pending_records(10).await.expect("outbox"), []);
    let chained = trail.scan_chained().await.expect("the trail");
    for r in &records {
        let found = chained.iter().filter(|c| c.record.audit_id == r.audit_id).count();
        assert_eq!(found, 1, "record {} in the trail", r.audit_id);
    }
    let report = verify_trail(
        &trail,
        &S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket()),
        &VerifyOptions::default(),
    )
    .await
    .expect("verify");
    assert!(report.intact(), "{report:?}");
    s.cleanup().await;
}
