//! Least privilege, proven by use: each function runs its code paths on the local stack with its
//! own AWS clients, and the IAM actions of the requests it sent must be exactly the actions the
//! template's role grants its code (the template is the one statement of what each role may do).

use recon_aws::dynamodb::HAND_OFF_ATTRIBUTES;
use recon_aws::wiring;
use recon_aws::{AwsClients, Target};
use recon_core::config::LedgerSettings;
use recon_core::domain::{PeriodRecord, PeriodStatus, TransientKind};
use recon_core::ports::ReferenceData;
use recon_core::resources::{ResourceNames, TableKind, keys};
use recon_harness::stack::TestStack;
use recon_harness::template::{self, Deployment, Template, references};
use recon_testkit::builders::tx;
use recon_testkit::memory::MemoryMetrics;
use recon_testkit::sim::faults::Fault;
use recon_testkit::sim::faulty::Faulty;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Statements Lambda, or a store, exercises with the role on the function's behalf, never its
/// code (its logs, its traces, its network interfaces in your subnets, its failed events'
/// delivery, the stores' key used by SQS, DynamoDB and S3), each held to exactly these actions on
/// this resource (`Logs`: the function's own log group).
const RUNTIME: [(&str, &[&str], &str); 5] = [
    ("Logs", &["logs:CreateLogStream", "logs:PutLogEvents"], "Logs"),
    ("Tracing", &["xray:PutTraceSegments", "xray:PutTelemetryRecords"], "*"),
    (
        "LedgerNetwork",
        &[
            "ec2:CreateNetworkInterface",
            "ec2:DescribeNetworkInterfaces",
            "ec2:DeleteNetworkInterface",
            "ec2:AssignPrivateIpAddresses",
            "ec2:UnassignPrivateIpAddresses",
        ],
        "*",
    ),
    ("Undelivered", &["sqs:SendMessage"], "UndeliveredQueue"),
    (
        "DataKeyThroughTheStores",
        &[
            "kms:Decrypt",
            "kms:DescribeKey",
            "kms:Encrypt",
            "kms:GenerateDataKey*",
            "kms:ReEncrypt*",
        ],
        "DataKey",
    ),
];

/// What an event-source mapping calls with the function's role, by the type of its source.
fn mapping_actions(source_type: &str) -> &'static [&'static str] {
    match source_type {
        "AWS::SQS::Queue" => &["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
        _ => &[
            "dynamodb:DescribeStream",
            "dynamodb:GetRecords",
            "dynamodb:GetShardIterator",
            "dynamodb:ListStreams",
        ],
    }
}

fn refs(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    references(v, &mut out);
    out
}

/// What a statement's `Resource` names, each as the logical id (or parameter) with the level an
/// ARN pattern adds (`EnvelopeTable/index/*`, `QuarantineBucket/*`, `ReferenceTable/stream/*`); a
/// literal (`*`, an ARN written out) as itself.
fn targets(resource: &Value) -> Vec<String> {
    let one = |r: &Value| match r {
        Value::String(s) => s.clone(),
        _ => match r.get("Fn::Sub").and_then(Value::as_str) {
            Some(text) if text.starts_with("${") && text.contains(".Arn}") => {
                let (id, rest) = text[2..].split_once(".Arn}").unwrap_or_default();
                format!("{id}{rest}")
            }
            Some(text) => text.to_owned(),
            None => refs(r).into_iter().next().unwrap_or_else(|| r.to_string()),
        },
    };
    match resource {
        Value::Array(items) => items.iter().map(one).collect(),
        r => vec![one(r)],
    }
}

fn list(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Value::String(s) => vec![s.clone()],
        _ => vec![],
    }
}

fn resources() -> &'static serde_json::Map<String, Value> {
    Template::ours()
        .unwrap()
        .raw("/Resources")
        .and_then(Value::as_object)
        .unwrap()
}

