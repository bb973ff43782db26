use super::*;

fn e(key: &str, amount: &str) -> Entry {
    Entry {
        key: key.into(),
        currency: Some("USD".into()),
        amount: parse_amount(amount).ok(),
        entity: Some("E".into()),
        period: Some("2026-11".into()),
        reference: format!("ref of {key}"),
        edited_from: None,
    }
}

#[test]
fn a_complete_population_holds_and_a_missing_one_is_named() {
    let manifest = vec![e("msg:a", "1.50"), e("msg:b", "2"), e("msg:b", "2")];
    let outcomes = vec![
        (State::Committed, e("msg:a", "1.5")),
        (State::Committed, e("msg:b", "2")),
        (State::Duplicate, e("msg:b", "2.00")),
    ];
    let r = reconcile(outcomes.clone(), vec![], Some(&manifest), 0);
    assert!(r.holds, "{r:?}");
    let r = reconcile(outcomes[..2].to_vec(), vec![], Some(&manifest), 0);
    assert!(!r.holds);
    assert_eq!(r.missing, ["msg:b"]);
    let mut more = outcomes.clone();
    more.push((State::Committed, e("msg:zz", "9")));
    let r = reconcile(more, vec![], Some(&manifest), 0);
    assert_eq!(r.extra, ["msg:zz (ref of msg:zz)"]);
    assert!(!r.holds);
}

#[test]
fn while_anything_is_queued_the_answer_is_undecided_never_holds() {
    let manifest = vec![e("msg:a", "10"), e("msg:b", "2")];
    // b is lost, and one message (another one) is still queued: missing <= queued once read as
    // HOLDS. It is undecided until the queues are empty.
    let r = reconcile(vec![(State::Committed, e("msg:a", "10"))], vec![], Some(&manifest), 1);
    assert_eq!(r.verdict, Verdict::Undecided, "{r:?}");
    assert!(!r.holds);
    // Queues empty: b is missing, it does not hold.
    let r = reconcile(vec![(State::Committed, e("msg:a", "10"))], vec![], Some(&manifest), 0);
    assert_eq!(r.verdict, Verdict::DoesNotHold);
    assert_eq!(r.missing, ["msg:b"]);
    // Without a manifest too.
    let r = reconcile(vec![(State::Committed, e("msg:a", "10"))], vec![], None, 3);
    assert_eq!(r.verdict, Verdict::Undecided);
    assert_eq!(reconcile(vec![], vec![], None, 0).verdict, Verdict::Holds);
}

#[test]
fn an_amount_altered_does_not_hold_even_while_messages_are_queued() {
    // a posted 11 where 10 was sent; b not yet anywhere, one message queued.
    let manifest = vec![e("msg:a", "10"), e("msg:b", "2")];
    let r = reconcile(vec![(State::Committed, e("msg:a", "11"))], vec![], Some(&manifest), 1);
    assert_eq!(r.verdict, Verdict::DoesNotHold, "{r:?}");
    assert_eq!(r.altered.len(), 1, "{r:?}");
    assert!(r.altered[0].starts_with("msg:a"), "{r:?}");
    // The same amount spelled otherwise is the same amount.
    let r = reconcile(
        vec![(State::Committed, e("msg:a", "10.00"))],
        vec![],
        Some(&manifest),
        1,
    );
    assert!(r.altered.is_empty(), "{r:?}");
    // Two amounts swapped between two sends under one key: per key, the multiset still matches.
    let manifest = vec![e("msg:c", "1"), e("msg:c", "2")];
    let swapped = vec![(State::Committed, e("msg:c", "2")), (State::Duplicate, e("msg:c", "1"))];
    assert_eq!(reconcile(swapped, vec![], Some(&manifest), 0).verdict, Verdict::Holds);
}

#[test]
fn the_largest_amounts_reconcile_exactly_without_panicking() {
    // Ten of the largest amounts a message may carry (28 digits) and half a unit: Decimal
    // sums overflow (a panic) or round; reconcile must do neither.
    let big = "9999999999999999999999999999";
    let mut manifest: Vec<Entry> = (0..10).map(|i| e(&format!("msg:{i}"), big)).collect();
    manifest.push(e("msg:half", "0.5"));
    let outcomes: Vec<(State, Entry)> = manifest.iter().map(|m| (State::Committed, m.clone())).collect();
    let r = reconcile(outcomes.clone(), vec![], Some(&manifest), 0);
    assert!(r.holds, "{r:?}");
    assert_eq!(
        r.by_state[&State::Committed].get("USD").to_string(),
        "99999999999999999999999999990.5"
    );
    // One cent missing is seen, however large the totals.
    let mut short = outcomes;
    short[10].1.amount = parse_amount("0.49").ok();
    assert!(!reconcile(short, vec![], Some(&manifest), 0).holds);
}

