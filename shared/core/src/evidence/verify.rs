//! Verification, pure (used online and offline): every chain against its head; the trail against
//! its anchor; the seal chain (no gap, each naming the digest of the one before, each root the
//! root of its heads, each key agreeing with its content); every sealed head against the record
//! now at that position; and the unsealed tail, with the records that have waited too long.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use super::anchors::WormEvidence;
use super::summary::{ChainSummary, SealPlan};
use crate::domain::audit::{ChainBreak, short_hash};
use crate::domain::seal::{AuditSeal, FIRST_PREV, SEAL_SCHEMA, first_after, seal_digest};

/// What `audit verify` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// The trail verified (the one the table names, or the bundle's).
    #[serde(default)]
    pub trail: Option<String>,
    /// chain -> number of records
    pub chains: BTreeMap<String, u64>,
    pub records: u64,
    pub seals: u64,
    /// The newest seal verified.
    #[serde(default)]
    pub latest_seal: Option<String>,
    /// Its number: what `audit verify --from-seal` continues from next time.
    #[serde(default)]
    pub latest_seal_seq: Option<u64>,
    /// A continuation (`--from-seal`): the seal it started from (verified by an earlier run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_seal: Option<u64>,
    /// A continuation: the first record read of each chain (the one the seal it started from
    /// fixed; 1 for a chain that seal does not name). Nothing before it was read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub read_from: BTreeMap<String, u64>,
    /// Records after the newest seal: no seal anchors them yet.
    #[serde(default)]
    pub unsealed: Vec<UnsealedTail>,
    /// Earlier trails, each ended by an explicit retirement.
    #[serde(default)]
    pub retired_trails: Vec<String>,
    /// Read from the WORM bucket alone (`--from-bucket`): its records and its newest seal's heads.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_bucket: bool,
    /// Every break found, the first per chain; empty when the trail is intact.
    pub breaks: Vec<String>,
}

/// Records of one chain that no seal covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsealedTail {
    pub chain: String,
    pub from_seq: u64,
    pub to_seq: u64,
    pub oldest_at: Option<DateTime<Utc>>,
}

impl VerifyReport {
    pub fn intact(&self) -> bool {
        self.breaks.is_empty()
    }
}

/// How long the trail may go without a seal, while records wait for one, before verification
/// calls sealing stopped.
#[derive(Clone, Copy, Debug)]
pub struct SealWindow {
    pub now: DateTime<Utc>,
    pub max_age: Duration,
}

/// What the auditor asks of a verification.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    pub window: Option<SealWindow>,
    /// Earlier trails whose retirement the auditor has reviewed and accepts (listed, not a break).
    /// Any other retired trail is a break: a retirement is only a file in the bucket.
    pub accept_retired: Vec<String>,
}

/// Everything after the chains, in the order a report lists it: what the bucket shows, the
/// trails, the seal chain and the sealed heads (with a trail), and the unsealed tail.
pub(super) fn conclude(
    chains: &BTreeMap<String, ChainSummary>,
    plan: Option<&SealPlan<'_>>,
    worm: &WormEvidence,
    opts: &VerifyOptions,
    report: &mut VerifyReport,
) {
    check_trails(worm, &opts.accept_retired, report);
    if let Some(plan) = plan {
        check_seals(plan, chains, report);
        if let Some(parts) = &worm.record_parts {
            check_records_beside(plan, parts, report);
        }
    }
    unsealed_tail(chains, plan.and_then(SealPlan::last), opts.window, report);
}

/// What the bucket shows that no honest writer leaves; the trail the report names (the table's) is
/// the one the bucket anchors, and every other trail the bucket knows was retired explicitly.
pub(super) fn check_trails(worm: &WormEvidence, accepted: &[String], report: &mut VerifyReport) {
    report.breaks.extend(worm.findings.iter().cloned());
    let trail = report.trail.clone();
    let trail = trail.as_deref();
    // A continuation reads no other trail's seals: their number is not known.
    let seals = |n: u64| match worm.seals_from {
        Some(_) => "seals not read".to_owned(),
        None => format!("{n} seals"),
    };
    let anchored = |t: &str| worm.trails.get(t).is_some_and(|k| k.anchor.is_some());
    match trail {
        None if !worm.trails.is_empty() => report.breaks.push(format!(
            "the audit table names no trail, but the bucket holds trail(s) {}: the trail id was deleted",
            worm.trails.keys().cloned().collect::<Vec<_>>().join(", ")
        )),
        Some(t) if !anchored(t) => {
            if worm.trails.get(t).is_some_and(|k| k.seals > 0) {
                report
                    .breaks
                    .push(format!("trail {t} has seals but no anchor in the bucket"));
            } else if worm.trails.keys().any(|k| k != t) {
                report.breaks.push(format!(
                    "the audit table names trail {t}, which the bucket never anchored (the trail id was replaced)"
                ));
            }
        }
        _ => {}
    }
    for (t, known) in &worm.trails {
        match &known.retired {
            Some(r) if Some(t.as_str()) == trail => report.breaks.push(format!(
                "trail {t} is the table's trail but was retired at {} by {}",
                r.at, r.by
            )),
            _ if Some(t.as_str()) == trail => {}
            Some(r) => {
                let line = format!(
                    "{t}: {}, retired at {} by {} ({})",
                    seals(known.seals),
                    r.at,
                    r.by,
                    r.reason
                );
                if !accepted.iter().any(|a| a == t) {
                    report.breaks.push(format!(
                        "trail {line} — not accepted: a retirement is only a file in the bucket; review it and accept it by name (--accept-retired {t})"
                    ));
                }
                report.retired_trails.push(line);
            }
            None => report.breaks.push(format!(
                "trail {t} ({}{}) is not the table's trail and was never retired: the trail was replaced",
                seals(known.seals),
                known
                    .anchor
                    .as_ref()
                    .map(|a| format!(", anchored at {}", a.created_at))
                    .unwrap_or_default()
            )),
        }
    }
}

