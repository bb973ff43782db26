//! The audit trail against someone who can write to the stores, on the local stack: the table
//! (records, heads, the trail pointer) through DynamoDB's own API, and the Object Lock bucket
//! through S3's (a plain PUT over a key, a DELETE without a version id). Each attack is named by
//! verify; the honest trail verifies; the first versions are still read.

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::primitives::ByteStream;
use recon_core::domain::audit::{ChainedRecord, GENESIS, link};
use recon_core::domain::seal::{AuditSeal, RECORDS_PREFIX, seal_key};
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::evidence::{VerifyReport, seal, verify_bucket, verify_trail};
use recon_core::ports::AuditLog;
use recon_core::resources::keys;
use recon_harness::stack::TestStack;
use std::collections::HashMap;

type Item = HashMap<String, AttributeValue>;

fn s3(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

async fn trail(s: &TestStack, n: u32) {
    let log = s.audit_log();
    for i in 0..n {
        let r = AuditRecord::system(
            AuditKind::ReferenceChanged,
            &format!("anchor-{i}"),
            chrono::Utc::now(),
            "it",
            format!("change {i}"),
        );
        log.append(&r).await.unwrap();
    }
}

fn worm(s: &TestStack) -> recon_aws::s3::S3Worm {
    recon_aws::s3::S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket())
}

async fn verify(s: &TestStack) -> VerifyReport {
    verify_trail(
        &s.audit_log(),
        &worm(s),
        &recon_core::evidence::VerifyOptions::default(),
    )
    .await
    .unwrap()
}

async fn seal_now(s: &TestStack) -> (String, AuditSeal) {
    seal(&s.audit_log(), &worm(s), chrono::Utc::now()).await.unwrap()
}

fn named(r: &VerifyReport, what: &str) -> bool {
    r.breaks.iter().any(|b| b.contains(what))
}

/// Rewrite the longest chain consistently through DynamoDB's API (one amount changed, every
/// record re-linked) and move its head to match.
async fn rewrite_longest_chain(s: &TestStack) -> String {
    let log = s.audit_log();
    let mut chains: Vec<Vec<ChainedRecord>> = Vec::new();
    for i in 0..recon_core::domain::audit::AUDIT_CHAINS {
        chains.push(recon_core::ports::read_chain(&log, &format!("c{i}"), 0).await.unwrap());
    }
    let chain = chains.into_iter().max_by_key(Vec::len).unwrap();
    let name = chain[0].chain.clone();
    let mut prev = GENESIS.to_owned();
    for r in &chain {
        let mut record = r.record.clone();
        if r.seq == 1 {
            record.detail = "rewritten".into();
        }
        let relinked = link(record, &name, r.seq - 1, &prev);
        let mut item = s.audit_item(&r.record.audit_id).await;
        item.insert("detail".into(), s3(&relinked.record.detail));
        item.insert("prev_hash".into(), s3(&relinked.prev_hash));
        item.insert("hash".into(), s3(&relinked.hash));
        s.put_audit_item(item).await;
        prev = relinked.hash;
    }
    let mut head = s.audit_item(&format!("{}{name}", keys::AUDIT_HEAD_PREFIX)).await;
    head.insert("hash".into(), s3(&prev));
    s.put_audit_item(head).await;
    name
}

