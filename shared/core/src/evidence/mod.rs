//! Audit evidence that holds against someone who can write to the stores.
//!
//! The audit table holds the hash chains and their heads; the Object Lock bucket holds what
//! nobody can rewrite: the trail's anchor (its identity), its seals (the head of every chain at one
//! instant, their Merkle root, and the digest of the seal before), beside each seal the records it
//! covers (`archive.rs`; read back as a trail by `bucket.rs`, so the evidence outlives the table),
//! and any explicit retirement of a trail. Verification reads the bucket by version — the first
//! version of a key is the genuine one; a newer version or a delete marker anywhere is named —
//! and checks every chain against its head, the trail against its anchor, the seal chain, every
//! sealed head against the record now there, and reports the unsealed tail (a break when it is
//! older than the sealing window). A
//! continuation (`continuation.rs`) verifies only what came after a seal an earlier verification
//! checked.
//!
//! Online, the records are read a page at a time (`stream.rs`) and never held: the seals, read
//! first, say which records the checks need (`summary.rs`: the hash at each sealed position, the
//! span of the unsealed tail), each chain's verifier keeps only where it is, and a record beyond
//! the first heads read is held, as its link, until the second heads say whether it was appended
//! meanwhile. So a verification's memory grows with the seals and with what was appended during
//! it, not with the trail. The pure checks (`verify.rs`) are the same ones over the same
//! summaries, built from records in memory (a bundle, `verify_all`).

mod anchors;
mod archive;
mod bucket;
mod bundle;
mod configuration;
mod continuation;
mod export;
mod sealing;
mod stream;
mod summary;
mod verify;

pub use anchors::{KnownTrail, StoredSeal, WormEvidence, read_worm, retire_trail, seal};
pub use archive::RECORDS_PER_PART;
pub use bucket::{BucketTrail, verify_bucket};
pub use bundle::{BUNDLE_SCHEMA, Bundle, BundleSeal, HeadProof, verify_bundle};
pub use configuration::{ConfigState, config_change};
pub use continuation::{FromSealError, verify_from_seal};
pub use export::{BUNDLE_PREFIX, BundleStored, BundleWritten, ExportError, export_bundle, store_bundle, write_bundle};
pub use sealing::SealingAuditLog;
pub use stream::VERIFY_PAGE;
pub use verify::{SealWindow, UnsealedTail, VerifyOptions, VerifyReport};

use crate::domain::audit::{AUDIT_CHAINS, ChainHead, ChainedRecord};
use crate::ports::{AuditLog, StoreResult, Worm};
use summary::{Needs, SealPlan};

/// Read the whole trail and the bucket, and verify them.
///
/// The bucket first (a seal written after it is read is not checked, and every seal read covers
/// heads no later than those read next), then the heads, the records, and the heads again: a
/// record beyond the first heads but within the second was appended while this read and is left
/// out; one beyond both is linked by no head, and is named. The records are read in pages of
/// [`VERIFY_PAGE`].
pub async fn verify_trail<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    opts: &VerifyOptions,
) -> StoreResult<VerifyReport> {
    verify_trail_in_pages(audit, worm, opts, VERIFY_PAGE).await
}

/// [`verify_trail`], reading the records `page` at a time (at least 1). The report does not
/// depend on `page`.
pub async fn verify_trail_in_pages<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    opts: &VerifyOptions,
    page: usize,
) -> StoreResult<VerifyReport> {
    let trail = audit.current_trail().await?;
    let worm_evidence = read_worm(worm, trail.as_deref()).await?;
    verify_read(audit, trail, &worm_evidence, opts, page).await
}

/// The verification of `trail`'s records (from `audit`) against what the bucket showed, read
/// before them (`worm_evidence`).
async fn verify_read<A: AuditLog>(
    audit: &A,
    trail: Option<String>,
    worm_evidence: &WormEvidence,
    opts: &VerifyOptions,
    page: usize,
) -> StoreResult<VerifyReport> {
    let plan = trail.as_deref().map(|t| SealPlan::new(t, &worm_evidence.seals));
    let needs = Needs::of(plan.as_ref());
    let mut report = VerifyReport {
        trail: trail.clone(),
        ..VerifyReport::default()
    };
    let starts = (0..AUDIT_CHAINS).map(|i| (format!("c{i}"), 0)).collect();
    let chains = stream::read_chains(audit, &starts, &needs, page, &mut report).await?;
    verify::conclude(&chains, plan.as_ref(), worm_evidence, opts, &mut report);
    Ok(report)
}

/// Verify the trail the table names (`trail`) from its records and heads, read whole, and what the
/// bucket shows: what [`verify_trail`] concludes of the same.
pub fn verify_all(
    records: &[ChainedRecord],
    heads: &[ChainHead],
    trail: Option<&str>,
    worm: &WormEvidence,
    opts: &VerifyOptions,
) -> VerifyReport {
    let mut report = VerifyReport {
        trail: trail.map(str::to_owned),
        ..VerifyReport::default()
    };
    let plan = trail.map(|t| SealPlan::new(t, &worm.seals));
    let needs = Needs::of(plan.as_ref());
    let chains = stream::verify_chains(records, heads, &needs, &mut report);
    verify::conclude(&chains, plan.as_ref(), worm, opts, &mut report);
    report
}
