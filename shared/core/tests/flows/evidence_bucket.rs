//! The trail verified and exported from the WORM bucket alone: every seal writes the records it
//! covers beside it, so the evidence outlives the audit table. A bucket missing a part, holding an
//! altered record or a key no sealer writes does not verify; a part a sealer wrote for a seal it
//! lost the race for is not read.

use chrono::Utc;
use recon_core::domain::audit::{ChainHead, ID_CHAINS};
use recon_core::domain::seal::{AuditSeal, RECORDS_PREFIX, parse_records_key, records_key};
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::evidence::{
    BucketTrail, RECORDS_PER_PART, VerifyOptions, VerifyReport, seal, verify_bucket, verify_bundle, verify_trail,
    verify_trail_in_pages, write_bundle,
};
use recon_core::ports::{AuditLog, Worm};
use recon_core::reconcile::reconcile;
use recon_testkit::memory::{MemoryAuditLog, MemoryWorm};

fn rec(n: u32) -> AuditRecord {
    AuditRecord::system(
        AuditKind::DuplicateSuppressed,
        &format!("b{n}"),
        Utc::now(),
        "consumer",
        format!("line one of {n}\nand a second, \"quoted\""),
    )
}

async fn append(audit: &MemoryAuditLog, range: std::ops::Range<u32>) {
    let records: Vec<AuditRecord> = range.map(rec).collect();
    for chunk in records.chunks(500) {
        audit.append_many(chunk).await.unwrap();
    }
}

/// `counts` records, a seal after each batch.
async fn sealed_trail(counts: &[u32]) -> (MemoryAuditLog, MemoryWorm) {
    let (audit, worm) = (MemoryAuditLog::default(), MemoryWorm::default());
    let mut next = 0;
    for n in counts {
        append(&audit, next..next + n).await;
        next += n;
        seal(&audit, &worm, Utc::now()).await.unwrap();
    }
    (audit, worm)
}

async fn from_bucket(worm: &MemoryWorm) -> VerifyReport {
    verify_bucket(worm, None, &VerifyOptions::default()).await.unwrap()
}

/// The newest seal of the bucket's run, as the bucket alone shows it.
async fn newest_seal(worm: &MemoryWorm) -> AuditSeal {
    let trail = BucketTrail::open(worm, None).await.unwrap();
    trail.latest_seal().cloned().expect("a seal in the bucket")
}

fn part_keys(worm: &MemoryWorm) -> Vec<String> {
    worm.keys()
        .into_iter()
        .filter(|k| k.starts_with(RECORDS_PREFIX))
        .collect()
}

/// A bucket with every object of `worm` as `edit` returns it (`None`: left out): what a bucket
/// would hold had the sealer written that instead.
async fn rewritten(worm: &MemoryWorm, edit: impl Fn(&str, Vec<u8>) -> Option<Vec<u8>>) -> MemoryWorm {
    let copy = MemoryWorm::default();
    for key in worm.keys() {
        if let Some(bytes) = edit(&key, worm.get_version_bytes(&key)) {
            copy.put(&key, &bytes).await.unwrap();
        }
    }
    copy
}

#[tokio::test]
async fn the_trail_verifies_from_the_bucket_alone_as_from_the_table() {
    let (audit, worm) = sealed_trail(&[40, 31, 25]).await;
    let table = verify_trail(&audit, &worm, &VerifyOptions::default()).await.unwrap();
    let bucket = from_bucket(&worm).await;
    assert!(bucket.intact(), "{bucket:?}");
    assert!(bucket.from_bucket && !table.from_bucket);
    assert_eq!((bucket.records, bucket.seals), (96, 3));
    assert_eq!(
        (&bucket.chains, &bucket.latest_seal, &bucket.trail),
        (&table.chains, &table.latest_seal, &table.trail)
    );
    // The pages a verification reads do not change what it finds.
    let trail = BucketTrail::open(&worm, None).await.unwrap();
    let paged = verify_trail_in_pages(&trail, &worm, &VerifyOptions::default(), 3)
        .await
        .unwrap();
    assert_eq!((paged.records, paged.breaks.len()), (96, 0), "{paged:?}");

    // The table rewritten, or lost: the bucket's trail is what it was.
    audit.tamper(|records| records.iter_mut().for_each(|r| r.record.detail = "rewritten".into()));
    assert!(
        !verify_trail(&audit, &worm, &VerifyOptions::default())
            .await
            .unwrap()
            .intact()
    );
    assert!(from_bucket(&worm).await.intact());
}

