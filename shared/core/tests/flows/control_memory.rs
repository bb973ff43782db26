//! The control plane on in-memory adapters: each operation only for its roles, as the verified
//! caller; every refusal audited and changing nothing; every change audited old -> new.

use crate::common::*;
use recon_core::control::{Asked, Command, ControlError, ControlPlane, Remediation};
use recon_core::domain::approval::{ApprovalPolicy, Identity, RequestStatus};
use recon_core::domain::operator::{Caller, RoleNames};
use recon_core::domain::reference::PeriodStatus;
use recon_core::ports::ApprovalRequests;
use recon_core::ports::Signer;
use recon_testkit::memory::MemorySigner;

/// `person`'s session of operator role `role` (a session name has at least two characters).
fn caller(role: &str, person: &str) -> Caller {
    let roles: RoleNames = "viewer:acme-viewer,maker:acme-maker,approver:acme-approver,auditor:acme-auditor,admin:acme-admin,break-glass:acme-break-glass"
        .parse()
        .unwrap();
    let arn = format!("arn:aws:sts::000000000000:assumed-role/acme-{role}/{person}");
    let caller = Caller::verified(&arn, &roles);
    // A refusal below must be about the role asked for, not a caller holding none.
    assert!(caller.role.is_some(), "{arn} holds no operator role");
    caller
}

async fn records(w: &World, kind: AuditKind) -> Vec<recon_core::domain::AuditRecord> {
    let mut out = Vec::new();
    for c in 0..recon_core::domain::audit::AUDIT_CHAINS {
        for r in recon_core::ports::read_chain(&w.audit, &format!("c{c}"), 0)
            .await
            .unwrap()
        {
            out.extend(Some(r.record).filter(|r| r.kind == kind));
        }
    }
    out
}

/// Each call its own request id, as each invocation has.
trait HandleAs {
    async fn handle_as(&self, caller: &Caller, command: Command) -> Result<serde_json::Value, ControlError>;
}

impl HandleAs for ControlPlane<TestPorts, MemorySigner> {
    async fn handle_as(&self, caller: &Caller, command: Command) -> Result<serde_json::Value, ControlError> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request_id = format!("req-{id}");
        let asked = Asked {
            caller,
            request_id: &request_id,
            deadline: None,
        };
        self.handle(&asked, command).await
    }
}

fn control(w: &World) -> ControlPlane<TestPorts, MemorySigner> {
    ControlPlane {
        replayer: w.replayer(ReplayConfig::default()),
        signer: MemorySigner::new("control plane"),
        max_unsealed: recon_core::config::SealPolicy::default().max_unsealed(),
    }
}

/// `n` PENDING dead letters in XAU (mapped since), and a control plane over them.
async fn xau_dead_letters(n: u32) -> (World, ControlPlane<TestPorts, MemorySigner>) {
    let w = world();
    add_xau(&w).await;
    for i in 1..=n {
        w.envelope(&format!("s{i}"), &xau(i), ChronoDuration::hours(3)).await;
    }
    let control = control(&w);
    (w, control)
}

fn policy(max_count: u64) -> Command {
    Command::SetPolicy {
        policy: ApprovalPolicy {
            max_count: Some(max_count),
            ..ApprovalPolicy::default()
        },
    }
}

#[tokio::test]
async fn an_operation_outside_the_callers_role_is_refused_audited_and_changes_nothing() {
    let w = world();
    let control = control(&w);
    for role in ["viewer", "maker", "approver", "auditor", "break-glass"] {
        let err = control
            .handle_as(&caller(role, "mallory"), policy(1))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ControlError::Forbidden(r) if r.0.contains("needs the admin role")),
            "{role}: {err}"
        );
    }
    let outsider = Caller {
        identity: Identity {
            arn: "arn:aws:iam::000000000000:user/admin".into(),
            name: None,
        },
        role: None,
    };
    assert!(control.handle_as(&outsider, policy(1)).await.is_err());
    assert_eq!(
        w.reference.snapshot().await.unwrap().approval(),
        &ApprovalPolicy::default()
    );
    let refused = records(&w, AuditKind::AccessRefused).await;
    assert_eq!(refused.len(), 6);
    assert!(
        refused
            .iter()
            .any(|r| r.actor.contains("acme-maker/mallory") && r.detail.contains("set-policy"))
    );
    assert!(records(&w, AuditKind::ReferenceChanged).await.is_empty());

    control.handle_as(&caller("admin", "ada"), policy(1)).await.unwrap();
    assert_eq!(w.reference.snapshot().await.unwrap().approval().max_count, Some(1));
    let changed = records(&w, AuditKind::ReferenceChanged).await;
    assert_eq!(changed.len(), 1);
    assert!(changed[0].actor.ends_with("acme-admin/ada"));
    assert!(changed[0].detail.contains(" -> "), "old -> new: {}", changed[0].detail);
}

