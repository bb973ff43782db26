//! Edit-and-retry on in-memory adapters: an edited body must pass gate 1, waits for a second
//! person, posts once as a new message linked to its original (SUPERSEDED, its bytes untouched),
//! hands the original transaction off so it never posts beside the edit, and reconciles once.

use crate::common::*;
use recon_core::consume::Disposition;
use recon_core::domain::approval::{Identity, RequestStatus};
use recon_core::domain::edit::Proposal;
use recon_core::domain::{AuditRecord, decode};
use recon_core::reconcile::{State, manifest_entry, outcomes as fates, reconcile};

fn who(name: &str) -> Identity {
    Identity {
        arn: format!("arn:aws:iam::000000000000:user/{name}"),
        name: None,
    }
}

fn set(field: &str, value: &str) -> Proposal {
    Proposal::Set(vec![(field.to_owned(), value.to_owned())])
}

/// An edit of `e` requested by the maker and approved by the checker.
async fn approved_edit(
    r: &TestReplayer,
    e: &DlqEnvelope,
    field: &str,
    value: &str,
    reason: &str,
) -> recon_core::domain::approval::ApprovalRequest {
    approved(r, e, &set(field, value), reason).await
}

/// `proposal` for `e`, requested by the maker and approved by the checker.
async fn approved(
    r: &TestReplayer,
    e: &DlqEnvelope,
    proposal: &Proposal,
    reason: &str,
) -> recon_core::domain::approval::ApprovalRequest {
    let q = r
        .request_edit(&e.envelope_id, proposal, reason, &who("maker"))
        .await
        .unwrap();
    r.decide(&q.request_id, &who("checker"), true, "ok").await.unwrap();
    q
}

/// An edit that corrects the currency to USD and moves the value date into November.
fn moved_into_november() -> Proposal {
    Proposal::Set(vec![
        ("currency".to_owned(), "USD".to_owned()),
        ("value_date".to_owned(), "2026-11-02".to_owned()),
    ])
}

fn attribute<'a>(m: &'a recon_core::ports::OutgoingMessage, name: &str) -> Option<&'a str> {
    m.attributes
        .iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, _, v)| v.as_str())
}

/// The consumer given the edited copy twice: it posts once, the second delivery is a duplicate.
/// One trail as the stores hold it (the consumer's records beside the replay's), and where
/// reconcile's bounded read (by period, through the indexes) tells other than the whole read.
async fn bounded_read_disagreements(
    w: &World,
    consumer: &TestConsumer,
) -> (recon_testkit::memory::MemoryAuditLog, Vec<String>) {
    let trail = recon_testkit::memory::MemoryAuditLog::default();
    let audit: Vec<AuditRecord> = w.audit.records().into_iter().chain(consumer.audit.records()).collect();
    for a in &audit {
        recon_core::ports::AuditLog::append(&trail, a).await.unwrap();
    }
    let envelopes = recon_core::ports::all_envelopes(&*w.store, None).await.unwrap();
    let violations = recon_testkit::sim::oracle::bounded_read_agrees(
        &w.ledger,
        (&w.store, &trail),
        &w.ledger.postings(),
        &envelopes,
        &audit,
        true,
    );
    (trail, violations)
}

async fn posted_twice(w: &World, copy: &recon_core::ports::OutgoingMessage) -> TestConsumer {
    let consumer = w.consumer();
    assert_eq!(
        consumer.handle_message(&builders::delivered("edited-1", copy)).await,
        Disposition::Committed
    );
    assert!(matches!(
        consumer.handle_message(&builders::delivered("edited-2", copy)).await,
        Disposition::DuplicateSuppressed { .. }
    ));
    consumer
}

