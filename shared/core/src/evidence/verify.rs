//! Verification, pure (used online and offline): every chain against its head; the trail against
//! its anchor; the seal chain (no gap, each naming the digest of the one before, each root the
//! root of its heads, each key agreeing with its content); every sealed head against the record
//! now at that position; and the unsealed tail, with the records that have waited too long.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::anchors::{StoredSeal, WormEvidence};
use crate::domain::audit::{ChainBreak, ChainHead, ChainedRecord, short_hash, verify_chain_from};
use crate::domain::seal::{AuditSeal, FIRST_PREV, SEAL_SCHEMA, parse_seal_key, seal_digest};

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

/// Verify the trail the table names (`trail`) from its records, heads and what the bucket shows.
pub fn verify_all(
    records: &[ChainedRecord],
    heads: &[ChainHead],
    trail: Option<&str>,
    worm: &WormEvidence,
    opts: &VerifyOptions,
) -> VerifyReport {
    let mut report = VerifyReport {
        trail: trail.map(str::to_owned),
        records: records.len() as u64,
        ..VerifyReport::default()
    };
    let by_chain = verify_chains(records, heads, &BTreeMap::new(), &mut report);
    report.breaks.extend(worm.findings.iter().cloned());
    check_trails(trail, worm, &opts.accept_retired, &mut report);
    let last = match trail {
        Some(t) => check_seals(t, &worm.seals, &by_chain, None, &mut report),
        None => None,
    };
    unsealed_tail(&by_chain, last.as_ref(), opts.window, &mut report);
    report
}

/// Every chain against its head, each from its record in `read_from` (from its first record when
/// not there); the records grouped by chain, in `seq` order. `report.chains` counts the records
/// verified.
pub(super) fn verify_chains(
    records: &[ChainedRecord],
    heads: &[ChainHead],
    read_from: &BTreeMap<String, u64>,
    report: &mut VerifyReport,
) -> BTreeMap<String, Vec<ChainedRecord>> {
    let mut by_chain: BTreeMap<String, Vec<ChainedRecord>> = BTreeMap::new();
    for r in records {
        by_chain.entry(r.chain.clone()).or_default().push(r.clone());
    }
    for h in heads {
        by_chain.entry(h.chain.clone()).or_default();
    }
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
        let from = read_from.get(chain).copied().unwrap_or(1).max(1);
        match verify_chain_from(chain, list, from, head) {
            Ok(n) => {
                report.chains.insert(chain.clone(), n.saturating_sub(from - 1));
            }
            Err(b) => report.breaks.push(b.to_string()),
        }
    }
    by_chain
}

/// The trail the table names is the one the bucket anchors, and every other trail the bucket
/// knows was retired explicitly.
pub(super) fn check_trails(trail: Option<&str>, worm: &WormEvidence, accepted: &[String], report: &mut VerifyReport) {
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
        if Some(t.as_str()) == trail {
            if let Some(r) = &known.retired {
                report.breaks.push(format!(
                    "trail {t} is the table's trail but was retired at {} by {}",
                    r.at, r.by
                ));
            }
            continue;
        }
        match &known.retired {
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

/// Where a continuation starts: the seal an earlier verification checked (its own `prev` was
/// checked then: it is not read again here), and the first record read of each chain (the one
/// that seal fixed; a chain it does not name is read from its first record).
pub(super) struct ContinuedFrom {
    pub seal: u64,
    pub read_from: BTreeMap<String, u64>,
}

/// The seal chain of `trail` and every sealed head; returns the newest seal that reads. With
/// `from`, the chain starts at that seal instead of the first.
pub(super) fn check_seals(
    trail: &str,
    seals: &[StoredSeal],
    by_chain: &BTreeMap<String, Vec<ChainedRecord>>,
    from: Option<&ContinuedFrom>,
    report: &mut VerifyReport,
) -> Option<AuditSeal> {
    let mut numbered: Vec<(u64, &StoredSeal)> = Vec::new();
    for s in seals {
        match parse_seal_key(&s.key) {
            Some((t, seq)) if t == trail => numbered.push((seq, s)),
            _ => report
                .breaks
                .push(format!("seal {}: not a seal key of trail {trail}", s.key)),
        }
    }
    numbered.sort_by_key(|(seq, _)| *seq);
    report.seals = numbered.len() as u64;
    let mut expected = match from {
        Some(c) => (c.seal, None),
        None => (1u64, Some(FIRST_PREV.to_owned())),
    };
    let mut last = None;
    for (seq, stored) in numbered {
        let key = &stored.key;
        if seq != expected.0 {
            report.breaks.push(format!(
                "seal chain of trail {trail}: seal {} is missing (the next present is {seq}): a gap in the seal chain",
                expected.0
            ));
        }
        let digest = seal_digest(stored.body.as_bytes());
        let seal = match AuditSeal::parse(stored.body.as_bytes()) {
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
            check_sealed_heads(key, &seal, by_chain, from, report);
        }
        report.latest_seal = Some(key.clone());
        report.latest_seal_seq = Some(seq);
        expected = (seq.saturating_add(1), Some(digest));
        last = Some(seal);
    }
    last
}

fn check_sealed_heads(
    key: &str,
    seal: &AuditSeal,
    by_chain: &BTreeMap<String, Vec<ChainedRecord>>,
    from: Option<&ContinuedFrom>,
    report: &mut VerifyReport,
) {
    for h in &seal.heads {
        let at = by_chain.get(&h.chain).and_then(|l| l.iter().find(|r| r.seq == h.seq));
        let read_from = from.and_then(|c| c.read_from.get(&h.chain).map(|first| (c.seal, *first)));
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
                audit_id: at.map(|r| r.record.audit_id.clone()),
                problem,
            }
            .to_string(),
        );
    }
}

/// The records after the newest seal, per chain. While records wait, the newest seal (or, with
/// none, the oldest waiting record) must be younger than the window: the seal schedule writes one
/// every interval whatever happens, so an older one means sealing has stopped. The seal's own time
/// is the measure, not the records' (which a writer sets, and a stream may deliver late).
pub(super) fn unsealed_tail(
    by_chain: &BTreeMap<String, Vec<ChainedRecord>>,
    last: Option<&AuditSeal>,
    window: Option<SealWindow>,
    report: &mut VerifyReport,
) {
    for (chain, list) in by_chain {
        let sealed = last
            .and_then(|s| s.heads.iter().find(|h| &h.chain == chain))
            .map_or(0, |h| h.seq);
        let tail: Vec<&ChainedRecord> = list.iter().filter(|r| r.seq > sealed).collect();
        let (Some(first), Some(end)) = (tail.first(), tail.last()) else {
            continue;
        };
        let oldest_at = tail
            .iter()
            .filter(|r| r.unreadable.is_none())
            .map(|r| r.record.at)
            .min();
        report.unsealed.push(UnsealedTail {
            chain: chain.clone(),
            from_seq: first.seq,
            to_seq: end.seq,
            oldest_at,
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
