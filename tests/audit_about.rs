//! The records about one transaction (`dlqctl audit show`): those a reconciliation reads (a
//! duplicate's, a dead letter's, its enrichment, a quarantine) are found by the transaction's
//! period and in no `by_source_hash` entry; the others (a replay's) by its hash alone; a record
//! written before that rule, in both, once.

use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::resources::keys;
use recon_harness::stack::TestStack;
use recon_testkit::builders::tx;

fn kinds(records: &[recon_core::domain::audit::ChainedRecord]) -> Vec<AuditKind> {
    let mut k: Vec<AuditKind> = records.iter().map(|r| r.record.kind).collect();
    k.sort_by_key(|k| k.as_str());
    k
}

#[tokio::test]
async fn a_transactions_records_are_found_by_its_hash_and_period_and_each_once() {
    let s = TestStack::new("au-about").await;
    let mut xau = tx(2);
    xau.currency = "XAU".into();
    let bodies = [
        tx(1).to_body().unwrap(),
        tx(1).to_body().unwrap(),
        xau.to_body().unwrap(),
        "garbage".to_owned(),
    ];
    s.remediated(&bodies, 100).await;

    let log = s.audit_log();
    let all = log.scan().await.unwrap();
    // The first of `kind` about a transaction (not the garbage's).
    let of = |kind: AuditKind| -> &AuditRecord {
        all.iter()
            .find(|r| r.kind == kind && r.period.is_some())
            .expect("the record")
    };
    let dead = of(AuditKind::DeadLettered);
    let (hash, period) = (dead.source_hash.clone().unwrap(), dead.period.clone().unwrap());

    // By its period: every record about it, each once, in time order.
    let found = log.about(&hash, [period.as_str()]).await.unwrap();
    let expected: Vec<&AuditRecord> = all.iter().filter(|r| r.source_hash.as_deref() == Some(&hash)).collect();
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    assert_eq!(
        kinds(&found),
        vec![
            AuditKind::DeadLettered,
            AuditKind::Enriched,
            AuditKind::ReplayReinjected
        ]
    );
    assert!(found.windows(2).all(|w| w[0].record.at <= w[1].record.at));
    // By its hash alone: only the replay's; the dead letter's and its enrichment are not indexed
    // by hash (an append of theirs writes no such entry).
    let by_hash = log.about(&hash, []).await.unwrap();
    assert_eq!(kinds(&by_hash), vec![AuditKind::ReplayReinjected], "{by_hash:#?}");
    // Another period's shard holds nothing of it.
    let elsewhere = log.about(&hash, ["2019-01"]).await.unwrap();
    assert_eq!(kinds(&elsewhere), vec![AuditKind::ReplayReinjected]);

    // The duplicate's, by its period only.
    let dup = of(AuditKind::DuplicateSuppressed);
    let dup_hash = dup.source_hash.clone().unwrap();
    let dup_period = dup.period.clone().unwrap();
    assert!(log.about(&dup_hash, []).await.unwrap().is_empty());
    assert_eq!(
        kinds(&log.about(&dup_hash, [dup_period.as_str()]).await.unwrap()),
        vec![AuditKind::DuplicateSuppressed]
    );

    // A body of no transaction: its dead letter's records are of no period, found without one.
    let raw = all
        .iter()
        .find(|r| r.source_hash.as_deref().is_some_and(|h| h.starts_with("raw:")))
        .unwrap_or_else(|| panic!("the garbage's records: {all:#?}"));
    assert_eq!(raw.period, None);
    let raw_hash = raw.source_hash.clone().unwrap();
    let of_raw = log.about(&raw_hash, []).await.unwrap();
    assert!(
        of_raw.iter().any(|r| r.record.kind == AuditKind::DeadLettered),
        "{of_raw:#?}"
    );
    assert_eq!(
        of_raw.len(),
        all.iter()
            .filter(|r| r.source_hash.as_deref() == Some(&raw_hash))
            .count()
    );

    // `dlqctl audit show`, as an operator runs it: the duplicate's transaction has no envelope
    // and no record indexed by hash; its posting (searched for) names the period of its record.
    let prefix = s.stack.names.prefix.clone();
    let show = |hash: &str| -> Vec<String> {
        let out = crate::deploy::dlqctl(&["--prefix", &prefix, "--json", "audit", "show", "--source-hash", hash]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
        v["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["event"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let starts = |events: &[String], what: &str| events.iter().filter(|e| e.starts_with(what)).count();
    let events = show(&dup_hash);
    assert_eq!(
        (starts(&events, "COMMITTED"), starts(&events, "DUPLICATE_SUPPRESSED")),
        (1, 1),
        "{events:#?}"
    );
    // The dead letter's, through its verified envelope's period: every record, the posting of
    // its replay, the envelope's history.
    let events = show(&hash);
    for what in [
        "DEAD_LETTERED",
        "ENRICHED",
        "REPLAY_REINJECTED",
        "COMMITTED",
        "ENVELOPE",
    ] {
        assert!(starts(&events, what) >= 1, "{what} in {events:#?}");
    }

    // A record from before the rule has its `by_source_hash` entry too: found by hash, and once
    // when both indexes hold it.
    s.clients
        .dynamodb
        .update_item()
        .table_name(&s.settings.audit_table)
        .key(keys::AUDIT_PK, AttributeValue::S(dup.audit_id.clone()))
        .update_expression("SET #at = :at")
        .expression_attribute_names("#at", keys::AUDIT_AT_KEY)
        .expression_attribute_values(
            ":at",
            AttributeValue::S(format!("{}#{}", dup.at.to_rfc3339(), dup.audit_id)),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        kinds(&log.about(&dup_hash, []).await.unwrap()),
        vec![AuditKind::DuplicateSuppressed]
    );
    assert_eq!(log.about(&dup_hash, [dup_period.as_str()]).await.unwrap().len(), 1);

    s.cleanup().await;
}
