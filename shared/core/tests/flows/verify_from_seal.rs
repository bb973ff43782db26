//! `audit verify --from-seal N` on the in-memory adapters: a continuation reads seal N, the seals
//! after it and each chain from the record seal N fixed — never what lies before — and names
//! every attack on what it reads, with the messages of a full verification.

use chrono::Utc;
use recon_core::domain::AuditRecord;
use recon_core::domain::audit::{AUDIT_CHAINS, ChainHead, ChainedRecord, GENESIS, link};
use recon_core::domain::seal::{AuditSeal, SEAL_PREFIX, seal_key};
use recon_core::evidence::{FromSealError, VerifyOptions, VerifyReport, seal, verify_from_seal, verify_trail};
use recon_core::ports::{AuditLog, ChainPage, ObjectVersion, StoreResult, Worm, Written};
use recon_testkit::memory::{MemoryAuditLog, MemoryWorm};
use std::sync::Mutex;

fn rec(n: u32) -> AuditRecord {
    let mut r = AuditRecord::system(
        recon_core::domain::AuditKind::DuplicateSuppressed,
        &format!("s{n}"),
        Utc::now(),
        "consumer",
        String::new(),
    );
    r.amount = Some(format!("{n}.00"));
    r.currency = Some("USD".into());
    r
}

/// An audit log that records what it was asked to read.
#[derive(Default)]
struct Recording {
    log: MemoryAuditLog,
    /// Every `chain` call (a whole chain read).
    whole: Mutex<Vec<String>>,
    /// Every `chain_from` call.
    from: Mutex<Vec<(String, u64)>>,
    /// Every `chain_page` call: chain, from_seq, whether it continued a read, records returned.
    pages: Mutex<Vec<(String, u64, bool, usize)>>,
}

impl AuditLog for Recording {
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
        let continued = cursor.is_some();
        let page = self.log.chain_page(chain, from_seq, cursor, limit).await?;
        let entry = (chain.to_owned(), from_seq, continued, page.0.len());
        self.pages.lock().unwrap().push(entry);
        Ok(page)
    }
    async fn heads(&self) -> StoreResult<Vec<ChainHead>> {
        self.log.heads().await
    }
    async fn current_trail(&self) -> StoreResult<Option<String>> {
        self.log.current_trail().await
    }
    async fn start_trail(&self, candidate: &str) -> StoreResult<String> {
        self.log.start_trail(candidate).await
    }
    async fn sealed_up_to(&self, trail: &str) -> StoreResult<Option<u64>> {
        self.log.sealed_up_to(trail).await
    }
    async fn note_seal(&self, trail: &str, seq: u64) -> StoreResult<()> {
        self.log.note_seal(trail, seq).await
    }
}

/// A bucket that records what was listed and read.
#[derive(Default)]
struct RecordingWorm {
    worm: MemoryWorm,
    listed: Mutex<Vec<String>>,
    read: Mutex<Vec<String>>,
}

impl Worm for RecordingWorm {
    fn bucket(&self) -> &str {
        self.worm.bucket()
    }
    async fn put(&self, key: &str, bytes: &[u8]) -> StoreResult<Written> {
        self.worm.put(key, bytes).await
    }
    async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read.lock().unwrap().push(key.to_owned());
        self.worm.get(key).await
    }
    async fn get_version(&self, key: &str, version_id: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read.lock().unwrap().push(key.to_owned());
        self.worm.get_version(key, version_id).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        self.listed.lock().unwrap().push(format!("list {prefix}"));
        self.worm.list(prefix).await
    }
    async fn versions(&self, prefix: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.listed.lock().unwrap().push(format!("versions {prefix}"));
        self.worm.versions(prefix).await
    }
    async fn versions_after(&self, prefix: &str, start_after: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.listed
            .lock()
            .unwrap()
            .push(format!("versions {prefix} after {start_after}"));
        self.worm.versions_after(prefix, start_after).await
    }
}

impl Recording {
    fn forget(&self) {
        self.whole.lock().unwrap().clear();
        self.from.lock().unwrap().clear();
        self.pages.lock().unwrap().clear();
    }
}

impl RecordingWorm {
    fn forget(&self) {
        self.listed.lock().unwrap().clear();
        self.read.lock().unwrap().clear();
    }
}

