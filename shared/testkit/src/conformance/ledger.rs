//! What every ledger must do (`Ledger`, `LedgerReader`): the exactly-once obligations, the reads,
//! and how an unreachable one fails; for the memory, DynamoDB, PostgreSQL and HTTP ledgers alike.

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
