//! The control plane's least privilege, proven by use: every operation an operator may ask, run
//! on the control plane's own clients, and the requests it sent held to exactly what the
//! template grants `ControlRole` (its identity policies and the decision key's policy).

use super::{assert_calls_exactly_its_grants, own_clients};
use crate::control::{Control, xau};
use recon_aws::dynamodb::DynamoEnvelopeStore;
use serde_json::{Value, json};

fn ok((status, body): (u64, Value)) -> Value {
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn the_control_plane_calls_exactly_what_its_role_grants() {
    // A debug build keeps every awaited future's temporaries on the stack: the control plane's
    // deepest path (an execute that seals each record it appends) needs more than a test
    // thread's 2 MiB (4 MiB suffice; the Lambda's main thread has 8).
    let run = || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(control_plane_calls());
    };
    let thread = std::thread::Builder::new().stack_size(8 << 20).spawn(run).unwrap();
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

async fn control_plane_calls() {
    let s = recon_harness::stack::TestStack::new("iam-ctl").await;
    let mut bodies: Vec<String> = (1..=5).map(|n| xau(n).to_body().unwrap()).collect();
    // A body too large for its envelope: the replay reads it from the bucket.
    let mut large = serde_json::from_str::<Value>(&xau(6).to_body().unwrap()).unwrap();
    large["narrative"] = "x".repeat(100_000).into();
    bodies.push(large.to_string());
    // A body that claims a transaction its content cannot reproduce (the amount unreadable): its
    // quarantine asks the ledger for the hash it claims without a period (a scan).
    let mut unreadable = serde_json::from_str::<Value>(&xau(7).to_body().unwrap()).unwrap();
    unreadable["amount"] = "12,50".into();
    bodies.push(unreadable.to_string());
    s.enveloped(&bodies, 10_000).await;
    let own = own_clients().await;
    // Every appended record seals, so the second seal reads the first by its version.
    let mut settings = s.control_settings();
    settings.replay.seal.every_records = 1;
    settings.replay.page_size = 1;
    let table = settings.replay.envelope_table.clone();
    let mut c = Control::with_settings(&s, &own, settings).await;
    // The administrator's changes to the reference data.
    let admin = [
        json!({"operation": "put-currency", "code": "XAU", "minor_units": 4}),
        json!({"operation": "set-policy", "policy": {"max_count": 1}}),
        json!({"operation": "close-period", "entity": "ACME-US", "period": "2026-01"}),
        json!({"operation": "open-period", "entity": "ACME-US", "period": "2026-01"}),
        json!({"operation": "schedule-period-close", "entity": "ACME-US", "period": "2026-12", "closes_on": "2027-01-05"}),
    ];
    for change in admin {
        ok(c.ask("admin", "ada", change).await);
    }
    // A dry run; a replay above the policy, asked, approved by another person and executed (its
    // marks through the audit outbox: what the store falls back to when the trail's heads keep
    // moving); a quarantine under it (a hand-off in the ledger); a request rejected.
    let replay = |dry_run: bool| json!({"operation": "replay", "reason": "XAU mapped", "root_cause": "UNMAPPED_CURRENCY:*", "max_items": 3, "dry_run": dry_run});
    ok(c.ask("maker", "alice", replay(true)).await);
    let asked = ok(c.ask("maker", "alice", replay(false)).await);
    let id = &asked["request"]["request_id"];
    ok(c.ask(
        "approver",
        "bob",
        json!({"operation": "approve", "request_id": id, "reason": "checked"}),
    )
    .await);
    let linked = std::mem::replace(
        &mut c.plane_mut().replayer.store,
        DynamoEnvelopeStore::new(own.dynamodb.clone(), &table),
    );
    let ran = ok(c
        .ask("maker", "alice", json!({"operation": "execute", "request_id": id}))
        .await);
    assert_eq!(ran["report"]["reinjected"], 3, "{ran}");
    c.plane_mut().replayer.store = linked;
    let quarantine = json!({"operation": "quarantine", "reason": "manual journal", "root_cause": "UNMAPPED_CURRENCY:*", "max_items": 1});
    let quarantined = ok(c.ask("maker", "alice", quarantine).await);
    assert_eq!(quarantined["report"]["quarantined"], 1, "{quarantined}");
    let unidentified = json!({"operation": "quarantine", "reason": "unreadable amount", "root_cause": "INVALID_DECIMAL", "max_items": 1});
    let quarantined = ok(c.ask("maker", "alice", unidentified).await);
    assert_eq!(quarantined["report"]["quarantined"], 1, "{quarantined}");
    let asked = ok(c.ask("maker", "alice", replay(false)).await);
    let id = &asked["request"]["request_id"];
    ok(c.ask(
        "approver",
        "bob",
        json!({"operation": "reject", "request_id": id, "reason": "not now"}),
    )
    .await);
    // The console's reads, a viewer's: triage, a page of envelopes, one in full (the large one,
    // its body from the bucket), the requests and one of them.
    ok(c.ask("viewer", "vera", json!({"operation": "triage"})).await);
    let page = ok(c
        .ask(
            "viewer",
            "vera",
            json!({"operation": "envelopes", "status": "PENDING", "limit": 5}),
        )
        .await);
    let large = page["envelopes"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["amount"] == "6.0625"))
        .map(|r| r["envelope_id"].clone());
    let one = ok(c
        .ask("viewer", "vera", json!({"operation": "envelope", "envelope_id": large}))
        .await);
    assert!(one["body"].as_str().is_some_and(|b| b.len() > 100_000), "{one}");
    ok(c.ask("viewer", "vera", json!({"operation": "requests"})).await);
    ok(
        c.ask("viewer", "vera", json!({"operation": "request", "request_id": id}))
            .await,
    );
    // The auditor's read of a period's postings; a refusal (audited).
    let segment = json!({"operation": "reconcile-segment", "period": "2026-11", "segment": "0/2", "links": {}});
    ok(c.ask("auditor", "audrey", segment).await);
    // The auditor's reconciliation of a period at the console (its envelopes by key, both queues).
    let reconciled = ok(c
        .ask(
            "auditor",
            "audrey",
            json!({"operation": "reconcile", "period": "2026-11"}),
        )
        .await);
    assert!(reconciled["verdict"].is_string(), "{reconciled}");
    // The auditor's seal before an export, and the trail verified at the console: whole, and
    // from that seal.
    ok(c.ask("auditor", "audrey", json!({"operation": "seal"})).await);
    let verified = ok(c.ask("auditor", "audrey", json!({"operation": "verify-audit"})).await);
    assert_eq!(verified["intact"], true, "{verified}");
    let from = verified["latest_seal_seq"].clone();
    let again = ok(c
        .ask(
            "auditor",
            "audrey",
            json!({"operation": "verify-audit", "from_seal": from}),
        )
        .await);
    assert_eq!(again["intact"], true, "{again}");
    // The period's evidence bundle kept in the bucket, with its download address.
    let exported = ok(c
        .ask(
            "auditor",
            "audrey",
            json!({"operation": "export-evidence", "period": "2026-11"}),
        )
        .await);
    assert!(exported["url"].is_string(), "{exported}");
    let refused = c.ask(
        "viewer",
        "vera",
        json!({"operation": "set-policy", "policy": {"max_count": 9}}),
    );
    assert_eq!(refused.await.0, 403);
    let ledger = s.control_settings().replay.ledger;
    assert_calls_exactly_its_grants(&own, &s.stack.names, "ControlFunction", &ledger);
    s.cleanup().await;
}