#[tokio::test]
async fn a_bundle_exported_from_the_bucket_verifies_offline() {
    let (_, worm) = sealed_trail(&[20, 30]).await;
    let trail = BucketTrail::open(&worm, None).await.unwrap();
    let latest = trail.latest_seal().cloned().unwrap();
    let mut bytes = Vec::new();
    let r = reconcile(Vec::new(), Vec::new(), None, 0);
    let written = write_bundle(
        &trail,
        &worm,
        (&latest.trail, latest.seq),
        Utc::now(),
        "",
        &[],
        &r,
        &mut bytes,
    )
    .await
    .unwrap();
    assert_eq!((written.audit_records, written.seals), (50, 2));
    let bundle = serde_json::from_slice(&bytes).unwrap();
    let report = verify_bundle(&bundle);
    assert!(report.intact() && report.records == 50, "{report:?}");
}

#[tokio::test]
async fn a_chain_longer_than_a_part_is_written_in_parts_and_read_across_them() {
    let per_chain = RECORDS_PER_PART as u32 + 7;
    let (_, worm) = sealed_trail(&[per_chain * u32::from(ID_CHAINS) + 200]).await;
    let parts = part_keys(&worm);
    assert!(
        parts.iter().filter_map(|k| parse_records_key(k)).any(|k| k.part == 1),
        "no chain took a second part: {parts:?}"
    );
    let report = from_bucket(&worm).await;
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.records, u64::from(per_chain * u32::from(ID_CHAINS) + 200));
}

