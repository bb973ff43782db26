//! Governance on the real local stack (DynamoDB Local, LocalStack): maker-checker requests kept
//! in the envelope table, decided and executed under DynamoDB's conditions (the approved set is
//! exact; an envelope replayed between the request and its execution posts once); canaries whose
//! copies dead-letter again; escalation by the scheduled sweep (of age, and before a period
//! closes); an edit posted once.

use recon_core::domain::approval::{
    Action, ApprovalPolicy, ApprovalRequest, Change, ChangeSet, Identity, MAX_REQUEST_ENVELOPES, NewRequest,
    RequestStatus,
};
use recon_core::domain::canary::{Canary, CanarySlice};
use recon_core::domain::{AuditKind, AuditRecord, EnvelopeStatus, NewMessage, PeriodRecord, PeriodStatus};
use recon_core::ports::{ApprovalRequests, AuditOutbox, EnvelopeStore, ReferenceData};
use recon_core::replay::{ReplayRequest, Selector};
use recon_harness::stack::TestStack;
use recon_testkit::builders::tx;
use std::sync::atomic::{AtomicBool, Ordering};

fn xau(n: u32) -> NewMessage {
    let mut m = tx(n);
    m.currency = "XAU".into();
    m.amount = format!("{n}.0625");
    m
}

fn who(name: &str) -> Identity {
    Identity {
        arn: format!("arn:aws:iam::000000000000:user/{name}"),
        name: None,
    }
}

fn replay(selector: Selector, reason: &str) -> ReplayRequest {
    ReplayRequest {
        selector,
        dry_run: false,
        reason: reason.into(),
        triggered_by: "integration-test".into(),
        invocation: None,
        scheduled: false,
        quarantine: false,
    }
}

async fn dead_letter(s: &TestStack, from: u32, to: u32) {
    s.enveloped(
        &(from..=to).map(|n| xau(n).to_body().unwrap()).collect::<Vec<_>>(),
        10_000,
    )
    .await;
}

/// `request` reads back from the envelope table as written, and its requester cannot approve it.
async fn reads_back_and_refuses_its_requester(
    s: &TestStack,
    r: &recon_aws::wiring::AwsReplayer<recon_testkit::memory::MemoryMetrics>,
    request: &ApprovalRequest,
) {
    let stored = s
        .envelope_store()
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&stored, request, "the request reads back as written");
    let err = r
        .decide(&request.request_id, &who("maker"), true, "")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("self-approval refused"), "{err}");
}