#[tokio::test]
async fn periods_and_currencies_change_only_through_the_admin_and_say_what_they_were() {
    let w = world();
    let control = control(&w);
    let close = Command::ClosePeriod {
        entity: "ACME-US".into(),
        period: "2026-10".into(),
    };
    assert!(
        control
            .handle_as(&caller("maker", "mallory"), close.clone())
            .await
            .is_err()
    );
    control.handle_as(&caller("admin", "ada"), close).await.unwrap();
    let snap = w.reference.refresh().await.unwrap();
    assert_eq!(snap.period_status("acme-us", "2026-10"), PeriodStatus::Closed);
    // Planning the close of a closed period is refused; of an open one, only after it ends.
    let plan = |period: &str, on: &str| Command::SchedulePeriodClose {
        entity: "ACME-US".into(),
        period: period.into(),
        closes_on: on.parse().unwrap(),
    };
    let err = control
        .handle_as(&caller("admin", "ada"), plan("2026-10", "2026-11-05"))
        .await;
    assert!(matches!(err, Err(ControlError::Refused(_))));
    let err = control
        .handle_as(&caller("admin", "ada"), plan("2026-11", "2026-11-30"))
        .await;
    assert!(matches!(err, Err(ControlError::Invalid(_))));
    control
        .handle_as(&caller("admin", "ada"), plan("2026-11", "2026-12-03"))
        .await
        .unwrap();

    let xau = Command::PutCurrency {
        code: "xau".into(),
        minor_units: 4,
        description: "gold".into(),
    };
    control.handle_as(&caller("admin", "ada"), xau).await.unwrap();
    assert_eq!(w.reference.refresh().await.unwrap().minor_units("XAU"), Some(4));
    let details: Vec<String> = records(&w, AuditKind::ReferenceChanged)
        .await
        .into_iter()
        .map(|r| r.detail)
        .collect();
    assert!(details.iter().any(|d| d.contains("OPEN -> CLOSED")), "{details:?}");
    assert!(details.iter().any(|d| d.contains("XAU: unmapped -> 4")), "{details:?}");
}

#[tokio::test]
async fn a_request_is_decided_by_an_approver_who_is_not_its_maker_and_withdrawn_only_by_its_maker() {
    let (w, control) = xau_dead_letters(3).await;
    control.handle_as(&caller("admin", "ada"), policy(1)).await.unwrap();
    let r = &control.replayer;
    let wanted = ReplayRequest {
        reason: "XAU mapped".into(),
        ..manual(Selector::default(), false)
    };
    let assessed = r.assess(&wanted, None).await.unwrap();
    let alice = caller("maker", "alice").identity;
    let request = r.request_approval(&wanted, &assessed, &alice, None).await.unwrap();
    let id = request.request_id.clone();

    // The maker may not approve; nor may alice as approver (one person); nor a viewer.
    for (who, why) in [
        (caller("maker", "alice"), "needs the approver role"),
        (caller("approver", "alice"), "self-approval"),
        (caller("viewer", "bob"), "needs the approver role"),
    ] {
        let approve = Command::Approve {
            request_id: id.clone(),
            reason: "ok".into(),
        };
        let err = control.handle_as(&who, approve).await.unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    // Another maker may not withdraw alice's request.
    let withdraw = Command::Reject {
        request_id: id.clone(),
        reason: "not mine".into(),
    };
    let err = control
        .handle_as(&caller("maker", "carol"), withdraw.clone())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("only their own"), "{err}");
    assert_eq!(r.request(&id).await.unwrap().status, RequestStatus::PendingApproval);
    assert_eq!(records(&w, AuditKind::AccessRefused).await.len(), 4);

    let approve = Command::Approve {
        request_id: id.clone(),
        reason: "checked".into(),
    };
    control.handle_as(&caller("approver", "bob"), approve).await.unwrap();
    let decided = r.request(&id).await.unwrap();
    assert_eq!(decided.status, RequestStatus::Approved);
    assert!(decided.decision.unwrap().by.arn.ends_with("acme-approver/bob"));
    // Decided: alice can no longer withdraw it.
    let own = Command::Reject {
        request_id: id.clone(),
        reason: "changed my mind".into(),
    };
    assert!(control.handle_as(&caller("maker", "alice"), own).await.is_err());
}