mod lineage {
    use super::super::*;
    use crate::domain::{OriginalAttribute, ReplayRecord, attrs, envelope_from_dlq_message};
    use chrono::{TimeZone, Utc};

    fn body() -> String {
        crate::domain::NewMessage {
            message_id: "m-1".into(),
            ledger_entity: "ACME-US".into(),
            currency: "USD".into(),
            amount: "10.50".into(),
            match_decision: crate::domain::MatchDecision::Matched,
            trace_id: "t-1".into(),
            value_date: "2026-11-30".into(),
            external_ref: "R-1".into(),
            counterparty: String::new(),
        }
        .to_body()
        .unwrap()
    }

    fn posting(sqs_id: &str, replay_of: Option<&str>) -> Posting {
        let b = body();
        let m = crate::domain::decode(&b).unwrap();
        Posting::from_message(
            &m,
            sqs_id,
            1,
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            replay_of.map(str::to_owned),
        )
    }

    /// The envelope of SQS message `sqs_id` (dead-lettered), optionally a copy of `replay_of`.
    fn envelope(sqs_id: &str, status: EnvelopeStatus, replay_of: Option<&str>) -> DlqEnvelope {
        let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
        m.message_id = Some(sqs_id.into());
        m.body = Some(body());
        let mut e = envelope_from_dlq_message(&m, Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(), "t");
        if let Some(parent) = replay_of {
            e.original.attributes.insert(
                attrs::REPLAY_OF.into(),
                OriginalAttribute {
                    data_type: "String".into(),
                    string_value: Some(parent.into()),
                    binary_value: None,
                },
            );
        }
        e.status = status;
        e
    }

    fn replayed_as(mut e: DlqEnvelope, copy: &str) -> DlqEnvelope {
        e.replays.push(ReplayRecord {
            replay_id: "rpl".into(),
            triggered_by: "t".into(),
            reason: "r".into(),
            at: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            outcome: EnvelopeStatus::Replayed,
            sqs_message_id: Some(copy.into()),
            copy_source_hash: None,
            copy_period: None,
            in_doubt_until: None,
        });
        e
    }

    fn states(postings: &[Posting], envelopes: &[DlqEnvelope], audit: &[AuditRecord], queued: u64) -> Reconciliation {
        let (out, problems) = outcomes(postings, envelopes, audit, true);
        let manifest = vec![manifest_entry(&body())];
        reconcile(out, problems, Some(&manifest), queued)
    }

    #[test]
    fn a_write_that_landed_before_a_dead_letter_counts_once() {
        // Committed by S0, whose caller saw a timeout; its last receive dead-lettered it.
        let r = states(
            &[posting("S0", None)],
            &[envelope("S0", EnvelopeStatus::SuppressedDuplicate, None)],
            &[],
            0,
        );
        assert!(r.holds, "{r:?}");
        assert_eq!(r.by_state[&State::Committed].count, 1);
        assert!(!r.by_state.contains_key(&State::Duplicate));
    }

    #[test]
    fn a_crash_between_reinjection_and_the_status_update_counts_once() {
        // Still REPLAYING (the status update never came), the copy C1 committed.
        let e = envelope("S0", EnvelopeStatus::Replaying, None);
        let r = states(&[posting("C1", Some(&e.envelope_id))], &[e], &[], 0);
        assert!(r.holds, "{r:?}");
        assert_eq!(r.by_state[&State::Committed].count, 1);
    }