#[tokio::test]
async fn an_approved_edit_posts_once_supersedes_its_original_and_reconciles_once() {
    let w = world();
    // Sent with a mistyped currency: USX is no currency, so the message is poison.
    let sent = tx_in(1, "USX", "100.00");
    let e = w.envelope("s1", &sent, ChronoDuration::hours(1)).await;
    let original = e.original.body.clone().unwrap();
    let r = w.replayer(ReplayConfig::default());

    // An edit that still fails gate 1 is refused at once, and so is editing the identity.
    let err = r
        .request_edit(&e.envelope_id, &set("currency", "USQ"), "typo", &who("maker"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not pass gate 1"), "{err}");
    let err = r
        .request_edit(&e.envelope_id, &set("message_id", "m-9"), "typo", &who("maker"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot be edited"), "{err}");

    let q = r
        .request_edit(
            &e.envelope_id,
            &set("currency", "USD"),
            "USX typed for USD (ticket FIN-12)",
            &who("maker"),
        )
        .await
        .unwrap();
    assert_eq!(q.status, RequestStatus::PendingApproval);
    let edit = q.edit.clone().unwrap();
    assert!(edit.economic());
    assert_eq!(
        edit.diff_line().split("; ").next(),
        Some("currency: \"USX\" -> \"USD\"")
    );

    // Self-approval is refused; nothing is sent before approval.
    let err = r.decide(&q.request_id, &who("maker"), true, "ok").await.unwrap_err();
    assert!(err.to_string().contains("self-approval refused"), "{err}");
    assert!(w.queue.sent().is_empty());
    r.decide(&q.request_id, &who("checker"), true, "matches the bank statement")
        .await
        .unwrap();
    let (done, report) = r.execute(&q.request_id, "ops", None, None).await.unwrap();
    assert_eq!(done.status, RequestStatus::Executed, "{}", report.summary());
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::Superseded);

    // One new message: the edited body, naming its original and the request.
    let copies = w.queue.sent();
    assert_eq!(copies.len(), 1);
    let copy = &copies[0];
    assert_eq!(copy.body, edit.body);
    assert_eq!(decode(&copy.body).unwrap().currency, "USD");
    assert_eq!(attribute(copy, attrs::REPLAY_OF), Some(e.envelope_id.as_str()));
    let claim = recon_core::domain::edit::edit_claim(&q.request_id);
    assert_eq!(
        attribute(copy, attrs::REPLAY_ID),
        Some(claim.as_str()),
        "the request posted it"
    );
    // The original is as it came.
    let after = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert_eq!(after.original.body.as_deref(), Some(original.as_str()));
    assert_eq!(after.original.body_sha256, e.original.body_sha256);

    // The consumer posts the edit once; a second delivery of it is a duplicate.
    let consumer = posted_twice(&w, copy).await;
    // Should USX ever become a currency, the producer's original, sent again, never posts
    // beside its edit: the edit handed it off.
    w.reference
        .put_currency(&CurrencyMapping {
            code: "USX".into(),
            minor_units: 2,
            description: "a currency added later".into(),
        })
        .await
        .unwrap();
    assert!(matches!(
        consumer
            .handle_message(&builders::delivery("s1-again", &original, 1))
            .await,
        Disposition::DuplicateSuppressed { .. }
    ));
    let postings = w.ledger.postings();
    assert_eq!(postings.len(), 1);
    assert_eq!(
        (postings[0].currency.as_str(), postings[0].amount.to_string().as_str()),
        ("USD", "100.00")
    );

    // Nothing else takes the envelope: a sweep finds nothing to do.
    let swept = r.run(&sweep(), None).await.unwrap();
    assert_eq!(swept.selected, 0);

    // Reconciled against what the producer sent (USX, twice): the edited transaction counts
    // once, committed as posted (its copies, the duplicate delivery too, follow the original);
    // the second send is a duplicate; the edit is named.
    let audit: Vec<AuditRecord> = w.audit.records().into_iter().chain(consumer.audit.records()).collect();
    assert!(
        audit
            .iter()
            .any(|a| a.kind == AuditKind::Edited && a.detail.contains("USX"))
    );
    let (outcomes, problems) = fates(&postings, &[after], &audit, true);
    let states: Vec<State> = outcomes.iter().map(|(s, _)| *s).collect();
    assert_eq!(states, [State::Committed, State::Duplicate], "{outcomes:?}");
    let manifest = vec![manifest_entry(&original), manifest_entry(&original)];
    let rec = reconcile(outcomes, problems, Some(&manifest), 0);
    assert!(rec.holds, "{rec:?}");
    assert_eq!(rec.edited.len(), 1, "{:?}", rec.edited);
    assert!(
        rec.edited[0].contains("100.00 USX as sent -> 100.00 USD as posted"),
        "{:?}",
        rec.edited
    );
}

#[tokio::test]
async fn an_edit_is_not_posted_when_its_envelope_changed_or_the_original_posted_meanwhile() {
    let w = world();
    add_xau(&w).await;
    let e = w
        .envelope("s1", &tx_in(1, "USX", "5.00"), ChronoDuration::hours(1))
        .await;
    let r = w.replayer(ReplayConfig::default());
    let q = approved_edit(&r, &e, "currency", "XAU", "was gold").await;
    // Between approval and execution, someone quarantines the envelope.
    let quarantine = quarantine_of(&[e.envelope_id.as_str()]);
    assert_eq!(r.run(&quarantine, None).await.unwrap().quarantined, 1);
    let (done, report) = r.execute(&q.request_id, "ops", None, None).await.unwrap();
    assert_eq!(report.changed_since, std::slice::from_ref(&e.envelope_id));
    assert_eq!(done.execution.unwrap().changed_since_count, 1);
    assert!(w.queue.sent().is_empty());
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::Quarantined);

    // An edit whose edited transaction reached the ledger meanwhile (the producer sent the
    // corrected message itself): nothing is sent, the envelope is superseded by that posting.
    let e2 = w
        .envelope("s2", &tx_in(2, "USX", "7.00"), ChronoDuration::hours(1))
        .await;
    let q2 = approved_edit(&r, &e2, "currency", "USD", "typo").await;
    let corrected = builders::delivery("s2-fixed", &q2.edit.as_ref().unwrap().body, 1);
    assert_eq!(w.consumer().handle_message(&corrected).await, Disposition::Committed);
    let (done, _) = r.execute(&q2.request_id, "ops", None, None).await.unwrap();
    assert_eq!(done.status, RequestStatus::Executed);
    assert!(w.queue.sent().is_empty());
    assert_eq!(w.status(&e2.envelope_id).await, EnvelopeStatus::Superseded);
    assert_eq!(w.ledger.postings().len(), 1);
    // Its original was handed off all the same: should USX become a currency, it never posts.
    w.reference
        .put_currency(&CurrencyMapping {
            code: "USX".into(),
            minor_units: 2,
            description: "added later".into(),
        })
        .await
        .unwrap();
    let original = e2.original.body.clone().unwrap();
    assert!(matches!(
        w.consumer()
            .handle_message(&builders::delivery("s2-again", &original, 1))
            .await,
        Disposition::DuplicateSuppressed { .. }
    ));
    assert_eq!(w.ledger.postings().len(), 1);
}

#[tokio::test]
async fn once_its_original_is_handed_off_an_edit_goes_out_even_if_its_gate_now_fails() {
    let w = world();
    let e = w
        .envelope("s1", &tx_in(1, "USX", "9.00"), ChronoDuration::hours(1))
        .await;
    let r = w.replayer(ReplayConfig::default());
    let q = approved_edit(&r, &e, "currency", "USD", "typo").await;
    // SQS refuses the send after the hand-off: an error, the claim kept, the request EXECUTING.
    w.queue.set_refusing(true);
    assert!(r.execute(&q.request_id, "ops", None, None).await.is_err());
    assert_eq!(w.ledger.hand_offs().len(), 1);
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::Replaying);
    assert_eq!(r.request(&q.request_id).await.unwrap().status, RequestStatus::Executing);
    // Past every lease, no sweep takes the edit's claim over.
    w.clock.advance(ChronoDuration::minutes(16));
    w.queue.set_refusing(false);
    assert_eq!(r.run(&sweep(), None).await.unwrap().selected, 0);
    assert!(w.queue.sent().is_empty());
    // Meanwhile the period closes: gate 1 would refuse the edit now. Resumed, it goes out all
    // the same (the original is handed off: released, it would be neither posted nor booked).
    w.set_november(PeriodStatus::Closed, None).await;
    let (done, report) = r.execute(&q.request_id, "ops", None, None).await.unwrap();
    assert_eq!(done.status, RequestStatus::Executed, "{}", report.summary());
    assert_eq!(w.queue.sent().len(), 1);
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::Superseded);
}