/// The resources of type `kind` (those a deployment `d` has, if given): (logical id, properties).
fn of_type(kind: &str, d: Option<&Deployment>) -> Vec<(&'static str, &'static Value)> {
    resources()
        .iter()
        .filter(|(id, r)| r["Type"] == kind && d.is_none_or(|d| d.has(id).unwrap()))
        .map(|(id, r)| (id.as_str(), &r["Properties"]))
        .collect()
}

/// The role `function` runs with.
fn role_of(function: &str) -> String {
    refs(&resources()[function]["Properties"]["Role"])[0].clone()
}

/// The statements of `role`'s policies: its own and those attached to it (of deployment `d`).
fn statements(role: &str, d: Option<&Deployment>) -> Vec<&'static Value> {
    let own = resources()[role]["Properties"]["Policies"].as_array().unwrap().iter();
    let attached = of_type("AWS::IAM::Policy", d)
        .into_iter()
        .filter(|(_, p)| refs(&p["Roles"]).iter().any(|r| r == role))
        .map(|(_, p)| p);
    own.map(|p| &p["PolicyDocument"])
        .chain(attached.map(|p| &p["PolicyDocument"]))
        .flat_map(|doc| doc["Statement"].as_array().unwrap())
        .inspect(|st| {
            assert_eq!(st["Effect"], "Allow", "{role}: {st}");
            assert!(
                st.get("NotAction").is_none() && st.get("NotResource").is_none(),
                "{role}: {st}"
            );
        })
        .collect()
}

/// The sources of `function`'s event-source mappings (logical ids).
fn mapped_sources(function: &str) -> Vec<String> {
    of_type("AWS::Lambda::EventSourceMapping", None)
        .into_iter()
        .filter(|(_, p)| refs(&p["FunctionName"]) == [function])
        .map(|(_, p)| refs(&p["EventSourceArn"])[0].clone())
        .collect()
}

/// What the template grants `function`'s code on a deployment of `ledger`, as (IAM action, the
/// logical id of the resource or the parameter it is granted on): the statements of its role's
/// policies (a policy under a condition only where it holds), less the runtime's statements and
/// what its event-source mapping calls on its source.
fn granted_to_code(function: &str, ledger: &LedgerSettings) -> BTreeSet<(String, String)> {
    let mut given = vec![("LedgerKind", json!(ledger.kind()))];
    match ledger {
        LedgerSettings::DynamoDb => {}
        LedgerSettings::Postgres(p) => given.extend([
            ("PostgresUrl", json!(p.url)),
            ("PostgresSecretArn", json!(p.secret_arn.clone().unwrap_or_default())),
        ]),
        LedgerSettings::Http(h) => given.extend([
            ("HttpLedgerUrl", json!(h.url)),
            ("HttpLedgerSecretArn", json!(h.secret_arn.clone().unwrap_or_default())),
        ]),
    }
    let d = Template::ours()
        .unwrap()
        .deploy("000000000000", "us-east-1", &given)
        .unwrap();
    let mappings = mapped_sources(function);
    let mut granted = BTreeSet::new();
    for st in statements(&role_of(function), Some(&d)) {
        let sid = st["Sid"].as_str().unwrap_or_default();
        if let Some((_, actions, on)) = RUNTIME.iter().find(|(s, ..)| *s == sid) {
            let on = match *on {
                "Logs" => function.replace("Function", "Logs"),
                other => other.to_owned(),
            };
            assert_eq!(
                (list(&st["Action"]), targets(&st["Resource"])),
                (actions.iter().map(|a| a.to_string()).collect(), vec![on]),
                "{function}: {sid}"
            );
            continue;
        }
        for on in targets(&st["Resource"]) {
            let source = on.split('/').next().unwrap_or_default();
            let by_mapping = match mappings.iter().any(|m| m == source) {
                true => mapping_actions(resources()[source]["Type"].as_str().unwrap_or_default()),
                false => &[],
            };
            for action in list(&st["Action"])
                .into_iter()
                .filter(|a| !by_mapping.contains(&a.as_str()))
            {
                granted.insert((action, on.clone()));
            }
        }
    }
    // What a key's policy grants the role by name (no identity policy needs to).
    for (key, p) in of_type("AWS::KMS::Key", Some(&d)) {
        for st in p["KeyPolicy"]["Statement"].as_array().unwrap() {
            if refs(&st["Principal"]["AWS"]) == [role_of(function)] {
                granted.extend(list(&st["Action"]).into_iter().map(|a| (a, key.to_owned())));
            }
        }
    }
    granted
}