    #[test]
    fn two_copies_of_one_reinjection_count_once() {
        // The send was reported failed but landed: two copies; one posted, one suppressed.
        let e = replayed_as(replayed_as(envelope("S0", EnvelopeStatus::Replayed, None), "C1"), "C2");
        let mut dup = AuditRecord::system(
            AuditKind::DuplicateSuppressed,
            "C2",
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            "c",
            String::new(),
        );
        dup.sqs_message_id = "C2".into();
        dup.message_id = Some("m-1".into());
        dup.source_hash = Some(posting("C1", None).source_hash);
        dup.replay_of = Some(e.envelope_id.clone());
        let r = states(&[posting("C1", Some(&e.envelope_id))], &[e], &[dup], 0);
        assert!(r.holds, "{r:?}");
        assert_eq!(r.by_state.len(), 1, "{r:?}");
    }

    #[test]
    fn an_envelope_suppressed_as_a_duplicate_of_a_posting_that_is_gone_never_holds() {
        // Committed by S0 (its caller saw a timeout, then it was dead-lettered and suppressed);
        // someone deletes the posting: the envelope alone must not count as settled.
        let suppressed = envelope("S0", EnvelopeStatus::SuppressedDuplicate, None);
        assert!(states(&[posting("S0", None)], std::slice::from_ref(&suppressed), &[], 0).holds);
        let r = states(&[], &[suppressed], &[], 0);
        assert!(!r.holds, "{r:?}");
        assert!(
            r.problems.iter().any(|p| p.contains("suppressed as a duplicate")),
            "{r:?}"
        );
    }

    #[test]
    fn a_copy_dead_lettered_again_counts_where_it_is_now() {
        let e0 = replayed_as(envelope("S0", EnvelopeStatus::Replayed, None), "C1");
        let e1 = envelope("C1", EnvelopeStatus::Pending, Some(&e0.envelope_id));
        let r = states(&[], &[e0, e1], &[], 0);
        assert!(r.holds, "{r:?}");
        assert_eq!(r.by_state[&State::Pending].count, 1);
        assert_eq!(r.by_state.len(), 1);
    }

    /// An envelope quarantined for a manual journal by `replay`.
    fn left_for_manual_journal(mut e: DlqEnvelope) -> DlqEnvelope {
        e.status = EnvelopeStatus::Quarantined;
        e.status_history.push(crate::domain::StatusChange {
            status: EnvelopeStatus::Quarantined,
            at: Utc.with_ymd_and_hms(2026, 12, 1, 1, 0, 0).unwrap(),
            actor: "operator".into(),
            reason: "book by hand".into(),
            manual_journal: true,
        });
        e
    }

