//! What a reconciliation of one period reads besides the ledger (`reconcile::period`): that
//! period's exceptions and those of no known period, nothing of another period, and every
//! envelope a lineage names across periods.

use recon_core::domain::envelope::envelope_id;
use recon_core::domain::{AuditKind, DlqEnvelope, EnvelopeStatus, HandOff, ReplayRecord};
use recon_core::ports::{AuditLog, EnvelopeStore, Ledger};
use recon_core::reconcile::{LedgerRead, complete_exceptions, exceptions_of_period};
use recon_testkit::builders::now;
use recon_testkit::conformance::{envelope_of_period as of, posting, record_of_period as record};
use recon_testkit::memory::{MemoryAuditLog, MemoryEnvelopeStore, MemoryLedger};
use std::collections::BTreeSet;

/// `e` superseded by an edit whose copy was SQS message `copy`, carrying transaction `hash`.
fn edited_as(e: &mut DlqEnvelope, copy: &str, hash: &str) {
    e.replays.push(ReplayRecord {
        replay_id: "rp".into(),
        triggered_by: "test".into(),
        reason: "edit".into(),
        at: now(),
        outcome: EnvelopeStatus::Superseded,
        sqs_message_id: Some(copy.into()),
        copy_source_hash: Some(hash.into()),
        copy_period: None,
        in_doubt_until: None,
    });
}

fn ids(envelopes: &[DlqEnvelope]) -> BTreeSet<&str> {
    envelopes.iter().map(|e| e.envelope_id.as_str()).collect()
}

#[tokio::test]
async fn a_period_reads_its_exceptions_and_those_of_no_period_only() {
    recon_testkit::conformance::exceptions_are_read_by_period(
        &MemoryEnvelopeStore::default(),
        &MemoryAuditLog::default(),
        "memory",
    )
    .await;
}

#[tokio::test]
async fn what_the_read_names_but_does_not_hold_is_fetched_by_key() {
    let store = MemoryEnvelopeStore::default();
    let audit = MemoryAuditLog::default();
    let ledger = MemoryLedger::default();
    // October's dead letters, edited into November: a copy posted (named by its posting), a copy
    // suppressed as a duplicate (named by its record), and a copy dead-lettered again whose own
    // original was itself a copy (named by the envelope, then by that one).
    for e in [
        of("oct-posted", Some("2026-10"), None),
        of("oct-dup", Some("2026-10"), None),
        of("oct-root", Some("2026-10"), None),
        of("oct-copy", Some("2026-10"), Some("oct-root")),
        of("nov-again", Some("2026-11"), Some("oct-copy")),
        of("oct-unnamed", Some("2026-10"), None),
    ] {
        store.create(&e).await.unwrap();
    }
    audit
        .append(&record(
            AuditKind::DuplicateSuppressed,
            "copy-2",
            Some("2026-11"),
            Some("oct-dup"),
        ))
        .await
        .unwrap();
    // A record from before records carried their period (read under none) about a dead letter
    // whose envelope is September's.
    let mut september = of("unused", Some("2026-09"), None);
    september.envelope_id = envelope_id("sqs-sep");
    september.original.source_message_id = "sqs-sep".into();
    store.create(&september).await.unwrap();
    audit
        .append(&record(AuditKind::DeadLettered, "sqs-sep", None, None))
        .await
        .unwrap();
    // A duplicate of a transaction handed to a manual journal by an envelope of another period.
    let mut handed = of("oct-handed", Some("2026-10"), None);
    handed.source_hash = "ab".repeat(32);
    store.create(&handed).await.unwrap();
    ledger
        .hand_off(&HandOff {
            source_hash: handed.source_hash.clone(),
            period: Some("2026-10".into()),
            envelope_id: handed.envelope_id.clone(),
            replay_id: "rp".into(),
            handed_off_at: now(),
        })
        .await
        .unwrap();
    let mut dup = record(AuditKind::DuplicateSuppressed, "dup-of-handed", None, None);
    dup.source_hash = Some(handed.source_hash.clone());
    audit.append(&dup).await.unwrap();

    let mut copy = posting("period", 1, "copy-1");
    copy.replay_of = Some("oct-posted".into());
    // A copy of an envelope that is nowhere stays unmet: the reconciliation names it missing.
    let mut orphan = posting("period", 2, "copy-3");
    orphan.replay_of = Some("gone".into());

    let mut read = exceptions_of_period(&store, &audit, "2026-11").await.unwrap();
    assert_eq!(ids(&read.envelopes), BTreeSet::from(["nov-again"]));
    let mut postings = LedgerRead {
        linked: vec![copy, orphan],
        ..LedgerRead::default()
    };
    complete_exceptions(&store, &audit, &ledger, "2026-11", &mut postings, &mut read)
        .await
        .unwrap();
    let september_id = envelope_id("sqs-sep");
    assert_eq!(
        ids(&read.envelopes),
        BTreeSet::from([
            "nov-again",
            "oct-copy",
            "oct-root",
            "oct-posted",
            "oct-dup",
            "oct-handed",
            september_id.as_str()
        ])
    );
}