const FUNCTIONS: [&str; 5] = [
    "ConsumerFunction",
    "EnricherFunction",
    "ReplayFunction",
    "ReferenceAuditFunction",
    "ControlFunction",
];

/// What IAM enforces and the local stack cannot show, stated in the template as the code needs
/// it: a chain's head is never put and is moved only by its `seq` and `hash`; a hand-off writes
/// only its own attributes; each event-source mapping may read its source; only the functions in
/// your subnets may make network interfaces.
#[test]
fn the_template_limits_what_the_local_stack_cannot_show() {
    let heads = json!([format!("{}*", keys::AUDIT_HEAD_PREFIX)]);
    let grants = |st: &Value, action: &str, on: &str| {
        let actions = list(&st["Action"]);
        let covers = |a: &String| a == action || a == "*" || a.strip_suffix('*').is_some_and(|p| action.starts_with(p));
        actions.iter().any(covers) && targets(&st["Resource"]).iter().any(|t| t == on || t == "*")
    };
    for function in FUNCTIONS {
        let role = role_of(function);
        for st in statements(&role, None) {
            if grants(st, "dynamodb:PutItem", "AuditTable") {
                assert_eq!(
                    st["Condition"],
                    json!({"ForAllValues:StringNotLike": {"dynamodb:LeadingKeys": heads}}),
                    "{role} puts heads"
                );
            }
            if grants(st, "dynamodb:UpdateItem", "AuditTable") {
                let only = json!({
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": heads},
                    "ForAllValues:StringEquals": {"dynamodb:Attributes": [keys::AUDIT_PK, "hash", "seq"]},
                });
                assert_eq!(
                    st["Condition"], only,
                    "{role} updates more than the heads' seq and hash"
                );
            }
            if grants(st, "dynamodb:PutItem", "LedgerTable") && role != "ConsumerRole" {
                let only = json!({"ForAllValues:StringEquals": {"dynamodb:Attributes": HAND_OFF_ATTRIBUTES}});
                assert_eq!(
                    st["Condition"], only,
                    "{role}: a hand-off writes more than its attributes"
                );
            }
        }
        for source in mapped_sources(function) {
            let wanted = mapping_actions(resources()[&source]["Type"].as_str().unwrap_or_default());
            let granted: BTreeSet<String> = statements(&role, None)
                .into_iter()
                .filter(|st| refs(&st["Resource"]).contains(&source))
                .flat_map(|st| list(&st["Action"]))
                .collect();
            for action in wanted {
                assert!(
                    granted.contains(*action),
                    "{role} may not {action} on {source}, which its mapping reads"
                );
            }
        }
        let in_subnets = resources()[function]["Properties"].get("VpcConfig").is_some();
        let makes_interfaces = statements(&role, None).iter().any(|st| st["Sid"] == "LedgerNetwork");
        assert_eq!(
            in_subnets, makes_interfaces,
            "{function}: in subnets {in_subnets}, network grant {makes_interfaces}"
        );
    }
}

