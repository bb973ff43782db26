//! Verifying a chain: every link, every hash, no gap, up to its head — over a slice of records or
//! a record at a time.

use super::{ChainBreak, ChainHead, ChainedRecord, GENESIS, record_hash, short_hash};

/// Verify one chain (records in `seq` order) against its head: every link, every hash, no gap.
/// Returns the chain's length.
pub fn verify_chain(chain: &str, records: &[ChainedRecord], head: Option<&ChainHead>) -> Result<u64, ChainBreak> {
    let mut verifier = ChainVerifier::new(chain, 1);
    for r in records {
        verifier.push(r);
    }
    verifier.finish(head)
}

/// [`verify_chain`] a record at a time, for a chain read in pages: it remembers the position and
/// hash it expects next and the first break, never the records, so its memory does not grow with
/// the chain.
#[derive(Clone, Debug)]
pub struct ChainVerifier {
    chain: String,
    expected_seq: u64,
    /// `None` before the first record of a chain verified from a later record: its `prev_hash`
    /// links to a record that is not read.
    expected_prev: Option<String>,
    broken: Option<ChainBreak>,
}

/// What [`ChainVerifier`] needs of a record, its content already checked against its hash: a record
/// read before the verifier can take it (its place in the order not yet known) is held as this,
/// not as its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordLink {
    pub chain: String,
    pub seq: u64,
    pub audit_id: String,
    pub prev_hash: String,
    pub hash: String,
    pub unreadable: Option<String>,
    /// It reads as a record, and its content, chain, seq and `prev_hash` hash to `hash`.
    pub content_holds: bool,
}

impl RecordLink {
    pub fn of(r: &ChainedRecord) -> Self {
        RecordLink {
            chain: r.chain.clone(),
            seq: r.seq,
            audit_id: r.record.audit_id.clone(),
            prev_hash: r.prev_hash.clone(),
            hash: r.hash.clone(),
            unreadable: r.unreadable.clone(),
            content_holds: r.unreadable.is_none() && record_hash(&r.record, &r.chain, r.seq, &r.prev_hash) == r.hash,
        }
    }
}

/// One record as the verifier looks at it (borrowed from a record or a [`RecordLink`]).
struct Link<'a> {
    chain: &'a str,
    seq: u64,
    audit_id: &'a str,
    prev_hash: &'a str,
    hash: &'a str,
    unreadable: Option<&'a str>,
}

impl ChainVerifier {
    /// Verify `chain` from record `from_seq` on (0 or 1: from its first record, linked to genesis).
    /// From a later record that record's own `prev_hash` is not checked (the record before it is
    /// not read): the caller checks its hash against the one a seal fixed.
    pub fn new(chain: &str, from_seq: u64) -> Self {
        let from_seq = from_seq.max(1);
        ChainVerifier {
            chain: chain.to_owned(),
            expected_seq: from_seq,
            expected_prev: (from_seq == 1).then(|| GENESIS.to_owned()),
            broken: None,
        }
    }

    /// The next record, in `seq` order. After the first break the records are not looked at: a
    /// chain is reported broken once, where it breaks.
    pub fn push(&mut self, r: &ChainedRecord) {
        let link = Link {
            chain: &r.chain,
            seq: r.seq,
            audit_id: &r.record.audit_id,
            prev_hash: &r.prev_hash,
            hash: &r.hash,
            unreadable: r.unreadable.as_deref(),
        };
        // The hash is computed only for a record the verifier reaches.
        self.step(&link, || {
            record_hash(&r.record, &r.chain, r.seq, &r.prev_hash) == r.hash
        });
    }

    /// [`ChainVerifier::push`] of a record held as its link.
    pub fn push_link(&mut self, l: &RecordLink) {
        let link = Link {
            chain: &l.chain,
            seq: l.seq,
            audit_id: &l.audit_id,
            prev_hash: &l.prev_hash,
            hash: &l.hash,
            unreadable: l.unreadable.as_deref(),
        };
        self.step(&link, || l.content_holds);
    }

