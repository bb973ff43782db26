//! `verify_trail` reads the chains page by page and holds no chain: its report is the one
//! `verify_all` gives over the same records, heads and bucket read whole — on an intact trail and
//! on every attack — whatever the page size, and it reads nothing but pages no larger than asked.

use chrono::{Duration, Utc};
use recon_core::domain::audit::{AUDIT_CHAINS, ChainHead, ChainedRecord, link};
use recon_core::domain::seal::{AuditSeal, seal_key};
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::evidence::{
    SealWindow, VERIFY_PAGE, VerifyOptions, VerifyReport, read_worm, seal, verify_all, verify_trail,
    verify_trail_in_pages,
};
use recon_core::ports::{AuditLog, ChainPage, StoreResult, Worm};
use recon_testkit::memory::{MemoryAuditLog, MemoryWorm};
use std::sync::Mutex;

fn rec(n: u32) -> AuditRecord {
    let mut r = AuditRecord::system(
        AuditKind::DuplicateSuppressed,
        &format!("s{n}"),
        Utc::now(),
        "consumer",
        String::new(),
    );
    r.amount = Some(format!("{n}.00"));
    r.currency = Some("USD".into());
    r
}

/// One page read: its limit and how many records it held (the port has no other read: a chain
/// is never read whole).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Read {
    limit: usize,
    got: usize,
}

/// An audit log that records every read and every heads answer, can hide a head (a head deleted)
/// and can append records while a verification reads (on its first page).
#[derive(Default)]
struct Watched {
    log: MemoryAuditLog,
    hidden_head: Mutex<Option<String>>,
    append_on_read: Mutex<Vec<AuditRecord>>,
    heads_seen: Mutex<Vec<Vec<ChainHead>>>,
    reads: Mutex<Vec<Read>>,
}

impl AuditLog for Watched {
    async fn append(&self, record: &AuditRecord) -> StoreResult<Option<u64>> {
        self.log.append(record).await
    }
    async fn chain_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        let appended: Vec<AuditRecord> = std::mem::take(&mut *self.append_on_read.lock().unwrap());
        for r in &appended {
            self.log.append(r).await?;
        }
        let page = self.log.chain_page(chain, from_seq, cursor, limit).await?;
        let got = page.0.len();
        self.reads.lock().unwrap().push(Read { limit, got });
        Ok(page)
    }
    async fn heads(&self) -> StoreResult<Vec<ChainHead>> {
        let hidden = self.hidden_head.lock().unwrap().clone();
        let mut heads = self.log.heads().await?;
        heads.retain(|h| Some(&h.chain) != hidden.as_ref());
        self.heads_seen.lock().unwrap().push(heads.clone());
        Ok(heads)
    }
    async fn current_trail(&self) -> StoreResult<Option<String>> {
        self.log.current_trail().await
    }
    async fn start_trail(&self, candidate: &str) -> StoreResult<String> {
        self.log.start_trail(candidate).await
    }
}

/// 60 records, seal 1, 30 more, seal 2, 20 more, seal 3, 15 more (unsealed).
async fn history() -> (Watched, MemoryWorm, Vec<AuditSeal>) {
    let (audit, worm) = (Watched::default(), MemoryWorm::default());
    let mut seals = Vec::new();
    let mut n = 0;
    for (batch, sealed) in [(60, true), (30, true), (20, true), (15, false)] {
        for _ in 0..batch {
            audit.append(&rec(n)).await.unwrap();
            n += 1;
        }
        if sealed {
            seals.push(seal(&audit, &worm, Utc::now()).await.unwrap().1);
        }
    }
    (audit, worm, seals)
}

/// What `verify_all` says of the records as the last verification read them: the heads it read
/// first, every record now less those appended between its two heads reads.
async fn whole(audit: &Watched, worm: &MemoryWorm, opts: &VerifyOptions) -> VerifyReport {
    let seen = audit.heads_seen.lock().unwrap().clone();
    let (before, after) = (&seen[seen.len() - 2], &seen[seen.len() - 1]);
    let trail = audit.log.current_trail().await.unwrap();
    let ev = read_worm(worm, trail.as_deref()).await.unwrap();
    let mut records = Vec::new();
    for c in 0..AUDIT_CHAINS {
        records.extend(
            recon_core::ports::read_chain(&audit.log, &format!("c{c}"), 0)
                .await
                .unwrap(),
        );
    }
    let seq_of = |heads: &[ChainHead], chain: &str| heads.iter().find(|h| h.chain == chain).map_or(0, |h| h.seq);
    records.retain(|r| !(r.seq > seq_of(before, &r.chain) && r.seq <= seq_of(after, &r.chain)));
    verify_all(&records, before, trail.as_deref(), &ev, opts)
}