#[tokio::test]
async fn an_edit_refused_by_gate_1_when_it_runs_leaves_its_envelope_to_the_next_remedy() {
    let w = world();
    add_xau(&w).await;
    let e = w
        .envelope("s1", &tx_in(1, "USX", "9.00"), ChronoDuration::hours(1))
        .await;
    let r = w.replayer(ReplayConfig::default());
    let q = approved_edit(&r, &e, "currency", "USD", "typo").await;
    w.set_november(PeriodStatus::Closed, None).await;
    let (done, report) = r.execute(&q.request_id, "ops", None, None).await.unwrap();
    assert_eq!((done.status, report.still_failing), (RequestStatus::Executed, 1));
    assert!(w.ledger.hand_offs().is_empty(), "nothing handed off before gate 1");
    assert_eq!(w.status(&e.envelope_id).await, EnvelopeStatus::Pending);
    // Released, the envelope is anyone's again: quarantined for a manual journal.
    let quarantine = quarantine_of(&[e.envelope_id.as_str()]);
    assert_eq!(r.run(&quarantine, None).await.unwrap().quarantined, 1);
}

/// An edit that moves the value date into the next month: the original's envelope is October's,
/// the copy's posting and its duplicate November's. Each period's bounded read (its exceptions
/// through the period indexes, what they name fetched by key) tells what the whole read tells.
#[tokio::test]
async fn an_edit_into_another_period_reconciles_each_period_as_the_whole_history_does() {
    let w = world();
    let sent = NewMessage {
        value_date: "2026-10-31".into(),
        ..tx_in(1, "USX", "100.00")
    };
    let e = w.envelope("s1", &sent, ChronoDuration::hours(1)).await;
    assert_eq!(e.accounting_period.as_deref(), Some("2026-10"));
    let r = w.replayer(ReplayConfig::default());
    let q = approved(&r, &e, &moved_into_november(), "booked a day late").await;
    let (done, report) = r.execute(&q.request_id, "ops", None, None).await.unwrap();
    assert_eq!(done.status, RequestStatus::Executed, "{}", report.summary());
    let copy = &w.queue.sent()[0];
    let consumer = posted_twice(&w, copy).await;
    let postings = w.ledger.postings();
    assert_eq!(postings[0].period, "2026-11");

    let (trail, violations) = bounded_read_disagreements(&w, &consumer).await;
    assert!(violations.is_empty(), "{violations:#?}");

    // Regression (issue 29, defect 8): each period against the producer's manifest, cut by the
    // period as sent, as `dlqctl reconcile --period P --manifest M` reads it: the edited
    // transaction is October's (it was sent in October), though November's ledger holds it.
    for period in ["2026-10", "2026-11"] {
        let manifest: Vec<_> = [manifest_entry(e.original.body.as_deref().unwrap())]
            .into_iter()
            .filter(|m| m.period.as_deref() == Some(period))
            .collect();
        let r = reconcile_period_against(&w, &trail, period, &manifest).await;
        assert!(r.holds, "{period}: {r:#?}");
        assert_eq!(
            r.by_state.values().map(|t| t.count).sum::<u64>(),
            manifest.len() as u64,
            "{period}: {r:#?}"
        );
    }
}

