//! Claims and settlements of several envelopes at once (`claim_many`, `finish_many`): each
//! answer what the one-envelope call would have answered, whatever the store groups them into.

use chrono::{DateTime, Duration, Utc};
use recon_core::domain::audit::{AUDIT_CHAINS, verify_chain};
use recon_core::domain::{
    AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, ReplayClaim, ReplayRecord, StatusChange,
};
use recon_core::ports::{AuditLog, AuditOutbox, Backlog, EnvelopeStore, Finish, FlowResult, Settled};

use super::totals_agree;
use crate::builders::{self, settle_by_hand};

fn claim_by(replay_id: &str, now: DateTime<Utc>, lease: Duration) -> ReplayClaim {
    builders::claim(replay_id, "conformance", now, lease)
}

fn change(status: EnvelopeStatus, at: DateTime<Utc>) -> StatusChange {
    StatusChange {
        status,
        at,
        actor: "test".into(),
        reason: "conformance".into(),
        manual_journal: false,
    }
}

/// 130 envelopes of `run` (more than one transaction holds; every other one with a 60 KB body,
/// about 4 MB in all, so DynamoDB's groups are cut by size too), claimed at once: one another replay holds, one changed since it was
/// read, one settled and one missing are refused; an expired lease is taken over; the
/// PENDING count moves by those claimed from PENDING only. Then settled at once: REPLAYED with
/// their records in the outbox (or, for a store given `trail`, linked into it, each once, the
/// chains unbroken), two released, one whose claim another replay took over refused, with no
/// record.
pub async fn envelopes_are_claimed_and_settled_at_once<S, A>(store: &S, trail: Option<&A>, run: &str)
where
    S: EnvelopeStore + Backlog + AuditOutbox,
    A: AuditLog,
{
    let pending = || async { store.pending_count().await.expect("pending count") };
    let now = builders::now();
    let before = pending().await;
    let mut read: Vec<DlqEnvelope> = Vec::new();
    // Their triage totals apart from any other test's (a root cause of their own), over hours,
    // entities, periods and amounts, dead-lettered over two days (two totals items).
    let cause = format!("CONFORMANCE:{run}");
    for n in 0..130 {
        let mut e = builders::envelope(&format!("{run}-g{n:03}"));
        if n % 2 == 0 {
            e.original.body = Some("x".repeat(60 * 1024));
        }
        e.root_cause = cause.clone();
        e.dead_lettered_at = now - Duration::hours(i64::from(n % 7) * 5);
        e.ledger_entity = Some(format!("E{}", n % 5));
        e.accounting_period = Some(if n % 2 == 0 { "2026-11" } else { "2026-12" }.into());
        e.amount = Some(format!("{n}.25"));
        store.create(&e).await.expect("create");
        read.push(e);
    }
    assert_eq!(pending().await, before + 130);
    let ids: Vec<String> = (0..130).map(|n| format!("{run}-g{n:03}")).collect();
    totals_agree(store, &cause, &ids).await;
    let id = |n: usize| format!("{run}-g{n:03}");
    // Held by another replay (live lease); held under a lease that ran out; changed since read.
    let claiming = change(EnvelopeStatus::Replaying, now);
    let other = |lease| claim_by("other", now, lease);
    assert_eq!(
        store
            .claim(&id(5), &other(Duration::hours(1)), now, &claiming, None)
            .await,
        Ok(true)
    );
    assert_eq!(
        store
            .claim(&id(7), &other(Duration::seconds(-1)), now, &claiming, None)
            .await,
        Ok(true)
    );
    settle_by_hand(store, &id(9), EnvelopeStatus::Quarantined).await;
    for n in [5, 7, 9] {
        read[n] = store.get(&id(n)).await.expect("get").expect("stored");
    }
    // Claimed and released by another replay after it was read: PENDING, but not as read.
    assert_eq!(
        store
            .claim(&id(11), &other(Duration::hours(1)), now, &claiming, None)
            .await,
        Ok(true)
    );
    let release = change(EnvelopeStatus::Pending, now);
    let record = ReplayRecord {
        replay_id: "other".into(),
        triggered_by: "test".into(),
        reason: "conformance".into(),
        at: now,
        outcome: EnvelopeStatus::Pending,
        sqs_message_id: None,
        copy_source_hash: None,
        copy_period: None,
        in_doubt_until: None,
    };
    assert_eq!(store.finish(&id(11), "other", &release, &record, None).await, Ok(true));
    assert_eq!(pending().await, before + 127);
    read.push(builders::envelope(&format!("{run}-missing")));

    let ours = claim_by("ours", now, Duration::minutes(5));
    let asked: Vec<&DlqEnvelope> = read.iter().collect();
    let answers = store.claim_many(&asked, &ours, now, &claiming).await;
    let refused = [5, 9, 11, 130];
    for (n, answer) in answers.iter().enumerate() {
        assert_eq!(answer, &Ok(!refused.contains(&n)), "claim of envelope {n}");
    }
    assert_eq!(answers.len(), 131);
    // 126 of the 127 PENDING are claimed; envelope 7, REPLAYING already, does not count.
    assert_eq!(
        pending().await,
        before + 1,
        "the count moves by the claims from PENDING"
    );
    totals_agree(store, &cause, &ids).await;
    for n in [0, 7, 64, 129] {
        let e = store.get(&id(n)).await.expect("get").expect("stored");
        assert_eq!(e.status, EnvelopeStatus::Replaying);
        assert_eq!(e.replay.map(|c| c.replay_id).as_deref(), Some("ours"), "envelope {n}");
    }

    // The refused are as they were: held by the other replay, settled, PENDING as released.
    let as_stored = |n: usize| async move { store.get(&id(n)).await.expect("get").expect("stored") };
    let held = as_stored(5).await;
    assert_eq!(
        (held.status, held.replay.map(|c| c.replay_id)),
        (EnvelopeStatus::Replaying, Some("other".into()))
    );
    assert_eq!(as_stored(9).await.status, EnvelopeStatus::Quarantined);
    let released = as_stored(11).await;
    assert_eq!(
        (released.status, released.status_history.len()),
        (EnvelopeStatus::Pending, read[11].status_history.len() + 2)
    );

    // Another replay takes envelope 30 over after our lease (its clock is past it).
    let later = now + Duration::minutes(6);
    let takeover = store
        .claim(
            &id(30),
            &claim_by("other", later, Duration::hours(1)),
            later,
            &claiming,
            None,
        )
        .await;
    assert_eq!(takeover, Ok(true));

    let claimed: Vec<usize> = (0..130).filter(|n| !refused.contains(n)).collect();
    let settled_at = now + Duration::minutes(1);
    let released = [20, 21];
    let changes: Vec<StatusChange> = claimed
        .iter()
        .map(|n| {
            let status = if released.contains(n) {
                EnvelopeStatus::Pending
            } else {
                EnvelopeStatus::Replayed
            };
            change(status, settled_at)
        })
        .collect();
    let records: Vec<ReplayRecord> = changes
        .iter()
        .map(|c| ReplayRecord {
            replay_id: "ours".into(),
            triggered_by: "test".into(),
            reason: "conformance".into(),
            at: settled_at,
            outcome: c.status,
            sqs_message_id: Some("copy".into()),
            copy_source_hash: None,
            copy_period: None,
            in_doubt_until: None,
        })
        .collect();
    let audits: Vec<AuditRecord> = claimed
        .iter()
        .map(|&n| {
            AuditRecord::system(
                AuditKind::ReplayReinjected,
                &id(n),
                settled_at,
                "test",
                "conformance".into(),
            )
        })
        .collect();
    let settlements: Vec<Finish<'_>> = claimed
        .iter()
        .enumerate()
        .map(|(k, &n)| Finish {
            envelope: &read[n],
            change: &changes[k],
            record: &records[k],
            audit: (!released.contains(&n)).then_some(&audits[k]),
        })
        .collect();
    let answers = store.finish_many("ours", &settlements).await;
    assert_eq!(answers.len(), claimed.len());
    for (k, &n) in claimed.iter().enumerate() {
        let answer = &answers[k];
        // Released envelopes have no record: the outbox's answer, with or without a trail.
        let as_expected = match (n, released.contains(&n), trail) {
            (30, _, _) => answer == &Ok(Settled::ClaimLost),
            (_, true, _) | (_, false, None) => answer == &Ok(Settled::InOutbox),
            (_, false, Some(_)) => matches!(answer, Ok(Settled::InTrail(_))),
        };
        assert!(as_expected, "settlement of envelope {n}: {answer:?}");
    }
    assert_eq!(pending().await, before + 3, "two released back to PENDING");
    totals_agree(store, &cause, &ids).await;
    for (n, status) in [
        (0, EnvelopeStatus::Replayed),
        (20, EnvelopeStatus::Pending),
        (30, EnvelopeStatus::Replaying),
    ] {
        let e = store.get(&id(n)).await.expect("get").expect("stored");
        assert_eq!(e.status, status, "envelope {n}");
    }
    let outbox = store.pending_records(1000).await.expect("outbox");
    for (k, &n) in claimed.iter().enumerate() {
        let held = outbox.iter().any(|r| r.audit_id == audits[k].audit_id);
        let expected = n != 30 && !released.contains(&n) && trail.is_none();
        assert_eq!(held, expected, "outbox record of envelope {n}");
    }
    if let Some(trail) = trail {
        records_are_linked_once(trail, &audits, &answers).await;
    }
}

