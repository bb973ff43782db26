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

#[tokio::test]
async fn a_bundle_with_a_multibyte_hash_is_reported_not_a_panic() {
    // Regression (found by the fuzzer): verification cut hashes to 12 bytes for its messages;
    // a hash edited to hold a multi-byte character there made `audit verify --bundle` panic.
    let (audit, worm) = trail(20).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    let mut heads = audit.heads().await.unwrap();
    heads[0].hash = format!("77c046d1ad8\u{202e}{}", &heads[0].hash[12..]);
    let mut records = Vec::new();
    for c in 0..recon_core::domain::audit::AUDIT_CHAINS {
        records.extend(audit.chain(&format!("c{c}")).await.unwrap());
    }
    let seals = recon_core::evidence::load_seals(&worm, "memory").await.unwrap();
    let report = std::panic::catch_unwind(|| recon_core::evidence::verify_all(&records, &heads, &seals));
    let report = report.expect("no panic on an edited hash");
    assert!(!report.intact(), "{report:?}");
    // The same for a record's hash under a genuine seal.
    let mut edited = records.clone();
    let sealed = &seals[0].1.heads[0];
    if let Some(r) = edited
        .iter_mut()
        .find(|r| r.chain == sealed.chain && r.seq == sealed.seq)
    {
        r.hash = format!("ab\u{e9}{}", &r.hash[3..]);
    }
    let report = std::panic::catch_unwind(|| recon_core::evidence::verify_all(&edited, &heads, &seals));
    assert!(!report.expect("no panic on an edited record").intact());
}
