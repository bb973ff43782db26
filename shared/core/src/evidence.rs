//! Audit evidence: seal the hash chains into the WORM bucket, verify every chain against its
//! head and against every seal, and check an exported bundle offline.
//!
//! A seal commits to the head (`seq`, `hash`) of every chain and to their Merkle root. Verifying
//! recomputes every record's hash and link, finds any gap, compares the last record with the
//! chain's head, and checks that every sealed head is still the record at that position: so a
//! modified, deleted or reordered record is named, and even a wholesale rewrite of a chain (records
//! and head together) is caught by the seals written before it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::domain::audit::{AUDIT_CHAINS, AuditSeal, ChainBreak, ChainHead, ChainedRecord, short_hash, verify_chain};
use crate::ports::{AuditLog, StoreError, StoreResult, Worm};

/// Where seals live in the WORM bucket.
pub const SEAL_PREFIX: &str = "audit-seals/";

/// Write a seal of the current chain heads. Returns its key.
pub async fn seal<A: AuditLog, W: Worm>(audit: &A, worm: &W, now: DateTime<Utc>) -> StoreResult<(String, AuditSeal)> {
    let trail = audit.trail_id().await?;
    let seal = AuditSeal::new(&trail, now, audit.heads().await?);
    let key = format!(
        "{SEAL_PREFIX}{trail}/{}-{}.json",
        now.format("%Y%m%dT%H%M%S%.6fZ"),
        &seal.root[..16]
    );
    let bytes = serde_json::to_vec(&seal)
        .map_err(|e| StoreError::new(crate::domain::TransientKind::Infrastructure, e.to_string()))?;
    worm.put(&key, &bytes).await?;
    Ok((key, seal))
}

/// Every seal of one trail in the bucket, oldest first.
pub async fn load_seals<W: Worm>(worm: &W, trail: &str) -> StoreResult<Vec<(String, AuditSeal)>> {
    let mut seals = Vec::new();
    for key in worm.list(&format!("{SEAL_PREFIX}{trail}/")).await? {
        if let Some(bytes) = worm.get(&key).await? {
            match serde_json::from_slice::<AuditSeal>(&bytes) {
                Ok(s) => seals.push((key, s)),
                Err(e) => {
                    return Err(StoreError::new(
                        crate::domain::TransientKind::Infrastructure,
                        format!("seal {key} does not parse: {e}"),
                    ));
                }
            }
        }
    }
    Ok(seals)
}

/// What `audit verify` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// chain -> number of records
    pub chains: BTreeMap<String, u64>,
    pub records: u64,
    pub seals: u64,
    /// Every break found, the first per chain; empty when the trail is intact.
    pub breaks: Vec<String>,
}

impl VerifyReport {
    pub fn intact(&self) -> bool {
        self.breaks.is_empty()
    }
}

/// Verify chains (records per chain, any order), heads and seals. Pure: used online and offline.
pub fn verify_all(records: &[ChainedRecord], heads: &[ChainHead], seals: &[(String, AuditSeal)]) -> VerifyReport {
    let mut by_chain: BTreeMap<String, Vec<ChainedRecord>> = BTreeMap::new();
    for r in records {
        by_chain.entry(r.chain.clone()).or_default().push(r.clone());
    }
    for h in heads {
        by_chain.entry(h.chain.clone()).or_default();
    }
    let mut report = VerifyReport {
        records: records.len() as u64,
        seals: seals.len() as u64,
        ..VerifyReport::default()
    };
    for (chain, list) in &mut by_chain {
        list.sort_by_key(|r| r.seq);
        let head = heads.iter().find(|h| &h.chain == chain);
        if head.is_none() && !list.is_empty() {
            report.breaks.push(format!(
                "chain {chain}: {} records but no head (the head was deleted)",
                list.len()
            ));
            continue;
        }
        match verify_chain(chain, list, head) {
            Ok(n) => {
                report.chains.insert(chain.clone(), n);
            }
            Err(b) => report.breaks.push(b.to_string()),
        }
    }
    let trails: std::collections::BTreeSet<&str> = seals.iter().map(|(_, s)| s.trail.as_str()).collect();
    if trails.len() > 1 {
        report
            .breaks
            .push(format!("seals of several trails were given: {trails:?}"));
    }
    let trails: std::collections::BTreeSet<&str> = seals.iter().map(|(_, s)| s.trail.as_str()).collect();
    if trails.len() > 1 {
        report
            .breaks
            .push(format!("seals of several trails were given: {trails:?}"));
    }
    for (key, seal) in seals {
        if !seal.root_holds() {
            report.breaks.push(format!(
                "seal {key}: its Merkle root does not match its heads (the seal is not genuine)"
            ));
            continue;
        }
        for h in &seal.heads {
            let at = by_chain.get(&h.chain).and_then(|l| l.iter().find(|r| r.seq == h.seq));
            match at {
                Some(r) if r.hash == h.hash => {}
                Some(r) => report.breaks.push(
                    ChainBreak {
                        chain: h.chain.clone(),
                        seq: h.seq,
                        audit_id: Some(r.record.audit_id.clone()),
                        problem: format!(
                            "seal {key} fixed its hash at {}…, it is now {}… (rewritten after sealing)",
                            short_hash(&h.hash),
                            short_hash(&r.hash)
                        ),
                    }
                    .to_string(),
                ),
                None => report.breaks.push(
                    ChainBreak {
                        chain: h.chain.clone(),
                        seq: h.seq,
                        audit_id: None,
                        problem: format!("sealed by {key} but no longer present (deleted after sealing)"),
                    }
                    .to_string(),
                ),
            }
        }
    }
    report
}

/// Read the whole trail and the seals, and verify them.
pub async fn verify_trail<A: AuditLog, W: Worm>(audit: &A, worm: &W) -> StoreResult<VerifyReport> {
    let mut records = Vec::new();
    for i in 0..AUDIT_CHAINS {
        records.extend(audit.chain(&format!("c{i}")).await?);
    }
    let seals = load_seals(worm, &audit.trail_id().await?).await?;
    Ok(verify_all(&records, &audit.heads().await?, &seals))
}

/// The evidence bundle an auditor verifies offline (`dlqctl evidence export`,
/// `dlqctl audit verify --bundle`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bundle {
    pub schema: String,
    pub exported_at: DateTime<Utc>,
    pub period: String,
    /// The period's population and its reconciliation (recomputed when verifying).
    pub outcomes: Vec<(crate::reconcile::State, crate::reconcile::Entry)>,
    pub reconciliation: crate::reconcile::Reconciliation,
    /// The whole audit trail with its heads and seals: chains verify from their first record.
    pub audit_records: Vec<ChainedRecord>,
    pub heads: Vec<ChainHead>,
    pub seals: Vec<(String, AuditSeal)>,
}

/// Verify a bundle: its chains against their heads and seals, and its reconciliation against its
/// own population.
pub fn verify_bundle(bundle: &Bundle) -> VerifyReport {
    let mut report = verify_all(&bundle.audit_records, &bundle.heads, &bundle.seals);
    let recomputed =
        crate::reconcile::reconcile(bundle.outcomes.clone(), bundle.reconciliation.problems.clone(), None, 0);
    if recomputed.by_state != bundle.reconciliation.by_state {
        report
            .breaks
            .push("the bundle's reconciliation does not match its own population (edited)".into());
    }
    report
}
