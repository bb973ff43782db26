//! What every implementation of a port must do, as checks any test runs against its adapter: the
//! memory adapters in `recon-core`'s tests, the AWS adapters on the local stack. One definition of
//! the behaviour, so the two cannot drift apart.

use recon_core::decisions::totals;
use recon_core::domain::status::IllegalTransition;
use recon_core::domain::{AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, StatusChange};
use recon_core::ports::{
    AuditLog, Backlog, CreateOutcome, EnvelopeStore, EnvelopesOfPeriod, FlowError, RecordsOfPeriod,
};
use recon_core::reconcile::exceptions_of_period;
use std::collections::{BTreeMap, BTreeSet};

use crate::builders::{self, settle_by_hand};

mod groups;
mod ledger;
pub use groups::{an_envelope_named_twice_is_claimed_once, envelopes_are_claimed_and_settled_at_once};
pub use ledger::{
    ledger_fails_transiently_when_unreachable, ledger_keeps_each_transaction_once, ledger_reads_by_period, posting,
};

/// The store's triage totals (`decisions::totals`) of root cause `cause` equal a recount of the
/// envelopes `ids` name, as the store holds them now: every change into or out of PENDING moved
/// them, in the same write.
pub async fn totals_agree<S: EnvelopeStore + Backlog>(store: &S, cause: &str, ids: &[String]) {
    let mut envelopes = Vec::new();
    for id in ids {
        envelopes.extend(store.get(id).await.expect("get"));
    }
    assert!(
        envelopes.iter().all(|e| e.root_cause == cause),
        "the envelopes are of {cause}"
    );
    let want = totals::recount(&envelopes).expect("recount");
    let kept = store
        .triage_totals()
        .await
        .expect("triage totals")
        .expect("the store keeps triage totals for every envelope");
    let got = totals::normalized(kept.into_iter().filter(|(k, _)| k.root_cause == cause).collect());
    assert_eq!(got, want, "triage totals of {cause}");
}

/// The envelope life cycle (`domain::status`), whatever the store: an envelope is born PENDING
/// or QUARANTINED, changes only under a claim, and a settled one never changes again; a refused
/// change writes nothing, the PENDING count included. `id` must be unused in `store`.
pub async fn envelope_store_keeps_the_life_cycle<S: EnvelopeStore + Backlog>(store: &S, id: &str) {
    let pending = || async { store.pending_count().await.expect("pending count") };
    let status = || async { store.get(id).await.expect("get").map(|e| e.status) };
    let before = pending().await;

    let mut born_replayed: DlqEnvelope = builders::envelope(id);
    born_replayed.status = EnvelopeStatus::Replayed;
    assert_eq!(
        store.create(&born_replayed).await,
        Err(FlowError::IllegalTransition(IllegalTransition::Initial(
            EnvelopeStatus::Replayed
        ))),
        "an envelope cannot be born REPLAYED"
    );
    assert_eq!(status().await, None, "a refused create writes nothing");

    // Its triage totals apart from any other test's: a root cause of its own.
    let cause = format!("CONFORMANCE:{id}");
    let ids = [id.to_owned()];
    let totals = || totals_agree(store, &cause, &ids);
    let mut born = builders::envelope(id);
    born.root_cause = cause.clone();
    assert_eq!(store.create(&born).await, Ok(CreateOutcome::Created));
    assert_eq!(pending().await, before + 1);
    totals().await;

    // A claim whose history entry would say anything but REPLAYING is refused before writing.
    let now = builders::now();
    let claim = builders::claim("illegal", "conformance", now, chrono::Duration::minutes(5));
    let skip_the_claim = StatusChange {
        status: EnvelopeStatus::Quarantined,
        at: now,
        actor: "test".into(),
        reason: "straight to quarantine".into(),
        manual_journal: false,
    };
    assert_eq!(
        store.claim(id, &claim, now, &skip_the_claim, None).await,
        Err(FlowError::IllegalTransition(IllegalTransition::Change {
            from: EnvelopeStatus::Pending,
            to: EnvelopeStatus::Quarantined
        }))
    );
    assert_eq!(
        status().await,
        Some(EnvelopeStatus::Pending),
        "a refused claim writes nothing"
    );
    assert_eq!(pending().await, before + 1);

    // A claim made on what the caller read fails when the envelope changed since (its history
    // is longer than the caller saw), and writes nothing.
    let claim_it = StatusChange {
        status: EnvelopeStatus::Replaying,
        ..skip_the_claim.clone()
    };
    let read = store.get(id).await.ok().flatten().map_or(0, |e| e.status_history.len());
    assert_eq!(store.claim(id, &claim, now, &claim_it, Some(read + 1)).await, Ok(false));
    assert_eq!(
        status().await,
        Some(EnvelopeStatus::Pending),
        "a stale claim writes nothing"
    );
    assert_eq!(pending().await, before + 1);
    totals().await;

    // Claimed and released: out of the count and the totals, and back in.
    settle_by_hand(store, id, EnvelopeStatus::Pending).await;
    assert_eq!(pending().await, before + 1);
    totals().await;

    settle_by_hand(store, id, EnvelopeStatus::Quarantined).await;
    assert_eq!(status().await, Some(EnvelopeStatus::Quarantined));
    assert_eq!(pending().await, before);
    totals().await;

    // Settled: no claim takes it back (QUARANTINED -> PENDING cannot be expressed).
    let reclaim = StatusChange {
        status: EnvelopeStatus::Replaying,
        ..skip_the_claim
    };
    assert_eq!(store.claim(id, &claim, now, &reclaim, None).await, Ok(false));
    assert_eq!(status().await, Some(EnvelopeStatus::Quarantined));
    assert_eq!(pending().await, before);
}

