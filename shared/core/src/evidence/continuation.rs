//! Verification continued from a seal an earlier verification checked (`audit verify --from-seal
//! N`): it reads the trail objects, seal N and the seals after it, and each chain from the record
//! seal N fixed — nothing before. Its cost grows with what came after seal N, not with the whole
//! history.
//!
//! What it checks: the trail against its anchor and the retired trails (as a full verification);
//! seal N and every later seal (no gap from N, each naming the digest of the one before, each root
//! that of its heads, key and content agreeing — seal N's own `prev` was checked by the
//! verification that printed N, and is not read again); every chain from the record at seal N's
//! head (which must still have the hash seal N fixed; its content must hash to it) through every
//! link after it up to the chain's head; every later seal's heads against the records now there;
//! and the unsealed tail with the seal window. A chain seal N does not name is read from its first
//! record.
//!
//! What it does not: a record before seal N's heads, a seal before N, a newer version or delete
//! marker at any key but the trail objects and seals from N, and another trail's seals are not
//! read. A rewrite there is found by a full verification only — which auditors run on their own
//! schedule, continuing in between.

use std::collections::BTreeMap;

use super::anchors::{StoredSeal, WormEvidence, read_worm_from_seal};
use super::stream::{VERIFY_PAGE, read_chains};
use super::summary::{Needs, SealPlan};
use super::verify::{VerifyOptions, VerifyReport, check_seals, check_trails, conclude};
use crate::domain::audit::AUDIT_CHAINS;
use crate::domain::seal::{AuditSeal, parse_seal_key, seal_key};
use crate::ports::{AuditLog, StoreError, Worm};

/// Why a continuation could not start (the auditor's input, not the trail): an operational error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FromSealError {
    #[error("{0}")]
    NotASeal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Verify what came after seal `from_seal` of the trail the table names (see the module).
///
/// As [`super::verify_trail`]: the bucket first, then the heads, the records from seal N's heads
/// on (page by page, as a full verification reads them), and the heads again; a record appended
/// meanwhile is left out.
pub async fn verify_from_seal<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    from_seal: u64,
    opts: &VerifyOptions,
) -> Result<VerifyReport, FromSealError> {
    if from_seal == 0 {
        return Err(FromSealError::NotASeal(
            "seals are numbered from 1: pass the latest_seal_seq a verify printed".into(),
        ));
    }
    let trail = audit.current_trail().await?;
    let (ev, present) = read_worm_from_seal(worm, trail.as_deref(), from_seal).await?;
    let start = trail
        .as_deref()
        .map(|t| seal_key(t, from_seal))
        .and_then(|key| ev.seals.iter().find(|s| s.key == key));
    let (Some(t), Some(start), true) = (trail.as_deref(), start, present) else {
        return not_started(trail.as_deref(), &ev, from_seal, present, opts);
    };
    let Some(start_seal) = AuditSeal::parse(start.body.as_bytes())
        .ok()
        .filter(AuditSeal::root_holds)
    else {
        return Ok(unusable_start(t, &ev, start, from_seal, opts));
    };
    let read_from: BTreeMap<String, u64> = (0..AUDIT_CHAINS)
        .map(|i| {
            let chain = format!("c{i}");
            let first = start_seal.heads.iter().find(|h| h.chain == chain).map_or(1, |h| h.seq);
            (chain, first)
        })
        .collect();
    // The verification that printed N checked the seals before it.
    let seals: Vec<StoredSeal> = ev
        .seals
        .iter()
        .filter(|s| parse_seal_key(&s.key).is_none_or(|(_, seq)| seq >= from_seal))
        .cloned()
        .collect();
    let plan = SealPlan::new(t, &seals);
    let needs = Needs::of(Some(&plan));
    let mut report = VerifyReport {
        trail: Some(t.to_owned()),
        from_seal: Some(from_seal),
        read_from: read_from.clone(),
        ..VerifyReport::default()
    };
    let chains = read_chains(audit, &read_from, &needs, VERIFY_PAGE, &mut report).await?;
    conclude(&chains, Some(&plan), &ev, opts, &mut report);
    Ok(report)
}

/// A continuation that does not start: the bucket's findings and the trail checks only.
fn not_continued(trail: Option<&str>, worm: &WormEvidence, from_seal: u64, opts: &VerifyOptions) -> VerifyReport {
    let mut report = VerifyReport {
        trail: trail.map(str::to_owned),
        from_seal: Some(from_seal),
        ..VerifyReport::default()
    };
    check_trails(worm, &opts.accept_retired, &mut report);
    report
}

/// No seal `from_seal` to start from. When the trail checks find something (the table's trail
/// replaced or deleted, a newer version or delete marker on a trail object), that is the answer
/// — a break, with the missing seal named; otherwise the seal number is wrong: an error.
fn not_started(
    trail: Option<&str>,
    worm: &WormEvidence,
    from_seal: u64,
    present: bool,
    opts: &VerifyOptions,
) -> Result<VerifyReport, FromSealError> {
    let mut report = not_continued(trail, worm, from_seal, opts);
    let why = match trail {
        None => format!(
            "the audit table names no trail, so there is no seal {from_seal} to continue from: run a full verify"
        ),
        Some(t) if present => format!(
            "seal {} cannot be read by version: there is nothing to continue from; run a full verify",
            seal_key(t, from_seal)
        ),
        Some(t) => format!(
            "trail {t}, the one the audit table names, has no seal {from_seal} in the bucket: pass the latest_seal_seq a verify of this trail printed, or run a full verify"
        ),
    };
    if report.breaks.is_empty() && !present {
        return Err(FromSealError::NotASeal(why));
    }
    report.breaks.push(why);
    Ok(report)
}

/// Seal `from_seal` is there but does not read as a seal whose root holds: named (as a full
/// verification names it), and nothing is continued from it.
fn unusable_start(
    trail: &str,
    worm: &WormEvidence,
    start: &StoredSeal,
    from_seal: u64,
    opts: &VerifyOptions,
) -> VerifyReport {
    let mut report = not_continued(Some(trail), worm, from_seal, opts);
    let plan = SealPlan::new(trail, std::slice::from_ref(start));
    check_seals(&plan, &BTreeMap::new(), &mut report);
    report.latest_seal = None;
    report.latest_seal_seq = None;
    report.breaks.push(format!(
        "seal {} is not a seal whose root holds: there is nothing to continue from; run a full verify",
        start.key
    ));
    report
}