fn remediation(reason: &str) -> Remediation {
    Remediation {
        reason: reason.into(),
        root_cause: Some("UNMAPPED_CURRENCY:*".into()),
        ..Remediation::default()
    }
}

/// A maker's replay: a dry run changes nothing; under the policy it runs; above it, it becomes
/// a request; the maker cannot run that request before an approver decides it, then may.
#[tokio::test]
async fn a_makers_replay_runs_under_the_policy_and_above_it_waits_for_an_approver() {
    let (w, control) = xau_dead_letters(3).await;
    let maker = caller("maker", "alice");
    let dry = Remediation {
        dry_run: true,
        ..remediation("look first")
    };
    let out = control.handle_as(&maker, Command::Replay(dry.clone())).await.unwrap();
    assert_eq!(out["report"]["reinjected"], 3);
    assert!(w.queue.sent().is_empty(), "a dry run changes nothing");
    // Not the approver's, the viewer's or the admin's to run.
    for role in ["approver", "viewer", "admin", "auditor"] {
        let err = control
            .handle_as(&caller(role, "bob"), Command::Replay(dry.clone()))
            .await;
        assert!(matches!(err, Err(ControlError::Forbidden(_))), "{role}");
    }

    control.handle_as(&caller("admin", "ada"), policy(2)).await.unwrap();
    let out = control
        .handle_as(&maker, Command::Replay(remediation("XAU mapped")))
        .await
        .unwrap();
    assert_eq!(out["request"]["request_status"], "PENDING_APPROVAL", "{out}");
    assert!(w.queue.sent().is_empty());
    let id = out["request"]["request_id"].as_str().unwrap().to_owned();
    let execute = Command::Execute { request_id: id.clone() };
    let err = control.handle_as(&maker, execute.clone()).await.unwrap_err();
    assert!(err.to_string().contains("only an APPROVED request runs"), "{err}");
    let approve = Command::Approve {
        request_id: id.clone(),
        reason: "checked".into(),
    };
    control.handle_as(&caller("approver", "bob"), approve).await.unwrap();
    let out = control.handle_as(&maker, execute).await.unwrap();
    assert_eq!(out["request"]["request_status"], "EXECUTED", "{out}");
    assert_eq!(w.queue.sent().len(), 3);

    // Under the policy a replay just runs (and one with nothing left to do changes nothing).
    control.handle_as(&caller("admin", "ada"), policy(10)).await.unwrap();
    w.envelope("s4", &xau(4), ChronoDuration::hours(3)).await;
    let out = control
        .handle_as(&maker, Command::Replay(remediation("again")))
        .await
        .unwrap();
    assert_eq!(out["report"]["reinjected"], 1, "{out}");
    assert_eq!(w.queue.sent().len(), 4);
    // Each re-injection's record names who ran it (the verified caller, whatever a payload
    // said) and the control-plane request it ran in: the approved run's and the direct one's.
    let reinjected = records(&w, AuditKind::ReplayReinjected).await;
    assert_eq!(reinjected.len(), 4, "{reinjected:?}");
    let by_alice = "arn:aws:sts::000000000000:assumed-role/acme-maker/alice [invocation req-";
    for r in &reinjected {
        assert!(r.actor.starts_with(by_alice), "{}", r.actor);
    }
}

