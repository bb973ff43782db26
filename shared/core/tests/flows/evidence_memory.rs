//! Audit evidence on the in-memory adapters, against someone who can write to both stores: the
//! audit table (records, heads, the trail pointer) and the bucket (new versions at any key, delete
//! markers; never the removal of a version Object Lock keeps). Each attack is named by verify; an
//! honest trail verifies.

use chrono::{Duration, Utc};
use recon_core::domain::audit::{AUDIT_CHAINS, GENESIS, link};
use recon_core::domain::seal::{AuditSeal, seal_key};
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::evidence::{
    Bundle, SealWindow, VerifyReport, export_bundle, read_worm, seal, verify_all, verify_bundle, verify_trail,
};
use recon_core::ports::AuditLog;
use recon_core::reconcile::reconcile;
use recon_testkit::memory::{MemoryAuditLog, MemoryWorm};

fn rec(n: u32) -> AuditRecord {
    AuditRecord {
        audit_id: format!("DUPLICATE_SUPPRESSED#s{n}"),
        kind: AuditKind::DuplicateSuppressed,
        at: Utc::now(),
        actor: "consumer".into(),
        sqs_message_id: format!("s{n}"),
        message_id: Some(format!("m{n}")),
        trace_id: None,
        source_hash: None,
        match_decision: None,
        failure_code: None,
        root_cause: None,
        attempt_count: 1,
        ledger_entity: None,
        currency: Some("USD".into()),
        amount: Some(format!("{n}.00")),
        detail: String::new(),
        replay_of: None,
        period: None,
    }
}

async fn trail(n: u32) -> (MemoryAuditLog, MemoryWorm) {
    let audit = MemoryAuditLog::default();
    for i in 0..n {
        audit.append(&rec(i)).await.unwrap();
    }
    (audit, MemoryWorm::default())
}

async fn verify(audit: &MemoryAuditLog, worm: &MemoryWorm) -> VerifyReport {
    verify_trail(audit, worm, &recon_core::evidence::VerifyOptions::default())
        .await
        .unwrap()
}

fn named(report: &VerifyReport, what: &str) -> bool {
    report.breaks.iter().any(|b| b.contains(what))
}

/// Rewrite chain `chain` consistently from its first record (one amount changed, every record
/// re-linked), and move its head to match: what someone with write access to the table can do.
fn rewrite_chain(audit: &MemoryAuditLog) -> String {
    let mut rewritten = String::new();
    audit.tamper(|records| {
        let chain = records[0].chain.clone();
        let mut prev = GENESIS.to_owned();
        for r in records.iter_mut().filter(|r| r.chain == chain) {
            if r.seq == 1 {
                r.record.amount = Some("999999.00".into());
            }
            *r = link(r.record.clone(), &chain, r.seq - 1, &prev);
            prev = r.hash.clone();
        }
        rewritten = chain;
    });
    rewritten
}

#[tokio::test]
async fn an_intact_trail_with_chained_seals_verifies() {
    let (audit, worm) = trail(40).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    for i in 40..50 {
        audit.append(&rec(i)).await.unwrap();
    }
    let (key, second) = seal(&audit, &worm, Utc::now()).await.unwrap();
    assert_eq!((second.seq, key), (2, seal_key(&second.trail, 2)));
    let first = AuditSeal::parse(&worm.get_version_bytes(&seal_key(&second.trail, 1))).unwrap();
    assert_eq!(
        second.prev,
        first.digest(),
        "each seal names the digest of the one before"
    );
    let report = verify(&audit, &worm).await;
    assert!(report.intact(), "{report:?}");
    assert_eq!((report.records, report.seals), (50, 2));
    assert!(report.unsealed.is_empty(), "{report:?}");
    assert!(report.chains.len() > 1, "spread over chains");
}