    #[test]
    fn a_manual_journal_beside_a_posting_of_its_transaction_never_holds() {
        // S0 was left for a manual journal; S1, another message of the same transaction (or a
        // late GL request of S0's), posted it: booked twice.
        let e = left_for_manual_journal(envelope("S0", EnvelopeStatus::Pending, None));
        let mut manifest_of_two = vec![manifest_entry(&body()), manifest_entry(&body())];
        let (out, problems) = outcomes(&[posting("S1", None)], std::slice::from_ref(&e), &[], true);
        let r = reconcile(out, problems, Some(&manifest_of_two), 0);
        assert!(!r.holds, "{r:?}");
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("manual journal") && p.contains("posted")),
            "{r:?}"
        );
        // Only claimed by a body that does not decode: the same check on the hash it claims.
        let mut claimed = e.clone();
        claimed.source_hash_kind = crate::domain::HashKind::Claimed;
        let (_, problems) = outcomes(&[posting("S1", None)], &[claimed], &[], true);
        assert!(problems.iter().any(|p| p.contains("manual journal")), "{problems:?}");
        // Alone, the manual journal holds.
        manifest_of_two.pop();
        let (out, problems) = outcomes(&[], &[e], &[], true);
        assert!(reconcile(out, problems, Some(&manifest_of_two), 0).holds);
    }

    #[test]
    fn one_transaction_left_for_two_manual_journals_never_holds() {
        // S0 and S1 name one transaction (S1 only claims it: its content was altered); both were
        // quarantined for a manual journal: booked twice by hand, with nothing posted.
        let e0 = left_for_manual_journal(envelope("S0", EnvelopeStatus::Pending, None));
        let mut e1 = left_for_manual_journal(envelope("S1", EnvelopeStatus::Pending, None));
        e1.source_hash_kind = crate::domain::HashKind::Claimed;
        assert_eq!(e0.source_hash, e1.source_hash);
        let (out, problems) = outcomes(&[], &[e0, e1], &[], true);
        let r = reconcile(out, problems, None, 0);
        assert!(!r.holds, "{r:?}");
        assert!(
            r.problems.iter().any(|p| p.contains("left for 2 manual journals")),
            "{r:?}"
        );
    }

    #[test]
    fn an_edited_copy_dead_lettered_again_and_left_for_a_manual_journal_is_quarantined() {
        // E0 superseded by an approved edit, its copy C1 sent; C1 dead-lettered again, and its
        // envelope left for a manual journal: the transaction waits for the accountant.
        let mut e0 = replayed_as(envelope("S0", EnvelopeStatus::Superseded, None), "C1");
        e0.replays[0].outcome = EnvelopeStatus::Superseded;
        let e1 = left_for_manual_journal(envelope("C1", EnvelopeStatus::Pending, Some(&e0.envelope_id)));
        let r = states(&[], &[e0, e1], &[], 0);
        assert!(r.holds, "{r:?}");
        assert_eq!(r.by_state.keys().collect::<Vec<_>>(), [&State::Quarantined], "{r:?}");
    }

    #[test]
    fn a_lineage_is_labelled_by_the_message_sent_even_when_a_copy_is_dated_before_it() {
        // E0 superseded by an edit into another currency; its copy C1 dead-lettered again and
        // quarantined, its dead letter dated an hour before E0's (the wall clock went back).
        let mut e0 = replayed_as(envelope("S0", EnvelopeStatus::Superseded, None), "C1");
        e0.replays[0].outcome = EnvelopeStatus::Superseded;
        let mut e1 = envelope("C1", EnvelopeStatus::Quarantined, Some(&e0.envelope_id));
        e1.currency = Some("EUR".into());
        e1.amount = Some("9.99".into());
        e1.dead_lettered_at = e0.dead_lettered_at - chrono::Duration::hours(1);
        let r = states(&[], &[e0, e1], &[], 0);
        assert!(r.holds, "{r:?}");
        assert!(r.by_state[&State::Quarantined].amounts.contains_key("USD"), "{r:?}");
    }

    #[test]
    fn a_copy_lost_on_the_way_never_lets_reconcile_hold() {
        // Re-injected as C1, which never reached any state, and the queues are empty.
        let e0 = replayed_as(envelope("S0", EnvelopeStatus::Replayed, None), "C1");
        let r = states(&[], std::slice::from_ref(&e0), &[], 0);
        assert!(!r.holds);
        assert!(r.problems.iter().any(|p| p.contains("in flight")), "{r:?}");
        // While a queue still holds messages, it may be on its way: undecided, never HOLDS.
        assert_eq!(states(&[], &[e0], &[], 1).verdict, Verdict::Undecided);
    }
}

fn period_entry(key: &str, period: Option<&str>, reference: &str) -> Entry {
    Entry {
        key: key.into(),
        currency: Some("USD".into()),
        amount: Some(Decimal::ONE),
        entity: Some("ACME-US".into()),
        period: period.map(str::to_owned),
        reference: reference.into(),
        edited_from: None,
    }
}

#[test]
fn a_period_keeps_its_transactions_with_every_record_of_them() {
    let outcomes = vec![
        (State::Committed, period_entry("msg:a", Some("2026-11"), "posting a")),
        // A duplicate of a, recorded without its period: it follows its transaction.
        (State::Duplicate, period_entry("msg:a", None, "audit dup-a")),
        (State::Committed, period_entry("msg:b", Some("2026-10"), "posting b")),
        (State::Quarantined, period_entry("raw:c", None, "envelope c")),
        // Another transaction under a's message id, in another period: not 2026-11's.
        (
            State::Committed,
            period_entry("msg:a", Some("2026-10"), "posting a-reused"),
        ),
    ];
    let kept = of_period(outcomes.clone(), "2026-11", None);
    let refs: Vec<&str> = kept.iter().map(|(_, e)| e.reference.as_str()).collect();
    assert_eq!(refs, ["posting a", "audit dup-a"]);
    // The manifest names a message whose records carry no period.
    let manifest = [period_entry("raw:c", Some("2026-11"), "")];
    let kept = of_period(outcomes, "2026-11", Some(&manifest));
    let refs: Vec<&str> = kept.iter().map(|(_, e)| e.reference.as_str()).collect();
    assert_eq!(refs, ["posting a", "audit dup-a", "envelope c"]);
}
