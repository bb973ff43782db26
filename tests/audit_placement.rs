//! Where appends go on the local stack: a function instance alone keeps to one chain and reads no
//! head after its first append; one whose head another instance moved leaves that chain; instances
//! appending at once each record every record once, on chains that verify.

use aws_sdk_dynamodb::types::AttributeValue;
use recon_aws::dynamodb::DynamoAuditLog;
use recon_aws::s3::S3Worm;
use recon_core::domain::audit::{AUDIT_CHAINS, ChainedRecord};
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::evidence::{VerifyOptions, verify_trail};
use recon_core::ports::AuditLog;
use recon_core::resources::keys;
use recon_harness::stack::TestStack;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A log as one function instance holds it (its own placement).
fn instance(s: &TestStack) -> DynamoAuditLog {
    DynamoAuditLog::new(s.clients.dynamodb.clone(), &s.settings.audit_table)
}

fn record(name: &str) -> AuditRecord {
    AuditRecord::system(
        AuditKind::ReferenceChanged,
        name,
        chrono::Utc::now(),
        "it",
        String::new(),
    )
}

/// Every record of every chain, by id.
async fn stored(log: &DynamoAuditLog) -> BTreeMap<String, Vec<ChainedRecord>> {
    let mut by_id: BTreeMap<String, Vec<ChainedRecord>> = BTreeMap::new();
    for i in 0..AUDIT_CHAINS {
        for r in recon_core::ports::read_chain(log, &format!("c{i}"), 0).await.unwrap() {
            by_id.entry(r.record.audit_id.clone()).or_default().push(r);
        }
    }
    by_id
}

async fn intact(s: &TestStack, log: &DynamoAuditLog) -> u64 {
    let worm = S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket());
    let report = verify_trail(log, &worm, &VerifyOptions::default()).await.unwrap();
    let links_hold = report
        .breaks
        .iter()
        .all(|b| b.contains("no trail") || b.contains("unsealed"));
    assert!(links_hold, "{report:?}");
    report.records
}

#[tokio::test]
async fn an_instance_alone_keeps_its_head_and_one_chain_and_leaves_a_chain_another_moved() {
    let s = TestStack::new("au-place").await;
    let alone = instance(&s);
    let before = s.clients.requests.snapshot();
    for i in 0..20 {
        assert!(alone.append(&record(&format!("alone-{i}"))).await.unwrap().is_some());
    }
    let after = s.clients.requests.snapshot();
    let reads = |op: &str| after.get(op).copied().unwrap_or(0) - before.get(op).copied().unwrap_or(0);
    assert_eq!(
        reads("DynamoDB:GetItem"),
        1,
        "one head read, at the first append: {after:?}"
    );
    assert_eq!(reads("DynamoDB:TransactWriteItems"), 20, "one transaction per append");
    let heads = alone.heads().await.unwrap();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!((heads[0].chain.as_str(), heads[0].seq), ("c0", 20));

    // Another instance appends: it too starts on the lowest chain, from the head it reads.
    let other = instance(&s);
    assert_eq!(other.append(&record("other-0")).await.unwrap(), Some(21));
    // The first instance's head is stale now: its append meets the move, leaves c0 and lands on
    // another chain; the other instance keeps c0.
    assert_eq!(alone.append(&record("alone-20")).await.unwrap(), Some(1));
    assert_eq!(other.append(&record("other-1")).await.unwrap(), Some(22));
    let by_id = stored(&alone).await;
    let moved = &by_id[&record("alone-20").audit_id];
    assert!(moved.len() == 1 && moved[0].chain != "c0", "{moved:?}");

    // A record already recorded is recorded once, whichever instance and chain sees it again.
    assert_eq!(other.append(&record("alone-20")).await.unwrap(), None);
    assert_eq!(alone.append(&record("other-1")).await.unwrap(), None);
    assert_eq!(intact(&s, &alone).await, 23);
    s.cleanup().await;
}

/// A table rebuilt under a warm instance: the head it remembers is at the same `seq` as the new
/// trail's, with another hash. Its next append must not link onto the remembered hash.
#[tokio::test]
async fn a_remembered_head_at_the_same_seq_with_another_hash_is_not_linked_onto() {
    let s = TestStack::new("au-rebuilt").await;
    let warm = instance(&s);
    warm.append(&record("before-rebuild")).await.unwrap();
    for id in [
        record("before-rebuild").audit_id,
        format!("{}c0", keys::AUDIT_HEAD_PREFIX),
    ] {
        s.clients
            .dynamodb
            .delete_item()
            .table_name(&s.settings.audit_table)
            .key(keys::AUDIT_PK, AttributeValue::S(id))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(instance(&s).append(&record("new-trail")).await.unwrap(), Some(1));
    warm.append(&record("after-rebuild")).await.unwrap();
    let by_id = stored(&warm).await;
    let after = &by_id[&record("after-rebuild").audit_id];
    assert!(after.len() == 1 && after[0].chain != "c0", "{after:?}");
    assert_eq!(intact(&s, &warm).await, 2);
    s.cleanup().await;
}

/// Eight instances at once, each appending its records one at a time and in batches, then each
/// re-sending the records another instance recorded: every record is in the trail once, and every
/// chain verifies.
#[tokio::test]
async fn instances_appending_at_once_record_each_record_once_on_chains_that_verify() {
    let s = TestStack::new("au-inst").await;
    let name = |w: usize, i: usize| format!("inst-{w}-{i}");
    let all_recorded = Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|w| {
            let log = instance(&s);
            let all_recorded = all_recorded.clone();
            tokio::spawn(async move {
                let records: Vec<AuditRecord> = (0..30).map(|i| record(&name(w, i))).collect();
                for r in &records[..20] {
                    assert!(log.append(r).await.unwrap().is_some(), "{}", r.audit_id);
                }
                let linked = log.append_many(&records[20..]).await.unwrap();
                assert!(linked.iter().all(Option::is_some), "{linked:?}");
                all_recorded.wait().await;
                let theirs: Vec<AuditRecord> = (0..30).map(|i| record(&name((w + 1) % 8, i))).collect();
                let again = log.append_many(&theirs).await.unwrap();
                assert!(again.iter().all(Option::is_none), "{again:?}");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let log = instance(&s);
    let by_id = stored(&log).await;
    assert_eq!(by_id.len(), 8 * 30);
    let twice: Vec<_> = by_id.values().filter(|v| v.len() > 1).collect();
    assert!(twice.is_empty(), "{twice:?}");
    assert_eq!(intact(&s, &log).await, 8 * 30);
    s.cleanup().await;
}