#[tokio::test]
async fn a_consistent_rewrite_with_the_head_moved_and_the_trail_id_replaced_is_named() {
    let (audit, worm) = trail(20).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    rewrite_chain(&audit);
    let report = verify(&audit, &worm).await;
    assert!(named(&report, "rewritten after sealing"), "{report:?}");

    // Point the table at a trail with no seals: the bucket still anchors the first one.
    audit.set_trail(Some("0123456789abcdef"));
    let report = verify(&audit, &worm).await;
    assert!(named(&report, "never anchored"), "{report:?}");
    assert!(
        named(&report, "was never retired: the trail was replaced"),
        "{report:?}"
    );
    // ... and anchoring the new trail with seals of its own does not help.
    seal(&audit, &worm, Utc::now()).await.unwrap();
    let report = verify(&audit, &worm).await;
    assert!(
        named(&report, "was never retired: the trail was replaced"),
        "{report:?}"
    );
    // Deleting the pointer altogether.
    audit.set_trail(None);
    let report = verify(&audit, &worm).await;
    assert!(named(&report, "the audit table names no trail"), "{report:?}");
}

#[tokio::test]
async fn a_newer_version_at_a_seal_key_with_forged_heads_is_named_and_the_first_is_kept() {
    let (audit, worm) = trail(20).await;
    let (key, genuine) = seal(&audit, &worm, Utc::now()).await.unwrap();
    rewrite_chain(&audit);
    // A forged seal with the rewritten heads and a consistent root, written over the key.
    let forged = AuditSeal::new(
        &genuine.trail,
        1,
        &genuine.prev,
        genuine.at,
        audit.heads().await.unwrap(),
    );
    assert!(forged.root_holds());
    worm.overwrite(&key, forged.canonical().as_bytes());
    let report = verify(&audit, &worm).await;
    assert!(named(&report, &format!("s3 key {key}: a newer version")), "{report:?}");
    assert!(
        named(&report, "rewritten after sealing"),
        "the first version is the one read: {report:?}"
    );
}

#[tokio::test]
async fn delete_markers_hiding_a_seal_or_a_worm_object_are_named() {
    let (audit, worm) = trail(12).await;
    let (key, _) = seal(&audit, &worm, Utc::now()).await.unwrap();
    seal(&audit, &worm, Utc::now()).await.unwrap();
    recon_core::ports::Worm::put(&worm, "quarantine/e1/abc.json", b"{}")
        .await
        .unwrap();
    worm.delete_marker(&key);
    worm.delete_marker("quarantine/e1/abc.json");
    let report = verify(&audit, &worm).await;
    assert!(named(&report, &format!("s3 key {key}: a delete marker")), "{report:?}");
    assert!(
        named(&report, "s3 key quarantine/e1/abc.json: a delete marker"),
        "{report:?}"
    );
    assert_eq!(report.seals, 2, "the hidden seal is still read by version: {report:?}");
}

#[tokio::test]
async fn a_gap_in_the_seal_chain_and_a_seal_whose_key_and_content_disagree_are_named() {
    let (audit, worm) = trail(12).await;
    let (_, first) = seal(&audit, &worm, Utc::now()).await.unwrap();
    // Seal 3 written directly (seal 2 never was), and seal 4's key holding seal 9's content.
    let third = AuditSeal::new(
        &first.trail,
        3,
        &first.digest(),
        Utc::now(),
        audit.heads().await.unwrap(),
    );
    recon_core::ports::Worm::put(&worm, &seal_key(&first.trail, 3), third.canonical().as_bytes())
        .await
        .unwrap();
    let ninth = AuditSeal::new(
        &first.trail,
        9,
        &third.digest(),
        Utc::now(),
        audit.heads().await.unwrap(),
    );
    recon_core::ports::Worm::put(&worm, &seal_key(&first.trail, 4), ninth.canonical().as_bytes())
        .await
        .unwrap();
    let report = verify(&audit, &worm).await;
    assert!(named(&report, "seal 2 is missing"), "{report:?}");
    assert!(named(&report, "key and content disagree"), "{report:?}");
}

