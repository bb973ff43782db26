//! Audit evidence on the local stack: one durable record per decision, tamper detection, the
//! completeness reconciliation, concurrent writers, and the offline evidence bundle.

use aws_sdk_dynamodb::types::AttributeValue;
use recon_aws::dynamodb::DynamoAuditLog;
use recon_aws::s3::S3Worm;
use recon_core::domain::audit::{AUDIT_CHAINS, ChainedRecord};
use recon_core::domain::{AuditKind, AuditRecord, PeriodRecord, PeriodStatus};
use recon_core::evidence::{Bundle, export_bundle, seal, verify_bundle, verify_from_seal, verify_trail};
use recon_core::ports::{AuditLog, ReferenceData};
use recon_core::reconcile::{manifest_entry, outcomes, reconcile};
use recon_harness::stack::TestStack;
use recon_testkit::builders::tx;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A mixed workload through every flow; returns the bodies sent (the producer's manifest).
async fn mixed_workload(s: &TestStack) -> Vec<String> {
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let xau = |n: u32| {
        let mut m = tx(n);
        m.currency = "XAU".into();
        m
    };
    let mut closed = xau(5);
    closed.value_date = "2026-10-05".into();
    let bodies = vec![
        tx(1).to_body().unwrap(),
        tx(1).to_body().unwrap(),  // duplicate
        xau(2).to_body().unwrap(), // poison, replayed later
        xau(3).to_body().unwrap(), // poison, committed directly later -> replay suppresses
        closed.to_body().unwrap(), // poison, quarantined by the temporal gate
        "garbage".to_string(),     // unrecoverable, quarantined at enrichment
    ];
    s.send(&bodies).await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(0)).await; // high-water 0: the first PENDING envelope overflows
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
    let resent = xau(3).to_body().unwrap();
    s.send(std::slice::from_ref(&resent)).await;
    s.pump(&consumer).await;
    let sweep = recon_testkit::builders::sweep_request();
    // Boxed: with the HTTP ledger's reservations, a debug build's sweep is deep enough that the
    // test thread's stack (2 MB) would not hold it beside this helper's frames.
    Box::pin(s.replayer().run(&sweep, None)).await.unwrap();
    s.pump(&consumer).await;
    let mut all = bodies;
    all.push(resent);
    all
}

fn audit(s: &TestStack) -> DynamoAuditLog {
    DynamoAuditLog::new(s.clients.dynamodb.clone(), &s.settings.audit_table)
}

fn worm(s: &TestStack) -> S3Worm {
    S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket())
}

#[tokio::test]
async fn every_decision_off_the_happy_path_leaves_one_audit_record_with_its_fields() {
    let s = TestStack::new("au-kinds").await;
    mixed_workload(&s).await;
    let records = audit(&s).scan().await.unwrap();
    let mut by_kind: BTreeMap<&str, Vec<&AuditRecord>> = BTreeMap::new();
    for r in &records {
        by_kind.entry(r.kind.as_str()).or_default().push(r);
    }
    let count = |k: &str| by_kind.get(k).map_or(0, Vec::len);
    assert_eq!(count("DUPLICATE_SUPPRESSED"), 1, "{by_kind:#?}");
    assert_eq!(count("DEAD_LETTERED"), 4);
    assert_eq!(count("ENRICHED"), 3);
    assert_eq!(count("QUARANTINED"), 2, "at enrichment and by the temporal gate");
    assert_eq!(count("REPLAY_REINJECTED"), 1);
    assert_eq!(count("REPLAY_SUPPRESSED"), 1);
    assert_eq!(count("DLQ_OVERFLOW"), 1);
    for r in &records {
        assert!(!r.actor.is_empty(), "{r:?}");
        if r.kind != AuditKind::DlqOverflow {
            assert!(r.source_hash.is_some(), "source_hash on {}", r.audit_id);
            assert!(r.attempt_count >= 1, "attempt count on {}", r.audit_id);
            assert!(r.failure_code.is_some(), "failure code on {}", r.audit_id);
        }
        if r.source_hash.as_deref().is_some_and(|h| !h.starts_with("raw:")) {
            assert!(
                r.trace_id.is_some() && r.match_decision.is_some(),
                "trace and match decision on {}",
                r.audit_id
            );
        }
    }
    // The happy path's evidence is the posting, with the same fields.
    for p in s.postings().await {
        assert!(!p.trace_id.is_empty() && !p.source_hash.is_empty() && p.attempt_count >= 1);
    }
    s.cleanup().await;
}