/// A claim is renewed (its lease extended, a REPLAYING change appended: a hand-off's intent) only
/// by its own holder while its lease lasts: never after a takeover, never after its lease ended,
/// and a takeover is refused while the renewed lease lasts. `id` must be unused in `store`.
pub async fn a_claim_is_renewed_only_by_its_live_holder<S: EnvelopeStore>(store: &S, id: &str) {
    assert_eq!(store.create(&builders::envelope(id)).await, Ok(CreateOutcome::Created));
    let t0 = builders::now();
    let minutes = chrono::Duration::minutes;
    let change = |at, reason: &str, manual_journal| StatusChange {
        status: EnvelopeStatus::Replaying,
        at,
        actor: "conformance".into(),
        reason: reason.into(),
        manual_journal,
    };
    let first = builders::claim("rpl_first", "conformance", t0, minutes(5));
    assert_eq!(
        store.claim(id, &first, t0, &change(t0, "claimed", false), None).await,
        Ok(true)
    );
    let intent = change(t0 + minutes(1), "handing off", true);
    assert_eq!(
        store
            .renew(id, "rpl_other", t0 + minutes(1), t0 + minutes(10), &intent)
            .await,
        Ok(false),
        "only the claim's holder renews it"
    );
    assert_eq!(
        store
            .renew(id, "rpl_first", t0 + minutes(1), t0 + minutes(10), &intent)
            .await,
        Ok(true)
    );
    let renewed = store.get(id).await.ok().flatten().expect("the envelope");
    assert_eq!(renewed.status_history.last(), Some(&intent));
    assert_eq!(renewed.replay.as_ref().map(|c| c.lease_until), Some(t0 + minutes(10)));
    let second = builders::claim("rpl_second", "conformance", t0 + minutes(6), minutes(5));
    let seen = Some(renewed.status_history.len());
    assert_eq!(
        store
            .claim(
                id,
                &second,
                t0 + minutes(6),
                &change(t0 + minutes(6), "taken over", false),
                seen
            )
            .await,
        Ok(false),
        "no takeover while the renewed lease lasts"
    );
    assert_eq!(
        store
            .renew(id, "rpl_first", t0 + minutes(11), t0 + minutes(20), &intent)
            .await,
        Ok(false),
        "no renewal once the lease ended"
    );
    let second = builders::claim("rpl_second", "conformance", t0 + minutes(11), minutes(5));
    assert_eq!(
        store
            .claim(
                id,
                &second,
                t0 + minutes(11),
                &change(t0 + minutes(11), "taken over", false),
                seen
            )
            .await,
        Ok(true)
    );
    assert_eq!(
        store
            .renew(id, "rpl_first", t0 + minutes(12), t0 + minutes(20), &intent)
            .await,
        Ok(false),
        "a claim taken over is not the old holder's to renew"
    );
    let quarantine = StatusChange {
        status: EnvelopeStatus::Quarantined,
        ..intent
    };
    assert!(matches!(
        store
            .renew(id, "rpl_second", t0 + minutes(12), t0 + minutes(20), &quarantine)
            .await,
        Err(FlowError::IllegalTransition(_))
    ));
}