#[tokio::test]
async fn a_consistent_rewrite_with_its_head_moved_and_the_trail_id_replaced_is_named() {
    let s = TestStack::new("an-rewrite").await;
    trail(&s, 24).await;
    seal_now(&s).await;
    assert!(verify(&s).await.intact(), "{:?}", verify(&s).await);

    let chain = rewrite_longest_chain(&s).await;
    let report = verify(&s).await;
    assert!(
        named(&report, &format!("chain {chain}")) && named(&report, "rewritten after sealing"),
        "{report:?}"
    );

    // Replace the trail-id item, so that a reader of the table looks for another trail's seals.
    let mut pointer = s.audit_item("#trail#id").await;
    pointer.insert("trail".into(), s3("00000000000000aa"));
    s.put_audit_item(pointer).await;
    let report = verify(&s).await;
    assert!(named(&report, "never anchored"), "{report:?}");
    assert!(
        named(&report, "was never retired: the trail was replaced"),
        "{report:?}"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn a_noted_seal_is_a_hint_never_lowered_and_kept_per_trail() {
    let s = TestStack::new("an-noted").await;
    let log = s.audit_log();
    assert_eq!(log.sealed_up_to("00000000000000a1").await.unwrap(), None);
    log.note_seal("00000000000000a1", 5).await.unwrap();
    log.note_seal("00000000000000a1", 3).await.unwrap();
    assert_eq!(log.sealed_up_to("00000000000000a1").await.unwrap(), Some(5), "lowered");
    log.note_seal("00000000000000a1", 7).await.unwrap();
    assert_eq!(log.sealed_up_to("00000000000000a1").await.unwrap(), Some(7));
    assert_eq!(log.sealed_up_to("00000000000000b2").await.unwrap(), None);
    // A sealer notes what it wrote; the note is no audit record.
    trail(&s, 4).await;
    let (_, written) = seal_now(&s).await;
    assert_eq!(log.sealed_up_to(&written.trail).await.unwrap(), Some(written.seq));
    assert_eq!(log.scan().await.unwrap().len(), 4);
    s.cleanup().await;
}

#[tokio::test]
async fn the_bucket_alone_verifies_the_trail_when_the_table_is_rewritten() {
    let s = TestStack::new("an-alone").await;
    trail(&s, 24).await;
    seal_now(&s).await;
    trail(&s, 9).await;
    seal_now(&s).await;
    let opts = recon_core::evidence::VerifyOptions::default();
    let alone = verify_bucket(&worm(&s), None, &opts).await.unwrap();
    assert!(alone.intact() && alone.from_bucket, "{alone:?}");
    assert_eq!((alone.records, alone.seals), (verify(&s).await.records, 2));

    // The table rewritten (or lost): the bucket's copy is what the seals vouch for.
    rewrite_longest_chain(&s).await;
    assert!(!verify(&s).await.intact());
    let after = verify_bucket(&worm(&s), None, &opts).await.unwrap();
    assert_eq!(after, alone, "the bucket's trail does not depend on the table");

    // A plain PUT over a part: the first version is read, the newer one named.
    let part = s
        .clients
        .s3
        .list_objects_v2()
        .bucket(&s.stack.names.quarantine_bucket)
        .prefix(RECORDS_PREFIX)
        .send()
        .await
        .unwrap()
        .contents()
        .first()
        .and_then(|o| o.key().map(str::to_owned))
        .expect("the seals wrote their records");
    s.clients
        .s3
        .put_object()
        .bucket(&s.stack.names.quarantine_bucket)
        .key(&part)
        .body(ByteStream::from_static(b"{}\n"))
        .send()
        .await
        .expect("Object Lock does not refuse a newer version");
    let overwritten = verify_bucket(&worm(&s), None, &opts).await.unwrap();
    assert_eq!(overwritten.records, alone.records, "the first version is read");
    assert!(
        named(&overwritten, &format!("s3 key {part}: a newer version")),
        "{overwritten:?}"
    );
    s.cleanup().await;
}

#[tokio::test]
async fn a_newer_version_at_a_seal_key_and_delete_markers_are_named_and_the_first_versions_count() {
    let s = TestStack::new("an-bucket").await;
    trail(&s, 16).await;
    let (first_key, genuine) = seal_now(&s).await;
    trail(&s, 20).await;
    let (second_key, _) = seal_now(&s).await;
    assert!(verify(&s).await.intact());

    // Rewrite a chain, then write a seal with the rewritten heads (a consistent Merkle root)
    // over the first seal's key: Object Lock allows a newer version.
    rewrite_longest_chain(&s).await;
    let forged = AuditSeal::new(
        &genuine.trail,
        1,
        &genuine.prev,
        genuine.at,
        s.audit_log().heads().await.unwrap(),
    );
    let bucket = &s.stack.names.quarantine_bucket;
    s.clients
        .s3
        .put_object()
        .bucket(bucket)
        .key(&first_key)
        .body(ByteStream::from(forged.canonical().into_bytes()))
        .send()
        .await
        .expect("Object Lock does not refuse a newer version");
    // A plain GET now returns the forgery...
    let plain = s
        .clients
        .s3
        .get_object()
        .bucket(bucket)
        .key(&first_key)
        .send()
        .await
        .unwrap();
    let body = plain.body.collect().await.unwrap().into_bytes();
    assert_eq!(AuditSeal::parse(&body).unwrap(), forged);
    // ... and a DELETE without a version id hides the second seal from LIST and GET.
    s.clients
        .s3
        .delete_object()
        .bucket(bucket)
        .key(&second_key)
        .send()
        .await
        .expect("a delete marker is not refused");
    let listed = s
        .clients
        .s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(&second_key)
        .send()
        .await
        .unwrap();
    assert!(listed.contents().is_empty(), "the delete marker hides it");
    // ... and a WORM copy of a quarantined payload, the same way.
    let payload = "quarantine/env-1/0123.json";
    recon_core::ports::Worm::put(&worm(&s), payload, b"{\"quarantined\":true}")
        .await
        .unwrap();
    s.clients
        .s3
        .delete_object()
        .bucket(bucket)
        .key(payload)
        .send()
        .await
        .unwrap();

    let report = verify(&s).await;
    assert!(
        named(&report, &format!("s3 key {first_key}: a newer version")),
        "{report:?}"
    );
    assert!(
        named(&report, &format!("s3 key {second_key}: a delete marker")),
        "{report:?}"
    );
    assert!(
        named(&report, &format!("s3 key {payload}: a delete marker")),
        "{report:?}"
    );
    assert!(
        named(&report, "rewritten after sealing"),
        "the first version of the seal is the one read: {report:?}"
    );
    assert_eq!(report.seals, 2, "the hidden seal is still read: {report:?}");
    assert_eq!(second_key, seal_key(&genuine.trail, 2));
    s.cleanup().await;
}

#[tokio::test]
async fn the_append_path_bounds_the_unsealed_tail_and_an_old_tail_is_a_break() {
    let s = TestStack::new("an-window").await;
    let every = 5;
    let policy = recon_core::config::SealPolicy {
        every_records: every,
        ..Default::default()
    };
    let log = recon_aws::wiring::audit_log(&s.clients, &s.settings.audit_table, &s.stack.names.bucket(), &policy);
    for i in 0..60 {
        let r = AuditRecord::system(
            AuditKind::ReferenceChanged,
            &format!("window-{i}"),
            chrono::Utc::now(),
            "it",
            String::new(),
        );
        log.append(&r).await.unwrap();
    }
    let report = verify(&s).await;
    assert!(report.intact(), "{report:?}");
    assert!(report.seals >= 2, "the append path sealed: {report:?}");
    // No chain has `every` records after the newest seal: each chain seals at its own multiples.
    for t in &report.unsealed {
        assert!(t.to_seq - t.from_seq + 1 < every, "{t:?} in {report:?}");
    }

    // Hours later, with no seal since (the seal schedule has stopped) and a record waiting.
    let old = AuditRecord::system(
        AuditKind::ReferenceChanged,
        "late",
        chrono::Utc::now(),
        "it",
        String::new(),
    );
    s.audit_log().append(&old).await.unwrap();
    let opts = recon_core::evidence::VerifyOptions {
        window: Some(recon_core::evidence::SealWindow {
            now: chrono::Utc::now() + chrono::Duration::hours(2),
            max_age: policy.max_unsealed(),
        }),
        ..Default::default()
    };
    let report = verify_trail(&s.audit_log(), &worm(&s), &opts).await.unwrap();
    assert!(named(&report, "sealing has stopped"), "{report:?}");
    seal_now(&s).await;
    let report = verify_trail(&s.audit_log(), &worm(&s), &opts).await.unwrap();
    assert!(report.intact() && report.unsealed.is_empty(), "{report:?}");
    s.cleanup().await;
}

#[tokio::test]
async fn a_function_starting_with_changed_settings_writes_config_changed_with_the_difference() {
    let s = TestStack::new("an-config").await;
    let record = |settings: recon_core::config::ConsumerSettings| {
        let s = &s;
        async move {
            recon_aws::wiring::record_configuration(&s.clients, &s.settings.audit_table, "consumer", &settings.audited)
                .await
                .unwrap()
        }
    };
    let first = record(s.settings.clone()).await.expect("the first start is recorded");
    assert!(
        record(s.settings.clone()).await.is_none(),
        "a restart with the same settings is not"
    );
    // A restart whose environment sets another retry budget.
    let audited = &s.settings.audited;
    let changed = recon_core::config::ConsumerSettings::from_lookup(|k| {
        let set = if k == "DLQ_MAX_ATTEMPTS" { Some("9") } else { None };
        set.map(str::to_owned).or_else(|| audited.get(k).cloned())
    })
    .unwrap();
    let id = record(changed).await.expect("a change is recorded");
    assert_ne!(id, first);
    let records = s.audit_log().scan().await.unwrap();
    let r = records.iter().find(|r| r.audit_id == id).unwrap();
    assert_eq!(r.kind, AuditKind::ConfigChanged);
    let before = s.settings.retry.max_attempts;
    assert!(
        r.detail.contains(&format!("DLQ_MAX_ATTEMPTS: {before} -> 9")),
        "{}",
        r.detail
    );
    seal_now(&s).await;
    assert!(verify(&s).await.intact());
    s.cleanup().await;
}

#[tokio::test]
async fn a_direct_write_to_the_reference_table_is_recorded_from_its_stream() {
    let s = TestStack::new("an-refstream").await;
    let reference = &s.stack.names.reference_table;
    let put = |pk: &str, sk: &str, attr: (&str, AttributeValue)| {
        let mut item: Item = HashMap::new();
        item.insert(keys::REFERENCE_PK.into(), s3(pk));
        item.insert(keys::REFERENCE_SK.into(), s3(sk));
        item.insert(attr.0.into(), attr.1);
        s.clients
            .dynamodb
            .put_item()
            .table_name(reference)
            .set_item(Some(item))
            .send()
    };
    // Someone with write access to the table, not dlqctl: close a period, open it again, map a
    // currency. Nothing else records these.
    put("PERIOD#ACME-US", "2026-10", ("status", s3("CLOSED")))
        .await
        .unwrap();
    put("PERIOD#ACME-US", "2026-10", ("status", s3("OPEN"))).await.unwrap();
    put("CURRENCY", "XAU", ("minor_units", AttributeValue::N("4".into())))
        .await
        .unwrap();

    let settings = recon_core::config::ReferenceAuditSettings {
        reference_table: reference.clone(),
        audit_table: s.settings.audit_table.clone(),
        quarantine_bucket: s.stack.names.bucket(),
        seal: Default::default(),
        audited: Default::default(),
    };
    let auditor = recon_aws::wiring::reference_auditor(&s.clients, &settings);
    let delivered = recon_harness::streams::pump_stream(&s.clients, reference, &auditor)
        .await
        .unwrap();
    assert_eq!(delivered, 3);
    let changes = || async {
        let mut d: Vec<String> = s
            .audit_log()
            .scan()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.kind == AuditKind::ReferenceChanged)
            .map(|r| r.detail)
            .collect();
        d.sort();
        d
    };
    let recorded = changes().await;
    assert_eq!(recorded.len(), 3, "{recorded:#?}");
    for expected in [
        "period ACME-US 2026-10: (none) -> CLOSED",
        "period ACME-US 2026-10: CLOSED -> OPEN",
        "currency XAU: (none) -> 4",
    ] {
        assert!(
            recorded.iter().any(|d| d.contains(expected)),
            "{expected}: {recorded:#?}"
        );
    }
    // Delivered again (as Lambda may): still one record per change.
    recon_harness::streams::pump_stream(&s.clients, reference, &auditor)
        .await
        .unwrap();
    assert_eq!(changes().await.len(), 3);
    seal_now(&s).await;
    assert!(verify(&s).await.intact());
    s.cleanup().await;
}

#[tokio::test]
async fn setup_never_lowers_the_buckets_retention() {
    // Regression: `setup` put the local default (one day) over any existing configuration, so
    // the local setup run against AWS could cut a deployed bucket's seven years to one day.
    let s = TestStack::new("an-retain").await;
    let longer = recon_harness::provision::StackSettings {
        worm_retention_days: 30,
        ..Default::default()
    };
    recon_harness::provision::ensure_stack(&s.clients, &s.stack.names, &longer)
        .await
        .unwrap();
    let bucket = s.stack.names.bucket();
    let retention = || recon_harness::provision::worm_retention(&s.clients, &bucket);
    let compliance = aws_sdk_s3::types::ObjectLockRetentionMode::Compliance;
    assert_eq!(retention().await.unwrap(), Some((compliance.clone(), 30)));
    // Setup again with the local default of one day: the 30 days stay.
    recon_harness::provision::ensure_stack(&s.clients, &s.stack.names, &Default::default())
        .await
        .unwrap();
    assert_eq!(retention().await.unwrap(), Some((compliance, 30)));
    s.cleanup().await;
}