/// The template's logical id of each resource name the stack's code may send a request to (a
/// secret: the parameter that names it).
fn logical_ids(names: &ResourceNames, ledger: &LedgerSettings) -> BTreeMap<String, String> {
    let mut ids: BTreeMap<String, String> = [
        (names.main_queue.as_str(), template::ids::MAIN_QUEUE),
        (&names.dead_letter_queue, template::ids::DEAD_LETTER_QUEUE),
        (&names.parking_queue, template::ids::PARKING_QUEUE),
        (&names.quarantine_bucket, template::ids::QUARANTINE_BUCKET),
    ]
    .into_iter()
    .chain(
        [
            TableKind::Ledger,
            TableKind::Envelopes,
            TableKind::Reference,
            TableKind::Audit,
            TableKind::Dedup,
        ]
        .map(|k| (names.table(k), template::ids::table(k))),
    )
    .map(|(name, id)| (name.to_string(), id.to_owned()))
    .collect();
    ids.insert(format!("alias/{}-decisions", names.prefix), "DecisionKey".into());
    match ledger {
        LedgerSettings::Postgres(p) => ids.extend(p.secret_arn.clone().map(|s| (s, "PostgresSecretArn".to_owned()))),
        LedgerSettings::Http(h) => ids.extend(h.secret_arn.clone().map(|s| (s, "HttpLedgerSecretArn".to_owned()))),
        LedgerSettings::DynamoDb => {}
    }
    ids
}

/// The IAM actions an SDK operation (`Service:Operation`, as the request counter names it)
/// needs. A transaction needs the actions of its items: PutItem and UpdateItem here, the only
/// kinds our transactions contain.
fn actions_for(operation: &str) -> &'static [&'static str] {
    match operation {
        "SQS:SendMessage" | "SQS:SendMessageBatch" => &["sqs:SendMessage"],
        "SQS:ChangeMessageVisibility" => &["sqs:ChangeMessageVisibility"],
        "SQS:GetQueueAttributes" => &["sqs:GetQueueAttributes"],
        "SQS:ReceiveMessage" => &["sqs:ReceiveMessage"],
        "SQS:DeleteMessage" | "SQS:DeleteMessageBatch" => &["sqs:DeleteMessage"],
        "DynamoDB:PutItem" => &["dynamodb:PutItem"],
        "DynamoDB:GetItem" => &["dynamodb:GetItem"],
        "DynamoDB:UpdateItem" => &["dynamodb:UpdateItem"],
        "DynamoDB:DeleteItem" => &["dynamodb:DeleteItem"],
        "DynamoDB:Query" => &["dynamodb:Query"],
        "DynamoDB:Scan" => &["dynamodb:Scan"],
        "DynamoDB:TransactWriteItems" => &["dynamodb:PutItem", "dynamodb:UpdateItem"],
        "DynamoDB:BatchGetItem" => &["dynamodb:BatchGetItem"],
        "DynamoDB:BatchWriteItem" => &["dynamodb:BatchWriteItem"],
        "S3:PutObject" => &["s3:PutObject"],
        "S3:GetObject" | "S3:HeadObject" => &["s3:GetObject"],
        "S3:GetObjectVersion" => &["s3:GetObjectVersion"],
        "S3:ListObjectVersions" => &["s3:ListBucketVersions"],
        "S3:GetObjectLockConfiguration" => &["s3:GetBucketObjectLockConfiguration"],
        "Secrets Manager:GetSecretValue" => &["secretsmanager:GetSecretValue"],
        "KMS:GenerateMac" => &["kms:GenerateMac"],
        "KMS:VerifyMac" => &["kms:VerifyMac"],
        _ => &[],
    }
}

/// What `clients` sent, as (IAM action, logical id of what it named; the name if it is none of
/// the stack's).
fn observed(clients: &AwsClients, ids: &BTreeMap<String, String>) -> BTreeSet<(String, String)> {
    let mut seen = BTreeSet::new();
    for (op, name) in clients.requests.targets() {
        // A name the stack gives as a whole (a key's alias), else a table's index as the grant
        // names it (`Id/index/*`), a bucket's object (`Id/*`).
        let on = match (ids.get(&name), name.split_once('/')) {
            (Some(id), _) => id.clone(),
            (None, Some((base, "*"))) => ids.get(base).map_or(format!("{base}/*"), |id| format!("{id}/*")),
            (None, Some((base, _))) => ids
                .get(base)
                .map_or(format!("{base}/index/*"), |id| format!("{id}/index/*")),
            (None, None) => name.clone(),
        };
        seen.extend(actions_for(&op).iter().map(|a| (a.to_string(), on.clone())));
    }
    seen
}