async fn set_policy(s: &TestStack, max_count: u64) {
    s.reference()
        .put_approval_policy(&ApprovalPolicy {
            max_count: Some(max_count),
            ..ApprovalPolicy::default()
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn an_approved_replay_posts_exactly_its_set_once_and_every_step_is_audited() {
    let s = TestStack::new("ap-exact").await;
    dead_letter(&s, 1, 3).await;
    s.map_currency("XAU", 4).await;
    set_policy(&s, 1).await;
    let r = s.replayer();
    let all = replay(
        Selector {
            root_cause: Some("UNMAPPED_CURRENCY:*".into()),
            ..Selector::default()
        },
        "XAU mapped",
    );
    // Above the policy: refused, nothing sent.
    let err = r.run(&all, None).await.unwrap_err();
    assert!(err.to_string().contains("needs a second person's approval"), "{err}");
    let assessed = r.assess(&all, None).await.unwrap();
    let request = r.request_approval(&all, &assessed, &who("maker"), None).await.unwrap();
    assert_eq!(request.exposure.count, 3);
    // It reads back as written; self-approval is refused and leaves it unchanged.
    reads_back_and_refuses_its_requester(&s, &r, &request).await;

    // Between the request and its approval: a fourth dead letter the selector matches (in XAG,
    // mapped at once), and the first envelope replayed on its own (one is within the policy).
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.send(&[NewMessage {
        currency: "XAG".into(),
        ..xau(4)
    }
    .to_body()
    .unwrap()])
        .await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(10_000)).await;
    s.map_currency("XAG", 4).await;
    let first = request.set.changes[0].envelope_id.clone();
    let one = replay(
        Selector {
            envelope_ids: vec![first.clone()],
            ..Selector::default()
        },
        "just one",
    );
    assert_eq!(r.run(&one, None).await.unwrap().reinjected, 1);

    r.decide(&request.request_id, &who("checker"), true, "mapping checked")
        .await
        .unwrap();
    let (done, report) = r
        .execute(&request.request_id, "integration-test", None, None)
        .await
        .unwrap();
    assert_eq!(done.status, RequestStatus::Executed);
    assert_eq!(report.reinjected, 2, "{report:#?}");
    assert_eq!(report.changed_since, vec![first]);
    assert!(
        r.execute(&request.request_id, "integration-test", None, None)
            .await
            .is_err(),
        "once"
    );

    // Each of the three transactions posts once; the fourth is still waiting.
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.pump(&consumer).await;
    let postings = s.postings().await;
    let mut ids: Vec<&str> = postings.iter().map(|p| p.message_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["m-1", "m-2", "m-3"]);
    let pending: Vec<_> = s
        .envelopes()
        .await
        .into_iter()
        .filter(|e| e.status == EnvelopeStatus::Pending)
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].message_id.as_deref(), Some("m-4"));

    let audit = s.audit().await;
    for kind in [
        AuditKind::ApprovalRequested,
        AuditKind::ApprovalGranted,
        AuditKind::ApprovalExecuted,
    ] {
        let found: Vec<&AuditRecord> = audit.iter().filter(|a| a.kind == kind).collect();
        assert_eq!(found.len(), 1, "{kind:?}");
        assert_eq!(found[0].sqs_message_id, request.digest, "records name the set");
    }
    assert!(s.envelope_store().pending_records(10).await.unwrap().is_empty());
    // Requests never show among envelopes.
    assert_eq!(s.envelopes().await.len(), 4);
    let (listed, _) = s.envelope_store().list_requests(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
}

#[tokio::test]
async fn two_approvers_at_once_one_wins_and_two_executions_at_once_one_runs() {
    let s = TestStack::new("ap-race").await;
    dead_letter(&s, 1, 2).await;
    s.map_currency("XAU", 4).await;
    set_policy(&s, 0).await;
    let r = s.replayer();
    let all = replay(Selector::default(), "XAU mapped");
    let assessed = r.assess(&all, None).await.unwrap();
    let request = r.request_approval(&all, &assessed, &who("maker"), None).await.unwrap();
    let (checker_a, checker_b) = (who("checker-a"), who("checker-b"));
    let (a, b) = tokio::join!(
        r.decide(&request.request_id, &checker_a, true, "a"),
        r.decide(&request.request_id, &checker_b, true, "b")
    );
    assert_eq!(u8::from(a.is_ok()) + u8::from(b.is_ok()), 1, "{a:?} {b:?}");
    let decided = s
        .envelope_store()
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((decided.status, decided.version), (RequestStatus::Approved, 2));
    let (x, y) = tokio::join!(
        r.execute(&request.request_id, "x", None, None),
        r.execute(&request.request_id, "y", None, None)
    );
    assert_eq!(u8::from(x.is_ok()) + u8::from(y.is_ok()), 1);
    let report = x.or(y).unwrap().1;
    assert_eq!(report.reinjected, 2);
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.pump(&consumer).await;
    assert_eq!(s.postings().await.len(), 2);
}

#[tokio::test]
async fn the_largest_request_fits_a_dynamodb_item() {
    // DynamoDB's 400 KB per item bounds a request's set; the memory store models the same limit.
    let s = TestStack::new("ap-size").await;
    let changes = (0..MAX_REQUEST_ENVELOPES)
        .map(|n| Change {
            envelope_id: format!("env_{n:032x}"),
            fingerprint: format!("{n:032x}"),
            outcome: "WOULD_QUARANTINE".into(),
            // The longest each field may be: a 12-character currency, 28 digits, a 64-character
            // entity.
            currency: Some("ABCDEFGHIJKL".into()),
            amount: Some(format!("-{}.{}", "9".repeat(14), "9".repeat(14))),
            entity: Some("E".repeat(64)),
            period: Some("2026-11".into()),
            closed_period: true,
        })
        .collect();
    let request = ApprovalRequest::new(
        NewRequest {
            action: Action::Quarantine,
            selector: "{}".into(),
            reason: "r".repeat(recon_core::domain::approval::MAX_REASON_BYTES),
            requested_by: who("maker"),
            why: vec!["w".into()],
            dry_run: String::new(),
            set: ChangeSet { changes },
            canary: None,
            edit: None,
        },
        &ApprovalPolicy::default(),
        chrono::Utc::now(),
    )
    .unwrap();
    let record = AuditRecord::system(
        AuditKind::ApprovalRequested,
        &request.request_id,
        request.created_at,
        "t",
        String::new(),
    );
    let memory = recon_testkit::memory::MemoryEnvelopeStore::default();
    assert!(memory.create_request(&request, &record).await.unwrap());
    assert!(s.envelope_store().create_request(&request, &record).await.unwrap());
    let back = s
        .envelope_store()
        .get_request(&request.request_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.set.len(), MAX_REQUEST_ENVELOPES);
    assert!(back.check_digest().is_ok());
    // Its last write holds the most: a decision, two runs, every envelope changed since.
    let mut r = back;
    let now = chrono::Utc::now();
    r.approve(&who("checker"), &"d".repeat(1000), now).unwrap();
    let changed: Vec<String> = r.set.changes.iter().map(|c| c.envelope_id.clone()).collect();
    r.start("x", None, now).unwrap();
    r.finish("rpl_1", "s".repeat(300), changed.clone(), true, now);
    r.start("y", Some(&who("checker")), now).unwrap();
    r.finish("rpl_2", "s".repeat(300), changed, false, now);
    // Written over the stored version: its size is what is checked.
    r.version = 2;
    assert!(memory.update_request(&r, None).await.unwrap());
    assert!(s.envelope_store().update_request(&r, None).await.unwrap());
}

#[tokio::test]
async fn a_canary_whose_copies_dead_letter_again_stops_the_rest_on_the_local_stack() {
    // The canary's copy meets a period closed after the replay's gates passed it: the consumer
    // dead-letters it (CLOSED_PERIOD), the enricher makes its envelope, the canary fails, and the
    // other three are never re-injected.
    let s = TestStack::new("ap-canary").await;
    dead_letter(&s, 1, 4).await;
    s.map_currency("XAU", 4).await;
    let r = s.replayer();
    let all = replay(Selector::default(), "XAU mapped");
    let canary = Canary {
        slice: CanarySlice::Count(1),
        max_failure_percent: 0,
        wait_secs: 60,
    };
    let finished = AtomicBool::new(false);
    let run = async {
        let report = r.run_guarded(&all, Some(&canary), None).await;
        finished.store(true, Ordering::SeqCst);
        report
    };
    let lambda = async {
        // Lambda's triggers, once the canary's copy is in the main queue.
        while s.main_queue().depth().await.unwrap().total() == 0 && !finished.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        s.reference()
            .put_period(&PeriodRecord {
                entity: "ACME-US".into(),
                period: "2026-11".into(),
                status: PeriodStatus::Closed,
                closes_on: None,
            })
            .await
            .unwrap();
        let consumer = s.consumer_with(s.ledger(), s.main_queue());
        while !finished.load(Ordering::SeqCst) {
            s.pump(&consumer).await;
            s.pump_dlq(&s.enricher(10_000)).await;
        }
    };
    let report = tokio::join!(run, lambda).0.unwrap();
    let c = report.canary.clone().unwrap();
    assert!(!c.passed && c.size == 1 && c.dead_lettered == 1, "{c}");
    assert_eq!(report.reinjected, 1, "{report:#?}");
    assert!(s.postings().await.is_empty());
    let envelopes = s.envelopes().await;
    let pending = envelopes.iter().filter(|e| e.status == EnvelopeStatus::Pending).count();
    assert_eq!(pending, 4, "three untouched and the copy's own");
}

#[tokio::test]
async fn a_scheduled_sweep_escalates_what_waited_too_long_once_per_stage() {
    let s = TestStack::new("ap-escalate").await;
    // An unmapped currency: the sweep leaves it PENDING. Dead-lettered 30 hours ago.
    let mut e = recon_testkit::builders::envelope("env_escalation_30h");
    e.dead_lettered_at = chrono::Utc::now() - chrono::Duration::hours(30);
    s.envelope_store().create(&e).await.unwrap();
    let r = s.replayer();
    for _ in 0..2 {
        let report = r.run(&recon_testkit::builders::sweep_request(), None).await.unwrap();
        assert_eq!(report.still_failing, 1);
    }
    let escalated: Vec<AuditRecord> = s
        .audit()
        .await
        .into_iter()
        .filter(|a| a.kind == AuditKind::Escalated)
        .collect();
    let mut ids: Vec<&str> = escalated.iter().map(|a| a.audit_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "ESCALATED#finance-controller#POISON_MESSAGE#env_escalation_30h",
            "ESCALATED#on-call#POISON_MESSAGE#env_escalation_30h",
        ],
        "one per stage, however many sweeps"
    );
}