/// The streaming report, read in pages of each size, against `verify_all`'s; the last one.
async fn same_as_whole(audit: &Watched, worm: &MemoryWorm, opts: &VerifyOptions, pages: &[usize]) -> VerifyReport {
    let mut last = None;
    for &page in pages {
        audit.heads_seen.lock().unwrap().clear();
        let streamed = verify_trail_in_pages(audit, worm, opts, page).await.unwrap();
        assert_eq!(streamed, whole(audit, worm, opts).await, "pages of {page}");
        last = Some(streamed);
    }
    last.unwrap()
}

const PAGES: [usize; 4] = [1, 3, 7, VERIFY_PAGE];

fn named(report: &VerifyReport, what: &str) -> bool {
    report.breaks.iter().any(|b| b.contains(what))
}

/// The chain seal 2 fixed furthest (its head there, with records after it).
fn busiest(seals: &[AuditSeal]) -> ChainHead {
    seals[1].heads.iter().max_by_key(|h| h.seq).unwrap().clone()
}

fn tamper_at(audit: &Watched, chain: &str, seq: u64, f: impl FnOnce(&mut ChainedRecord)) {
    audit.log.tamper(|records| {
        f(records.iter_mut().find(|r| r.chain == chain && r.seq == seq).unwrap());
    });
}

fn window() -> VerifyOptions {
    VerifyOptions {
        window: Some(SealWindow {
            now: Utc::now() + Duration::minutes(45),
            max_age: Duration::minutes(30),
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_intact_trail_with_seals_and_an_unsealed_tail_reads_the_same_in_any_pages() {
    let (audit, worm, _) = history().await;
    let report = same_as_whole(&audit, &worm, &VerifyOptions::default(), &PAGES).await;
    assert!(report.intact(), "{report:?}");
    assert_eq!((report.records, report.seals), (125, 3));
    assert!(!report.unsealed.is_empty(), "{report:?}");
    // Sealing stopped while records wait: the window names it, the same way.
    let report = same_as_whole(&audit, &worm, &window(), &PAGES).await;
    assert!(named(&report, "sealing has stopped"), "{report:?}");
    assert_eq!(verify_trail(&audit, &worm, &window()).await.unwrap(), report);
}

#[tokio::test]
async fn a_record_modified_deleted_reordered_or_unreadable_reads_the_same_in_any_pages() {
    let opts = VerifyOptions::default();
    // Modified.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    tamper_at(&audit, &h.chain, 2, |r| r.record.amount = Some("999999.00".into()));
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(
        named(&report, "its content does not match its hash (modified)"),
        "{report:?}"
    );

    // Deleted in the middle, and the last.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    audit
        .log
        .tamper(|records| records.retain(|r| !(r.chain == h.chain && r.seq == 3)));
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(named(&report, "missing: the next record present is 4"), "{report:?}");
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    let last = audit
        .log
        .heads()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.chain == h.chain)
        .unwrap();
    audit
        .log
        .tamper(|records| records.retain(|r| !(r.chain == h.chain && r.seq == last.seq)));
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(named(&report, "the last records were deleted"), "{report:?}");

    // Two records swapped (each takes the other's place).
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    audit.log.tamper(|records| {
        let at = |seq: u64| records.iter().position(|r| r.chain == h.chain && r.seq == seq).unwrap();
        let (four, five) = (at(4), at(5));
        records[four].seq = 5;
        records[five].seq = 4;
    });
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(!report.intact(), "{report:?}");

    // A record that no longer reads back.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    tamper_at(&audit, &h.chain, 3, |r| {
        *r = ChainedRecord::unreadable(
            &r.record.audit_id,
            &r.chain,
            r.seq,
            &r.prev_hash,
            &r.hash,
            "edited".into(),
        );
    });
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(named(&report, "cannot be read back as a record"), "{report:?}");
}

#[tokio::test]
async fn records_beyond_the_head_a_forged_twin_and_a_deleted_head_read_the_same_in_any_pages() {
    let opts = VerifyOptions::default();
    // Two records linked past the head, which was not moved.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    let head = audit
        .log
        .heads()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.chain == h.chain)
        .unwrap();
    audit.log.tamper(|records| {
        let first = link(rec(900), &h.chain, head.seq, &head.hash);
        let second = link(rec(901), &h.chain, first.seq, &first.hash);
        records.extend([first, second]);
    });
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(named(&report, "lie beyond the chain's head"), "{report:?}");

    // A second record at a position already taken: a page may end between the two, neither is lost.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    audit.log.tamper(|records| {
        let mut twin = records
            .iter()
            .find(|r| r.chain == h.chain && r.seq == 3)
            .unwrap()
            .clone();
        twin.record.audit_id = "DUPLICATE_SUPPRESSED#forged".into();
        records.push(twin);
    });
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(!report.intact(), "{report:?}");

    // The head deleted: every record of its chain is held until the second heads.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    *audit.hidden_head.lock().unwrap() = Some(h.chain.clone());
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(
        named(&report, "records but no head (the head was deleted)"),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_sealed_record_rewritten_and_a_seal_missing_or_hidden_read_the_same_in_any_pages() {
    let opts = VerifyOptions::default();
    // The record at seal 2's head rewritten consistently, every record after it re-linked.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    audit.log.tamper(|records| {
        let mut chain: Vec<&mut ChainedRecord> = records
            .iter_mut()
            .filter(|r| r.chain == h.chain && r.seq >= h.seq)
            .collect();
        chain.sort_by_key(|r| r.seq);
        let mut prev = chain[0].prev_hash.clone();
        for r in chain {
            if r.seq == h.seq {
                r.record.amount = Some("0.01".into());
            }
            *r = link(r.record.clone(), &h.chain, r.seq - 1, &prev);
            prev = r.hash.clone();
        }
    });
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(named(&report, "rewritten after sealing"), "{report:?}");

    // Seal 5 written directly: seal 4 never was. Then seal 2 hidden by a delete marker.
    let (audit, worm, seals) = history().await;
    let third = &seals[2];
    let fifth = AuditSeal::new(
        &third.trail,
        5,
        &third.digest(),
        Utc::now(),
        audit.heads().await.unwrap(),
    );
    worm.put(&seal_key(&third.trail, 5), fifth.canonical().as_bytes())
        .await
        .unwrap();
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(
        named(&report, "seal 4 is missing (the next present is 5)"),
        "{report:?}"
    );
    assert_eq!(report.latest_seal_seq, Some(5));
    worm.delete_marker(&seal_key(&third.trail, 2));
    let report = same_as_whole(&audit, &worm, &opts, &PAGES).await;
    assert!(named(&report, "a delete marker"), "{report:?}");
}