/// Every request `own` sent maps to an IAM action, and those actions on those resources are
/// exactly the ones the template's role grants `function`'s code.
fn assert_calls_exactly_its_grants(own: &AwsClients, names: &ResourceNames, function: &str, ledger: &LedgerSettings) {
    // Every request to the bucket names the account that must own it: S3 refuses it if a bucket
    // of that name is anyone else's (LocalStack does not check; the header is what AWS checks).
    assert!(own.requests.total("s3") > 0, "the function made no S3 request to check");
    assert!(
        own.requests.s3_without_expected_owner().is_empty(),
        "S3 requests without ExpectedBucketOwner: {:?}",
        own.requests.s3_without_expected_owner()
    );
    assert!(
        unmapped(own).is_empty(),
        "operations without an IAM mapping: {:?}",
        unmapped(own)
    );
    assert_eq!(
        observed(own, &logical_ids(names, ledger)),
        granted_to_code(function, ledger),
        "requests seen: {:?}",
        own.requests.snapshot()
    );
}

/// The function's own clients, recording the resources each request names.
async fn own_clients() -> AwsClients {
    let own = AwsClients::connect(Target::local_from_env()).await;
    own.requests.record_targets();
    own
}

fn unmapped(clients: &AwsClients) -> Vec<String> {
    clients
        .requests
        .snapshot()
        .keys()
        .filter(|op| actions_for(op).is_empty())
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_consumer_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-cons").await;
    let own = own_clients().await;
    let m = tx(1);
    let flaky = tx(2);
    let ledger = Faulty::with_outages(wiring::consumer_ledger(&own, &s.settings), TransientKind::Throttled);
    ledger.faults.inject(&flaky.compute_hash().unwrap(), Fault::Times(1));
    // A general ledger that fails a post: the reservation protocol releases its claim.
    if let Some(gl) = s.gl() {
        gl.inject(&[recon_harness::http_ledger::GlFault::Unavailable]);
    }
    // Every appended record seals (the append path), so the seals are exercised too.
    let mut settings = s.settings.clone();
    settings.seal.every_records = 1;
    let consumer = Arc::new(wiring::consumer(&own, &settings, ledger, "iam-test"));
    // What the function does at start-up: record its configuration.
    wiring::record_configuration(&own, &settings.audit_table, "consumer", &settings.audited)
        .await
        .unwrap();
    let mut poison = tx(3);
    poison.currency = "XAU".into();
    // Commit, duplicate, poison, transient: every path of the consumer's code.
    s.send(&[
        m.to_body().unwrap(),
        m.to_body().unwrap(),
        poison.to_body().unwrap(),
        flaky.to_body().unwrap(),
    ])
    .await;
    s.pump(&consumer).await;
    assert_calls_exactly_its_grants(&own, &s.stack.names, FUNCTIONS[0], &s.settings.ledger);
    s.cleanup().await;
}

#[tokio::test]
async fn the_enricher_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-enr").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut poison = tx(4);
    poison.currency = "XAU".into();
    s.send(&[poison.to_body().unwrap(), "not json".into()]).await;
    s.pump(&consumer).await;
    let own = own_clients().await;
    let mut settings = s.enricher_settings(0);
    settings.seal.every_records = 1;
    let enricher = Arc::new(wiring::enricher(&own, &settings, "iam-test", MemoryMetrics::default()));
    wiring::record_configuration(&own, &settings.audit_table, "enricher", &settings.audited)
        .await
        .unwrap();
    // New envelopes (pending and quarantined; one PENDING is above a mark of 0: the overflow
    // record passes through the audit outbox), then the same DLQ message again.
    let (event, _) = s.receive_event(&s.dlq(), 2, 1).await;
    enricher.handle_batch(&event, None).await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    s.pump_dlq(&enricher).await;
    assert_calls_exactly_its_grants(&own, &s.stack.names, FUNCTIONS[1], &LedgerSettings::DynamoDb);
    s.cleanup().await;
}