#[tokio::test]
async fn an_approved_edit_posts_once_and_reconciles_once_on_the_local_stack() {
    use recon_core::domain::edit::Proposal;
    use recon_core::reconcile::{State, manifest_entry, outcomes, reconcile};
    let s = TestStack::new("ap-edit").await;
    // Sent with a mistyped currency (USX): poison, dead-lettered, enriched.
    let sent = NewMessage {
        currency: "USX".into(),
        amount: "250.00".into(),
        ..tx(1)
    }
    .to_body()
    .unwrap();
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.send(std::slice::from_ref(&sent)).await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(10_000)).await;
    let envelope = s.envelopes().await.pop().unwrap();
    let r = s.replayer();
    let fix = Proposal::Set(vec![("currency".into(), "USD".into())]);
    let request = r
        .request_edit(&envelope.envelope_id, &fix, "USX typed for USD", &who("maker"))
        .await
        .unwrap();
    assert_eq!(request.action, Action::Edit);
    reads_back_and_refuses_its_requester(&s, &r, &request).await;
    r.decide(&request.request_id, &who("checker"), true, "bank statement says USD")
        .await
        .unwrap();
    let (done, report) = r
        .execute(&request.request_id, "integration-test", None, None)
        .await
        .unwrap();
    assert_eq!(done.status, RequestStatus::Executed, "{report:#?}");
    // A second execution is refused; the edited copy is consumed once, posted once.
    assert!(
        r.execute(&request.request_id, "integration-test", None, None)
            .await
            .is_err()
    );
    s.pump(&consumer).await;
    let postings = s.postings().await;
    assert_eq!(postings.len(), 1);
    assert_eq!(
        (postings[0].message_id.as_str(), postings[0].currency.as_str()),
        ("m-1", "USD")
    );
    assert_eq!(postings[0].replay_of.as_deref(), Some(envelope.envelope_id.as_str()));
    let envelopes = s.envelopes().await;
    assert_eq!(envelopes.len(), 1);
    assert_eq!(envelopes[0].status, EnvelopeStatus::Superseded);
    assert_eq!(envelopes[0].original.body_sha256, envelope.original.body_sha256);
    // The original sent again, once USX is a currency: suppressed, never posted beside its edit.
    s.map_currency("USX", 2).await;
    s.send(std::slice::from_ref(&sent)).await;
    s.pump(&consumer).await;
    assert_eq!(s.postings().await.len(), 1);

    let audit = s.audit().await;
    let edited: Vec<&AuditRecord> = audit.iter().filter(|a| a.kind == AuditKind::Edited).collect();
    assert_eq!(edited.len(), 1);
    assert!(
        edited[0].detail.contains("currency: \"USX\" -> \"USD\""),
        "{}",
        edited[0].detail
    );
    assert!(audit.iter().any(|a| a.kind == AuditKind::DuplicateSuppressed));
    // The producer sent the transaction twice (the second time as it first was): reconciled
    // against that manifest, every message counts once and the edit is named.
    let (out, problems) = outcomes(&s.postings().await, &s.envelopes().await, &audit, true);
    assert!(
        out.iter()
            .all(|(st, _)| matches!(st, State::Committed | State::Duplicate)),
        "{out:?}"
    );
    let manifest = vec![manifest_entry(&sent), manifest_entry(&sent)];
    let rec = reconcile(out, problems, Some(&manifest), 0);
    assert_eq!(rec.edited.len(), 1, "{rec:#?}");
    assert!(rec.holds, "{rec:#?}");
}

