//! Maker-checker approvals on in-memory adapters: the policy refuses a manual remediation above
//! it; a request holds exactly what its dry run would change; a second identity approves; the
//! execution touches exactly that set, each envelope only while it is as it was.

use crate::common::*;
use recon_core::domain::approval::{ApprovalPolicy, Identity, RequestStatus};
use recon_core::domain::canary::Canary;
use recon_core::ports::{ApprovalRequests, FlowError};

fn who(name: &str) -> Identity {
    Identity {
        arn: format!("arn:aws:iam::000000000000:user/{name}"),
        name: None,
    }
}

async fn policy(w: &World, max_count: u64) {
    w.reference
        .put_approval_policy(&ApprovalPolicy {
            max_count: Some(max_count),
            ..ApprovalPolicy::default()
        })
        .await
        .unwrap();
}

async fn kinds(w: &World) -> Vec<AuditKind> {
    let mut out = Vec::new();
    for c in 0..recon_core::domain::audit::AUDIT_CHAINS {
        for r in recon_core::ports::read_chain(&w.audit, &format!("c{c}"), 0)
            .await
            .unwrap()
        {
            out.push(r.record.kind);
        }
    }
    out
}

fn xau_replay() -> ReplayRequest {
    ReplayRequest {
        reason: "XAU mapped".into(),
        ..manual(
            Selector {
                root_cause: Some("UNMAPPED_CURRENCY:*".into()),
                ..Selector::default()
            },
            false,
        )
    }
}

#[tokio::test]
async fn a_manual_replay_above_the_policy_is_refused_and_changes_nothing() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=3 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    policy(&w, 2).await;
    let r = w.replayer(ReplayConfig::default());
    let err = r.run(&xau_replay(), None).await.unwrap_err();
    assert!(
        matches!(&err, FlowError::Refused(e) if e.0.contains("3 envelopes would change")),
        "{err}"
    );
    assert!(w.queue.sent().is_empty());
    assert_eq!(w.store.pending_count().await.unwrap(), 3);
    // A dry run is never refused, and a scheduled sweep is governed by its gates, not the policy.
    assert_eq!(
        r.run(&manual(Selector::default(), true), None)
            .await
            .unwrap()
            .reinjected,
        3
    );
    // Below the policy it runs.
    policy(&w, 3).await;
    assert_eq!(r.run(&xau_replay(), None).await.unwrap().reinjected, 3);
}

#[tokio::test]
async fn an_approved_request_runs_exactly_its_set_and_skips_what_changed_since() {
    let w = world();
    add_xau(&w).await;
    let mut ids = Vec::new();
    for n in 1..=3 {
        ids.push(
            w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(3))
                .await
                .envelope_id,
        );
    }
    policy(&w, 1).await;
    let r = w.replayer(ReplayConfig::default());
    let assessed = r.assess(&xau_replay(), None).await.unwrap();
    assert_eq!(assessed.why.len(), 1, "{:?}", assessed.why);
    let request = r
        .request_approval(&xau_replay(), &assessed, &who("maker"), None)
        .await
        .unwrap();
    assert_eq!(request.status, RequestStatus::PendingApproval);
    assert_eq!(request.exposure.count, 3);
    assert_eq!(request.exposure.gross.get("XAU").to_string(), "6.375");

    // Self-approval is refused, whatever name is given.
    let same = Identity {
        name: Some("someone else".into()),
        ..who("maker")
    };
    let err = r.decide(&request.request_id, &same, true, "fine").await.unwrap_err();
    assert!(err.to_string().contains("self-approval refused"), "{err}");
    // Nothing runs before approval.
    let err = r.execute(&request.request_id, "ops", None, None).await.unwrap_err();
    assert!(err.to_string().contains("only an APPROVED request runs"), "{err}");

    // Meanwhile: a fourth envelope arrives, and the first is replayed by someone else.
    let late = w.envelope("s4", &xau(4), ChronoDuration::hours(1)).await;
    policy(&w, 10).await;
    let one = ReplayRequest {
        reason: "just this one".into(),
        ..manual(
            Selector {
                envelope_ids: vec![ids[0].clone()],
                ..Selector::default()
            },
            false,
        )
    };
    assert_eq!(r.run(&one, None).await.unwrap().reinjected, 1);
    assert_eq!(w.queue.sent().len(), 1);

    let approved = r
        .decide(&request.request_id, &who("checker"), true, "checked the XAU mapping")
        .await
        .unwrap();
    assert_eq!(approved.status, RequestStatus::Approved);
    let (done, report) = r.execute(&request.request_id, "ops", None, None).await.unwrap();
    assert_eq!(done.status, RequestStatus::Executed);
    // The second and third: re-injected. The first: changed since, not re-injected twice. The
    // fourth: not in the set.
    assert_eq!(report.reinjected, 2, "{report:#?}");
    assert_eq!(report.changed_since, vec![ids[0].clone()]);
    assert_eq!(w.queue.sent().len(), 3);
    assert_eq!(w.status(&late.envelope_id).await, EnvelopeStatus::Pending);
    assert_eq!(done.execution.as_ref().unwrap().changed_since, vec![ids[0].clone()]);
    // Once.
    assert!(r.execute(&request.request_id, "ops", None, None).await.is_err());
    assert_eq!(w.queue.sent().len(), 3);

    let kinds = kinds(&w).await;
    for k in [
        AuditKind::ApprovalRequested,
        AuditKind::ApprovalGranted,
        AuditKind::ApprovalExecuted,
    ] {
        assert_eq!(kinds.iter().filter(|x| **x == k).count(), 1, "{k:?} in {kinds:?}");
    }
    assert!(
        w.store.pending_records(10).await.unwrap().is_empty(),
        "every record published"
    );
}