#[tokio::test]
async fn modifying_deleting_or_reordering_one_record_is_detected_and_named() {
    let s = TestStack::new("au-tamper").await;
    mixed_workload(&s).await;
    let log = audit(&s);
    // One writer appending on its own keeps to one chain: three records there whatever the
    // workload's writers left.
    for i in 0..3 {
        let pad = AuditRecord::system(
            AuditKind::ReferenceChanged,
            &format!("pad-{i}"),
            chrono::Utc::now(),
            "it",
            "padding".into(),
        );
        log.append(&pad).await.unwrap();
    }
    seal(&log, &worm(&s), chrono::Utc::now()).await.unwrap();
    assert!(
        verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
            .await
            .unwrap()
            .intact()
    );
    // The longest chain, to tamper in its middle.
    let mut chains: Vec<Vec<ChainedRecord>> = Vec::new();
    for i in 0..AUDIT_CHAINS {
        chains.push(recon_core::ports::read_chain(&log, &format!("c{i}"), 0).await.unwrap());
    }
    let chain = chains.into_iter().max_by_key(Vec::len).unwrap();
    assert!(chain.len() >= 3, "need three records in one chain, got {}", chain.len());
    let (a, b) = (&chain[0], &chain[1]);

    // Modify.
    let original = s.audit_item(&b.record.audit_id).await;
    let mut modified = original.clone();
    modified.insert("detail".into(), AttributeValue::S("nothing to see here".into()));
    s.put_audit_item(modified).await;
    let report = verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
        .await
        .unwrap();
    assert!(
        report
            .breaks
            .iter()
            .any(|x| x.contains(&b.record.audit_id) && x.contains("modified")),
        "{report:?}"
    );
    s.put_audit_item(original.clone()).await;
    assert!(
        verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
            .await
            .unwrap()
            .intact()
    );

    // Delete.
    s.clients
        .dynamodb
        .delete_item()
        .table_name(&s.settings.audit_table)
        .key("audit_id", AttributeValue::S(b.record.audit_id.clone()))
        .send()
        .await
        .unwrap();
    let report = verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
        .await
        .unwrap();
    assert!(
        report
            .breaks
            .iter()
            .any(|x| x.contains(&format!("record {}", b.seq)) && x.contains("missing")),
        "{report:?}"
    );
    s.put_audit_item(original.clone()).await;
    assert!(
        verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
            .await
            .unwrap()
            .intact()
    );

    // Edit the index key alone (not covered by the hash): named, not read where it now points.
    let mut moved = original.clone();
    moved.insert("seq_key".into(), AttributeValue::S(format!("{:012}", b.seq + 900)));
    s.put_audit_item(moved).await;
    let report = verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
        .await
        .unwrap();
    assert!(
        report
            .breaks
            .iter()
            .any(|x| x.contains(&format!("record {}", b.seq)) && x.contains("seq_key")),
        "{report:?}"
    );
    s.put_audit_item(original.clone()).await;

    // Reorder: swap the positions of the first two records.
    let (mut ia, mut ib) = (s.audit_item(&a.record.audit_id).await, original);
    for key in ["seq", "seq_key"] {
        let va = ia.remove(key).unwrap();
        let vb = ib.remove(key).unwrap();
        ia.insert(key.into(), vb);
        ib.insert(key.into(), va);
    }
    s.put_audit_item(ia).await;
    s.put_audit_item(ib).await;
    let report = verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
        .await
        .unwrap();
    assert!(!report.intact(), "a reordering must not verify");
    assert!(
        report.breaks.iter().any(|x| x.contains(&format!("chain {}", a.chain))),
        "{report:?}"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn a_record_edited_into_an_unreadable_value_is_named_not_a_failure_of_verify() {
    // Regression: an unknown failure code written into one record made verify stop with an
    // infrastructure error, so one edit disabled the verification of the whole trail.
    let s = TestStack::new("au-unread").await;
    mixed_workload(&s).await;
    let log = audit(&s);
    let victim = log
        .scan_chained()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.record.failure_code.is_some())
        .expect("the workload dead-letters something");
    let mut edited = s.audit_item(&victim.record.audit_id).await;
    edited.insert("failure_code".into(), AttributeValue::S("BANANA".into()));
    s.put_audit_item(edited).await;
    let report = verify_trail(&log, &worm(&s), &recon_core::evidence::VerifyOptions::default())
        .await
        .expect("verify answers");
    assert!(
        report
            .breaks
            .iter()
            .any(|x| x.contains(&victim.record.audit_id) && x.contains("cannot be read back")),
        "{report:?}"
    );
    // The other chains are still verified.
    assert_eq!(report.breaks.len(), 1, "{report:?}");
    s.cleanup().await;
}

async fn current(s: &TestStack, manifest: &[recon_core::reconcile::Entry]) -> recon_core::reconcile::Reconciliation {
    let postings = s.postings().await;
    let envelopes = s.envelopes().await;
    let records = audit(s).scan().await.unwrap();
    let dlq_empty = s.dlq().depth().await.unwrap().total() == 0;
    let (out, problems) = outcomes(&postings, &envelopes, &records, dlq_empty);
    reconcile(out, problems, Some(manifest), 0)
}

#[tokio::test]
async fn reconcile_holds_after_a_mixed_workload_and_names_a_deleted_posting_or_envelope() {
    let s = TestStack::new("au-recon").await;
    let sent = mixed_workload(&s).await;
    let manifest: Vec<_> = sent.iter().map(|b| manifest_entry(b)).collect();
    let r = current(&s, &manifest).await;
    assert!(r.holds, "{r:#?}");
    assert_eq!(r.sent.as_ref().unwrap().count, sent.len() as u64);

    // Delete one posting: its transaction is named as missing.
    let p = s.postings().await.into_iter().find(|p| p.message_id == "m-1").unwrap();
    s.delete_posting(&p).await;
    let r = current(&s, &manifest).await;
    assert!(!r.holds);
    assert_eq!(r.missing, ["msg:m-1"]);
    assert!(
        r.problems.iter().any(|x| x.contains(&p.source_hash)),
        "the duplicate points at the gone posting: {r:#?}"
    );
    s.restore_posting(&p).await;

    // Delete one envelope: named too.
    let e = s
        .envelopes()
        .await
        .into_iter()
        .find(|e| e.status == recon_core::domain::EnvelopeStatus::Quarantined)
        .unwrap();
    s.clients
        .dynamodb
        .delete_item()
        .table_name(&s.stack.names.envelope_table)
        .key("envelope_id", AttributeValue::S(e.envelope_id.clone()))
        .send()
        .await
        .unwrap();
    let r = current(&s, &manifest).await;
    assert!(!r.holds);
    assert_eq!(r.missing.len(), 1, "{r:#?}");
    assert!(r.problems.iter().any(|x| x.contains(&e.envelope_id)), "{r:#?}");
    s.cleanup().await;
}

fn writer_record(w: usize, i: usize) -> AuditRecord {
    AuditRecord {
        audit_id: AuditRecord::id_for(AuditKind::DuplicateSuppressed, &format!("w{w}-{i}")),
        kind: AuditKind::DuplicateSuppressed,
        at: chrono::Utc::now(),
        actor: format!("writer-{w}"),
        sqs_message_id: format!("w{w}-{i}"),
        message_id: None,
        trace_id: None,
        source_hash: Some(format!("{w:02x}{i:062x}")),
        match_decision: None,
        failure_code: None,
        root_cause: None,
        attempt_count: 1,
        ledger_entity: None,
        currency: None,
        amount: None,
        detail: String::new(),
        replay_of: None,
        period: None,
    }
}

/// Eight writers at once on one log: four append one record at a time, four in batches of ten
/// (one transaction each, as the replay publishes a batch's records), the
/// second batch re-sending one record of the first. Every record is linked once, every chain
/// verifies.
#[tokio::test]
async fn concurrent_writers_leave_chains_that_verify() {
    let s = TestStack::new("au-conc").await;
    let log = Arc::new(audit(&s));
    let mut tasks = Vec::new();
    for w in 0..8 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let records: Vec<AuditRecord> = (0..25).map(|i| writer_record(w, i)).collect();
            if w % 2 == 0 {
                for r in &records {
                    log.append(r).await.unwrap();
                    log.append(r).await.unwrap(); // a redelivery: still one record
                }
                return;
            }
            for batch in records.chunks(10) {
                let linked = log.append_many(batch).await.unwrap();
                assert!(
                    linked.iter().all(Option::is_some),
                    "a new batch links every record: {linked:?}"
                );
                let again = log.append_many(batch).await.unwrap();
                assert!(
                    again.iter().all(Option::is_none),
                    "a batch sent again links nothing: {again:?}"
                );
            }
            // Records already there among new ones: only the new ones are linked.
            let mut mixed = vec![records[3].clone(), records[24].clone()];
            mixed.extend((25..28).map(|i| writer_record(w, i)));
            let linked = log.append_many(&mixed).await.unwrap();
            assert_eq!(linked.iter().filter(|l| l.is_some()).count(), 3, "{linked:?}");
            assert!(linked[0].is_none() && linked[1].is_none(), "{linked:?}");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let report = verify_trail(log.as_ref(), &worm(&s), &recon_core::evidence::VerifyOptions::default())
        .await
        .unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.records, 8 * 25 + 4 * 3);
    assert_eq!(report.chains.values().sum::<u64>(), 8 * 25 + 4 * 3);
    s.cleanup().await;
}

