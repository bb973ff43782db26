//! The console's door to the control plane on the local stack: a request whose token API
//! Gateway's JWT authorizer verified (its claims in the request context, as API Gateway hands
//! them over). The person and their roles come from the claims; the console only names which of
//! their roles they act in; every refusal is the server's, and audited.

use recon_core::control::http::CONSOLE_ROUTE;
use recon_core::domain::AuditKind;
use recon_core::domain::console::ConsoleSignIn;
use recon_core::ports::EnvelopeStore;
use recon_harness::stack::TestStack;
use serde_json::{Value, json};

use crate::control::{Control, xau};

/// The control plane with the console door open: the identity provider's `fin-*` groups.
async fn console(s: &TestStack) -> Control<'_> {
    let mut settings = s.control_settings();
    settings.console = Some(ConsoleSignIn {
        groups: "viewer:fin-viewers,maker:fin-makers,approver:fin-controllers,auditor:fin-auditors,admin:fin-admins"
            .parse()
            .unwrap(),
        groups_claim: "groups".into(),
        name_claim: "email".into(),
    });
    Control::with_settings(s, &s.clients, settings).await
}

/// `body` from `email`'s sign-in, in `groups` (as API Gateway writes a list), acting as `role`.
async fn ask(c: &Control<'_>, email: &str, groups: &str, role: Option<&str>, body: Value) -> (u64, Value) {
    let claims = json!({"email": email, "groups": groups, "sub": format!("sub-{}", email.to_lowercase()), "iss": "https://idp.example.com"});
    let headers = role.map_or_else(|| json!({}), |r| json!({"x-operator-role": r}));
    c.ask_with(
        CONSOLE_ROUTE,
        json!({"jwt": {"claims": claims, "scopes": null}}),
        headers,
        body,
    )
    .await
}

#[tokio::test]
async fn a_console_sign_in_is_the_person_its_token_names_in_a_role_its_groups_give() {
    let s = TestStack::new("con-signin").await;
    let c = console(&s).await;
    let whoami = json!({"operation": "whoami"});
    let (status, who) = ask(&c, "Alice@Example.com", "[fin-makers other]", None, whoami.clone()).await;
    assert_eq!(status, 200, "{who}");
    assert_eq!(who["role"], "maker", "{who}");
    let arn = who["identity"]["arn"].as_str().unwrap_or_default();
    assert!(
        arn.starts_with("console/000000000000/maker/alice@example.com/"),
        "{who}"
    );

    // A viewer's crafted request is refused by the server, and audited as theirs.
    let policy = json!({"operation": "set-policy", "policy": {"max_count": 1}});
    let (status, body) = ask(&c, "vera@example.com", "[fin-viewers]", None, policy.clone()).await;
    assert_eq!(status, 403, "{body}");
    // Naming a role the groups do not give is refused (not taken), audited as the person's.
    let (status, body) = ask(&c, "vera@example.com", "[fin-viewers]", Some("admin"), policy.clone()).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("does not hold the admin role"),
        "{body}"
    );
    // Two roles: the console must say which.
    let both = "[fin-makers fin-controllers]";
    let (status, body) = ask(&c, "bob@example.com", both, None, whoami.clone()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        ask(&c, "bob@example.com", both, Some("approver"), whoami.clone())
            .await
            .1["role"],
        "approver"
    );
    // A token that names no one: nobody to audit.
    let (status, _) = c
        .ask_with(
            CONSOLE_ROUTE,
            json!({"jwt": {"claims": {"sub": "x", "groups": "[fin-admins]"}}}),
            json!({}),
            whoami.clone(),
        )
        .await;
    assert_eq!(status, 401);

    let refused: Vec<_> = s
        .audit()
        .await
        .into_iter()
        .filter(|r| r.kind == AuditKind::AccessRefused)
        .collect();
    let actors: Vec<&str> = refused.iter().map(|r| r.actor.as_str()).collect();
    assert_eq!(refused.len(), 3, "{refused:#?}");
    for who in ["viewer/vera@example.com/", "-/vera@example.com/", "-/bob@example.com/"] {
        let by = format!("console/000000000000/{who}");
        assert!(actors.iter().any(|a| a.starts_with(&by)), "{by} in {actors:?}");
    }

    // A deployment without DLQ_CONSOLE_GROUPS answers no console sign-in.
    let closed = Control::new(&s).await;
    let claims = json!({"jwt": {"claims": {"email": "ada@example.com", "sub": "u-ada", "groups": "[fin-admins]"}}});
    assert_eq!(closed.ask_with(CONSOLE_ROUTE, claims, json!({}), whoami).await.0, 401);
    s.cleanup().await;
}

