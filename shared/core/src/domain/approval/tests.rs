use super::*;
use crate::domain::envelope::DlqEnvelope;
use crate::domain::envelope_from_dlq_message;
use crate::domain::status::{EnvelopeStatus, StatusChange};

fn envelope(n: u32, amount: &str, currency: &str) -> DlqEnvelope {
    let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
    m.message_id = Some(format!("m-{n}"));
    m.body = Some("{}".into());
    let mut e = envelope_from_dlq_message(&m, DateTime::UNIX_EPOCH, "t");
    e.amount = Some(amount.into());
    e.currency = Some(currency.into());
    e
}

fn set(envelopes: &[DlqEnvelope]) -> ChangeSet {
    ChangeSet {
        changes: envelopes.iter().map(|e| Change::of(e, "REINJECTED", false)).collect(),
    }
}

fn who(arn: &str) -> Identity {
    Identity {
        arn: arn.into(),
        name: None,
    }
}

fn at(hours: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::hours(1000 + hours)
}

fn request(set: ChangeSet, policy: &ApprovalPolicy) -> ApprovalRequest {
    ApprovalRequest::new(
        NewRequest {
            action: Action::Replay,
            selector: "root_cause=X".into(),
            reason: "XAU mapped".into(),
            requested_by: Identity {
                arn: "arn:aws:iam::1:user/maker".into(),
                name: Some("alice".into()),
            },
            why: vec!["big".into()],
            dry_run: "2 would be re-injected".into(),
            set,
            canary: None,
            edit: None,
        },
        policy,
        at(0),
    )
    .unwrap()
}

#[test]
fn the_policy_names_every_rule_a_change_set_breaks_and_nothing_else() {
    let a = [
        envelope(1, "600.00", "USD"),
        envelope(2, "-500.00", "USD"),
        envelope(3, "1", "EUR"),
    ];
    let policy = ApprovalPolicy {
        max_count: Some(2),
        max_amount: [("USD".to_owned(), "1000".parse().unwrap())].into(),
        closed_period: true,
        expire_hours: 1,
        distinct_roles: false,
    };
    let why = policy.requires(&set(&a).exposure());
    // Three envelopes, USD 1100 gross (a credit moves money as a debit does).
    assert_eq!(why.len(), 2, "{why:?}");
    assert!(why[0].contains("3 envelopes"), "{why:?}");
    assert!(why[1].contains("USD 1100"), "{why:?}");
    assert!(policy.requires(&set(&a[..1]).exposure()).is_empty());
    // At the limit is not above it.
    let exact = ApprovalPolicy {
        max_amount: [("USD".to_owned(), "1100.00".parse().unwrap())].into(),
        ..ApprovalPolicy::default()
    };
    assert!(exact.requires(&set(&a).exposure()).is_empty());
    // An amount that cannot be read cannot be shown to be under the limit.
    let unreadable = [envelope(4, "12,00", "USD")];
    assert!(exact.requires(&set(&unreadable).exposure())[0].contains("no readable amount"));
    // A closed period.
    let mut closed = set(&a[..1]);
    closed.changes[0].closed_period = true;
    assert!(policy.requires(&closed.exposure())[0].contains("closed period"));
    assert!(ApprovalPolicy::default().requires(&closed.exposure()).is_empty());
    assert!(ApprovalPolicy::default().is_empty() && !policy.is_empty());
}