#[tokio::test]
async fn an_exported_bundle_verifies_offline_and_a_tampered_one_does_not() {
    let s = TestStack::new("au-bundle").await;
    let sent = mixed_workload(&s).await;
    let log = audit(&s);
    let (out, problems) = outcomes(
        &s.postings().await,
        &s.envelopes().await,
        &log.scan().await.unwrap(),
        true,
    );
    let manifest: Vec<_> = sent.iter().map(|b| manifest_entry(b)).collect();
    let reconciliation = reconcile(out.clone(), problems, Some(&manifest), 0);
    let bundle = export_bundle(&log, &worm(&s), chrono::Utc::now(), "2026-11", out, reconciliation)
        .await
        .unwrap();
    // Through JSON, as an auditor receives it.
    let text = serde_json::to_string(&bundle).unwrap();
    let offline: Bundle = serde_json::from_str(&text).unwrap();
    assert!(verify_bundle(&offline).intact(), "{:?}", verify_bundle(&offline));
    // The standalone verifier (Python, standard library only) agrees, both ways.
    assert_eq!(
        standalone_verifier(&offline),
        0,
        "the exported bundle verifies without our code"
    );
    let mut tampered = offline.clone();
    tampered.audit_records[0].record.amount = Some("0.01".into());
    assert_eq!(standalone_verifier(&tampered), 1);
    let mut stripped = offline.clone();
    stripped.seals.clear();
    assert_eq!(standalone_verifier(&stripped), 1, "a bundle without seals");
    let report = verify_bundle(&tampered);
    assert!(!report.intact());
    assert!(
        report.breaks[0].contains(&tampered.audit_records[0].record.audit_id),
        "{report:?}"
    );
    let mut edited = offline;
    if let Some(t) = edited.reconciliation.by_state.values_mut().next() {
        t.count += 1;
    }
    assert!(!verify_bundle(&edited).intact());
    s.cleanup().await;
}