/// A paused request (its canary failed, or its run stopped early) goes on only by an approver's
/// decision: neither its maker nor a fellow maker resumes it.
#[tokio::test]
async fn a_paused_request_goes_on_only_by_an_approver() {
    let (w, control) = xau_dead_letters(2).await;
    control.handle_as(&caller("admin", "ada"), policy(1)).await.unwrap();
    let asked = control
        .handle_as(&caller("maker", "alice"), Command::Replay(remediation("XAU mapped")))
        .await
        .unwrap();
    let id = asked["request"]["request_id"].as_str().unwrap().to_owned();
    let approve = Command::Approve {
        request_id: id.clone(),
        reason: "ok".into(),
    };
    control.handle_as(&caller("approver", "bob"), approve).await.unwrap();
    // As a run stopped early leaves it.
    let mut paused = control.replayer.request(&id).await.unwrap();
    paused.status = RequestStatus::Paused;
    paused.version += 1;
    assert!(w.store.update_request(&paused, None).await.unwrap());
    let execute = Command::Execute { request_id: id.clone() };
    for maker in ["alice", "carol"] {
        let err = control
            .handle_as(&caller("maker", maker), execute.clone())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("an approver decides"), "{maker}: {err}");
    }
    assert!(w.queue.sent().is_empty());
    let out = control.handle_as(&caller("approver", "dan"), execute).await.unwrap();
    assert_eq!(out["request"]["request_status"], "EXECUTED", "{out}");
    assert_eq!(w.queue.sent().len(), 2);
}

/// An approval written into the table by anyone but the control plane (a role with write rights,
/// break-glass, a replay of an older decision) carries no seal of its key, or one that no longer
/// fits: it does not run, and the refusal is audited.
#[tokio::test]
async fn an_approval_the_control_plane_did_not_seal_does_not_run() {
    let (w, control) = xau_dead_letters(2).await;
    control.handle_as(&caller("admin", "ada"), policy(1)).await.unwrap();
    let maker = caller("maker", "alice");
    let asked = control
        .handle_as(&maker, Command::Replay(remediation("XAU mapped")))
        .await
        .unwrap();
    let id = asked["request"]["request_id"].as_str().unwrap().to_owned();
    // Decided around the control plane: the replay engine's own decide, as a writer would.
    let bob = caller("approver", "bob").identity;
    control.replayer.decide(&id, &bob, true, "looks fine").await.unwrap();
    let execute = Command::Execute { request_id: id.clone() };
    let err = control.handle_as(&maker, execute.clone()).await.unwrap_err();
    assert!(err.to_string().contains("seal"), "{err}");
    // Sealed by another key (another deployment's control plane): refused too.
    let other = ControlPlane {
        replayer: w.replayer(ReplayConfig::default()),
        signer: MemorySigner::new("another control plane"),
        max_unsealed: recon_core::config::SealPolicy::default().max_unsealed(),
    };
    let carol = caller("maker", "carol");
    let again = Command::Replay(remediation("XAU mapped, again"));
    let asked = control.handle_as(&carol, again).await.unwrap();
    let second = asked["request"]["request_id"].as_str().unwrap().to_owned();
    let approve = Command::Approve {
        request_id: second.clone(),
        reason: "ok".into(),
    };
    other.handle_as(&caller("approver", "bob"), approve).await.unwrap();
    // ... and a sealed decision whose reason was altered in the table afterwards.
    let mut altered = control.replayer.request(&second).await.unwrap();
    assert!(altered.decision.as_ref().unwrap().mac.is_some());
    let execute_second = Command::Execute {
        request_id: second.clone(),
    };
    assert!(control.handle_as(&maker, execute_second.clone()).await.is_err());
    let sealed_here = control
        .signer
        .sign(altered.decision_message(true).unwrap().as_bytes())
        .await
        .unwrap();
    altered.decision.as_mut().unwrap().mac = Some(sealed_here);
    altered.decision.as_mut().unwrap().reason = "approved by the CFO".into();
    altered.version += 1;
    assert!(w.store.update_request(&altered, None).await.unwrap());
    assert!(control.handle_as(&maker, execute_second).await.is_err());
    // ... and a request set APPROVED with no decision at all.
    let mut bare = control.replayer.request(&second).await.unwrap();
    bare.decision = None;
    bare.version += 1;
    assert!(w.store.update_request(&bare, None).await.unwrap());
    let execute_bare = Command::Execute {
        request_id: second.clone(),
    };
    assert!(control.handle_as(&maker, execute_bare).await.is_err());
    assert!(w.queue.sent().is_empty(), "nothing ran");
    let refused = records(&w, AuditKind::AccessRefused).await;
    assert_eq!(refused.iter().filter(|r| r.detail.contains("seal")).count(), 4);
}