/// An envelope of `period` (`None`: its body gave none), a copy of `replay_of` when given.
pub fn envelope_of_period(id: &str, period: Option<&str>, replay_of: Option<&str>) -> DlqEnvelope {
    let mut e = builders::envelope(id);
    e.accounting_period = period.map(str::to_owned);
    if let Some(parent) = replay_of {
        e.original.attributes.insert(
            recon_core::domain::attrs::REPLAY_OF.into(),
            recon_core::domain::OriginalAttribute {
                data_type: "String".into(),
                string_value: Some(parent.into()),
                binary_value: None,
            },
        );
    }
    e
}

/// A record of `kind` about SQS message `subject`, of `period`, a copy of `replay_of` when given.
pub fn record_of_period(kind: AuditKind, subject: &str, period: Option<&str>, replay_of: Option<&str>) -> AuditRecord {
    let mut r = AuditRecord::system(kind, subject, builders::now(), "test", String::new());
    r.sqs_message_id = subject.into();
    r.period = period.map(str::to_owned);
    r.replay_of = replay_of.map(str::to_owned);
    r
}

/// A period's exceptions (`reconcile::exceptions_of_period`): its envelopes, as they are now,
/// and the records a reconciliation reads, with those of no known period; nothing of another
/// period, no record of another kind. `run` keeps the ids apart from other runs on the stores.
pub async fn exceptions_are_read_by_period<S, A>(store: &S, audit: &A, run: &str)
where
    S: EnvelopeStore + EnvelopesOfPeriod,
    A: AuditLog + RecordsOfPeriod,
{
    let id = |name: &str| format!("{run}-{name}");
    for (name, period) in [("nov", Some("2026-11")), ("oct", Some("2026-10")), ("none", None)] {
        store
            .create(&envelope_of_period(&id(name), period, None))
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }
    settle_by_hand(store, &id("nov"), EnvelopeStatus::Quarantined).await;
    for (kind, name, period) in [
        (AuditKind::DuplicateSuppressed, "dup-nov", Some("2026-11")),
        (AuditKind::DuplicateSuppressed, "dup-oct", Some("2026-10")),
        (AuditKind::DuplicateSuppressed, "dup-before", None),
        (AuditKind::DeadLettered, "dl-nov", Some("2026-11")),
        // Not a kind a reconciliation reads, whatever its period.
        (AuditKind::ReplayReinjected, "rpl-nov", Some("2026-11")),
    ] {
        let linked = audit.append(&record_of_period(kind, &id(name), period, None)).await;
        assert!(matches!(linked, Ok(Some(_))), "append {name}: {linked:?}");
    }
    let read = exceptions_of_period(store, audit, "2026-11")
        .await
        .unwrap_or_else(|e| panic!("period read: {e}"));
    let envelopes: BTreeMap<String, EnvelopeStatus> = read
        .envelopes
        .iter()
        .map(|e| (e.envelope_id.clone(), e.status))
        .collect();
    assert_eq!(
        envelopes,
        BTreeMap::from([
            (id("nov"), EnvelopeStatus::Quarantined),
            (id("none"), EnvelopeStatus::Pending)
        ]),
        "November's envelopes as they are now, and those of no period"
    );
    let subjects: BTreeSet<String> = read.audit.iter().map(|r| r.sqs_message_id.clone()).collect();
    assert_eq!(
        subjects,
        BTreeSet::from([id("dup-nov"), id("dup-before"), id("dl-nov")]),
        "November's records a reconciliation reads, and those of no period"
    );
    // A record by its key, whatever its period.
    let october = AuditRecord::id_for(AuditKind::DuplicateSuppressed, &id("dup-oct"));
    let found = audit.record(&october).await.unwrap_or_else(|e| panic!("record: {e}"));
    assert_eq!(found.map(|r| r.sqs_message_id), Some(id("dup-oct")));
    assert!(matches!(audit.record(&id("none-such")).await, Ok(None)));
}