/// Maker-checker across the doors: a maker at the console cannot approve their own request as a
/// role session named after them (`dlqctl`), nor at the console as an approver.
#[tokio::test]
async fn a_console_maker_is_not_their_own_approver_through_either_door() {
    let s = TestStack::new("con-checker").await;
    s.enveloped(&(1..=3).map(|n| xau(n).to_body().unwrap()).collect::<Vec<_>>(), 10_000)
        .await;
    let c = console(&s).await;
    let admin = |body| ask(&c, "ada@example.com", "[fin-admins]", None, body);
    assert_eq!(
        admin(json!({"operation": "put-currency", "code": "XAU", "minor_units": 4}))
            .await
            .0,
        200
    );
    assert_eq!(
        admin(json!({"operation": "set-policy", "policy": {"max_count": 2}}))
            .await
            .0,
        200
    );

    let replay = json!({"operation": "replay", "reason": "XAU mapped", "root_cause": "UNMAPPED_CURRENCY:*"});
    let (status, asked) = ask(
        &c,
        "alice@example.com",
        "[fin-makers fin-controllers]",
        Some("maker"),
        replay,
    )
    .await;
    assert_eq!(status, 200, "{asked}");
    let id = asked["request"]["request_id"].as_str().unwrap().to_owned();
    let approve = json!({"operation": "approve", "request_id": id, "reason": "checked"});
    let (status, body) = ask(
        &c,
        "Alice@example.com",
        "[fin-makers fin-controllers]",
        Some("approver"),
        approve.clone(),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body["message"].as_str().unwrap().contains("self-approval"), "{body}");
    let (status, body) = c.ask("approver", "alice@example.com", approve.clone()).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["message"].as_str().unwrap().contains("self-approval"), "{body}");
    assert!(s.postings().await.is_empty());
    let (status, body) = ask(&c, "carol@example.com", "[fin-controllers]", None, approve).await;
    assert_eq!(status, 200, "{body}");
    s.cleanup().await;
}

