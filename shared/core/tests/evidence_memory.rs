//! Audit evidence on the in-memory adapters: an intact sealed trail verifies, and a consistent
//! rewrite of a chain after sealing is caught by the seal.

use chrono::Utc;
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::evidence::{seal, verify_trail};
use recon_core::ports::AuditLog;
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
    }
}

async fn trail(n: u32) -> (MemoryAuditLog, MemoryWorm) {
    let audit = MemoryAuditLog::default();
    for i in 0..n {
        audit.append(&rec(i)).await.unwrap();
    }
    (audit, MemoryWorm::default())
}

#[tokio::test]
async fn an_intact_sealed_trail_verifies() {
    let (audit, worm) = trail(40).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    for i in 40..50 {
        audit.append(&rec(i)).await.unwrap();
    }
    let report = verify_trail(&audit, &worm).await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.records, 50);
    assert_eq!(report.seals, 1);
    assert!(report.chains.len() > 1, "spread over chains");
}

#[tokio::test]
async fn a_rewrite_of_a_whole_chain_after_sealing_is_caught_by_the_seal() {
    let (audit, worm) = trail(20).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    // Rewrite one chain consistently (re-link every record after changing one amount).
    audit.tamper(|records| {
        let chain = records[0].chain.clone();
        let mut prev = recon_core::domain::audit::GENESIS.to_owned();
        for r in records.iter_mut().filter(|r| r.chain == chain) {
            if r.seq == 1 {
                r.record.amount = Some("999999.00".into());
            }
            let relinked = recon_core::domain::audit::link(r.record.clone(), &chain, r.seq - 1, &prev);
            *r = relinked;
            prev = r.hash.clone();
        }
    });
    let report = verify_trail(&audit, &worm).await.unwrap();
    assert!(!report.intact());
    assert!(
        report.breaks.iter().any(|b| b.contains("rewritten after sealing")),
        "{report:?}"
    );
}