#[test]
fn a_policy_with_a_negative_limit_or_no_time_to_decide_is_refused() {
    let ok = ApprovalPolicy::default();
    assert!(ok.check().is_ok());
    let negative = ApprovalPolicy {
        max_amount: [("USD".to_owned(), "-1".parse().unwrap())].into(),
        ..ApprovalPolicy::default()
    };
    assert!(negative.check().unwrap_err().contains("negative"));
    let lower = ApprovalPolicy {
        max_amount: [("usd".to_owned(), "1".parse().unwrap())].into(),
        ..ApprovalPolicy::default()
    };
    assert!(lower.check().unwrap_err().contains("upper-case"));
    for hours in [0, 2161] {
        let p = ApprovalPolicy {
            expire_hours: hours,
            ..ApprovalPolicy::default()
        };
        assert!(p.check().unwrap_err().contains("expire_hours"));
    }
    let parsed: Result<ApprovalPolicy, _> = serde_json::from_str(r#"{"max_cont": 3}"#);
    assert!(parsed.is_err(), "a mistyped rule must not leave the policy empty");
}

#[test]
fn self_approval_is_refused_whatever_name_is_given() {
    let policy = ApprovalPolicy::default();
    let mut r = request(set(&[envelope(1, "1", "USD")]), &policy);
    let same = Identity {
        arn: "arn:aws:iam::1:user/maker".into(),
        name: Some("bob".into()),
    };
    let err = r.approve(&same, "ok", at(1)).unwrap_err();
    assert!(err.0.contains("self-approval refused"), "{err}");
    assert_eq!(r.status, RequestStatus::PendingApproval);
    assert_eq!(r.version, 1);
    r.approve(&who("arn:aws:iam::1:user/checker"), "looked at it", at(1))
        .unwrap();
    assert_eq!((r.status, r.version), (RequestStatus::Approved, 2));
    // Decided once.
    assert!(r.approve(&who("arn:aws:iam::1:user/other"), "", at(1)).is_err());
    assert!(r.reject(&who("arn:aws:iam::1:user/other"), "no", at(1)).is_err());
}

/// One person through both doors: a maker at the console is refused as the approver of their own
/// request through `dlqctl` (a session named after them), and as the approver at the console,
/// under the name they had or another (the same subject).
#[test]
fn a_person_is_refused_as_their_own_approver_through_the_other_door() {
    use crate::domain::operator::OperatorRole;
    let console = |role: OperatorRole, name: &str, sub: &str| {
        Identity::console(
            "123456789012",
            Some(role.as_str()),
            name,
            ("https://idp.example.com", sub),
        )
        .unwrap()
    };
    let policy = ApprovalPolicy::default();
    let mut r = request(set(&[envelope(1, "1", "USD")]), &policy);
    r.requested_by = console(OperatorRole::Maker, "Alice@Example.com", "u-alice");
    let through_iam = who("arn:aws:sts::123456789012:assumed-role/acme-approver/alice@example.com");
    let at_console = console(OperatorRole::Approver, "alice@example.com", "u-alice");
    let renamed = console(OperatorRole::Approver, "alice2@example.com", "u-alice");
    for same in [through_iam, at_console, renamed] {
        let err = r.approve(&same, "ok", at(1)).unwrap_err();
        assert!(err.0.contains("self-approval refused"), "{same}: {err}");
    }
    r.approve(
        &console(OperatorRole::Approver, "bob@example.com", "u-bob"),
        "looked at it",
        at(1),
    )
    .unwrap();
    assert_eq!(r.status, RequestStatus::Approved);
}

/// What the control plane seals covers who asked and until when: rewriting either afterwards (to
/// pass a maker's request as someone else's, or to keep an approval alive) changes the message.
#[test]
fn the_sealed_decision_names_the_requester_and_the_expiry_too() {
    let mut r = request(set(&[envelope(1, "1", "USD")]), &ApprovalPolicy::default());
    r.approve(&who("arn:aws:iam::1:user/checker"), "looked at it", at(1))
        .unwrap();
    let sealed = r.decision_message(true).unwrap();
    let mut other_maker = r.clone();
    other_maker.requested_by = who("arn:aws:iam::1:user/someone-else");
    let mut longer = r.clone();
    longer.expires_at += chrono::Duration::hours(48);
    for altered in [other_maker, longer] {
        assert_ne!(altered.decision_message(true).unwrap(), sealed);
    }
}

#[test]
fn a_request_expires_undecided_or_unexecuted_and_then_nothing_runs() {
    let policy = ApprovalPolicy {
        expire_hours: 4,
        ..ApprovalPolicy::default()
    };
    let mut r = request(set(&[envelope(1, "1", "USD")]), &policy);
    assert!(!r.expire_if_due(at(3)));
    let err = r.approve(&who("arn:checker"), "", at(4)).unwrap_err();
    assert!(err.0.contains("expired"), "{err}");
    assert!(r.expire_if_due(at(4)));
    assert_eq!(r.status, RequestStatus::Expired);

    let mut r = request(set(&[envelope(1, "1", "USD")]), &policy);
    r.approve(&who("arn:checker"), "", at(1)).unwrap();
    assert!(r.start("x", None, at(5)).unwrap_err().0.contains("expired"));
    assert!(r.expire_if_due(at(5)));
}

#[test]
fn only_an_approved_request_starts_and_a_crashed_execution_resumes_after_its_lease() {
    let policy = ApprovalPolicy::default();
    let mut r = request(set(&[envelope(1, "1", "USD")]), &policy);
    assert!(r.start("x", None, at(1)).unwrap_err().0.contains("only an APPROVED"));
    r.approve(&who("arn:checker"), "", at(1)).unwrap();
    r.start("x", None, at(1)).unwrap();
    assert_eq!(r.status, RequestStatus::Executing);
    // A second start while the first holds its lease is refused …
    assert!(r.start("y", None, at(1)).is_err());
    assert!(!r.stalled(at(1)));
    // … and allowed after it (the envelopes' fingerprints keep the work single); meanwhile
    // the request shows as stalled.
    let later = at(1) + Duration::minutes(EXECUTION_LEASE_MINUTES);
    assert!(r.stalled(later));
    r.start("y", None, later).unwrap();
    assert!(!r.stalled(later));
    r.finish("rpl_2", "done".into(), vec![], false, later);
    assert_eq!(r.status, RequestStatus::Executed);
    assert!(r.start("z", None, later).is_err());
    // A paused request (its canary failed) goes on when someone starts it again.
    let mut p = request(set(&[envelope(1, "1", "USD")]), &policy);
    p.approve(&who("arn:checker"), "", at(1)).unwrap();
    p.start("x", None, at(1)).unwrap();
    assert!(p.first_run());
    p.finish("rpl_1", "canary failed".into(), vec![], true, at(1));
    assert_eq!(p.status, RequestStatus::Paused);
    assert!(!p.first_run());
    // … by another person than the requester, never by a payload that names nobody.
    assert!(
        p.start("y", None, at(2))
            .unwrap_err()
            .0
            .contains("other than its requester")
    );
    let maker = Identity {
        arn: "arn:aws:iam::1:user/maker".into(),
        name: None,
    };
    assert!(
        p.start("y", Some(&maker), at(2))
            .unwrap_err()
            .0
            .contains("self-approval")
    );
    p.start("y", Some(&who("arn:checker")), at(2)).unwrap();
    assert_eq!(p.status, RequestStatus::Executing);
    assert_eq!(p.earlier.len(), 1, "the paused run is kept");
}

#[test]
fn the_fingerprint_moves_with_every_change_a_remediation_makes_and_the_digest_with_the_set() {
    let e = envelope(1, "10.00", "USD");
    let base = fingerprint(&e);
    assert_eq!(base, fingerprint(&e.clone()), "deterministic");
    let mut replayed = e.clone();
    replayed.status = EnvelopeStatus::Replayed;
    replayed.status_history.push(StatusChange {
        status: EnvelopeStatus::Replayed,
        at: at(2),
        actor: "r".into(),
        reason: "r".into(),
        manual_journal: false,
    });
    let mut edited = e.clone();
    edited.amount = Some("10.01".into());
    let mut caused = e.clone();
    caused.root_cause = "OTHER".into();
    for other in [&replayed, &edited, &caused] {
        assert_ne!(fingerprint(other), base);
    }
    let a = [envelope(1, "1", "USD"), envelope(2, "1", "USD")];
    let mut reversed = set(&a);
    reversed.changes.reverse();
    assert_eq!(set(&a).digest(), reversed.digest(), "order does not matter");
    assert_ne!(set(&a).digest(), set(&a[..1]).digest());

    // A stored request whose set was edited after the request is refused.
    let mut r = request(set(&a), &ApprovalPolicy::default());
    r.set.changes.pop();
    let err = r.approve(&who("arn:checker"), "", at(1)).unwrap_err();
    assert!(err.0.contains("no longer matches its digest"), "{err}");
}

#[test]
fn a_request_holds_at_most_its_limit_and_never_nothing() {
    let policy = ApprovalPolicy::default();
    let new = |set: ChangeSet| {
        ApprovalRequest::new(
            NewRequest {
                action: Action::Quarantine,
                selector: String::new(),
                reason: "r".into(),
                requested_by: who("arn:maker"),
                why: vec![],
                dry_run: String::new(),
                set,
                canary: None,
                edit: None,
            },
            &policy,
            at(0),
        )
    };
    assert!(new(ChangeSet::default()).unwrap_err().0.contains("nothing to approve"));
    let many: Vec<DlqEnvelope> = (0..=MAX_REQUEST_ENVELOPES as u32)
        .map(|n| envelope(n, "1", "USD"))
        .collect();
    assert!(new(set(&many)).unwrap_err().0.contains("--max-items"));
    assert!(new(set(&many[1..])).is_ok());
}

#[test]
fn under_distinct_roles_two_sessions_of_one_role_are_one_person() {
    let role = |session: &str| Identity {
        arn: format!("arn:aws:sts::111111111111:assumed-role/Ops/{session}"),
        name: None,
    };
    assert_eq!(role("ab").principal(), "arn:aws:sts::111111111111:assumed-role/Ops");
    assert_eq!(who("arn:aws:iam::1:user/x").principal(), "arn:aws:iam::1:user/x");
    let policy = ApprovalPolicy {
        distinct_roles: true,
        ..ApprovalPolicy::default()
    };
    let mut r = ApprovalRequest::new(
        NewRequest {
            action: Action::Replay,
            selector: String::new(),
            reason: "r".into(),
            requested_by: role("alice"),
            why: vec![],
            dry_run: String::new(),
            set: set(&[envelope(1, "1", "USD")]),
            canary: None,
            edit: None,
        },
        &policy,
        at(0),
    )
    .unwrap();
    assert!(r.approve(&role("alice-again"), "", at(1)).is_err());
    r.approve(&who("arn:aws:sts::111111111111:assumed-role/Controller/bob"), "", at(1))
        .unwrap();
}

/// A person holds one session name in every operator role (their trust policies pin it): alice
/// proposing as maker and approving as approver is self-approval, whatever the policy says.
#[test]
fn one_person_in_two_roles_is_refused_the_approval_of_their_own_request() {
    let mut r = request(set(&[envelope(1, "1", "USD")]), &ApprovalPolicy::default());
    r.requested_by = who("arn:aws:sts::111111111111:assumed-role/acme-maker/alice");
    let e = r.approve(
        &who("arn:aws:sts::111111111111:assumed-role/acme-approver/alice"),
        "",
        at(1),
    );
    assert!(e.unwrap_err().0.contains("self-approval"));
    assert_eq!(
        who("arn:aws:sts::111111111111:assumed-role/acme-maker/Alice").person(),
        "111111111111:alice"
    );
    assert_eq!(who("arn:aws:iam::1:user/alice").person(), "arn:aws:iam::1:user/alice");
    // A user whose path reads like an assumed role is that user, not alice.
    let user = who("arn:aws:iam::111111111111:user/:assumed-role/acme-approver/alice");
    assert_eq!(user.person(), user.arn);
    assert_eq!(user.principal(), user.arn);
    r.approve(
        &who("arn:aws:sts::111111111111:assumed-role/acme-approver/bob"),
        "",
        at(1),
    )
    .unwrap();
}

#[test]
fn a_reason_is_bounded_and_the_digest_covers_the_action_and_the_canary() {
    let a = set(&[envelope(1, "1", "USD")]);
    let canary = crate::domain::canary::Canary {
        slice: crate::domain::canary::CanarySlice::Count(1),
        max_failure_percent: 0,
        wait_secs: 10,
    };
    let d = request_digest(Action::Replay, None, &a, None);
    assert_ne!(d, request_digest(Action::Quarantine, None, &a, None));
    assert_ne!(d, request_digest(Action::Replay, Some(&canary), &a, None));
    let mut r = request(a.clone(), &ApprovalPolicy::default());
    r.action = Action::Quarantine;
    assert!(
        r.check_digest().is_err(),
        "a request whose action was edited is refused"
    );
    let long = ApprovalRequest::new(
        NewRequest {
            action: Action::Replay,
            selector: String::new(),
            reason: "x".repeat(MAX_REASON_BYTES + 1),
            requested_by: who("arn:maker"),
            why: vec![],
            dry_run: String::new(),
            set: a,
            canary: None,
            edit: None,
        },
        &ApprovalPolicy::default(),
        at(0),
    );
    assert!(long.unwrap_err().0.contains("at most"));
}