/// 40 records, seal 1, 10 more, seal 2, 10 more, seal 3, 5 more (unsealed).
async fn history() -> (Recording, RecordingWorm, Vec<AuditSeal>) {
    let (audit, worm) = (Recording::default(), RecordingWorm::default());
    let mut seals = Vec::new();
    let mut n = 0;
    for batch in [40, 10, 10] {
        for _ in 0..batch {
            audit.append(&rec(n)).await.unwrap();
            n += 1;
        }
        seals.push(seal(&audit, &worm, Utc::now()).await.unwrap().1);
    }
    for _ in 0..5 {
        audit.append(&rec(n)).await.unwrap();
        n += 1;
    }
    audit.forget();
    worm.forget();
    (audit, worm, seals)
}

async fn from_seal(audit: &Recording, worm: &RecordingWorm, n: u64) -> VerifyReport {
    verify_from_seal(audit, worm, n, &VerifyOptions::default())
        .await
        .unwrap()
}

fn named(report: &VerifyReport, what: &str) -> bool {
    report.breaks.iter().any(|b| b.contains(what))
}

fn sealed_seq(seal: &AuditSeal, chain: &str) -> u64 {
    seal.heads.iter().find(|h| h.chain == chain).map_or(0, |h| h.seq)
}

/// A head seal `s` fixed past the chain's first record, with records after it now.
async fn busiest(audit: &Recording, s: &AuditSeal) -> ChainHead {
    let now = audit.heads().await.unwrap();
    s.heads
        .iter()
        .filter(|h| h.seq > 1 && now.iter().any(|n| n.chain == h.chain && n.seq > h.seq))
        .max_by_key(|h| h.seq)
        .expect("a chain sealed past its first record has moved on")
        .clone()
}

/// Edit one stored record's amount, leaving its hashes (what a writer to the table can do).
fn edit(audit: &Recording, chain: &str, seq: u64) {
    audit.log.tamper(|records| {
        let r = records.iter_mut().find(|r| r.chain == chain && r.seq == seq).unwrap();
        r.record.amount = Some("999999.00".into());
    });
}

#[tokio::test]
async fn an_intact_continuation_reads_only_what_came_after_the_seal_and_counts_it() {
    let (audit, worm, seals) = history().await;
    let second = &seals[1];
    let report = from_seal(&audit, &worm, 2).await;
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.from_seal, Some(2));
    assert_eq!(report.seals, 2, "seals 2 and 3: {report:?}");
    assert_eq!(report.latest_seal_seq, Some(3));
    assert_eq!(report.latest_seal, Some(seal_key(&second.trail, 3)));
    // Every chain from the record seal 2 fixed (1 for a chain it does not name) to its head.
    let heads = audit.heads().await.unwrap();
    let mut expected_total = 0;
    for i in 0..AUDIT_CHAINS {
        let chain = format!("c{i}");
        let first = sealed_seq(second, &chain).max(1);
        assert_eq!(report.read_from.get(&chain), Some(&first), "{report:?}");
        let head = heads.iter().find(|h| h.chain == chain).map_or(0, |h| h.seq);
        let n = (head + 1).saturating_sub(first);
        expected_total += n;
        if head > 0 {
            assert_eq!(report.chains.get(&chain), Some(&n), "{chain}: {report:?}");
        }
    }
    assert_eq!(report.records, expected_total);
    assert!(report.records < 65, "fewer than the whole history: {report:?}");
    assert!(!report.unsealed.is_empty(), "the 5 records after seal 3: {report:?}");

    // What was read: no whole chain, no record before seal 2's heads, no seal before 2, and not
    // the whole bucket.
    assert!(audit.whole.lock().unwrap().is_empty() && audit.from.lock().unwrap().is_empty());
    let pages = audit.pages.lock().unwrap().clone();
    let first_pages: Vec<_> = pages.iter().filter(|(_, _, continued, _)| !continued).collect();
    assert_eq!(first_pages.len(), usize::from(AUDIT_CHAINS), "{pages:?}");
    for (chain, from, _, _) in &pages {
        assert_eq!(*from, sealed_seq(second, chain).max(1), "{chain}");
    }
    let read: usize = pages.iter().map(|(.., n)| n).sum();
    assert_eq!(read as u64, report.records, "every record read once");
    let listed = worm.listed.lock().unwrap().clone();
    assert!(!listed.iter().any(|l| l == "versions "), "{listed:?}");
    assert!(
        listed.contains(&format!(
            "versions {SEAL_PREFIX}{}/ after {}",
            second.trail,
            seal_key(&second.trail, 1)
        )),
        "{listed:?}"
    );
    let read = worm.read.lock().unwrap().clone();
    assert!(!read.contains(&seal_key(&second.trail, 1)), "{read:?}");
    assert!(read.contains(&seal_key(&second.trail, 2)), "{read:?}");

    // The full verification of the same trail, for comparison.
    let full = verify_trail(&audit, &worm, &VerifyOptions::default()).await.unwrap();
    assert!(full.intact() && full.records == 65 && full.seals == 3, "{full:?}");
    assert_eq!(full.latest_seal_seq, Some(3));
    assert!(full.from_seal.is_none() && full.read_from.is_empty());
}