#[tokio::test]
async fn a_request_expires_and_a_rejected_one_never_runs() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=2 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    policy(&w, 1).await;
    let r = w.replayer(ReplayConfig::default());
    let assessed = r.assess(&xau_replay(), None).await.unwrap();
    let first = r
        .request_approval(&xau_replay(), &assessed, &who("maker"), None)
        .await
        .unwrap();
    w.clock.advance(ChronoDuration::seconds(1));
    let second = r
        .request_approval(&xau_replay(), &assessed, &who("maker"), None)
        .await
        .unwrap();
    assert_ne!(first.request_id, second.request_id);

    let rejected = r
        .decide(&second.request_id, &who("checker"), false, "wrong period")
        .await
        .unwrap();
    assert_eq!(rejected.status, RequestStatus::Rejected);
    assert!(r.execute(&second.request_id, "ops", None, None).await.is_err());

    w.clock.advance(ChronoDuration::hours(72));
    assert_eq!(r.expire_requests().await.unwrap(), 1);
    let err = r
        .decide(&first.request_id, &who("checker"), true, "late")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("EXPIRED"), "{err}");
    let (listed, _) = w.store.list_requests(None, 10).await.unwrap();
    let statuses: Vec<RequestStatus> = listed.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [RequestStatus::Rejected, RequestStatus::Expired],
        "newest first"
    );
    assert!(w.queue.sent().is_empty());
    let kinds = kinds(&w).await;
    assert!(kinds.contains(&AuditKind::ApprovalExpired) && kinds.contains(&AuditKind::ApprovalRejected));
}

#[tokio::test]
async fn an_approved_quarantine_quarantines_its_set() {
    let w = world();
    for n in 1..=2 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    policy(&w, 0).await;
    let req = ReplayRequest {
        quarantine: true,
        reason: "counterparty closed".into(),
        ..manual(Selector::default(), false)
    };
    let r = w.replayer(ReplayConfig::default());
    assert!(r.run(&req, None).await.is_err());
    let assessed = r.assess(&req, None).await.unwrap();
    let request = r.request_approval(&req, &assessed, &who("maker"), None).await.unwrap();
    r.decide(&request.request_id, &who("checker"), true, "ok")
        .await
        .unwrap();
    let (_, report) = r.execute(&request.request_id, "ops", None, None).await.unwrap();
    assert_eq!(outcomes(&report), ["QUARANTINED", "QUARANTINED"]);
}

/// Lambda's SQS trigger, in memory: every copy re-injected since the last look is consumed
/// (committed) or, with `dead_letter`, reaches the DLQ again and the enricher (its envelope), until
/// `done`.
async fn pump(w: &World, done: &std::sync::atomic::AtomicBool, dead_letter: bool) {
    use std::sync::atomic::Ordering;
    let consumer = w.consumer();
    let mut seen = 0;
    loop {
        // One more look after `done`: what was sent last is consumed too.
        let finished = done.load(Ordering::SeqCst);
        let sent = w.queue.sent();
        for (i, m) in sent.iter().enumerate().skip(seen) {
            let msg = builders::delivered(&format!("replayed-{}", i + 1), m);
            if dead_letter {
                let again = envelope_from_dlq_message(&msg, w.clock_now(), "enricher");
                w.store.create(&again).await.unwrap();
            } else {
                assert_eq!(consumer.handle_message(&msg).await, Disposition::Committed);
            }
        }
        seen = sent.len();
        if finished {
            return;
        }
        tokio::task::yield_now().await;
    }
}

fn canary(slice: &str, wait_secs: u32) -> Canary {
    Canary {
        slice: slice.parse().unwrap(),
        max_failure_percent: 0,
        wait_secs,
    }
}

/// Run `req` behind `canary` with the pump beside it.
async fn guarded(w: &World, req: &ReplayRequest, canary: &Canary, dead_letter: bool) -> ReplayReport {
    let done = std::sync::atomic::AtomicBool::new(false);
    let r = w.replayer(ReplayConfig::default());
    let run = async {
        let report = r.run_guarded(req, Some(canary), None).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        report
    };
    tokio::join!(run, pump(w, &done, dead_letter)).0.unwrap()
}