#[tokio::test]
async fn the_replay_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-rpl").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let xau = |n: u32| {
        let mut m = tx(n);
        m.currency = "XAU".into();
        m
    };
    let mut closed = xau(6);
    closed.value_date = "2026-10-10".into();
    let mut large = serde_json::from_str::<serde_json::Value>(&xau(7).to_body().unwrap()).unwrap();
    large["narrative"] = "x".repeat(100_000).into();
    s.send(&[xau(5).to_body().unwrap(), closed.to_body().unwrap(), large.to_string()])
        .await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(1000)).await;
    s.map_currency("XAU", 4).await;
    s.reference()
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        })
        .await
        .unwrap();

    let own = own_clients().await;
    let settings = s.replay_settings();
    wiring::record_configuration(&own, &settings.audit_table, "replay", &settings.audited)
        .await
        .unwrap();
    let mut replayer = wiring::replayer(&own, &settings, "iam-test", MemoryMetrics::default());
    replayer.config.page_size = 1;
    // A scheduled sweep: pages (cursor saved and cleared), re-injection, a large body read from
    // the bucket, a quarantine record written to it. Its first envelope's mark goes through the
    // outbox (what the store falls back to when the trail's heads keep moving: the record
    // published, then deleted from the outbox), the others' with their records linked into the
    // trail.
    let linked = replayer.store.clone();
    replayer.store = recon_aws::dynamodb::DynamoEnvelopeStore::new(own.dynamodb.clone(), &settings.envelope_table);
    let mut sweep = recon_testkit::builders::sweep_request();
    sweep.selector.max_items = Some(1);
    let first = replayer.run(&sweep, None).await.unwrap();
    replayer.store = linked;
    sweep.selector.max_items = None;
    let report = replayer.run(&sweep, None).await.unwrap();
    assert_eq!(
        (first.reinjected + report.reinjected, report.quarantined),
        (2, 1),
        "{first:#?} {report:#?}"
    );
    // A second sweep seals again: the first seal is read by its version id to chain the second.
    replayer.run(&sweep, None).await.unwrap();
    assert_calls_exactly_its_grants(&own, &s.stack.names, FUNCTIONS[2], &settings.ledger);
    s.cleanup().await;
}

#[tokio::test]
async fn the_reference_audit_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-refaud").await;
    s.map_currency("XAU", 4).await;
    s.reference()
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        })
        .await
        .unwrap();
    let own = own_clients().await;
    let mut settings = recon_core::config::ReferenceAuditSettings::from_lookup(s.stack.lookup(|_| None)).unwrap();
    settings.seal.every_records = 1;
    wiring::record_configuration(&own, &settings.audit_table, "reference-audit", &settings.audited)
        .await
        .unwrap();
    let auditor = wiring::reference_auditor(&own, &settings);
    // The stream is read with the harness's own client (Lambda's event-source mapping does that,
    // with the role's stream grants); the function's code makes the rest.
    let harness = AwsClients::connect(Target::local_from_env()).await;
    let n = recon_harness::streams::pump_stream(&harness, &settings.reference_table, &auditor)
        .await
        .unwrap();
    assert!(n >= 2, "{n} stream records");
    assert_calls_exactly_its_grants(
        &own,
        &s.stack.names,
        "ReferenceAuditFunction",
        &LedgerSettings::DynamoDb,
    );
    s.cleanup().await;
}

mod control;