/// An October envelope whose edited copy went to November: that copy's fate (its own envelope,
/// dead-lettered again, or its duplicate record) is November's, and October's read fetches it.
#[tokio::test]
async fn the_fate_of_a_copy_sent_into_another_period_is_fetched() {
    let store = MemoryEnvelopeStore::default();
    let audit = MemoryAuditLog::default();
    let mut edited = of("oct-edited", Some("2026-10"), None);
    let mut suppressed = of("oct-suppressed", Some("2026-10"), None);
    for (e, copy) in [(&mut edited, "copy-again"), (&mut suppressed, "copy-dup")] {
        edited_as(e, copy, &"cd".repeat(32));
        store.create(e).await.unwrap();
    }
    let mut again = of("unused", Some("2026-11"), Some("oct-edited"));
    again.envelope_id = envelope_id("copy-again");
    again.original.source_message_id = "copy-again".into();
    store.create(&again).await.unwrap();
    audit
        .append(&record(
            AuditKind::DuplicateSuppressed,
            "copy-dup",
            Some("2026-11"),
            Some("oct-suppressed"),
        ))
        .await
        .unwrap();

    let mut read = exceptions_of_period(&store, &audit, "2026-10").await.unwrap();
    assert!(read.audit.is_empty());
    complete_exceptions(
        &store,
        &audit,
        &MemoryLedger::default(),
        "2026-10",
        &mut LedgerRead::default(),
        &mut read,
    )
    .await
    .unwrap();
    let again_id = envelope_id("copy-again");
    assert_eq!(
        ids(&read.envelopes),
        BTreeSet::from(["oct-edited", "oct-suppressed", again_id.as_str()])
    );
    let records: Vec<&str> = read.audit.iter().map(|r| r.sqs_message_id.as_str()).collect();
    assert_eq!(records, ["copy-dup"]);
}

/// An October envelope edited into November, whose copy was dead-lettered again and edited
/// again: the second copy's posting (under the transaction its replay record names) is
/// November's, and October's read finds it by key through the chain of copies.
#[tokio::test]
async fn a_copy_edited_again_is_followed_to_its_posting() {
    let store = MemoryEnvelopeStore::default();
    let audit = MemoryAuditLog::default();
    let ledger = MemoryLedger::default();
    let mut first = of("oct-first", Some("2026-10"), None);
    edited_as(&mut first, "copy-1", &"c1".repeat(32));
    store.create(&first).await.unwrap();
    let mut again = of("unused", Some("2026-11"), Some("oct-first"));
    again.envelope_id = envelope_id("copy-1");
    again.original.source_message_id = "copy-1".into();
    edited_as(&mut again, "copy-2", &"c2".repeat(32));
    store.create(&again).await.unwrap();
    let mut posted = posting("period", 3, "copy-2");
    posted.source_hash = "c2".repeat(32);
    posted.period = "2026-11".into();
    posted.replay_of = Some(again.envelope_id.clone());
    ledger.commit(&posted).await.unwrap();

    let mut read = exceptions_of_period(&store, &audit, "2026-10").await.unwrap();
    let mut postings = LedgerRead::default();
    complete_exceptions(&store, &audit, &ledger, "2026-10", &mut postings, &mut read)
        .await
        .unwrap();
    let again_id = envelope_id("copy-1");
    assert_eq!(ids(&read.envelopes), BTreeSet::from(["oct-first", again_id.as_str()]));
    let hashes: Vec<&str> = postings.linked.iter().map(|p| p.source_hash.as_str()).collect();
    assert_eq!(hashes, ["c2".repeat(32)]);
    // Read for November (where it was read already, kept or counted), it is not added again.
    let mut read = exceptions_of_period(&store, &audit, "2026-11").await.unwrap();
    let mut postings = LedgerRead::default();
    complete_exceptions(&store, &audit, &ledger, "2026-11", &mut postings, &mut read)
        .await
        .unwrap();
    assert!(postings.linked.is_empty(), "{:?}", postings.linked);
}
