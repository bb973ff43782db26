//! The dedup table of the claim -> post -> commit protocol on DynamoDB Local: the conditions
//! hold under concurrency.

use recon_aws::dynamodb::DynamoDedupTable;
use recon_core::domain::CommittedRef;
use recon_core::ports::{ClaimOutcome, DedupTable};
use recon_harness::stack::TestStack;
use std::sync::Arc;

fn committed(hash: &str, sqs: &str) -> CommittedRef {
    CommittedRef {
        source_hash: hash.into(),
        sqs_message_id: sqs.into(),
        message_id: format!("m-{sqs}"),
        committed_at: Some(chrono::Utc::now()),
    }
}

#[tokio::test]
async fn concurrent_claims_have_one_winner_and_only_the_owner_commits() {
    let s = TestStack::new("claim").await;
    let table = Arc::new(DynamoDedupTable::new(
        s.clients.dynamodb.clone(),
        &s.stack.names.dedup_table,
    ));
    let hash = "ab".repeat(32);
    let now = chrono::Utc::now();
    let lease = now + chrono::Duration::seconds(60);
    let ttl = now + chrono::Duration::days(400);

    let mut tasks = Vec::new();
    for i in 0..8 {
        let (t, h) = (table.clone(), hash.clone());
        tasks.push(tokio::spawn(async move {
            (i, t.claim(&h, &format!("worker-{i}"), now, lease, ttl).await)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (i, r) = task.await.unwrap();
        match r.unwrap() {
            ClaimOutcome::Claimed => winners.push(i),
            ClaimOutcome::HeldElsewhere { owner, lease_until } => {
                assert!(owner.starts_with("worker-"));
                assert_eq!(lease_until.timestamp_millis(), lease.timestamp_millis());
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim wins: {winners:?}");
    let winner = format!("worker-{}", winners[0]);
    let loser = format!("worker-{}", (winners[0] + 1) % 8);

    assert!(table.lookup(&hash).await.unwrap().is_none(), "a claim is not a commit");
    assert!(
        !table.commit(&loser, &committed(&hash, "x")).await.unwrap(),
        "only the owner commits"
    );
    table.release(&hash, &loser).await.unwrap();
    assert!(table.commit(&winner, &committed(&hash, "s1")).await.unwrap());
    assert_eq!(table.lookup(&hash).await.unwrap().unwrap().sqs_message_id, "s1");
    match table.claim(&hash, "late", now, lease, ttl).await.unwrap() {
        ClaimOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "s1"),
        other => panic!("{other:?}"),
    }
    s.cleanup().await;
}

#[tokio::test]
async fn an_expired_claim_is_taken_over_and_a_released_one_is_free() {
    let s = TestStack::new("lease").await;
    let table = DynamoDedupTable::new(s.clients.dynamodb.clone(), &s.stack.names.dedup_table);
    let hash = "cd".repeat(32);
    let t0 = chrono::Utc::now();
    let ttl = t0 + chrono::Duration::days(400);
    assert_eq!(
        table
            .claim(&hash, "a", t0, t0 + chrono::Duration::seconds(30), ttl)
            .await
            .unwrap(),
        ClaimOutcome::Claimed
    );
    let later = t0 + chrono::Duration::seconds(31);
    assert_eq!(
        table
            .claim(&hash, "b", later, later + chrono::Duration::seconds(30), ttl)
            .await
            .unwrap(),
        ClaimOutcome::Claimed
    );
    assert!(
        !table.commit("a", &committed(&hash, "sa")).await.unwrap(),
        "the expired owner lost it"
    );
    table.release(&hash, "b").await.unwrap();
    assert_eq!(
        table
            .claim(&hash, "c", later, later + chrono::Duration::seconds(30), ttl)
            .await
            .unwrap(),
        ClaimOutcome::Claimed
    );
    s.cleanup().await;
}