#[tokio::test]
async fn a_missing_part_an_altered_record_and_a_stray_key_are_named() {
    let (audit, worm) = sealed_trail(&[40, 40]).await;
    let parts = part_keys(&worm);
    // The first seal's part of one chain never written (a sealer that skips the archive).
    let dropped = parts[0].clone();
    let missing = rewritten(&worm, |k, b| (k != dropped).then_some(b)).await;
    let report = from_bucket(&missing).await;
    let chain = parse_records_key(&dropped).unwrap().chain;
    assert!(
        report.breaks.iter().any(|b| b.contains(&format!("chain {chain}"))),
        "{report:?}"
    );
    // The routine verification, from the table, names the seal without its records too.
    let routine = verify_trail(&audit, &missing, &VerifyOptions::default()).await.unwrap();
    assert!(
        routine
            .breaks
            .iter()
            .any(|b| b.contains(&format!("chain {chain}'s records")) && b.contains("not beside it")),
        "{routine:?}"
    );
    assert!(
        verify_trail(&audit, &worm, &VerifyOptions::default())
            .await
            .unwrap()
            .intact()
    );

    // One record's amount changed in the part as written.
    let altered = rewritten(&worm, |k, b| {
        Some(if k == dropped {
            String::from_utf8(b)
                .unwrap()
                .replacen("consumer", "someone", 1)
                .into_bytes()
        } else {
            b
        })
    })
    .await;
    let report = from_bucket(&altered).await;
    assert!(!report.intact(), "an altered record verified: {report:?}");

    // A newer version over a part: the first is read, the newer one named.
    worm.overwrite(&dropped, b"{}\n");
    let report = from_bucket(&worm).await;
    assert!(report.breaks.iter().any(|b| b.contains("newer version")), "{report:?}");
    assert_eq!(report.records, 80, "the first version is the one read");

    // A key under the records' prefix that no sealer writes.
    let (_, clean) = sealed_trail(&[10]).await;
    let trail = newest_seal(&clean).await.trail;
    clean
        .put(&format!("{RECORDS_PREFIX}{trail}/notes.txt"), b"x")
        .await
        .unwrap();
    let report = from_bucket(&clean).await;
    assert!(
        report.breaks.iter().any(|b| b.contains("no sealer writes")),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_part_written_for_a_seal_lost_in_a_race_is_not_read() {
    let (audit, worm) = sealed_trail(&[16]).await;
    let first = newest_seal(&worm).await;
    // A sealer that read other heads for seal 2 and lost: its part lies under its own root.
    let heads: Vec<ChainHead> = audit.heads().await.unwrap();
    let loser = AuditSeal::new(&first.trail, 2, "x", Utc::now(), heads);
    worm.put(&records_key(&first.trail, 2, &loser.root, "c0", 0), b"not records")
        .await
        .unwrap();
    append(&audit, 16..24).await;
    seal(&audit, &worm, Utc::now()).await.unwrap();
    let report = from_bucket(&worm).await;
    assert!(report.intact() && report.records == 24, "{report:?}");
}

#[tokio::test]
async fn a_part_already_there_with_other_records_stops_the_seal() {
    let (audit, worm) = sealed_trail(&[8]).await;
    let first = newest_seal(&worm).await;
    append(&audit, 8..16).await;
    let next = AuditSeal::new(&first.trail, 2, "x", Utc::now(), audit.heads().await.unwrap());
    let chain = &next.heads[0].chain;
    worm.put(&records_key(&first.trail, 2, &next.root, chain, 0), b"planted\n")
        .await
        .unwrap();
    let err = seal(&audit, &worm, Utc::now()).await.unwrap_err();
    assert!(err.to_string().contains("already holds other records"), "{err}");
    assert_eq!(newest_seal(&worm).await.seq, 1, "no seal 2 without its records");
}

#[tokio::test]
async fn the_bucket_names_no_trail_to_verify_when_it_holds_two() {
    let (_, worm) = sealed_trail(&[4]).await;
    let (other_audit, _) = sealed_trail(&[1]).await;
    other_audit.set_trail(None);
    seal(&other_audit, &worm, Utc::now() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    let err = verify_bucket(&worm, None, &VerifyOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains("2 trails"), "{err}");
}

#[tokio::test]
async fn a_span_the_table_does_not_show_whole_is_not_sealed() {
    let (audit, worm) = sealed_trail(&[8]).await;
    append(&audit, 8..24).await;
    // The chain index does not show a chain's newest record yet (or it was deleted): a gap.
    audit.tamper(|records| {
        records.pop();
    });
    let err = seal(&audit, &worm, Utc::now()).await.unwrap_err();
    assert!(err.to_string().contains("only up to"), "{err}");
    assert_eq!(newest_seal(&worm).await.seq, 1, "no seal over a gap in the bucket");
}

#[tokio::test]
async fn a_record_the_index_showed_late_is_sealed_once_it_shows() {
    // Chain c0's span longer than a part: a gap in its first part must not leave that part
    // written without the record, which would refuse the seal for ever once it shows.
    let (audit, worm) = sealed_trail(&[8]).await;
    append(&audit, 8..(RECORDS_PER_PART as u32 + 100) * u32::from(ID_CHAINS)).await;
    let mut late = None;
    audit.tamper(|records| {
        let at = records.iter().position(|r| r.chain == "c0" && r.seq == 100).unwrap();
        late = Some(records.remove(at));
    });
    let err = seal(&audit, &worm, Utc::now()).await.unwrap_err();
    assert!(err.to_string().contains("only up to 99"), "{err}");
    audit.tamper(|records| records.push(late.take().unwrap()));
    let (_, second) = seal(&audit, &worm, Utc::now()).await.unwrap();
    assert_eq!(second.seq, 2);
    let report = from_bucket(&worm).await;
    assert!(report.intact(), "{report:?}");
}