/// Each record answered [`Settled::InTrail`] is in its chain once, at the `seq` answered, and
/// every chain it is in verifies; no other record is.
async fn records_are_linked_once<A: AuditLog>(trail: &A, audits: &[AuditRecord], answers: &[FlowResult<Settled>]) {
    // Any chain may hold a record (the DynamoDB log places them by contention, not by id).
    let chains: Vec<String> = (0..AUDIT_CHAINS).map(|i| format!("c{i}")).collect();
    let mut stored = Vec::new();
    for chain in &chains {
        let records = recon_core::ports::read_chain(trail, chain, 0).await.expect("chain");
        assert_eq!(verify_chain(chain, &records, None).map(|_| ()), Ok(()), "chain {chain}");
        stored.extend(records);
    }
    for (r, answer) in audits.iter().zip(answers) {
        let found: Vec<u64> = stored
            .iter()
            .filter(|c| c.record.audit_id == r.audit_id)
            .map(|c| c.seq)
            .collect();
        match answer {
            Ok(Settled::InTrail(seq)) => assert_eq!(found, [*seq], "record {} in the trail", r.audit_id),
            _ => assert_eq!(found, Vec::<u64>::new(), "record {} not in the trail", r.audit_id),
        }
    }
}

/// An envelope named twice in one call is claimed once (DynamoDB refuses a transaction that writes
/// an item twice: its group is asked one envelope at a time), the others all the same.
pub async fn an_envelope_named_twice_is_claimed_once<S>(store: &S, run: &str)
where
    S: EnvelopeStore + Backlog,
{
    let now = builders::now();
    let read: Vec<DlqEnvelope> = (0..3).map(|n| builders::envelope(&format!("{run}-twice{n}"))).collect();
    for e in &read {
        store.create(e).await.expect("create");
    }
    let before = store.pending_count().await.expect("pending count");
    let asked = [&read[0], &read[1], &read[0], &read[2]];
    let ours = claim_by("ours", now, Duration::minutes(5));
    let answers = store
        .claim_many(&asked, &ours, now, &change(EnvelopeStatus::Replaying, now))
        .await;
    assert_eq!(answers.len(), 4);
    assert_eq!((&answers[1], &answers[3]), (&Ok(true), &Ok(true)));
    let first = [&answers[0], &answers[2]];
    assert_eq!(first.iter().filter(|a| ***a == Ok(true)).count(), 1, "{first:?}");
    assert_eq!(first.iter().filter(|a| ***a == Ok(false)).count(), 1, "{first:?}");
    assert_eq!(store.pending_count().await.expect("pending count"), before - 3);
}
