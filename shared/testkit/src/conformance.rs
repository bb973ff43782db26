//! What every implementation of a port must do, as checks any test runs against its adapter: the
//! memory adapters in `recon-core`'s tests, the AWS adapters on the local stack. One definition of
//! the behaviour, so the two cannot drift apart.

use recon_core::domain::status::IllegalTransition;
use recon_core::domain::{AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, StatusChange};
use recon_core::ports::{
    AuditLog, Backlog, CreateOutcome, EnvelopeStore, EnvelopesOfPeriod, FlowError, RecordsOfPeriod,
};
use recon_core::reconcile::exceptions_of_period;
use std::collections::{BTreeMap, BTreeSet};

use crate::builders::{self, settle_by_hand};

mod groups;
pub use groups::{an_envelope_named_twice_is_claimed_once, envelopes_are_claimed_and_settled_at_once};

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

    assert_eq!(store.create(&builders::envelope(id)).await, Ok(CreateOutcome::Created));
    assert_eq!(pending().await, before + 1);

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

    settle_by_hand(store, id, EnvelopeStatus::Quarantined).await;
    assert_eq!(status().await, Some(EnvelopeStatus::Quarantined));
    assert_eq!(pending().await, before);

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

/// A posting of transaction `n` of `run` (its `source_hash` unique to the run), delivered as
/// SQS message `sqs_message_id`.
pub fn posting(run: &str, n: u32, sqs_message_id: &str) -> recon_core::domain::Posting {
    use recon_core::domain::MatchDecision;
    recon_core::domain::Posting {
        source_hash: recon_core::domain::hash::sha256_hex(format!("{run}#{n}").as_bytes()),
        sqs_message_id: sqs_message_id.to_owned(),
        message_id: format!("m-{n}"),
        trace_id: format!("trace-{n}"),
        ledger_entity: "ACME-US".into(),
        currency: "USD".into(),
        amount: rust_decimal::Decimal::new(1_234_567_890_123_456_789, 4),
        value_date: chrono::NaiveDate::from_ymd_opt(2026, 11, 30).unwrap_or_default(),
        period: "2026-11".into(),
        match_decision: MatchDecision::Matched,
        external_ref: format!("BANK-{n:06}"),
        counterparty: "Globex".into(),
        attempt_count: 1,
        committed_at: chrono::DateTime::from_timestamp(1_796_000_000, 0).unwrap_or_default(),
        replay_of: None,
    }
}