/// The seal chain of the plan's trail and every sealed head. A continuation (`report.from_seal`)
/// starts the chain at that seal instead of the first: its own `prev` was checked by the
/// verification that printed it, and is not read again.
pub(super) fn check_seals(plan: &SealPlan<'_>, chains: &BTreeMap<String, ChainSummary>, report: &mut VerifyReport) {
    let trail = plan.trail;
    for key in &plan.foreign {
        report
            .breaks
            .push(format!("seal {key}: not a seal key of trail {trail}"));
    }
    report.seals = plan.numbered.len() as u64;
    let mut expected = match report.from_seal {
        Some(seal) => (seal, None),
        None => (1u64, Some(FIRST_PREV.to_owned())),
    };
    for (seq, stored, parsed) in &plan.numbered {
        let (seq, key) = (*seq, &stored.key);
        if seq != expected.0 {
            report.breaks.push(format!(
                "seal chain of trail {trail}: seal {} is missing (the next present is {seq}): a gap in the seal chain",
                expected.0
            ));
        }
        let digest = seal_digest(stored.body.as_bytes());
        let seal = match parsed {
            Ok(s) => s,
            Err(why) => {
                report.breaks.push(format!("seal {key} {why}"));
                expected = (seq.saturating_add(1), Some(digest));
                continue;
            }
        };
        if seal.schema != SEAL_SCHEMA {
            report.breaks.push(format!(
                "seal {key}: its schema is {:?}, not {SEAL_SCHEMA}",
                seal.schema
            ));
        }
        if seal.trail != trail || seal.seq != seq {
            report.breaks.push(format!(
                "seal {key}: its content says trail {} seal {}: key and content disagree",
                seal.trail, seal.seq
            ));
        }
        if seq == expected.0 && expected.1.as_ref().is_some_and(|p| seal.prev != *p) {
            report.breaks.push(format!(
                "seal {key} does not name the digest of the seal before it (the seal chain was rewritten)"
            ));
        }
        if !seal.root_holds() {
            report.breaks.push(format!(
                "seal {key}: its Merkle root does not match its heads (the seal is not genuine)"
            ));
        } else {
            check_sealed_heads(key, seal, chains, report);
        }
        report.latest_seal = Some(key.clone());
        report.latest_seal_seq = Some(seq);
        expected = (seq.saturating_add(1), Some(digest));
    }
}

/// From the first seal with records beside it in the bucket (`archive.rs`; a seal written by a
/// release before that has none), every seal has them: of each chain whose head moved on since
/// the seal before, a part under the seal's number and root. Without it, the bucket alone cannot
/// vouch for those records (`--from-bucket` names the gap): a sealer skipped them.
fn check_records_beside(plan: &SealPlan<'_>, parts: &BTreeSet<(u64, String, String)>, report: &mut VerifyReport) {
    let beside = |seq: u64, seal: &AuditSeal, chain: &str| parts.contains(&(seq, seal.root.clone(), chain.to_owned()));
    let mut before: Option<&AuditSeal> = None;
    let mut begun = false;
    for (seq, stored, parsed) in &plan.numbered {
        let Ok(seal) = parsed else {
            before = None;
            continue;
        };
        let moved: Vec<(&str, u64, u64)> = seal
            .heads
            .iter()
            .map(|h| (h.chain.as_str(), first_after(before, &h.chain), h.seq))
            .filter(|(_, from, to)| from <= to)
            .collect();
        begun = begun || moved.iter().any(|(chain, ..)| beside(*seq, seal, chain));
        for (chain, from, to) in moved.iter().filter(|(chain, ..)| begun && !beside(*seq, seal, chain)) {
            report.breaks.push(format!(
                "seal {}: chain {chain}'s records {from}..{to} are not beside it in the bucket (its sealer did not write them): the bucket alone cannot vouch for them",
                stored.key
            ));
        }
        before = Some(seal);
    }
}