#[tokio::test]
async fn an_edit_is_a_makers_request_and_a_remediation_must_say_why() {
    let w = world();
    let e = w.envelope("s1", &xau(1), ChronoDuration::hours(3)).await;
    let control = control(&w);
    let edit = Command::Edit {
        envelope_id: e.envelope_id.clone(),
        proposal: recon_core::domain::edit::Proposal::Set(vec![
            ("currency".into(), "USD".into()),
            ("amount".into(), "1.12".into()),
        ]),
        reason: "gold was booked as dollars".into(),
    };
    assert!(
        control
            .handle_as(&caller("approver", "bob"), edit.clone())
            .await
            .is_err()
    );
    let out = control.handle_as(&caller("maker", "alice"), edit).await.unwrap();
    assert_eq!(out["request_status"], "PENDING_APPROVAL", "{out}");
    assert!(
        out["requested_by"]["arn"]
            .as_str()
            .unwrap()
            .ends_with("acme-maker/alice")
    );
    let err = control
        .handle_as(&caller("maker", "alice"), Command::Replay(remediation(" ")))
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::Invalid(_)), "{err}");
}

/// A period's postings are the auditor's to read through the control plane, nobody else's.
#[tokio::test]
async fn a_segment_of_a_periods_postings_is_read_only_by_an_auditor() {
    let (_w, control) = xau_dead_letters(0).await;
    let read = |period: &str| {
        serde_json::from_value::<Command>(serde_json::json!({
            "operation": "reconcile-segment", "period": period, "segment": "0/2", "links": {}
        }))
        .unwrap()
    };
    let out = control
        .handle_as(&caller("auditor", "aud"), read("2026-11"))
        .await
        .unwrap();
    assert!(out.is_object(), "{out}");
    for role in ["maker", "approver", "viewer", "admin"] {
        let err = control
            .handle_as(&caller(role, "mallory"), read("2026-11"))
            .await
            .unwrap_err();
        assert!(matches!(err, ControlError::Forbidden(_)), "{role}: {err}");
    }
    let bad = control.handle_as(&caller("auditor", "aud"), read("2026-13")).await;
    assert!(matches!(bad, Err(ControlError::Invalid(_))), "{bad:?}");
}