#[tokio::test]
async fn a_canary_that_commits_lets_the_rest_go_and_one_that_dead_letters_stops_it() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=5 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    let report = guarded(&w, &xau_replay(), &canary("2", 30), false).await;
    let c = report.canary.clone().unwrap();
    assert!(c.passed && c.size == 2 && c.committed == 2, "{c}");
    assert_eq!(report.reinjected, 5, "{report:#?}");
    assert_eq!(w.ledger.len(), 5);

    let w = world();
    add_xau(&w).await;
    for n in 1..=5 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    let report = guarded(&w, &xau_replay(), &canary("40%", 30), true).await;
    let c = report.canary.clone().unwrap();
    assert!(!c.passed && c.size == 2 && c.dead_lettered == 2, "{c}");
    assert_eq!(report.reinjected, 2);
    assert!(
        report
            .stopped
            .as_deref()
            .unwrap()
            .contains("the rest (3 envelopes) not touched")
    );
    assert_eq!(w.queue.sent().len(), 2);
    // The rest still PENDING (beside the two copies' own new envelopes).
    assert_eq!(w.store.pending_count().await.unwrap(), 5);
}

#[tokio::test]
async fn a_canary_nothing_answers_for_counts_as_failing() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=3 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    let r = w.replayer(ReplayConfig::default());
    let report = r.run_guarded(&xau_replay(), Some(&canary("1", 5)), None).await.unwrap();
    let c = report.canary.unwrap();
    assert!(!c.passed && c.unknown == 1 && c.waited_ms >= 5000, "{c}");
    assert_eq!(w.queue.sent().len(), 1);
}

#[tokio::test]
async fn an_approved_request_whose_canary_fails_pauses_and_goes_on_only_when_run_again() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=4 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    policy(&w, 1).await;
    let r = w.replayer(ReplayConfig::default());
    let assessed = r.assess(&xau_replay(), None).await.unwrap();
    let request = r
        .request_approval(&xau_replay(), &assessed, &who("maker"), Some(canary("1", 10)))
        .await
        .unwrap();
    r.decide(&request.request_id, &who("checker"), true, "ok")
        .await
        .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let run = async {
        let x = r.execute(&request.request_id, "ops", None, None).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        x
    };
    let (paused, report) = tokio::join!(run, pump(&w, &done, true)).0.unwrap();
    assert_eq!(paused.status, RequestStatus::Paused);
    assert_eq!(report.reinjected, 1);
    assert!(!report.canary.unwrap().passed);
    assert_eq!(w.queue.sent().len(), 1);

    // Someone looked at the report and goes on: the rest, without another canary; the canary's
    // envelope changed since the request and is not touched again.
    // Not by the payload of a function that knows nobody, nor by the requester.
    assert!(r.execute(&request.request_id, "ops", None, None).await.is_err());
    assert!(
        r.execute(&request.request_id, "ops", Some(&who("maker")), None)
            .await
            .is_err()
    );
    let (done, rest) = r
        .execute(&request.request_id, "ops", Some(&who("checker")), None)
        .await
        .unwrap();
    assert_eq!(done.status, RequestStatus::Executed);
    assert_eq!(rest.reinjected, 3);
    assert_eq!(rest.changed_since.len(), 1);
    assert!(rest.canary.is_none());
    assert_eq!(w.queue.sent().len(), 4);
}

#[tokio::test]
async fn an_approved_run_stopped_by_back_pressure_pauses_and_a_second_person_resumes_it() {
    let w = world();
    add_xau(&w).await;
    for n in 1..=3 {
        w.envelope(&format!("s{n}"), &xau(n), ChronoDuration::hours(1)).await;
    }
    policy(&w, 1).await;
    let r = w.replayer(ReplayConfig::default());
    let assessed = r.assess(&xau_replay(), None).await.unwrap();
    let request = r
        .request_approval(&xau_replay(), &assessed, &who("maker"), None)
        .await
        .unwrap();
    r.decide(&request.request_id, &who("checker"), true, "ok")
        .await
        .unwrap();
    w.queue.set_depth(1_000_000);
    let (paused, report) = r.execute(&request.request_id, "ops", None, None).await.unwrap();
    assert_eq!(paused.status, RequestStatus::Paused, "{report:#?}");
    assert!(w.queue.sent().is_empty());
    w.queue.set_depth(0);
    let (done, rest) = r
        .execute(&request.request_id, "ops", Some(&who("checker")), None)
        .await
        .unwrap();
    assert_eq!((done.status, rest.reinjected), (RequestStatus::Executed, 3));
    assert_eq!(done.earlier.len(), 1);
    // Each run has its own record: the pause's and the execution's.
    let kinds = kinds(&w).await;
    assert!(kinds.contains(&AuditKind::ApprovalPaused) && kinds.contains(&AuditKind::ApprovalExecuted));
}
