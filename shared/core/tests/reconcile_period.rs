//! What a reconciliation of one period reads besides the ledger (`reconcile::period`): that
//! period's exceptions and those of no known period, nothing of another period, and every
//! envelope a lineage names across periods.

use recon_core::domain::{AuditKind, DlqEnvelope};
use recon_core::ports::{AuditLog, EnvelopeStore};
use recon_core::reconcile::{exceptions_of_period, fetch_named_envelopes};
use recon_testkit::conformance::{envelope_of_period as of, posting, record_of_period as record};
use recon_testkit::memory::{MemoryAuditLog, MemoryEnvelopeStore};
use std::collections::BTreeSet;

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
async fn every_envelope_a_lineage_names_from_another_period_is_fetched() {
    let store = MemoryEnvelopeStore::default();
    let audit = MemoryAuditLog::default();
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
    let mut copy = posting("period", 1, "copy-1");
    copy.replay_of = Some("oct-posted".into());
    // A copy of an envelope that is nowhere stays unmet: the reconciliation names it missing.
    let mut orphan = posting("period", 2, "copy-3");
    orphan.replay_of = Some("gone".into());

    let mut read = exceptions_of_period(&store, &audit, "2026-11").await.unwrap();
    assert_eq!(ids(&read.envelopes), BTreeSet::from(["nov-again"]));
    fetch_named_envelopes(&store, &[copy, orphan], &mut read).await.unwrap();
    assert_eq!(
        ids(&read.envelopes),
        BTreeSet::from(["nov-again", "oct-copy", "oct-root", "oct-posted", "oct-dup"])
    );
}