/// Each head of `seal` against the record now at its position; a continuation's
/// (`report.read_from`) never before the record the seal it started from fixed.
fn check_sealed_heads(key: &str, seal: &AuditSeal, chains: &BTreeMap<String, ChainSummary>, report: &mut VerifyReport) {
    for h in &seal.heads {
        let at = chains.get(&h.chain).and_then(|c| c.sealed.get(&h.seq));
        let read_from = report.from_seal.zip(report.read_from.get(&h.chain).copied());
        let problem = match (at, read_from) {
            (_, Some((start, first))) if h.seq < first => format!(
                "seal {key} commits to this record, before record {first} that seal {start} committed to: a chain's head never goes back"
            ),
            (Some(r), _) if r.hash == h.hash => continue,
            (Some(r), _) => format!(
                "seal {key} fixed its hash at {}…, it is now {}… (rewritten after sealing)",
                short_hash(&h.hash),
                short_hash(&r.hash)
            ),
            (None, _) => format!("sealed by {key} but no longer present (deleted after sealing)"),
        };
        report.breaks.push(
            ChainBreak {
                chain: h.chain.clone(),
                seq: h.seq,
                audit_id: at.map(|r| r.audit_id.clone()),
                problem,
            }
            .to_string(),
        );
    }
}

/// The records after the newest seal (`last`, the seal each summary's tail was taken after), per
/// chain. While records wait, the newest seal (or, with
/// none, the oldest waiting record) must be younger than the window: the seal schedule writes one
/// every interval whatever happens, so an older one means sealing has stopped. The seal's own time
/// is the measure, not the records' (which a writer sets, and a stream may deliver late).
pub(super) fn unsealed_tail(
    chains: &BTreeMap<String, ChainSummary>,
    last: Option<&AuditSeal>,
    window: Option<SealWindow>,
    report: &mut VerifyReport,
) {
    for (chain, summary) in chains {
        let Some(tail) = summary.tail else { continue };
        report.unsealed.push(UnsealedTail {
            chain: chain.clone(),
            from_seq: tail.from_seq,
            to_seq: tail.to_seq,
            oldest_at: tail.oldest_at,
        });
    }
    let since = match last {
        Some(s) => Some(s.at),
        None => report.unsealed.iter().filter_map(|t| t.oldest_at).min(),
    };
    if let (Some(w), Some(since), false) = (window, since, report.unsealed.is_empty())
        && w.now.signed_duration_since(since) > w.max_age
    {
        let waiting: Vec<String> = report
            .unsealed
            .iter()
            .map(|t| format!("{} {}..{}", t.chain, t.from_seq, t.to_seq))
            .collect();
        report.breaks.push(format!(
                "no seal since {since}, longer than the {} minute window, while records wait ({}): sealing has stopped, and these records could be truncated undetected",
                w.max_age.num_minutes(),
                waiting.join(", ")
            ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::seal::{TrailAnchor, TrailRetirement};
    use crate::evidence::KnownTrail;

    #[test]
    fn each_trail_of_the_bucket_is_the_tables_anchored_and_unretired_or_retired_and_accepted() {
        let at = DateTime::UNIX_EPOCH;
        let known = |retired: bool, t: &str| KnownTrail {
            anchor: Some(TrailAnchor::new(t, at)),
            retired: retired.then(|| TrailRetirement::new(t, at, "ops", "rebuilt")),
            seals: 2,
        };
        let worm = |trails: [(&str, KnownTrail); 3]| WormEvidence {
            trails: trails.into_iter().map(|(t, k)| (t.to_owned(), k)).collect(),
            ..WormEvidence::default()
        };
        let check = |worm: &WormEvidence, accepted: &[&str]| {
            let mut report = VerifyReport {
                trail: Some("a".into()),
                ..VerifyReport::default()
            };
            let accepted: Vec<String> = accepted.iter().map(|a| (*a).to_owned()).collect();
            check_trails(worm, &accepted, &mut report);
            report
        };
        let fine = worm([
            ("a", known(false, "a")),
            ("b", known(true, "b")),
            ("c", known(true, "c")),
        ]);
        let report = check(&fine, &["b", "c"]);
        assert!(
            report.breaks.is_empty() && report.retired_trails.len() == 2,
            "{report:?}"
        );
        let report = check(&fine, &["b"]);
        assert!(
            report.breaks.len() == 1
                && report.breaks[0].contains("c: 2 seals")
                && report.breaks[0].contains("not accepted"),
            "{report:?}"
        );
        let bad = worm([
            ("a", known(true, "a")),
            ("b", known(false, "b")),
            ("c", known(true, "c")),
        ]);
        let report = check(&bad, &["c"]);
        assert!(
            report.breaks[0].contains("trail a is the table's trail but was retired"),
            "{report:?}"
        );
        assert!(
            report.breaks[1].contains("trail b (2 seals, anchored at") && report.breaks.len() == 2,
            "{report:?}"
        );
    }
}