/// One period reconciled against `manifest` as `dlqctl reconcile --period --manifest` does: the
/// period's exceptions through their indexes, every posting of the period kept, what they name
/// in other periods fetched, the outcomes cut to the period.
async fn reconcile_period_against(
    w: &World,
    trail: &recon_testkit::memory::MemoryAuditLog,
    period: &str,
    manifest: &[recon_core::reconcile::Entry],
) -> recon_core::reconcile::Reconciliation {
    use recon_core::reconcile::{
        Links, complete_exceptions, exceptions_of_period, of_period, read_ledger, reconcile_counted,
    };
    let mut exceptions = exceptions_of_period(&*w.store, trail, period).await.unwrap();
    let links = Links::of(&exceptions.envelopes, &exceptions.audit).keeping_everything();
    let scope = recon_core::ports::LedgerScope::period(period);
    let mut read = read_ledger(&*w.ledger, &scope, 2, &links).await.unwrap();
    complete_exceptions(&*w.store, trail, &*w.ledger, period, &mut read, &mut exceptions)
        .await
        .unwrap();
    let (outcomes, problems) = fates(&read.linked, &exceptions.envelopes, &exceptions.audit, true);
    let outcomes = of_period(outcomes, period, Some(manifest));
    reconcile_counted(read.counted, &outcomes, problems, Some(manifest), 0)
}

/// Regression (found by the simulator): an approved edit into another period whose copy's send
/// answered an error after landing, the copy posted, and the resumed execution found the edited
/// transaction posted already: SUPERSEDED without a copy of its own. Its record now names the
/// edited transaction all the same, so the original's period reads its posting (in the other
/// period) as the whole history does, instead of counting the original a duplicate.
#[tokio::test]
async fn an_edit_found_posted_by_its_own_earlier_copy_reconciles_each_period_as_the_whole_history() {
    let w = world();
    let sent = NewMessage {
        value_date: "2026-10-31".into(),
        ..tx_in(2, "USX", "100.00")
    };
    let e = w.envelope("s1", &sent, ChronoDuration::hours(1)).await;
    let r = w.replayer(ReplayConfig::default());
    let q = approved(&r, &e, &moved_into_november(), "booked a day late").await;
    // The first execution's copy landed (its send answered an error) and posted.
    let edited = q.edit.clone().unwrap();
    let mut copy = builders::delivery("copy-1", &edited.body, 1);
    copy = builders::with_attribute(copy, attrs::REPLAY_OF, &e.envelope_id);
    let consumer = w.consumer();
    assert_eq!(consumer.handle_message(&copy).await, Disposition::Committed);
    // Resumed: the edited transaction is there already; nothing sent, the original superseded.
    let (done, report) = r.execute(&q.request_id, "ops", None, None).await.unwrap();
    assert_eq!(done.status, RequestStatus::Executed, "{}", report.summary());
    assert!(w.queue.sent().is_empty());
    let after = w.store.get(&e.envelope_id).await.unwrap().unwrap();
    assert_eq!(after.status, EnvelopeStatus::Superseded);
    assert_eq!(
        after.replays.last().and_then(|x| x.copy_source_hash.clone()),
        Some(edited.source_hash.clone())
    );

    let (_, violations) = bounded_read_disagreements(&w, &consumer).await;
    assert!(violations.is_empty(), "{violations:#?}");
}