#[tokio::test]
async fn a_record_before_the_seal_is_not_read_and_only_a_full_verify_names_its_rewrite() {
    let (audit, worm, seals) = history().await;
    let h = busiest(&audit, &seals[1]).await;
    assert!(h.seq > 1);
    edit(&audit, &h.chain, 1);
    let report = from_seal(&audit, &worm, 2).await;
    assert!(report.intact(), "record 1 lies before seal 2's heads: {report:?}");
    for (chain, from, ..) in audit.pages.lock().unwrap().iter() {
        assert!(*from >= sealed_seq(&seals[1], chain).max(1), "{chain} read from {from}");
    }
    let full = verify_trail(&audit, &worm, &VerifyOptions::default()).await.unwrap();
    assert!(
        full.breaks
            .iter()
            .any(|b| b.contains(&format!("chain {}, record 1", h.chain)) && b.contains("modified")),
        "{full:?}"
    );
}

#[tokio::test]
async fn a_record_after_the_seal_modified_or_deleted_is_named() {
    let (audit, worm, seals) = history().await;
    let h = busiest(&audit, &seals[1]).await;
    let current = recon_core::ports::read_chain(&audit.log, &h.chain, 0).await.unwrap();
    assert!(current.len() as u64 > h.seq, "records after seal 2 in {}", h.chain);
    edit(&audit, &h.chain, h.seq + 1);
    let report = from_seal(&audit, &worm, 2).await;
    assert!(
        named(&report, &format!("chain {}, record {}", h.chain, h.seq + 1))
            && named(&report, "its content does not match its hash (modified)"),
        "{report:?}"
    );

    // Deleted instead.
    let (audit, worm, seals) = history().await;
    let h = busiest(&audit, &seals[1]).await;
    audit
        .log
        .tamper(|records| records.retain(|r| !(r.chain == h.chain && r.seq == h.seq + 1)));
    let report = from_seal(&audit, &worm, 2).await;
    assert!(
        report
            .breaks
            .iter()
            .any(|b| b.contains(&format!("chain {}, record {}", h.chain, h.seq + 1)) && b.contains("deleted")),
        "{report:?}"
    );
}

#[tokio::test]
async fn the_record_at_the_sealed_position_rewritten_or_deleted_is_named() {
    // Its content edited, its hash kept.
    let (audit, worm, seals) = history().await;
    let h = busiest(&audit, &seals[1]).await;
    edit(&audit, &h.chain, h.seq);
    let report = from_seal(&audit, &worm, 2).await;
    assert!(
        named(&report, &format!("chain {}, record {}", h.chain, h.seq)) && named(&report, "modified"),
        "{report:?}"
    );

    // Rewritten consistently from there on (its hash recomputed, the records after re-linked).
    let (audit, worm, seals) = history().await;
    let h = busiest(&audit, &seals[1]).await;
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
    let report = from_seal(&audit, &worm, 2).await;
    let key = seal_key(&seals[1].trail, 2);
    assert!(
        report
            .breaks
            .iter()
            .any(|b| b.contains(&format!("chain {}, record {}", h.chain, h.seq))
                && b.contains(&format!("seal {key} fixed its hash"))
                && b.contains("rewritten after sealing")),
        "{report:?}"
    );

    // Deleted.
    let (audit, worm, seals) = history().await;
    let h = busiest(&audit, &seals[1]).await;
    audit
        .log
        .tamper(|records| records.retain(|r| !(r.chain == h.chain && r.seq == h.seq)));
    let report = from_seal(&audit, &worm, 2).await;
    assert!(named(&report, "deleted after sealing"), "{report:?}");
}

#[tokio::test]
async fn a_later_seal_missing_or_committing_to_an_earlier_head_is_named() {
    let (audit, worm, seals) = history().await;
    let third = &seals[2];
    // Seal 5 written directly: seal 4 never was.
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
    let report = from_seal(&audit, &worm, 2).await;
    assert!(
        named(&report, "seal 4 is missing (the next present is 5)"),
        "{report:?}"
    );

    // Seal 4 (genuine chaining) committing a chain to a record before the one seal 2 fixed.
    let (audit, worm, seals) = history().await;
    let h = busiest(&audit, &seals[1]).await;
    let mut heads = audit.heads().await.unwrap();
    let mut records = recon_core::ports::read_chain(&audit.log, &h.chain, 0).await.unwrap();
    records.retain(|r| r.seq == h.seq - 1);
    for head in heads.iter_mut().filter(|x| x.chain == h.chain) {
        (head.seq, head.hash) = (records[0].seq, records[0].hash.clone());
    }
    let fourth = AuditSeal::new(&seals[2].trail, 4, &seals[2].digest(), Utc::now(), heads);
    worm.put(&seal_key(&seals[2].trail, 4), fourth.canonical().as_bytes())
        .await
        .unwrap();
    let report = from_seal(&audit, &worm, 2).await;
    assert!(named(&report, "a chain's head never goes back"), "{report:?}");
}

