//! The evidence bundle an auditor verifies offline (`dlqctl evidence export`, `dlqctl audit verify
//! --bundle`, and `tools/verify_bundle.py`, which needs nothing of this project).
//!
//! A bundle holds the audit chains up to its last seal, every seal of the trail as stored (bytes,
//! key and S3 version id), and for each seal the Merkle proof of every head it commits to. Offline,
//! every record must hash and link, every chain end where the last seal says, the seal chain run
//! from the first seal without a gap, and every proof lead to its seal's root. A bundle without
//! seals, or whose chains were re-linked, does not verify.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::anchors::StoredSeal;
use super::stream::verify_chains;
use super::summary::{Needs, SealPlan};
use super::verify::{VerifyReport, check_seals, unsealed_tail};
use crate::domain::audit::{ChainHead, ChainedRecord};
use crate::domain::seal::{AuditSeal, ProofStep, merkle_proof, proof_root};

pub const BUNDLE_SCHEMA: &str = "recon-dlq/evidence-bundle/v2";

/// One head a seal commits to, with its path to the seal's root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadProof {
    pub chain: String,
    pub seq: u64,
    pub hash: String,
    pub path: Vec<ProofStep>,
}

/// A seal as stored, with the proofs of its heads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleSeal {
    #[serde(flatten)]
    pub stored: StoredSeal,
    pub proofs: Vec<HeadProof>,
}

impl BundleSeal {
    /// The proofs of every head of a stored seal (none when it does not parse).
    pub fn new(stored: StoredSeal) -> Self {
        let proofs = AuditSeal::parse(stored.body.as_bytes())
            .map(|seal| {
                seal.heads
                    .iter()
                    .enumerate()
                    .map(|(i, h)| HeadProof {
                        chain: h.chain.clone(),
                        seq: h.seq,
                        hash: h.hash.clone(),
                        path: merkle_proof(&seal.heads, i),
                    })
                    .collect()
            })
            .unwrap_or_default();
        BundleSeal { stored, proofs }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bundle {
    pub schema: String,
    pub exported_at: DateTime<Utc>,
    pub period: String,
    /// The period's population and its reconciliation (recomputed when verifying).
    pub outcomes: Vec<(crate::reconcile::State, crate::reconcile::Entry)>,
    pub reconciliation: crate::reconcile::Reconciliation,
    pub trail: String,
    /// The audit chains, each up to the head the last seal commits to.
    pub audit_records: Vec<ChainedRecord>,
    /// The last seal's heads.
    pub heads: Vec<ChainHead>,
    /// Every seal of the trail, in order.
    pub seals: Vec<BundleSeal>,
    /// What the bucket showed at export that no honest writer leaves (newer versions, delete
    /// markers): verification names each.
    #[serde(default)]
    pub worm_findings: Vec<String>,
}

/// Verify a bundle offline.
pub fn verify_bundle(bundle: &Bundle) -> VerifyReport {
    let mut report = VerifyReport {
        trail: Some(bundle.trail.clone()),
        ..VerifyReport::default()
    };
    if bundle.schema != BUNDLE_SCHEMA {
        report.breaks.push(format!(
            "the bundle's schema is {:?}, not {BUNDLE_SCHEMA}",
            bundle.schema
        ));
    }
    let stored: Vec<StoredSeal> = bundle.seals.iter().map(|s| s.stored.clone()).collect();
    let plan = SealPlan::new(&bundle.trail, &stored);
    let needs = Needs::of(Some(&plan));
    let chains = verify_chains(&bundle.audit_records, &bundle.heads, &needs, &mut report);
    report.breaks.extend(bundle.worm_findings.iter().cloned());
    if bundle.seals.is_empty() {
        report
            .breaks
            .push("the bundle carries no seal: nothing anchors its records".into());
    }
    check_seals(&plan, &chains, &mut report);
    let last = plan.last();
    for s in &bundle.seals {
        check_proofs(s, &mut report);
    }
    if let Some(last) = last
        && last.heads != bundle.heads
    {
        report
            .breaks
            .push("the bundle's heads are not the heads its last seal commits to".into());
    }
    unsealed_tail(&chains, last, None, &mut report);
    for t in &report.unsealed {
        report.breaks.push(format!(
            "chain {}: records {}..{} are in the bundle but no seal in it covers them",
            t.chain, t.from_seq, t.to_seq
        ));
    }
    let recomputed =
        crate::reconcile::reconcile(bundle.outcomes.clone(), bundle.reconciliation.problems.clone(), None, 0);
    if recomputed.by_state != bundle.reconciliation.by_state {
        report
            .breaks
            .push("the bundle's reconciliation does not match its own population (edited)".into());
    }
    report
}

/// Every head of the seal has a proof, and every proof leads to the seal's root.
fn check_proofs(s: &BundleSeal, report: &mut VerifyReport) {
    let Ok(seal) = AuditSeal::parse(s.stored.body.as_bytes()) else {
        return; // named by check_seals
    };
    for h in &seal.heads {
        let proof = s.proofs.iter().find(|p| p.chain == h.chain);
        let leads = proof.is_some_and(|p| {
            p.seq == h.seq && p.hash == h.hash && proof_root(h, &p.path).as_deref() == Some(seal.root.as_str())
        });
        if !leads {
            report.breaks.push(format!(
                "seal {}: the proof of chain {}'s head does not lead to the seal's root",
                s.stored.key, h.chain
            ));
        }
    }
}
