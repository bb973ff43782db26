//! Audit evidence that holds against someone who can write to the stores.
//!
//! The audit table holds the hash chains and their heads; the Object Lock bucket holds what
//! nobody can rewrite: the trail's anchor (its identity), its seals (the head of every chain at one
//! instant, their Merkle root, and the digest of the seal before), and any explicit retirement of a
//! trail. Verification reads the bucket by version — the first version of a key is the genuine one;
//! a newer version or a delete marker anywhere is named — and checks every chain against its head,
//! the trail against its anchor, the seal chain, every sealed head against the record now there,
//! and reports the unsealed tail (a break when it is older than the sealing window).

mod anchors;
mod bundle;
mod configuration;
mod sealing;
mod verify;

pub use anchors::{KnownTrail, StoredSeal, WormEvidence, ensure_trail, read_worm, retire_trail, seal};
pub use bundle::{BUNDLE_SCHEMA, Bundle, BundleSeal, HeadProof, covered_by_last_seal, export_bundle, verify_bundle};
pub use configuration::{ConfigState, config_change, difference, fingerprint};
pub use sealing::SealingAuditLog;
pub use verify::{SealWindow, UnsealedTail, VerifyReport, verify_all};

use crate::domain::audit::{AUDIT_CHAINS, ChainedRecord};
use crate::ports::{AuditLog, StoreResult, Worm};

/// Every record of every chain.
pub async fn all_records<A: AuditLog>(audit: &A) -> StoreResult<Vec<ChainedRecord>> {
    let mut records = Vec::new();
    for i in 0..AUDIT_CHAINS {
        records.extend(audit.chain(&format!("c{i}")).await?);
    }
    Ok(records)
}

/// Read the whole trail and the bucket, and verify them.
pub async fn verify_trail<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    window: Option<SealWindow>,
) -> StoreResult<VerifyReport> {
    // Heads first: a record appended while this reads lies beyond its head and is left out,
    // instead of being taken for a head rolled back.
    let trail = audit.current_trail().await?;
    let heads = audit.heads().await?;
    let worm_evidence = read_worm(worm, trail.as_deref()).await?;
    let mut records = all_records(audit).await?;
    records.retain(|r| heads.iter().find(|h| h.chain == r.chain).is_none_or(|h| r.seq <= h.seq));
    Ok(verify_all(&records, &heads, trail.as_deref(), &worm_evidence, window))
}
