//! The chains read page by page (`AuditLog::chain_page`), each record handed as it comes to its
//! chain's verifier and summary: a verification holds one page and, of each chain, what
//! `summary.rs` keeps — never the trail.
//!
//! The order of a verification holds: the heads, every chain's pages, the heads again. A record
//! beyond the first heads was either appended while the pages were read (left out) or lies beyond
//! every head (named); only the second heads tell which, so it is held until then, as its link
//! (its content already checked against its hash), not as its content. Few are: those appended
//! during the read, those written past a head, and every record of a chain whose head is missing.

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::summary::{ChainNeeds, ChainSummary, Digest, Needs};
use super::verify::VerifyReport;
use crate::domain::audit::{ChainHead, ChainVerifier, ChainedRecord, RecordLink};
use crate::ports::{AuditLog, Cursor, StoreResult};

pub const VERIFY_PAGE: usize = 1000;

/// A record held until the second heads are read.
struct Held {
    link: RecordLink,
    at: Option<DateTime<Utc>>,
}

struct ChainRead<'a> {
    chain: String,
    needs: ChainNeeds<'a>,
    /// Its head when the reading began (`None`: it had none).
    head: Option<ChainHead>,
    /// The first record verified.
    from: u64,
    verifier: ChainVerifier,
    summary: ChainSummary,
    held: Vec<Held>,
}

impl<'a> ChainRead<'a> {
    fn new(chain: &str, start: u64, head: Option<ChainHead>, needs: ChainNeeds<'a>) -> Self {
        ChainRead {
            chain: chain.to_owned(),
            needs,
            head,
            from: start.max(1),
            verifier: ChainVerifier::new(chain, start),
            summary: ChainSummary::default(),
            held: Vec::new(),
        }
    }

    fn take(&mut self, r: &ChainedRecord) {
        if r.seq > self.head.as_ref().map_or(0, |h| h.seq) {
            self.held.push(Held {
                link: RecordLink::of(r),
                at: r.unreadable.is_none().then_some(r.record.at),
            });
            return;
        }
        self.verifier.push(r);
        self.summary.add(self.needs, &Digest::of(r));
    }

    /// The held records not appended during the read (beyond `after`, the head read after it), in
    /// the order read; then the chain's verdict. `None` for a chain with neither records nor head.
    fn settle(mut self, after: u64, report: &mut VerifyReport) -> Option<ChainSummary> {
        for h in self.held.iter().filter(|h| h.link.seq > after) {
            self.verifier.push_link(&h.link);
            let digest = Digest {
                seq: h.link.seq,
                hash: &h.link.hash,
                audit_id: &h.link.audit_id,
                at: h.at,
            };
            self.summary.add(self.needs, &digest);
        }
        let records = self.summary.records;
        report.records += records;
        match &self.head {
            None if records == 0 => return None,
            None => report.breaks.push(format!(
                "chain {}: {records} records but no head (the head was deleted)",
                self.chain
            )),
            Some(head) => match self.verifier.finish(Some(head)) {
                Ok(n) => {
                    report.chains.insert(self.chain, n.saturating_sub(self.from - 1));
                }
                Err(b) => report.breaks.push(b.to_string()),
            },
        }
        Some(self.summary)
    }
}

fn head_of(heads: &[ChainHead], chain: &str) -> Option<ChainHead> {
    heads.iter().find(|h| h.chain == chain).cloned()
}

/// Each chain read settled against `after`, the heads read after its records; first, a chain of
/// `before` (the heads read before them) with no records read is checked against none, as a
/// whole read would. Returns what the seal and tail checks need of each chain that has records
/// or a head.
fn settle<'a>(
    mut reads: BTreeMap<String, ChainRead<'a>>,
    before: &[ChainHead],
    after: &[ChainHead],
    needs: &'a Needs,
    report: &mut VerifyReport,
) -> BTreeMap<String, ChainSummary> {
    for h in before {
        reads
            .entry(h.chain.clone())
            .or_insert_with(|| ChainRead::new(&h.chain, 1, Some(h.clone()), needs.chain(&h.chain)));
    }
    let mut summaries = BTreeMap::new();
    for (chain, read) in reads {
        let after = head_of(after, &chain).map_or(0, |h| h.seq);
        if let Some(summary) = read.settle(after, report) {
            summaries.insert(chain, summary);
        }
    }
    summaries
}

/// Every chain of `records`, read whole (a bundle, [`super::verify_all`]), against its head in
/// `heads`, each from its first record: the chains [`read_chains`] reads, with no record appended
/// meanwhile.
pub(super) fn verify_chains(
    records: &[ChainedRecord],
    heads: &[ChainHead],
    needs: &Needs,
    report: &mut VerifyReport,
) -> BTreeMap<String, ChainSummary> {
    let mut sorted: Vec<&ChainedRecord> = records.iter().collect();
    sorted.sort_by_key(|r| r.seq);
    let mut reads = BTreeMap::new();
    for r in sorted {
        reads
            .entry(r.chain.clone())
            .or_insert_with(|| ChainRead::new(&r.chain, 1, head_of(heads, &r.chain), needs.chain(&r.chain)))
            .take(r);
    }
    settle(reads, heads, heads, needs, report)
}