#[tokio::test]
async fn the_unsealed_tail_is_reported_and_is_a_break_once_older_than_the_window() {
    let (audit, worm) = trail(16).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    let mut late = rec(100);
    late.at = Utc::now() - Duration::minutes(45);
    audit.append(&late).await.unwrap();
    let report = verify(&audit, &worm).await;
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.unsealed.len(), 1, "{report:?}");
    // Later, with no seal since: the seal schedule writes one every interval whatever happens,
    // so a newest seal older than the window while records wait means sealing has stopped.
    let window = SealWindow {
        now: Utc::now() + Duration::minutes(45),
        max_age: Duration::minutes(30),
    };
    let opts = recon_core::evidence::VerifyOptions {
        window: Some(window),
        ..Default::default()
    };
    let quiet = SealWindow {
        now: Utc::now(),
        ..window
    };
    let report = verify_trail(
        &audit,
        &worm,
        &recon_core::evidence::VerifyOptions {
            window: Some(quiet),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        report.intact(),
        "a record stamped late does not break a recent seal: {report:?}"
    );
    let report = verify_trail(&audit, &worm, &opts).await.unwrap();
    assert!(named(&report, "sealing has stopped"), "{report:?}");
    seal(&audit, &worm, Utc::now()).await.unwrap();
    let report = verify_trail(&audit, &worm, &opts).await.unwrap();
    assert!(
        report.intact() && report.unsealed.is_empty(),
        "nothing waits: {report:?}"
    );
}

#[tokio::test]
async fn a_retired_trail_is_listed_and_the_new_trail_verifies() {
    let (audit, worm) = trail(12).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    recon_core::evidence::retire_trail(&audit, &worm, Utc::now(), "it", "table rebuilt")
        .await
        .unwrap();
    // The rebuilt table: a new trail.
    let audit = MemoryAuditLog::default();
    for i in 0..5 {
        audit.append(&rec(i)).await.unwrap();
    }
    let (_, sealed) = seal(&audit, &worm, Utc::now()).await.unwrap();
    // A retirement is only a file in the bucket (anyone who can put one could retire the real
    // trail and start a forged one): a break until the auditor accepts it by name.
    let report = verify(&audit, &worm).await;
    assert!(named(&report, "not accepted"), "{report:?}");
    let old = recon_core::evidence::read_worm(&worm, None)
        .await
        .unwrap()
        .trails
        .into_keys()
        .find(|t| *t != sealed.trail)
        .unwrap();
    let opts = recon_core::evidence::VerifyOptions {
        accept_retired: vec![old],
        ..Default::default()
    };
    let report = verify_trail(&audit, &worm, &opts).await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.retired_trails.len(), 1, "{report:?}");
    assert!(report.retired_trails[0].contains("table rebuilt"), "{report:?}");
}

async fn bundle(n: u32) -> Bundle {
    let (audit, worm) = trail(n).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    let r = reconcile(Vec::new(), Vec::new(), None, 0);
    let b = export_bundle(&audit, &worm, Utc::now(), "2026-12", Vec::new(), r)
        .await
        .unwrap();
    // Through JSON, as an auditor receives it.
    serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap()
}

#[tokio::test]
async fn a_bundle_verifies_offline_and_one_without_seals_or_re_linked_does_not() {
    let genuine = bundle(30).await;
    assert_eq!(genuine.seals.len(), 2, "the export seals first");
    assert!(verify_bundle(&genuine).intact(), "{:?}", verify_bundle(&genuine));

    let mut unsealed = genuine.clone();
    unsealed.seals.clear();
    assert!(named(&verify_bundle(&unsealed), "carries no seal"));

    // Re-linked consistently, heads moved, seals kept.
    let mut relinked = genuine.clone();
    let chain = relinked.audit_records[0].chain.clone();
    let mut prev = GENESIS.to_owned();
    let mut records: Vec<_> = relinked
        .audit_records
        .iter()
        .filter(|r| r.chain == chain)
        .cloned()
        .collect();
    records.sort_by_key(|r| r.seq);
    for r in &mut records {
        if r.seq == 1 {
            r.record.amount = Some("0.01".into());
        }
        *r = link(r.record.clone(), &chain, r.seq - 1, &prev);
        prev = r.hash.clone();
    }
    relinked.audit_records.retain(|r| r.chain != chain);
    relinked.audit_records.extend(records);
    for h in relinked.heads.iter_mut().filter(|h| h.chain == chain) {
        h.hash = prev.clone();
    }
    let report = verify_bundle(&relinked);
    assert!(named(&report, "rewritten after sealing"), "{report:?}");
    // ... and with its seals removed as well.
    relinked.seals.clear();
    assert!(!verify_bundle(&relinked).intact());

    // A proof that does not lead to its seal's root.
    let mut bad_proof = genuine.clone();
    bad_proof.seals[0].proofs[0].path.pop();
    assert!(named(&verify_bundle(&bad_proof), "does not lead to the seal's root"));

    // A record no seal in the bundle covers.
    let mut extra = genuine.clone();
    let last = extra.audit_records.iter().max_by_key(|r| r.seq).unwrap().clone();
    let next = link(rec(999), &last.chain, last.seq, &last.hash);
    extra.audit_records.push(next.clone());
    for h in extra.heads.iter_mut().filter(|h| h.chain == next.chain) {
        (h.seq, h.hash) = (next.seq, next.hash.clone());
    }
    assert!(!verify_bundle(&extra).intact());
}