#[tokio::test]
async fn records_appended_while_the_pages_are_read_are_left_out_the_same_way() {
    for page in PAGES {
        let (audit, worm, _) = history().await;
        let before = audit.log.heads().await.unwrap();
        *audit.append_on_read.lock().unwrap() = (500..540).map(rec).collect();
        let report = same_as_whole(&audit, &worm, &VerifyOptions::default(), &[page]).await;
        assert!(report.intact(), "pages of {page}: {report:?}");
        assert_eq!(
            report.records, 125,
            "pages of {page}: the 40 appended meanwhile are left out"
        );
        let now = audit.log.heads().await.unwrap();
        assert!(now.iter().map(|h| h.seq).sum::<u64>() == before.iter().map(|h| h.seq).sum::<u64>() + 40);
        // Once they were there before the read, they count.
        let report = same_as_whole(&audit, &worm, &VerifyOptions::default(), &[page]).await;
        assert!(report.intact() && report.records == 165, "{report:?}");
    }
    // Appended while read, and a record far beyond the head that was there before: it is named.
    let (audit, worm, seals) = history().await;
    let h = busiest(&seals);
    let head = audit
        .log
        .heads()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.chain == h.chain)
        .unwrap();
    audit
        .log
        .tamper(|records| records.push(link(rec(900), &h.chain, head.seq + 1000, &head.hash)));
    *audit.append_on_read.lock().unwrap() = (500..540).map(rec).collect();
    let report = same_as_whole(&audit, &worm, &VerifyOptions::default(), &[2]).await;
    assert!(!report.intact(), "{report:?}");
}

#[tokio::test]
async fn verify_reads_only_pages_no_larger_than_asked() {
    let (audit, worm, _) = history().await;
    for page in [1, 4, VERIFY_PAGE] {
        audit.reads.lock().unwrap().clear();
        let report = if page == VERIFY_PAGE {
            verify_trail(&audit, &worm, &VerifyOptions::default()).await.unwrap()
        } else {
            verify_trail_in_pages(&audit, &worm, &VerifyOptions::default(), page)
                .await
                .unwrap()
        };
        assert!(report.intact(), "{report:?}");
        let reads = audit.reads.lock().unwrap().clone();
        assert!(!reads.is_empty());
        let mut read = 0;
        for r in &reads {
            assert!(r.limit == page && r.got <= page, "{r:?}");
            read += r.got;
        }
        assert_eq!(read as u64, report.records, "every record read once");
        if page == 1 {
            assert!(reads.len() >= 125, "{}", reads.len());
        }
    }
}