/// The exactly-once obligations every [`recon_core::ports::Ledger`] carries (docs/own-ledger.md,
/// "Plug in your own ledger"), for any implementation to run; `run` must be new to the ledger.
/// - Many concurrent commits of one transaction: exactly one writes; every other answers
///   `AlreadyCommitted` naming the one that did (or a transient `Conflict` while it is still
///   being posted, and `AlreadyCommitted` when retried); `lookup` names it too.
/// - A redelivery of the committed SQS message answers `AlreadyCommitted` with its own SQS
///   message id (the consumer acknowledges it as done); another message carrying the same
///   transaction answers with the first one's (a duplicate).
/// - A hand-off to a manual journal and a posting exclude each other, whichever comes first, and
///   a second hand-off answers the first.
/// - An unknown transaction is not committed.
/// - `lookup_many` answers, for each key, what `lookup` answers.
/// - A transaction asked without its period is answered as when asked with it (a ledger keyed
///   by period searches for it); a raw digest (`raw:…`) is never committed.
pub async fn ledger_keeps_each_transaction_once<L: recon_core::ports::Ledger>(ledger: &L, run: &str) {
    use recon_core::domain::{CommitOutcome, HandOff, TxKey};

    assert_eq!(ledger.lookup(&posting(run, 0, "none").key()).await.unwrap(), None);
    // A raw digest (a body that named no hash) is no transaction's: not committed, however asked.
    let raw = format!("raw:{}", posting(run, 0, "none").source_hash);
    for key in [TxKey::new(&raw, Some("2026-11".into())), TxKey::hash_only(&raw)] {
        assert_eq!(ledger.lookup(&key).await.unwrap(), None, "{key:?}");
    }

    // One transaction, sixteen deliveries at once.
    let tries: Vec<_> = (0..16).map(|i| posting(run, 1, &format!("sqs-{i}"))).collect();
    let outcomes = futures::future::join_all(tries.iter().map(|p| ledger.commit(p))).await;
    let mut winners = Vec::new();
    let mut answered = Vec::new();
    let mut busy = Vec::new();
    for (p, o) in tries.iter().zip(outcomes) {
        match o {
            Ok(CommitOutcome::Committed) => winners.push(p.sqs_message_id.clone()),
            Ok(CommitOutcome::AlreadyCommitted(r)) => answered.push(r.sqs_message_id),
            // A claim held by a delivery still posting: a transient conflict, retried later
            // (its message's visibility timeout), never a second posting.
            Err(e) if e.kind == recon_core::domain::TransientKind::Conflict => busy.push(p),
            Err(e) => panic!("a commit under contention failed otherwise than a conflict: {e:?}"),
            Ok(refused) => panic!("a valid posting was refused: {refused:?}"),
        }
    }
    for p in busy {
        match ledger.commit(p).await.expect("the retry is answered") {
            CommitOutcome::AlreadyCommitted(r) => answered.push(r.sqs_message_id),
            CommitOutcome::Committed => winners.push(p.sqs_message_id.clone()),
            refused => panic!("a valid posting was refused: {refused:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one delivery commits: {winners:?}");
    assert!(
        answered.iter().all(|id| *id == winners[0]),
        "{answered:?} vs {winners:?}"
    );
    let held = ledger.lookup(&tries[0].key()).await.unwrap().expect("committed");
    assert_eq!(held.sqs_message_id, winners[0]);
    assert_eq!(held.manual_journal, None);
    let searched = ledger.lookup(&TxKey::hash_only(&tries[0].source_hash)).await.unwrap();
    assert_eq!(searched.as_ref(), Some(&held), "asked without its period");

    // The same SQS message again (a crash after the commit); another message carrying the
    // transaction is what the fifteen losers above were.
    let again = posting(run, 1, &winners[0]);
    match ledger.commit(&again).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, winners[0], "a redelivery is recognised"),
        other => panic!("a redelivery committed twice: {other:?}"),
    }

    // A hand-off after the posting loses to it.
    let late = HandOff {
        source_hash: tries[0].source_hash.clone(),
        period: Some(tries[0].period.clone()),
        envelope_id: format!("env_{run}_late"),
        replay_id: "rp-late".into(),
        handed_off_at: tries[0].committed_at,
    };
    match ledger.hand_off(&late).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, winners[0]),
        other => panic!("a hand-off over a posting: {other:?}"),
    }
    let still = ledger.lookup(&tries[0].key()).await.unwrap().expect("committed");
    assert_eq!(
        (still.sqs_message_id.as_str(), still.manual_journal.as_deref()),
        (winners[0].as_str(), None),
        "a losing hand-off changed nothing"
    );

    // A hand-off first: no posting may follow, and the first hand-off holds.
    let handed = HandOff {
        source_hash: posting(run, 2, "x").source_hash,
        period: Some(posting(run, 2, "x").period),
        envelope_id: format!("env_{run}_first"),
        replay_id: "rp-1".into(),
        handed_off_at: tries[0].committed_at,
    };
    assert_eq!(ledger.hand_off(&handed).await.unwrap(), CommitOutcome::Committed);
    match ledger.commit(&posting(run, 2, "sqs-after")).await.unwrap() {
        // No delivery's id: the consumer must not take it for a redelivery of its own message.
        CommitOutcome::AlreadyCommitted(r) => {
            assert!(r.handed_off_by(&handed.envelope_id), "{r:?}");
            assert!(r.sqs_message_id.is_empty(), "a hand-off names no delivery: {r:?}");
        }
        other => panic!("posted after a hand-off: {other:?}"),
    }
    let second = HandOff {
        envelope_id: format!("env_{run}_second"),
        ..handed.clone()
    };
    match ledger.hand_off(&second).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert!(r.handed_off_by(&handed.envelope_id)),
        other => panic!("two hand-offs of one transaction: {other:?}"),
    }
    for key in [handed.key(), TxKey::hash_only(&handed.source_hash)] {
        assert!(
            ledger
                .lookup(&key)
                .await
                .unwrap()
                .is_some_and(|r| r.handed_off_by(&handed.envelope_id)),
            "{key:?}"
        );
    }

    // Several at once answer what each answers alone: the posting, the hand-off, and nothing for
    // an unknown transaction (a key asked twice is answered once).
    let unknown = posting(run, 3, "none").key();
    let asked = vec![tries[0].key(), handed.key(), unknown.clone(), tries[0].key()];
    let many = ledger.lookup_many(&asked).await.expect("lookup_many");
    assert_eq!(many.len(), 2, "{many:?}");
    for key in [&tries[0].key(), &handed.key(), &unknown] {
        let alone = ledger.lookup(key).await.unwrap();
        assert_eq!(
            many.get(&key.source_hash),
            alone.as_ref(),
            "lookup_many and lookup disagree on {key:?}"
        );
    }
    assert!(ledger.lookup_many(&[]).await.unwrap().is_empty());
}