/// The console's reads, for every operator role through the console's door (and for none at
/// break-glass): triage, pages of envelopes that a filter narrows and a cursor continues, one
/// envelope with its verbatim body, the requests.
#[tokio::test]
async fn a_console_reader_triages_pages_filters_and_opens_envelopes() {
    let s = TestStack::new("con-reads").await;
    s.enveloped(&(1..=5).map(|n| xau(n).to_body().unwrap()).collect::<Vec<_>>(), 10_000)
        .await;
    let c = console(&s).await;
    let viewer = |body| ask(&c, "vera@example.com", "[fin-viewers]", None, body);

    let (status, triage) = viewer(json!({"operation": "triage"})).await;
    assert_eq!(status, 200, "{triage}");
    assert_eq!(triage["envelopes"], 5, "{triage}");
    assert_eq!(triage["counted"], "totals", "read from the store's totals: {triage}");
    let group = &triage["groups"][0];
    assert_eq!(
        (group["root_cause"].as_str(), group["count"].as_u64()),
        (Some("UNMAPPED_CURRENCY:XAU"), Some(5)),
        "{group}"
    );

    // Pages of two: every envelope once, the last page without a cursor.
    let (mut seen, mut cursor) = (Vec::new(), Value::Null);
    loop {
        let (status, page) = viewer(json!({"operation": "envelopes", "limit": 2, "cursor": cursor})).await;
        assert_eq!(status, 200, "{page}");
        let rows = page["envelopes"].as_array().unwrap();
        assert!(rows.len() <= 2, "{page}");
        seen.extend(rows.iter().map(|r| r["envelope_id"].as_str().unwrap().to_owned()));
        cursor = page["cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 5, "{seen:?}");

    // A filter on the verbatim body: the one envelope whose body holds its amount.
    let (_, found) = viewer(json!({"operation": "envelopes", "text": "3.0625", "currency": "xau"})).await;
    let rows = found["envelopes"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{found}");
    assert_eq!(rows[0]["amount"], "3.0625");
    let count = |page: &Value| page["envelopes"].as_array().map_or(0, Vec::len);
    let entity = rows[0]["entity"].as_str().unwrap().to_lowercase();
    for (filter, expected) in [
        (json!({"min_age_hours": 1}), 0),
        (json!({"root_cause": "UNMAPPED_CURRENCY:*"}), 5),
        (json!({"root_cause": "UNMAPPED_CURRENCY"}), 0),
        (
            json!({"failure_code": "POISON_MESSAGE", "root_cause": "UNMAPPED_CURRENCY:XAU"}),
            5,
        ),
        (json!({"failure_code": "REPLAY_DUPLICATE"}), 0),
        (json!({"entity": entity}), 5),
        (json!({"entity": "NO-SUCH-ENTITY"}), 0),
        (json!({"status": "REPLAYED"}), 0),
    ] {
        let mut asked = filter.clone();
        asked["operation"] = json!("envelopes");
        let (status, page) = viewer(asked).await;
        assert_eq!((status, count(&page)), (200, expected), "{filter}: {page}");
    }
    // A bad filter is the caller's to mend (400), not the store's to retry.
    let (status, _) = viewer(json!({"operation": "envelopes", "limit": 0})).await;
    assert_eq!(status, 400);

    let id = rows[0]["envelope_id"].as_str().unwrap();
    let (status, one) = viewer(json!({"operation": "envelope", "envelope_id": id})).await;
    assert_eq!(status, 200, "{one}");
    assert!(one["body"].as_str().unwrap().contains("3.0625"), "{one}");
    assert_eq!(one["envelope"]["envelope_id"], id);
    let (status, requests) = viewer(json!({"operation": "requests"})).await;
    assert_eq!(
        (status, requests["requests"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{requests}"
    );

    // The store's cursor after any envelope of a page: the next page starts just after it.
    let store =
        recon_aws::dynamodb::DynamoEnvelopeStore::new(s.clients.dynamodb.clone(), &s.stack.names.envelope_table);
    let pending = recon_core::domain::EnvelopeStatus::Pending;
    let ids = |es: &[recon_core::domain::DlqEnvelope]| es.iter().map(|e| e.envelope_id.clone()).collect::<Vec<_>>();
    let (all, _) = store.list_by_status(pending, None, 10).await.unwrap();
    let after = Some(store.cursor_after(&all[1], None));
    let (rest, _) = store.list_by_status(pending, after, 10).await.unwrap();
    assert_eq!(ids(&rest), ids(&all[2..]));
    // And inside a group, through the cause index (what triage links to).
    let (code, cause) = (recon_core::domain::FailureCode::PoisonMessage, "UNMAPPED_CURRENCY:XAU");
    let (all, _) = store.list_by_cause(code, cause, None, 10).await.unwrap();
    assert_eq!(all.len(), 5);
    let after = Some(store.cursor_after(&all[1], Some((code, cause))));
    let (rest, _) = store.list_by_cause(code, cause, after, 10).await.unwrap();
    assert_eq!(ids(&rest), ids(&all[2..]));
    // The console's pages of the group's PENDING envelopes, two at a time, its second one
    // settled (the index holds it still): each PENDING one once, a page full inside the
    // store's going on just after its last.
    recon_testkit::builders::settle_by_hand(
        &store,
        &all[1].envelope_id,
        recon_core::domain::EnvelopeStatus::Quarantined,
    )
    .await;
    let (mut seen, mut cursor) = (Vec::new(), Value::Null);
    loop {
        let asked = json!({"operation": "envelopes", "failure_code": code.as_str(), "root_cause": cause, "limit": 2, "cursor": cursor});
        let (status, page) = viewer(asked).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["envelopes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["envelope_id"].as_str().unwrap().to_owned()),
        );
        cursor = page["cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let unique: std::collections::BTreeSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), unique.len()), (4, 4), "{seen:?}");
    assert!(!seen.contains(&all[1].envelope_id), "{seen:?}");

    // Break-glass reads the stores itself: the control plane reads nothing for it (audited).
    let (status, body) = c.ask("break-glass", "mallory", json!({"operation": "triage"})).await;
    assert_eq!(status, 403, "{body}");
    s.cleanup().await;
}

/// The auditor's evidence at the console: a period's reconciliation by the control plane, as
/// `dlqctl reconcile --period` makes it. It holds after a day of remediation; it names a posting
/// gone missing; it is undecided while a message is still queued; no other role may ask it.
#[tokio::test]
async fn a_console_auditor_reconciles_a_period_and_the_control_plane_says_what_holds() {
    let s = TestStack::new("con-recon").await;
    s.remediated(&crate::control::plain_and_xau(4), 1000).await;
    let c = console(&s).await;
    let auditor = |body| ask(&c, "audrey@example.com", "[fin-auditors]", None, body);
    let reconcile = json!({"operation": "reconcile", "period": "2026-11"});
    let (status, r) = auditor(reconcile.clone()).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["verdict"], "HOLDS", "{r}");
    assert_eq!(r["by_state"]["COMMITTED"]["count"], 4, "{r}");

    // A replay's posting gone (its envelope says it was re-injected): the period does not hold,
    // and names it. (A plain posting that no record names is missed without a manifest, as by
    // `dlqctl reconcile --period`: only the producer's manifest says it was sent.)
    let postings = s.postings().await;
    let replayed = postings
        .iter()
        .find(|p| p.replay_of.is_some())
        .expect("a replay's posting");
    s.delete_posting(replayed).await;
    let (_, r) = auditor(reconcile.clone()).await;
    assert_eq!(r["verdict"], "DOES_NOT_HOLD", "{r}");
    let problems = r["problems"].to_string();
    assert!(
        problems.contains(&replayed.message_id) || problems.contains(&replayed.source_hash),
        "{r}"
    );
    s.restore_posting(replayed).await;
    assert_eq!(auditor(reconcile.clone()).await.1["verdict"], "HOLDS");

    // A message still queued decides nothing yet: on the main queue, then (dead-lettered, not yet
    // enveloped) on the DLQ.
    let mut poison = recon_testkit::builders::tx(9);
    poison.currency = "XPT".into();
    s.send(&[poison.to_body().unwrap()]).await;
    let undecided = |r: &Value| r["verdict"].as_str() == Some("UNDECIDED") && r["queued"] == 1;
    let (_, r) = auditor(reconcile.clone()).await;
    assert!(undecided(&r), "on the main queue: {r}");
    s.pump(&s.consumer_with(s.ledger(), s.main_queue())).await;
    let letters = s.dlq_messages().await;
    assert_eq!(letters.len(), 1);
    let (_, r) = auditor(reconcile.clone()).await;
    assert!(undecided(&r), "on the DLQ: {r}");
    // Parked behind the DLQ, as SQS moves a letter the enricher kept failing on: still undecided
    // (not enveloped, and nothing but the parking queue holds it).
    let (sqs, stack) = (&s.clients.sqs, &s.stack);
    let body = letters[0].body().unwrap_or_default();
    sqs.send_message()
        .queue_url(&stack.parked_url)
        .message_body(body)
        .send()
        .await
        .unwrap();
    let receipt = letters[0].receipt_handle().unwrap_or_default();
    sqs.delete_message()
        .queue_url(&stack.dlq_url)
        .receipt_handle(receipt)
        .send()
        .await
        .unwrap();
    let (_, r) = auditor(reconcile.clone()).await;
    assert!(undecided(&r), "parked: {r}");

    let (status, _) = ask(&c, "vera@example.com", "[fin-viewers]", None, reconcile).await;
    assert_eq!(status, 403);
    let (status, _) = auditor(json!({"operation": "reconcile", "period": "2026-13"})).await;
    assert_eq!(status, 400);
    s.cleanup().await;
}

/// A totals item that refuses the creation's `ADD` (on AWS: one that would grow past DynamoDB's
/// 400 KB an item, which DynamoDB Local does not enforce; here: a count made a string, which both
/// refuse alike, as a validation error of that item): the envelope is written all the same,
/// without its totals, and the counter's item says so; triage then counts the envelopes
/// themselves, with the same answer.
#[tokio::test]
async fn an_envelope_whose_totals_item_refuses_it_is_written_and_triage_counts_the_envelopes() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use recon_core::ports::{Backlog, CreateOutcome};
    use recon_core::resources::keys;
    let s = TestStack::new("con-full").await;
    let store = s.envelope_store();
    let first = recon_testkit::builders::envelope("full-1");
    assert_eq!(store.create(&first).await, Ok(CreateOutcome::Created));
    let c = console(&s).await;
    let viewer = |body| ask(&c, "vera@example.com", "[fin-viewers]", None, body);
    let (status, triage) = viewer(json!({"operation": "triage"})).await;
    assert_eq!(
        (status, &triage["counted"], &triage["envelopes"]),
        (200, &json!("totals"), &json!(1)),
        "{triage}"
    );

    // Its totals item, its count made a string.
    let table = &s.stack.names.envelope_table;
    let ddb = &s.clients.dynamodb;
    let totals = ddb
        .query()
        .table_name(table)
        .index_name(recon_core::resources::indexes::BY_STATUS_AGE.name)
        .key_condition_expression("#s = :s")
        .expression_attribute_names("#s", keys::ENVELOPE_STATUS)
        .expression_attribute_values(":s", AttributeValue::S(keys::ENVELOPE_TOTALS_STATUS.into()))
        .send()
        .await
        .expect("query the totals");
    assert_eq!(totals.items().len(), 1, "one totals item");
    ddb.update_item()
        .table_name(table)
        .key(keys::ENVELOPE_PK, totals.items()[0][keys::ENVELOPE_PK].clone())
        .update_expression("SET n = :s")
        .expression_attribute_values(":s", AttributeValue::S("not a number".into()))
        .send()
        .await
        .expect("spoil the count");

    // Another envelope of the group and month.
    let second = recon_testkit::builders::envelope("full-2");
    assert_eq!(store.create(&second).await, Ok(CreateOutcome::Created));
    assert_eq!(store.pending_count().await, Ok(2));
    assert_eq!(
        store.triage_totals().await,
        Ok(None),
        "the totals say they no longer cover every envelope"
    );
    let (status, triage) = viewer(json!({"operation": "triage"})).await;
    assert_eq!(status, 200, "{triage}");
    assert_eq!(
        (&triage["counted"], &triage["envelopes"]),
        (&json!("envelopes"), &json!(2)),
        "{triage}"
    );
    s.cleanup().await;
}

/// The auditor's audit verification at the console: the trail intact after a day of remediation,
/// whole and from the newest seal; one record's text changed in the table, as anyone who can write
/// to it could, and it is named; no other role may ask.
#[tokio::test]
async fn a_console_auditor_verifies_the_audit_trail_and_a_changed_record_is_named() {
    let s = TestStack::new("con-verify").await;
    let bodies: Vec<String> = (1..=3).map(|n| xau(n).to_body().unwrap()).collect();
    s.remediated(&bodies, 1000).await;
    let c = console(&s).await;
    let auditor = |body| ask(&c, "audrey@example.com", "[fin-auditors]", None, body);
    let (status, sealed) = auditor(json!({"operation": "seal"})).await;
    assert_eq!(status, 200, "{sealed}");
    let (status, whole) = auditor(json!({"operation": "verify-audit"})).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(
        (&whole["intact"], &whole["breaks"]),
        (&json!(true), &json!([])),
        "{whole}"
    );
    assert!(whole["records"].as_u64().is_some_and(|n| n > 0), "{whole}");
    let newest = whole["latest_seal_seq"].as_u64().expect("a seal");
    let (status, since) = auditor(json!({"operation": "verify-audit", "from_seal": newest})).await;
    assert_eq!(
        (status, &since["intact"], &since["from_seal"]),
        (200, &json!(true), &json!(newest)),
        "{since}"
    );

    // One record's detail changed in the table.
    let record = s.audit().await.into_iter().next().expect("an audit record");
    let mut item = s.audit_item(&record.audit_id).await;
    item.insert(
        "detail".into(),
        aws_sdk_dynamodb::types::AttributeValue::S("changed afterwards".into()),
    );
    s.put_audit_item(item).await;
    let (status, broken) = auditor(json!({"operation": "verify-audit"})).await;
    assert_eq!((status, &broken["intact"]), (200, &json!(false)), "{broken}");
    assert!(!broken["breaks"].as_array().unwrap().is_empty(), "{broken}");

    let (status, _) = auditor(json!({"operation": "verify-audit", "from_seal": 0})).await;
    assert_eq!(status, 400);
    let (status, _) = ask(
        &c,
        "vera@example.com",
        "[fin-viewers]",
        None,
        json!({"operation": "verify-audit"}),
    )
    .await;
    assert_eq!(status, 403);
    s.cleanup().await;
}
