//! Audit evidence that holds against someone who can write to the stores.
//!
//! The audit table holds the hash chains and their heads; the Object Lock bucket holds what
//! nobody can rewrite: the trail's anchor (its identity), its seals (the head of every chain at one
//! instant, their Merkle root, and the digest of the seal before), and any explicit retirement of a
//! trail. Verification reads the bucket by version — the first version of a key is the genuine one;
//! a newer version or a delete marker anywhere is named — and checks every chain against its head,
//! the trail against its anchor, the seal chain, every sealed head against the record now there,
//! and reports the unsealed tail (a break when it is older than the sealing window). A
//! continuation (`continuation.rs`) verifies only what came after a seal an earlier verification
//! checked.

mod anchors;
mod bundle;
mod configuration;
mod continuation;
mod sealing;
mod verify;

pub use anchors::{
    KnownTrail, StoredSeal, WormEvidence, ensure_trail, read_worm, read_worm_from_seal, retire_trail, seal,
};
pub use bundle::{BUNDLE_SCHEMA, Bundle, BundleSeal, HeadProof, covered_by_last_seal, export_bundle, verify_bundle};
pub use configuration::{ConfigState, config_change, difference, fingerprint};
pub use continuation::{FromSealError, verify_from_seal};
pub use sealing::SealingAuditLog;
pub use verify::{SealWindow, UnsealedTail, VerifyOptions, VerifyReport, verify_all};

use crate::domain::audit::{AUDIT_CHAINS, ChainHead, ChainedRecord};
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
///
/// The bucket first (a seal written after it is read is not checked, and every seal read covers
/// heads no later than those read next), then the heads, the records, and the heads again: a
/// record beyond the first heads but within the second was appended while this read and is left
/// out; one beyond both is linked by no head, and is named.
pub async fn verify_trail<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    opts: &VerifyOptions,
) -> StoreResult<VerifyReport> {
    let trail = audit.current_trail().await?;
    let worm_evidence = read_worm(worm, trail.as_deref()).await?;
    let before = audit.heads().await?;
    let mut records = all_records(audit).await?;
    let after = audit.heads().await?;
    let seq_of = |heads: &[ChainHead], chain: &str| heads.iter().find(|h| h.chain == chain).map_or(0, |h| h.seq);
    records.retain(|r| !(r.seq > seq_of(&before, &r.chain) && r.seq <= seq_of(&after, &r.chain)));
    Ok(verify_all(&records, &before, trail.as_deref(), &worm_evidence, opts))
}