#[tokio::test]
async fn a_continuation_from_a_seal_reads_only_what_came_after_it_and_names_a_rewrite_there() {
    let s = TestStack::new("au-cont").await;
    let (log, bucket) = (audit(&s), worm(&s));
    let pad = |i: u32| {
        AuditRecord::system(
            AuditKind::ReferenceChanged,
            &format!("cont-{i}"),
            chrono::Utc::now(),
            "it",
            format!("record {i}"),
        )
    };
    for i in 0..24 {
        log.append(&pad(i)).await.unwrap();
    }
    seal(&log, &bucket, chrono::Utc::now()).await.unwrap();
    for i in 24..40 {
        log.append(&pad(i)).await.unwrap();
    }
    let (_, second) = seal(&log, &bucket, chrono::Utc::now()).await.unwrap();
    for i in 40..52 {
        log.append(&pad(i)).await.unwrap();
    }
    let opts = recon_core::evidence::VerifyOptions::default();

    // The DynamoDB Query and the S3 listing read only from where they are asked: the chain seal 2
    // fixed furthest along among those that moved on since.
    let heads = log.heads().await.unwrap();
    let head_of = |chain: &str| heads.iter().find(|x| x.chain == chain).map_or(0, |x| x.seq);
    let h = second
        .heads
        .iter()
        .filter(|h| h.seq > 1 && head_of(&h.chain) > h.seq)
        .max_by_key(|h| h.seq)
        .expect("12 records after seal 2 move some chain sealed past its first record")
        .clone();
    let tail = recon_core::ports::read_chain(&log, &h.chain, h.seq).await.unwrap();
    let head = heads.iter().find(|x| x.chain == h.chain).unwrap();
    assert_eq!(
        tail.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (h.seq..=head.seq).collect::<Vec<_>>()
    );
    // The same in pages of 2 (a Query with a Limit, each from the key the one before ended on);
    // from 0, the whole chain.
    for (from, expected) in [
        (h.seq, tail.clone()),
        (0, recon_core::ports::read_chain(&log, &h.chain, 0).await.unwrap()),
    ] {
        let (mut paged, mut cursor) = (Vec::new(), None);
        loop {
            let (page, next) = log.chain_page(&h.chain, from, cursor, 2).await.unwrap();
            assert!(page.len() <= 2, "{}", page.len());
            paged.extend(page);
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(paged, expected, "from {from}");
    }
    let after_first = recon_core::ports::Worm::versions_after(
        &bucket,
        &format!("{}{}/", recon_core::domain::seal::SEAL_PREFIX, second.trail),
        &recon_core::domain::seal::seal_key(&second.trail, 1),
    )
    .await
    .unwrap();
    assert_eq!(
        after_first.iter().map(|v| v.key.clone()).collect::<Vec<_>>(),
        [recon_core::domain::seal::seal_key(&second.trail, 2)]
    );

    // Intact: seal 2, and each chain from the record seal 2 fixed.
    let report = verify_from_seal(&log, &bucket, 2, &opts).await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!((report.seals, report.latest_seal_seq), (1, Some(2)), "{report:?}");
    let expected: u64 = heads
        .iter()
        .map(|x| {
            let first = second.heads.iter().find(|y| y.chain == x.chain).map_or(1, |y| y.seq);
            x.seq + 1 - first
        })
        .sum();
    assert_eq!(report.records, expected, "{report:?}");
    assert!(report.records < 52, "{report:?}");
    assert!(!report.unsealed.is_empty(), "the records after seal 2: {report:?}");

    // A record after seal 2 edited: named.
    let victim = recon_core::ports::read_chain(&log, &h.chain, h.seq + 1)
        .await
        .unwrap()
        .into_iter()
        .next()
        .expect("a record after seal 2 in the busiest chain");
    let mut edited = s.audit_item(&victim.record.audit_id).await;
    edited.insert("detail".into(), AttributeValue::S("nothing to see here".into()));
    s.put_audit_item(edited).await;
    let report = verify_from_seal(&log, &bucket, 2, &opts).await.unwrap();
    assert!(
        report
            .breaks
            .iter()
            .any(|x| x.contains(&victim.record.audit_id) && x.contains("modified")),
        "{report:?}"
    );
    // A seal the trail does not have: the auditor's input is wrong, not the trail.
    assert!(matches!(
        verify_from_seal(&log, &bucket, 9, &opts).await,
        Err(recon_core::evidence::FromSealError::NotASeal(_))
    ));
    s.cleanup().await;
}

/// Exit code of `python3 tools/verify_bundle.py` on `bundle`.
fn standalone_verifier(bundle: &Bundle) -> i32 {
    let path = std::env::temp_dir().join(format!("bundle-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_vec(bundle).unwrap()).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/verify_bundle.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&path)
        .output()
        .expect("python3 runs the standalone verifier");
    let _ = std::fs::remove_file(&path);
    println!("{}", String::from_utf8_lossy(&out.stdout));
    out.status.code().unwrap_or(-1)
}