#[test]
fn a_command_names_its_operation_and_refuses_unknown_fields() {
    let c: Command = serde_json::from_str(r#"{"operation":"approve","request_id":"apr_1"}"#).unwrap();
    assert_eq!(c.operation().as_str(), "approve");
    assert!(serde_json::from_str::<Command>(r#"{"operation":"approve","request_id":"apr_1","by":"x"}"#).is_err());
    assert!(serde_json::from_str::<Command>(r#"{"operation":"drop-table"}"#).is_err());
    // The actor is the verified caller: a payload naming one is refused, not believed.
    let named = r#"{"operation":"replay","reason":"r","triggered_by":"the-cfo"}"#;
    assert!(serde_json::from_str::<Command>(named).is_err());
    let replay: Command = serde_json::from_str(r#"{"operation":"replay","reason":"r","dry_run":true}"#).unwrap();
    assert_eq!(replay.operation().as_str(), "replay");
}

/// A seal by hand (before an evidence export) is the auditor's or the admin's to ask: it writes
/// to the bucket, which no operator role may do itself.
#[tokio::test]
async fn the_trail_is_sealed_by_hand_only_for_an_auditor_or_an_admin() {
    let (w, control) = xau_dead_letters(2).await;
    for role in ["maker", "approver", "viewer", "break-glass"] {
        let err = control
            .handle_as(&caller(role, "mallory"), Command::Seal)
            .await
            .unwrap_err();
        assert!(matches!(err, ControlError::Forbidden(_)), "{role}: {err}");
    }
    let first = control
        .handle_as(&caller("auditor", "aud"), Command::Seal)
        .await
        .unwrap();
    let second = control.handle_as(&caller("admin", "ada"), Command::Seal).await.unwrap();
    assert_eq!(
        (first["seq"].as_u64(), second["seq"].as_u64()),
        (Some(1), Some(2)),
        "{first} {second}"
    );
    let trail = first["trail"].as_str();
    let stored = recon_core::evidence::read_worm(&*w.worm, trail).await.unwrap();
    assert_eq!(stored.seals.len(), 2, "both seals are in the bucket");
}

/// A refusal's record quotes the caller's input only so far, and never a line break of theirs.
#[tokio::test]
async fn a_refusal_keeps_a_bounded_printable_reason() {
    let w = world();
    let control = control(&w);
    let mallory = caller("maker", "mallory");
    let asked = Asked {
        caller: &mallory,
        request_id: "req-long",
        deadline: None,
    };
    let why = format!("not a command: unknown field `{}\nforged line`", "x".repeat(5_000));
    assert!(control.malformed(&asked, why).await.is_err());
    let refused = records(&w, AuditKind::AccessRefused).await;
    assert_eq!(refused.len(), 1);
    let detail = &refused[0].detail;
    assert!(detail.chars().count() < 400 && !detail.contains('\n'), "{detail}");
}

/// A control plane whose queue does not see the DLQ (the in-memory one) concludes nothing: a
/// reconciliation that cannot count what the DLQ holds must not say HOLDS.
#[tokio::test]
async fn a_reconciliation_that_cannot_see_the_queues_is_refused_not_concluded() {
    let (w, control) = xau_dead_letters(2).await;
    let asked = Command::Reconcile {
        period: "2026-11".into(),
    };
    let refused = control.handle_as(&caller("auditor", "audrey"), asked.clone()).await;
    assert!(
        matches!(&refused, Err(ControlError::Refused(r)) if r.0.contains("queues cannot be seen")),
        "{refused:?}"
    );
    assert!(matches!(
        control.handle_as(&caller("viewer", "vera"), asked).await,
        Err(ControlError::Forbidden(_))
    ));
    assert_eq!(records(&w, AuditKind::AccessRefused).await.len(), 2);
}

/// A page of a filter fills inside the store's page: the next starts just after its last
/// envelope, so every match is shown once, none skipped, however the store's pages fall.
#[tokio::test]
async fn pages_of_a_filter_show_each_match_once() {
    let w = world();
    // Oldest first: XAG at the 2nd, 3rd and 6th of eight.
    let mut want = Vec::new();
    for i in 1..=8u32 {
        let m = if [2, 3, 6].contains(&i) {
            tx_in(i, "XAG", "1.5")
        } else {
            xau(i)
        };
        let e = w
            .envelope(&format!("e{i}"), &m, ChronoDuration::hours(i64::from(20 - i)))
            .await;
        if m.currency == "XAG" {
            want.push(e.envelope_id);
        }
    }
    let control = control(&w);
    let viewer = caller("viewer", "vera");
    let (mut seen, mut cursor, mut pages) = (Vec::new(), serde_json::Value::Null, 0);
    loop {
        let query = serde_json::json!({"currency": "XAG", "limit": 1, "cursor": cursor});
        let page = control
            .handle_as(&viewer, Command::Envelopes(serde_json::from_value(query).unwrap()))
            .await
            .unwrap();
        seen.extend(
            page["envelopes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["envelope_id"].clone()),
        );
        pages += 1;
        cursor = page["cursor"].clone();
        if cursor.is_null() || pages > 10 {
            break;
        }
    }
    let ids: Vec<String> = seen.iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, want, "{pages} pages");
}