    fn step(&mut self, r: &Link<'_>, content_holds: impl FnOnce() -> bool) {
        if self.broken.is_some() {
            return;
        }
        let brk = |seq: u64, problem: String| ChainBreak {
            chain: self.chain.clone(),
            seq,
            audit_id: Some(r.audit_id.to_owned()),
            problem,
        };
        let problem = if let Some(why) = r.unreadable {
            Some(brk(r.seq, format!("cannot be read back as a record ({why}): modified")))
        } else if r.chain != self.chain {
            Some(brk(r.seq, format!("belongs to chain {}", r.chain)))
        } else if r.seq != self.expected_seq {
            Some(ChainBreak {
                chain: self.chain.clone(),
                seq: self.expected_seq,
                audit_id: None,
                problem: format!(
                    "missing: the next record present is {} ({}) — deleted or reordered",
                    r.seq, r.audit_id
                ),
            })
        } else if self.expected_prev.as_ref().is_some_and(|p| r.prev_hash != p) {
            Some(brk(
                r.seq,
                "its prev_hash is not the hash of the record before it (reordered or replaced)".into(),
            ))
        } else if !content_holds() {
            Some(brk(r.seq, "its content does not match its hash (modified)".into()))
        } else {
            None
        };
        match problem {
            Some(b) => self.broken = Some(b),
            None => {
                self.expected_prev = Some(r.hash.to_owned());
                self.expected_seq += 1;
            }
        }
    }

    /// The chain's length once every record was pushed, checked against its head; or the first
    /// break.
    pub fn finish(self, head: Option<&ChainHead>) -> Result<u64, ChainBreak> {
        if let Some(b) = self.broken {
            return Err(b);
        }
        let chain = self.chain;
        let length = self.expected_seq - 1;
        let Some(h) = head else { return Ok(length) };
        if length > h.seq {
            return Err(ChainBreak {
                chain,
                seq: h.seq.saturating_add(1),
                audit_id: None,
                problem: format!(
                    "records {}..{length} lie beyond the chain's head (no head links them: written outside the append protocol, or the head was rolled back)",
                    h.seq.saturating_add(1)
                ),
            });
        }
        // With no record read from a later start, the head's hash is the caller's to check.
        let hash_differs = self.expected_prev.as_ref().is_some_and(|p| length > 0 && h.hash != *p);
        if h.seq != length || hash_differs {
            return Err(ChainBreak {
                chain,
                seq: length + 1,
                audit_id: None,
                problem: format!(
                    "the chain ends at record {length} but its head says {} records (hash {}…): the last records were deleted or the head rewritten",
                    h.seq,
                    short_hash(&h.hash)
                ),
            });
        }
        Ok(length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AuditKind, AuditRecord};

    #[test]
    fn a_record_held_as_its_link_verifies_as_the_record_does() {
        let mut records: Vec<ChainedRecord> = Vec::new();
        for i in 1..=6u64 {
            let r = AuditRecord::system(
                AuditKind::DlqOverflow,
                &i.to_string(),
                chrono::DateTime::UNIX_EPOCH,
                "t",
                String::new(),
            );
            let prev = records.last().map_or(GENESIS.to_owned(), |p| p.hash.clone());
            records.push(super::super::link(r, "c0", i - 1, &prev));
        }
        let head = ChainHead {
            chain: "c0".into(),
            seq: 6,
            hash: records[5].hash.clone(),
        };
        let mut modified = records.clone();
        modified[2].record.detail = "edited".into();
        let mut gap = records.clone();
        gap.remove(3);
        for list in [records, modified, gap] {
            let mut by_link = ChainVerifier::new("c0", 1);
            for r in &list {
                by_link.push_link(&RecordLink::of(r));
            }
            assert_eq!(by_link.finish(Some(&head)), verify_chain("c0", &list, Some(&head)));
        }
    }
}