/// What every [`recon_core::ports::LedgerReader`] must answer (reconcile, stats, `audit show`
/// and evidence export rely on it); `run` must be new to the ledger, other data may be there.
/// - Reading a scope page by page (pages of 3 here) yields every posting in it exactly once and
///   nothing outside it; a period, an entity, both, or everything.
/// - The posting of a hash is the one committed, amount exact, asked with its period or without,
///   alone or several at once; a hand-off is no posting, and is listed among the hand-offs.
/// - The totals per currency are exact.
pub async fn ledger_reads_by_period<L: recon_core::ports::Ledger + recon_core::ports::LedgerReader>(
    ledger: &L,
    run: &str,
) {
    use recon_core::domain::{HandOff, Posting, TxKey};
    use recon_core::ports::LedgerScope;
    use std::collections::BTreeMap;

    let (east, west) = (format!("{run}-EAST"), format!("{run}-WEST"));
    let mut committed: Vec<Posting> = Vec::new();
    for n in 0..13u32 {
        let mut p = posting(run, 100 + n, &format!("sqs-read-{n}"));
        p.ledger_entity = if n % 3 == 0 { west.clone() } else { east.clone() };
        p.period = if n < 9 { "2026-10".into() } else { "2026-11".into() };
        p.currency = if n % 2 == 0 { "EUR".into() } else { "JPY".into() };
        p.amount = rust_decimal::Decimal::new(1_000_000_000_000_000_001 + i64::from(n), if n % 2 == 0 { 2 } else { 0 });
        assert_eq!(
            ledger.commit(&p).await.unwrap(),
            recon_core::domain::CommitOutcome::Committed
        );
        committed.push(p);
    }
    let handed = HandOff {
        source_hash: posting(run, 199, "x").source_hash,
        period: Some("2026-10".into()),
        envelope_id: format!("env_{run}_read"),
        replay_id: "rp-read".into(),
        handed_off_at: committed[0].committed_at,
    };
    ledger.hand_off(&handed).await.unwrap();
    let ours = |p: &Posting| p.ledger_entity == east || p.ledger_entity == west;

    let scopes = [
        LedgerScope::default(),
        LedgerScope::period("2026-10"),
        LedgerScope::period("2026-11"),
        LedgerScope {
            period: Some("2026-10".into()),
            entity: Some(west.clone()),
            segment: None,
        },
        LedgerScope {
            period: None,
            entity: Some(east.clone()),
            segment: None,
        },
    ];
    for scope in &scopes {
        let mut read: BTreeMap<String, Posting> = BTreeMap::new();
        let mut cursor: Option<String> = None;
        for _ in 0..10_000 {
            let page = ledger.postings_page(scope, cursor.as_deref(), 3).await.unwrap();
            assert!(page.postings.len() <= 3, "{scope:?}: a page over its limit");
            for p in page.postings {
                assert!(scope.covers(&p), "{scope:?}: {p:?} is outside the scope");
                let hash = p.source_hash.clone();
                assert!(read.insert(hash.clone(), p).is_none(), "{scope:?}: {hash} read twice");
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let got: Vec<&Posting> = read.values().filter(|p| ours(p)).collect();
        let mut expected: Vec<&Posting> = committed.iter().filter(|p| scope.covers(p)).collect();
        expected.sort_by(|a, b| a.source_hash.cmp(&b.source_hash));
        assert_eq!(got, expected, "{scope:?}: every posting in scope exactly once");
        // Split three ways and read segment by segment: disjoint, and together the scope.
        let mut by_segments: BTreeMap<String, Posting> = BTreeMap::new();
        for segment in recon_core::domain::Segment::all_of(3) {
            let part = scope.segment(segment);
            for p in recon_core::ports::read_postings(ledger, &part).await.unwrap() {
                assert!(scope.covers(&p), "{part:?}: {p:?} is outside the scope");
                let hash = p.source_hash.clone();
                assert!(
                    by_segments.insert(hash.clone(), p).is_none(),
                    "{hash} in two segments of {scope:?}"
                );
            }
        }
        let got: Vec<&Posting> = by_segments.values().filter(|p| ours(p)).collect();
        assert_eq!(
            got, expected,
            "{scope:?}: its three segments hold every posting in it once"
        );
    }

    for key in [committed[4].key(), TxKey::hash_only(&committed[4].source_hash)] {
        assert_eq!(
            ledger.posting(&key).await.unwrap().as_ref(),
            Some(&committed[4]),
            "{key:?}"
        );
    }
    for key in [handed.key(), TxKey::hash_only(&handed.source_hash)] {
        assert_eq!(ledger.posting(&key).await.unwrap(), None, "a hand-off is no posting");
    }
    assert_eq!(ledger.posting(&posting(run, 198, "x").key()).await.unwrap(), None);
    // Several at once: what each answers alone (with its period, without, a hand-off, nothing).
    let asked = vec![
        committed[4].key(),
        TxKey::hash_only(&committed[7].source_hash),
        committed[10].key(),
        handed.key(),
        posting(run, 198, "x").key(),
        TxKey::hash_only(format!("raw:{}", committed[4].source_hash)),
    ];
    let mut many = ledger.postings_of(&asked).await.unwrap();
    many.sort_by(|a, b| a.source_hash.cmp(&b.source_hash));
    let mut alone = vec![committed[4].clone(), committed[7].clone(), committed[10].clone()];
    alone.sort_by(|a, b| a.source_hash.cmp(&b.source_hash));
    assert_eq!(many, alone, "postings_of answers what posting answers, key by key");
    let hand_offs = ledger.hand_offs().await.unwrap();
    assert!(
        hand_offs.iter().any(|r| r.handed_off_by(&handed.envelope_id)),
        "{hand_offs:?}"
    );

    let scope = LedgerScope {
        period: Some("2026-10".into()),
        entity: Some(east.clone()),
        segment: None,
    };
    let totals = recon_core::ports::tally_postings(ledger, &scope).await.unwrap();
    let mut expected: BTreeMap<String, recon_core::domain::Tally> = BTreeMap::new();
    for p in committed.iter().filter(|p| scope.covers(p)) {
        expected
            .entry(p.currency.clone())
            .or_default()
            .add_parts(Some(&p.currency), Some(p.amount));
    }
    assert_eq!(totals, expected, "totals per currency, exact");
}

/// What every ledger answers when its store cannot be reached (pass one pointed at nothing):
/// a transient error of a kind that spends the retry budget — never a commit, never a
/// refusal (a message is not poison because its ledger is down), never "not committed" (gate 2
/// must not take an unreachable ledger for an empty one).
pub async fn ledger_fails_transiently_when_unreachable<L: recon_core::ports::Ledger>(ledger: &L, run: &str) {
    use recon_core::domain::{HandOff, TransientKind};
    let p = posting(run, 1, "sqs-1");
    let transient = |what: &str, kind: Option<TransientKind>| {
        assert!(
            matches!(
                kind,
                Some(
                    TransientKind::Network
                        | TransientKind::Timeout
                        | TransientKind::ServiceUnavailable
                        | TransientKind::Infrastructure
                )
            ),
            "{what} on an unreachable ledger: {kind:?}"
        );
    };
    let commit = ledger.commit(&p).await;
    transient("commit", commit.as_ref().err().map(|e| e.kind));
    let lookup = ledger.lookup(&p.key()).await;
    transient("lookup", lookup.as_ref().err().map(|e| e.kind));
    let hand_off = ledger
        .hand_off(&HandOff {
            source_hash: p.source_hash.clone(),
            period: Some(p.period.clone()),
            envelope_id: format!("env_{run}"),
            replay_id: "rp-unreachable".into(),
            handed_off_at: p.committed_at,
        })
        .await;
    transient("hand-off", hand_off.as_ref().err().map(|e| e.kind));
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