/// Read each chain of `starts` (chain -> the first `seq` read; 0 reads every record) in pages of
/// `page` records between two reads of the heads, and verify each from its start against its
/// head as first read: the records kept count in `report.records`, each chain verified in
/// `report.chains`, each break goes to `report.breaks` in chain order. Returns what the seal and
/// tail checks need of each chain that has records or a head.
pub(super) async fn read_chains<A: AuditLog>(
    audit: &A,
    starts: &BTreeMap<String, u64>,
    needs: &Needs,
    page: usize,
    report: &mut VerifyReport,
) -> StoreResult<BTreeMap<String, ChainSummary>> {
    let before = audit.heads().await?;
    let mut reads = BTreeMap::new();
    for (chain, &start) in starts {
        let mut read = ChainRead::new(chain, start, head_of(&before, chain), needs.chain(chain));
        let mut cursor = Cursor::new("audit chain read");
        while let Some(at) = cursor.at() {
            let (records, next) = audit.chain_page(chain, start, at, page.max(1)).await?;
            for r in records.iter().filter(|r| r.seq >= start) {
                read.take(r);
            }
            cursor.follow(next)?;
        }
        reads.insert(chain.clone(), read);
    }
    let after = audit.heads().await?;
    Ok(settle(reads, &before, &after, needs, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::audit::{GENESIS, link};
    use crate::domain::seal::{AuditSeal, FIRST_PREV, seal_key};
    use crate::domain::{AuditKind, AuditRecord};
    use crate::evidence::StoredSeal;
    use crate::evidence::summary::{SealPlan, Tail};

    const TRAIL: &str = "0123456789abcdef";

    fn chain(n: u64) -> Vec<ChainedRecord> {
        let mut out: Vec<ChainedRecord> = Vec::new();
        for i in 1..=n {
            let r = AuditRecord::system(
                AuditKind::DlqOverflow,
                &i.to_string(),
                DateTime::UNIX_EPOCH,
                "t",
                String::new(),
            );
            let prev = out.last().map_or(GENESIS.to_owned(), |p| p.hash.clone());
            out.push(link(r, "c0", i - 1, &prev));
        }
        out
    }

    fn head_at(records: &[ChainedRecord], seq: u64) -> ChainHead {
        let r = &records[usize::try_from(seq - 1).unwrap()];
        ChainHead {
            chain: r.chain.clone(),
            seq,
            hash: r.hash.clone(),
        }
    }

    /// Seals committing chain c0 to each of `at`.
    fn seals(records: &[ChainedRecord], at: &[u64]) -> Vec<StoredSeal> {
        (1..)
            .zip(at)
            .map(|(n, &seq)| StoredSeal {
                key: seal_key(TRAIL, n),
                version_id: format!("v{n}"),
                body: AuditSeal::new(TRAIL, n, FIRST_PREV, DateTime::UNIX_EPOCH, vec![head_at(records, seq)])
                    .canonical(),
            })
            .collect()
    }

    #[test]
    fn a_chain_read_holds_the_sealed_positions_and_the_tail_span_not_the_records() {
        let records = chain(3_000);
        let stored = seals(&records, &[700, 1_500, 2_990]);
        let plan = SealPlan::new(TRAIL, &stored);
        let needs = Needs::of(Some(&plan));
        let head = head_at(&records, 3_000);
        let mut read = ChainRead::new("c0", 0, Some(head), needs.chain("c0"));
        for r in &records {
            read.take(r);
        }
        assert!(read.held.is_empty(), "nothing lies beyond the head read first");
        assert_eq!(
            read.summary.sealed.keys().copied().collect::<Vec<_>>(),
            [700, 1_500, 2_990]
        );
        let tail = Tail {
            from_seq: 2_991,
            to_seq: 3_000,
            oldest_at: Some(DateTime::UNIX_EPOCH),
        };
        assert_eq!(read.summary.tail, Some(tail));
        let mut report = VerifyReport::default();
        let summary = read.settle(3_000, &mut report).unwrap();
        assert_eq!((summary.records, report.records), (3_000, 3_000));
        assert!(
            report.breaks.is_empty() && report.chains.get("c0") == Some(&3_000),
            "{report:?}"
        );
    }

    #[test]
    fn records_beyond_the_first_head_are_held_as_links_until_the_second() {
        let records = chain(1_200);
        let needs = Needs::default();
        // Appended while read: beyond the first head, within the second.
        let mut read = ChainRead::new("c0", 0, Some(head_at(&records, 1_000)), needs.chain("c0"));
        records.iter().for_each(|r| read.take(r));
        assert_eq!(read.held.len(), 200);
        assert_eq!(read.summary.records, 1_000);
        let mut report = VerifyReport::default();
        read.settle(1_200, &mut report);
        assert!(report.breaks.is_empty() && report.records == 1_000, "{report:?}");
        // Beyond both: named.
        let mut read = ChainRead::new("c0", 0, Some(head_at(&records, 1_000)), needs.chain("c0"));
        records.iter().for_each(|r| read.take(r));
        let mut report = VerifyReport::default();
        read.settle(1_000, &mut report);
        assert!(report.breaks[0].contains("records 1001..1200 lie beyond"), "{report:?}");
    }
}