#[tokio::test]
async fn edited_hashes_with_multibyte_characters_are_reported_not_a_panic() {
    // Regression (found by the fuzzer): verification cut hashes to 12 bytes for its messages;
    // a hash edited to hold a multi-byte character there made `audit verify --bundle` panic.
    let (audit, worm) = trail(20).await;
    let (_, sealed) = seal(&audit, &worm, Utc::now()).await.unwrap();
    let mut heads = audit.heads().await.unwrap();
    heads[0].hash = format!("77c046d1ad8\u{202e}{}", &heads[0].hash[12..]);
    let mut records = Vec::new();
    for c in 0..AUDIT_CHAINS {
        records.extend(
            recon_core::ports::read_chain(&audit, &format!("c{c}"), 0)
                .await
                .unwrap(),
        );
    }
    let ev = read_worm(&worm, Some(&sealed.trail)).await.unwrap();
    let t = Some(sealed.trail.as_str());
    let report = std::panic::catch_unwind(|| {
        verify_all(
            &records,
            &heads,
            t,
            &ev,
            &recon_core::evidence::VerifyOptions::default(),
        )
    });
    assert!(!report.expect("no panic on an edited hash").intact());
    let mut edited = records.clone();
    let h = &sealed.heads[0];
    if let Some(r) = edited.iter_mut().find(|r| r.chain == h.chain && r.seq == h.seq) {
        r.hash = format!("ab\u{e9}{}", &r.hash[3..]);
    }
    let report = std::panic::catch_unwind(|| {
        verify_all(&edited, &heads, t, &ev, &recon_core::evidence::VerifyOptions::default())
    });
    assert!(!report.expect("no panic on an edited record").intact());
}

#[tokio::test]
async fn a_seal_forged_far_ahead_is_named_and_sealing_goes_on_from_the_genuine_run() {
    let (audit, worm) = trail(10).await;
    let (_, first) = seal(&audit, &worm, Utc::now()).await.unwrap();
    let far = AuditSeal::new(
        &first.trail,
        u64::MAX,
        &first.digest(),
        Utc::now(),
        audit.heads().await.unwrap(),
    );
    recon_core::ports::Worm::put(&worm, &seal_key(&first.trail, u64::MAX), far.canonical().as_bytes())
        .await
        .unwrap();
    let (key, next) = seal(&audit, &worm, Utc::now()).await.unwrap();
    assert_eq!((next.seq, next.prev.clone()), (2, first.digest()), "{key}");
    let report = verify(&audit, &worm).await;
    assert!(named(&report, "seal 3 is missing"), "{report:?}");
}

/// Records another writer linked (the envelope store, with the marks that settle their
/// envelopes) seal the trail as the wrapper's own appends do: at a multiple of `every_records`.
#[tokio::test]
async fn records_linked_by_another_writer_seal_on_the_append_path() {
    use recon_core::evidence::SealingAuditLog;
    let log = SealingAuditLog {
        log: MemoryAuditLog::default(),
        worm: MemoryWorm::default(),
        clock: std::sync::Arc::new(recon_core::ports::SystemClock),
        every_records: 5,
    };
    // Linked straight into the store underneath, not through the wrapper.
    for i in 0..12 {
        log.log.append(&rec(i)).await.unwrap();
    }
    log.linked_elsewhere(&[3, 4]).await;
    assert_eq!(verify(&log.log, &log.worm).await.seals, 0, "no multiple of 5: no seal");
    log.linked_elsewhere(&[4, 5]).await;
    let report = verify(&log.log, &log.worm).await;
    assert_eq!(report.seals, 1, "{report:?}");
    assert!(report.intact() && report.unsealed.is_empty(), "{report:?}");
}