#[tokio::test]
async fn a_chain_the_seal_does_not_name_is_read_from_its_first_record() {
    let (audit, worm) = (Recording::default(), RecordingWorm::default());
    audit.append(&rec(0)).await.unwrap();
    let (_, first) = seal(&audit, &worm, Utc::now()).await.unwrap();
    assert_eq!(first.heads.len(), 1);
    for i in 1..30 {
        audit.append(&rec(i)).await.unwrap();
    }
    let report = from_seal(&audit, &worm, 1).await;
    assert!(report.intact(), "{report:?}");
    assert_eq!(
        report.records, 30,
        "everything from seal 1's head and the other chains whole"
    );
    for (chain, from) in &report.read_from {
        assert_eq!(*from, sealed_seq(&first, chain).max(1), "{chain}");
    }
    // The other chains start at genesis: a first record no longer linked to it is named.
    let other = report
        .chains
        .keys()
        .find(|c| sealed_seq(&first, c) == 0)
        .unwrap()
        .clone();
    audit.log.tamper(|records| {
        let r = records.iter_mut().find(|r| r.chain == other && r.seq == 1).unwrap();
        *r = link(r.record.clone(), &other, 0, &"1".repeat(GENESIS.len()));
    });
    let report = from_seal(&audit, &worm, 1).await;
    assert!(
        named(&report, &format!("chain {other}, record 1")) && named(&report, "prev_hash"),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_seal_number_that_is_not_a_seal_of_the_trail_is_an_error() {
    let (audit, worm, _) = history().await;
    for n in [0, 4, 1000] {
        let e = verify_from_seal(&audit, &worm, n, &VerifyOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(&e, FromSealError::NotASeal(_)), "{n}: {e:?}");
        let text = e.to_string();
        assert!(
            if n == 0 {
                text.contains("numbered from 1")
            } else {
                text.contains(&format!("has no seal {n}"))
            },
            "{text}"
        );
    }
    // Nothing sealed at all.
    let (audit, worm) = (Recording::default(), RecordingWorm::default());
    audit.append(&rec(1)).await.unwrap();
    let e = verify_from_seal(&audit, &worm, 1, &VerifyOptions::default()).await;
    assert!(matches!(e, Err(FromSealError::NotASeal(_))), "{e:?}");
    // But a table pointed at another trail is a break, not the auditor's mistake.
    let (audit, worm, _) = history().await;
    audit.log.set_trail(Some("0123456789abcdef"));
    let report = from_seal(&audit, &worm, 2).await;
    assert!(named(&report, "never anchored"), "{report:?}");
    assert!(named(&report, "has no seal 2"), "{report:?}");
}

#[tokio::test]
async fn a_sealer_lists_only_the_seals_from_the_one_noted_and_a_wrong_note_costs_a_full_read() {
    let (audit, worm, seals) = history().await;
    let trail = seals[0].trail.clone();
    let prefix = format!("audit-seals/{trail}/");
    let (_, fourth) = seal(&audit, &worm, Utc::now()).await.unwrap();
    let listed = worm.listed.lock().unwrap().clone();
    assert_eq!(fourth.seq, 4);
    assert!(
        listed.contains(&format!("versions {prefix} after {}", seal_key(&trail, 2))),
        "{listed:?}"
    );
    assert!(
        !listed.contains(&format!("versions {prefix}")),
        "every seal listed: {listed:?}"
    );

    // A note naming no seal (the table rewritten): every seal is read, and the run goes on.
    audit.note_seal(&trail, 1000).await.unwrap();
    worm.forget();
    let (_, fifth) = seal(&audit, &worm, Utc::now()).await.unwrap();
    assert_eq!((fifth.seq, fifth.prev.clone()), (5, fourth.digest()));
    assert!(worm.listed.lock().unwrap().contains(&format!("versions {prefix}")));
    let report = verify_trail(&audit, &worm, &VerifyOptions::default()).await.unwrap();
    assert!(report.intact(), "{report:?}");
}
