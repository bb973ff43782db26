//! The control plane on the local stack (DynamoDB Local, LocalStack), asked as API Gateway asks
//! it: an HTTP API request (payload format 2.0) whose caller is the principal IAM verified. Each
//! operator role's session asks; each refusal is an `ACCESS_REFUSED` record in the trail; a
//! maker's replay above the policy waits for another person as approver, then runs.

use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::config::ControlSettings;
use recon_core::domain::{AuditKind, NewMessage};
use recon_core::resources::keys;
use recon_harness::stack::TestStack;
use recon_testkit::builders::tx;
use recon_testkit::memory::MemoryMetrics;
use serde_json::{Value, json};

/// The control plane of stack `s`, asked through its HTTP face.
pub(crate) struct Control<'s> {
    s: &'s TestStack,
    plane: recon_aws::wiring::AwsControlPlane<MemoryMetrics>,
    settings: ControlSettings,
}

impl<'s> Control<'s> {
    pub(crate) async fn new(s: &'s TestStack) -> Self {
        Self::with_settings(s, &s.clients, s.control_settings()).await
    }

    /// The control plane with `settings` on `clients` (its decision key the local stack's, as
    /// provisioned from the template).
    pub(crate) async fn with_settings(
        s: &'s TestStack,
        clients: &recon_aws::AwsClients,
        settings: ControlSettings,
    ) -> Self {
        let plane = recon_aws::wiring::control_plane(clients, &settings, "control", MemoryMetrics::default());
        Control { s, plane, settings }
    }

    pub(crate) fn plane_mut(&mut self) -> &mut recon_aws::wiring::AwsControlPlane<MemoryMetrics> {
        &mut self.plane
    }

    /// `body` as `role`'s session of `person` asks it through the HTTP API: (status, body).
    pub(crate) async fn ask(&self, role: &str, person: &str, body: Value) -> (u64, Value) {
        let prefix = &self.s.stack.names.prefix;
        let arn = format!("arn:aws:sts::000000000000:assumed-role/{prefix}-{role}/{person}");
        self.ask_with("POST /operations", json!({"iam": {"userArn": arn}}), json!({}), body)
            .await
    }

    /// `body` on `route` of the HTTP API as `authorizer` (the request context's) verified the
    /// caller, with `headers`: (status, body).
    pub(crate) async fn ask_with(&self, route: &str, authorizer: Value, headers: Value, body: Value) -> (u64, Value) {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let event = json!({
            "version": "2.0",
            "routeKey": route,
            "headers": headers,
            "body": body.to_string(),
            "isBase64Encoded": false,
            "requestContext": {"requestId": format!("it-{n}"), "accountId": "000000000000", "authorizer": authorizer},
        });
        let invocation = format!("invocation-{n}");
        let response = Box::pin(self.plane.answer(
            &event,
            &self.settings.roles,
            self.settings.console.as_ref(),
            &invocation,
            None,
        ))
        .await;
        let body = serde_json::from_str(response["body"].as_str().unwrap()).unwrap();
        (response["statusCode"].as_u64().unwrap(), body)
    }
}

pub(crate) fn xau(n: u32) -> NewMessage {
    let mut m = tx(n);
    m.currency = "XAU".into();
    m.amount = format!("{n}.0625");
    m
}

/// `n` bodies, the even ones in XAU (dead-lettered until XAU is mapped), the odd ones plain.
pub(crate) fn plain_and_xau(n: u32) -> Vec<String> {
    (1..=n)
        .map(|n| if n % 2 == 0 { xau(n) } else { tx(n) })
        .map(|m| m.to_body().unwrap())
        .collect()
}