#[tokio::test]
async fn a_period_about_to_close_escalates_its_pending_dead_letters_on_the_local_stack() {
    let s = TestStack::new("ap-close").await;
    // Dead-lettered a minute ago: no stage of the chain applies; its period (ACME-US 2026-11)
    // closes tomorrow.
    let mut e = recon_testkit::builders::envelope("env_before_close");
    e.dead_lettered_at = chrono::Utc::now() - chrono::Duration::minutes(1);
    assert_eq!(
        (e.ledger_entity.as_deref(), e.accounting_period.as_deref()),
        (Some("ACME-US"), Some("2026-11"))
    );
    s.envelope_store().create(&e).await.unwrap();
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).date_naive();
    s.reference()
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-11".into(),
            status: PeriodStatus::Open,
            closes_on: Some(tomorrow),
        })
        .await
        .unwrap();
    let snapshot = s.reference().snapshot().await.unwrap();
    assert_eq!(
        snapshot.closes_on("acme-us", "2026-11"),
        Some(tomorrow),
        "the planned close reads back"
    );
    let r = s.replayer();
    for _ in 0..2 {
        r.run(&recon_testkit::builders::sweep_request(), None).await.unwrap();
    }
    let records: Vec<AuditRecord> = s
        .audit()
        .await
        .into_iter()
        .filter(|a| a.kind == AuditKind::Escalated)
        .collect();
    let ids: Vec<&str> = records.iter().map(|a| a.audit_id.as_str()).collect();
    assert_eq!(
        ids,
        [format!("ESCALATED#period-close#ACME-US#2026-11#{tomorrow}")],
        "once"
    );
    assert!(
        records[0].detail.contains("1 PENDING envelopes of ACME-US 2026-11"),
        "{}",
        records[0].detail
    );

    // Closed, the period has no deadline left, and a planned close never reopens it.
    let period = |status, closes_on| PeriodRecord {
        entity: "ACME-US".into(),
        period: "2026-11".into(),
        status,
        closes_on,
    };
    s.reference()
        .put_period(&period(PeriodStatus::Closed, None))
        .await
        .unwrap();
    let err = s
        .reference()
        .put_period(&period(PeriodStatus::Open, Some(tomorrow)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is closed"), "{err}");
    let snapshot = s.reference().refresh().await.unwrap();
    assert_eq!(snapshot.period_status("ACME-US", "2026-11"), PeriodStatus::Closed);
    assert_eq!(snapshot.closes_on("ACME-US", "2026-11"), None);
}

#[tokio::test]
async fn the_scheduled_sweep_sends_a_large_group_behind_its_canary_on_the_local_stack() {
    let s = TestStack::new("ap-sweep-canary").await;
    dead_letter(&s, 1, 4).await;
    s.map_currency("XAU", 4).await;
    let mut r = s.replayer();
    r.config.sweep_canary = 2;
    let sweep = recon_testkit::builders::sweep_request;
    let first = r.run(&sweep(), None).await.unwrap();
    assert_eq!((first.reinjected, first.skipped), (2, 2), "{}", first.summary());
    // Its copies not yet consumed: the rest waits.
    assert_eq!(r.run(&sweep(), None).await.unwrap().reinjected, 0);
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    s.pump(&consumer).await;
    assert_eq!(s.postings().await.len(), 2);
    // Both posted: the canary passed, the rest goes out and posts once.
    let third = r.run(&sweep(), None).await.unwrap();
    assert_eq!(third.reinjected, 2, "{}", third.summary());
    s.pump(&consumer).await;
    let mut ids: Vec<String> = s.postings().await.into_iter().map(|p| p.message_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["m-1", "m-2", "m-3", "m-4"]);
}
