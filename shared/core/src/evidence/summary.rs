//! What the seal and tail checks need of the records, remembered as the records go by: of each
//! chain, how many records were read, the hash and id of the record at each position a seal
//! commits to, and the span of the unsealed tail. The seals are read before the records, so which
//! positions matter and where the tail starts are known before the first record is: a
//! verification holds this, not the trail, and holds the same whether it read the records whole
//! (`verify_all`, a bundle) or page by page (`verify_trail`).

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};

use super::anchors::StoredSeal;
use crate::domain::audit::ChainedRecord;
use crate::domain::seal::{AuditSeal, parse_seal_key};

/// The seals of one trail as read from the bucket, each parsed once.
pub(super) struct SealPlan<'a> {
    pub trail: &'a str,
    /// Stored seals whose key is not a seal key of the trail.
    pub foreign: Vec<&'a str>,
    /// The trail's seals in number order (as stored for one number), each with what it reads as.
    pub numbered: Vec<(u64, &'a StoredSeal, Result<AuditSeal, String>)>,
}

impl<'a> SealPlan<'a> {
    pub fn new(trail: &'a str, seals: &'a [StoredSeal]) -> Self {
        let mut foreign = Vec::new();
        let mut numbered = Vec::new();
        for s in seals {
            match parse_seal_key(&s.key) {
                Some((t, seq)) if t == trail => numbered.push((seq, s, AuditSeal::parse(s.body.as_bytes()))),
                _ => foreign.push(s.key.as_str()),
            }
        }
        numbered.sort_by_key(|(seq, ..)| *seq);
        SealPlan {
            trail,
            foreign,
            numbered,
        }
    }

    /// The newest seal that reads, whatever its checks find: the unsealed tail is what lies after
    /// its heads.
    pub fn last(&self) -> Option<&AuditSeal> {
        self.numbered.iter().rev().find_map(|(_, _, s)| s.as_ref().ok())
    }
}

/// What the checks need of each chain's records.
#[derive(Debug, Default)]
pub(super) struct Needs {
    /// The positions the seals whose root holds commit to (only those are checked against the
    /// records now there).
    sealed: BTreeMap<String, BTreeSet<u64>>,
    /// The head the newest seal commits to: the records after it are the unsealed tail (all of a
    /// chain it does not name).
    sealed_to: BTreeMap<String, u64>,
}

impl Needs {
    pub fn of(plan: Option<&SealPlan<'_>>) -> Self {
        let mut needs = Needs::default();
        let Some(plan) = plan else { return needs };
        for seal in plan.numbered.iter().filter_map(|(_, _, s)| s.as_ref().ok()) {
            if seal.root_holds() {
                for h in &seal.heads {
                    needs.sealed.entry(h.chain.clone()).or_default().insert(h.seq);
                }
            }
        }
        if let Some(last) = plan.last() {
            for h in &last.heads {
                // The first head of a chain, as the tail check finds it.
                needs.sealed_to.entry(h.chain.clone()).or_insert(h.seq);
            }
        }
        needs
    }

    /// What one chain's records are needed for.
    pub fn chain(&self, chain: &str) -> ChainNeeds<'_> {
        ChainNeeds {
            sealed: self.sealed.get(chain),
            sealed_to: self.sealed_to.get(chain).copied().unwrap_or(0),
        }
    }
}

/// [`Needs`] of one chain.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChainNeeds<'a> {
    sealed: Option<&'a BTreeSet<u64>>,
    sealed_to: u64,
}

/// One record as the checks see it.
pub(super) struct Digest<'a> {
    pub seq: u64,
    pub hash: &'a str,
    pub audit_id: &'a str,
    /// When it was written; `None` for a record that does not read back.
    pub at: Option<DateTime<Utc>>,
}

impl<'a> Digest<'a> {
    pub fn of(r: &'a ChainedRecord) -> Self {
        Digest {
            seq: r.seq,
            hash: &r.hash,
            audit_id: &r.record.audit_id,
            at: r.unreadable.is_none().then_some(r.record.at),
        }
    }
}

/// The record read at a position a seal commits to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SealedRecord {
    pub hash: String,
    pub audit_id: String,
}

/// The records of one chain after the newest seal's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tail {
    pub from_seq: u64,
    pub to_seq: u64,
    /// The oldest time among those that read back.
    pub oldest_at: Option<DateTime<Utc>>,
}

/// What the checks need of one chain's records: its size does not grow with the chain, only with
/// the positions seals commit to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ChainSummary {
    pub records: u64,
    /// Position -> the first record read there.
    pub sealed: BTreeMap<u64, SealedRecord>,
    pub tail: Option<Tail>,
}

impl ChainSummary {
    /// Count one record, and remember of it what `needs` asks for.
    pub fn add(&mut self, needs: ChainNeeds<'_>, r: &Digest<'_>) {
        self.records += 1;
        if needs.sealed.is_some_and(|s| s.contains(&r.seq)) {
            self.sealed.entry(r.seq).or_insert_with(|| SealedRecord {
                hash: r.hash.to_owned(),
                audit_id: r.audit_id.to_owned(),
            });
        }
        if r.seq > needs.sealed_to {
            let t = self.tail.get_or_insert(Tail {
                from_seq: r.seq,
                to_seq: r.seq,
                oldest_at: None,
            });
            t.from_seq = t.from_seq.min(r.seq);
            t.to_seq = t.to_seq.max(r.seq);
            t.oldest_at = t.oldest_at.into_iter().chain(r.at).min();
        }
    }
}