#[tokio::test]
async fn each_role_asks_only_its_own_operations_and_every_refusal_is_audited() {
    let s = TestStack::new("ctl-roles").await;
    let c = Control::new(&s).await;
    let policy = json!({"operation": "set-policy", "policy": {"max_count": 1}});
    for role in ["viewer", "maker", "approver", "auditor", "break-glass"] {
        let (status, body) = c.ask(role, "mallory", policy.clone()).await;
        assert_eq!(status, 403, "{role}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("needs the admin role"),
            "{body}"
        );
    }
    let (status, body) = c.ask("admin", "ada", policy).await;
    assert_eq!(status, 200, "{body}");
    let (status, who) = c.ask("viewer", "vera", json!({"operation": "whoami"})).await;
    assert_eq!((status, who["role"].as_str()), (200, Some("viewer")));
    // A payload naming its own actor is not a command; a replay without a reason is not a valid
    // one: both refused and audited as the caller's.
    let named = json!({"operation": "replay", "reason": "r", "triggered_by": "the-cfo"});
    assert_eq!(c.ask("maker", "alice", named).await.0, 400);
    let blank = json!({"operation": "replay", "reason": " "});
    assert_eq!(c.ask("maker", "alice", blank).await.0, 400);

    let audit = s.audit().await;
    let refused: Vec<_> = audit.iter().filter(|r| r.kind == AuditKind::AccessRefused).collect();
    assert_eq!(refused.len(), 7, "{refused:?}");
    assert_eq!(refused.iter().filter(|r| r.detail.contains("set-policy")).count(), 5);
    let by_alice: Vec<_> = refused.iter().filter(|r| r.actor.ends_with("-maker/alice")).collect();
    assert!(
        by_alice
            .iter()
            .any(|r| r.detail.contains("unknown field `triggered_by`")),
        "{by_alice:?}"
    );
    assert!(
        by_alice
            .iter()
            .any(|r| r.detail.contains("`replay` refused") && r.detail.contains("reason")),
        "{by_alice:?}"
    );
    let changed: Vec<_> = audit.iter().filter(|r| r.kind == AuditKind::ReferenceChanged).collect();
    assert_eq!(changed.len(), 1);
    assert!(changed[0].actor.ends_with("-admin/ada"), "{}", changed[0].actor);
    s.cleanup().await;
}

#[tokio::test]
async fn a_makers_replay_above_the_policy_runs_only_once_another_person_approves_it() {
    let s = TestStack::new("ctl-approve").await;
    let consumer = s
        .enveloped(&(1..=3).map(|n| xau(n).to_body().unwrap()).collect::<Vec<_>>(), 10_000)
        .await;
    let c = Control::new(&s).await;
    let (status, _) = c
        .ask(
            "admin",
            "ada",
            json!({"operation": "put-currency", "code": "XAU", "minor_units": 4}),
        )
        .await;
    assert_eq!(status, 200);
    c.ask(
        "admin",
        "ada",
        json!({"operation": "set-policy", "policy": {"max_count": 2}}),
    )
    .await;

    let replay = json!({"operation": "replay", "reason": "XAU mapped", "root_cause": "UNMAPPED_CURRENCY:*"});
    let (status, asked) = c.ask("maker", "alice", replay).await;
    assert_eq!(status, 200, "{asked}");
    assert_eq!(asked["request"]["request_status"], "PENDING_APPROVAL", "{asked}");
    let id = asked["request"]["request_id"].as_str().unwrap().to_owned();
    // alice, now as approver, is still alice.
    let approve = json!({"operation": "approve", "request_id": id, "reason": "checked"});
    let (status, body) = c.ask("approver", "alice", approve.clone()).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["message"].as_str().unwrap().contains("self-approval"), "{body}");
    assert_eq!(c.ask("maker", "bob", approve.clone()).await.0, 403);
    assert!(s.postings().await.is_empty());

    assert_eq!(c.ask("approver", "bob", approve).await.0, 200);
    // The decision as stored, its reason rewritten by someone who may write the table: the
    // control plane's key (KMS) no longer vouches for it, and it does not run.
    let table = &s.stack.names.envelope_table;
    let key = AttributeValue::S(format!("{}{id}", keys::ENVELOPE_REQUEST_PREFIX));
    let get = s
        .clients
        .dynamodb
        .get_item()
        .table_name(table)
        .key(keys::ENVELOPE_PK, key);
    let stored = get.send().await.unwrap().item.unwrap();
    let mut forged = stored.clone();
    let mut decision = forged["decision"].as_m().unwrap().clone();
    decision.insert("reason".into(), AttributeValue::S("approved by the CFO".into()));
    forged.insert("decision".into(), AttributeValue::M(decision));
    let put = |item| {
        s.clients
            .dynamodb
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
    };
    put(forged).await.unwrap();
    let execute = json!({"operation": "execute", "request_id": id});
    let (status, body) = c.ask("maker", "alice", execute.clone()).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["message"].as_str().unwrap().contains("seal"), "{body}");
    put(stored).await.unwrap();
    let (status, ran) = c.ask("maker", "alice", execute).await;
    assert_eq!(status, 200, "{ran}");
    assert_eq!(ran["request"]["request_status"], "EXECUTED", "{ran}");
    assert_eq!(ran["report"]["reinjected"], 3, "{ran}");
    s.pump(&consumer).await;
    assert_eq!(s.postings().await.len(), 3);
    let refused = s
        .audit()
        .await
        .into_iter()
        .filter(|r| r.kind == AuditKind::AccessRefused)
        .count();
    assert_eq!(refused, 3);
    s.cleanup().await;
}
