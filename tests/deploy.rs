//! A deployment as AWS users meet it, on the local stack: `dlqctl --stack` reads every name from
//! a CloudFormation stack's outputs (LocalStack's CloudFormation), and `setup` refuses to touch
//! resources it did not create.

use aws_sdk_cloudformation::types::StackStatus;
use aws_sdk_sqs::types::QueueAttributeName;
use recon_aws::deployment::{self, outputs};
use recon_aws::{AwsClients, Target};
use recon_harness::provision::{StackSettings, ensure_stack};
use recon_harness::pump::Poll;
use recon_harness::stack::TestStack;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// A CloudFormation stack on LocalStack whose outputs are `values` (the resources themselves are
/// the test stack's; LocalStack's CloudFormation here runs without DynamoDB, so the outputs are
/// given as literals, as the real template's `!Ref`s would resolve them).
async fn stack_with_outputs(clients: &AwsClients, name: &str, values: &[(&str, String)]) {
    let outputs: serde_json::Map<String, serde_json::Value> = values
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::json!({ "Value": v })))
        .collect();
    let template = serde_json::json!({
        "Resources": { "Handle": { "Type": "AWS::CloudFormation::WaitConditionHandle" } },
        "Outputs": outputs,
    });
    let cfn = deployment::cloudformation(clients).await;
    cfn.create_stack()
        .stack_name(name)
        .template_body(template.to_string())
        .send()
        .await
        .expect("create stack");
    for _ in 0..120 {
        let out = cfn
            .describe_stacks()
            .stack_name(name)
            .send()
            .await
            .expect("describe stack");
        match out.stacks().first().and_then(|s| s.stack_status()) {
            Some(StackStatus::CreateComplete) => return,
            Some(StackStatus::CreateInProgress) | None => {}
            Some(other) => panic!("stack {name}: {other:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    panic!("stack {name} was not created");
}

async fn delete_cfn_stack(clients: &AwsClients, name: &str) {
    let _ = deployment::cloudformation(clients)
        .await
        .delete_stack()
        .stack_name(name)
        .send()
        .await;
}

/// The outputs the template gives a deployment with these names.
fn outputs_of(s: &TestStack) -> Vec<(&'static str, String)> {
    let n = &s.stack.names;
    vec![
        (outputs::STACK_PREFIX, n.prefix.clone()),
        (outputs::MAIN_QUEUE_URL, s.stack.main_queue_url.clone()),
        (outputs::DEAD_LETTER_QUEUE_URL, s.stack.dlq_url.clone()),
        (outputs::LEDGER_TABLE, n.ledger_table.clone()),
        (outputs::ENVELOPE_TABLE, n.envelope_table.clone()),
        (outputs::REFERENCE_TABLE, n.reference_table.clone()),
        (outputs::AUDIT_TABLE, n.audit_table.clone()),
        (outputs::DEDUP_TABLE, n.dedup_table.clone()),
        (outputs::QUARANTINE_BUCKET, n.quarantine_bucket.clone()),
        (outputs::QUARANTINE_BUCKET_OWNER, n.account.clone()),
        (outputs::SWEEP_SCHEDULE, n.sweep_schedule.clone()),
        (outputs::SEAL_SCHEDULE, n.seal_schedule.clone()),
        (outputs::LEDGER_KIND, "dynamodb".into()),
    ]
}

/// `dlqctl` as a user runs it, against the local stack.
pub(crate) fn dlqctl(args: &[&str]) -> std::process::Output {
    Command::new(dlqctl_binary())
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run dlqctl")
}

/// The `dlqctl` of the build `make test` runs its checks on: the workspace with its tests, built
/// once here (nothing to do after `cargo test --workspace`); the path is the one that build
/// reports, wherever cargo's target directory is. `cargo run -p dlqctl` would resolve dlqctl's own
/// feature set and compile the AWS SDK a second time (see the Makefile's BUILD_TESTED).
fn dlqctl_binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--workspace",
                "--bins",
                "--tests",
                "--message-format=json",
            ])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .output()
            .expect("cargo build runs");
        assert!(
            out.status.success(),
            "the workspace's build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "dlqctl")
            // Not the binary of dlqctl's own unit tests, built from the same target.
            .filter(|m| m["profile"]["test"] == false)
            .filter(|m| {
                m["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
            })
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("the build names dlqctl's executable")
    })
}

#[tokio::test]
async fn dlqctl_reads_every_name_from_the_stacks_outputs() {
    let s = TestStack::new("dp-outputs").await;
    let cfn_stack = format!("{}-cfn", s.stack.names.prefix);
    stack_with_outputs(&s.clients, &cfn_stack, &outputs_of(&s)).await;

    let read = deployment::read_stack(&s.clients, &cfn_stack).await.unwrap();
    assert_eq!(read.names, s.stack.names);
    assert_eq!(read.main_queue_url, s.stack.main_queue_url);
    assert_eq!(read.dlq_url, s.stack.dlq_url);

    // The command a user runs: the names come from the stack whatever the prefix says (the
    // stack's bucket is not `<prefix>-quarantine`).
    let out = dlqctl(&["--stack", &cfn_stack, "--prefix", "someone-else", "env"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let env = String::from_utf8_lossy(&out.stdout);
    for (var, value) in s.stack.env() {
        assert!(
            env.lines().any(|l| l == format!("{var}={value}")),
            "{var}={value} missing from:\n{env}"
        );
    }
    let out = dlqctl(&["--stack", &cfn_stack, "audit", "verify"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The ledger is the stack's too: a shell that says otherwise is refused, not followed.
    let out = dlqctl(&["--stack", &cfn_stack, "--ledger", "postgres", "stats"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("commits to the dynamodb ledger"), "{said}");

    delete_cfn_stack(&s.clients, &cfn_stack).await;
    s.cleanup().await;
}

#[tokio::test]
async fn a_stack_without_an_output_or_with_a_bad_one_is_named_in_the_error() {
    let s = TestStack::new("dp-missing").await;
    let without = format!("{}-cfn-a", s.stack.names.prefix);
    let mut values = outputs_of(&s);
    values.retain(|(k, _)| *k != outputs::QUARANTINE_BUCKET_OWNER);
    stack_with_outputs(&s.clients, &without, &values).await;
    let e = deployment::read_stack(&s.clients, &without).await.unwrap_err();
    assert!(e.contains("no output QuarantineBucketOwner"), "{e}");

    let bad = format!("{}-cfn-b", s.stack.names.prefix);
    let mut values = outputs_of(&s);
    for (k, v) in &mut values {
        if *k == outputs::QUARANTINE_BUCKET {
            *v = "Not_A_Bucket".into();
        }
    }
    stack_with_outputs(&s.clients, &bad, &values).await;
    let e = deployment::read_stack(&s.clients, &bad).await.unwrap_err();
    assert!(
        e.contains("QuarantineBucket=\"Not_A_Bucket\" is not an S3 bucket name"),
        "{e}"
    );

    let e = deployment::read_stack(&s.clients, &format!("{}-none", s.stack.names.prefix))
        .await
        .unwrap_err();
    assert!(e.contains("cannot read stack"), "{e}");
    delete_cfn_stack(&s.clients, &without).await;
    delete_cfn_stack(&s.clients, &bad).await;
    s.cleanup().await;
}

#[tokio::test]
async fn setup_refuses_to_touch_a_queue_it_did_not_create_and_changes_nothing() {
    let clients = AwsClients::connect(Target::local_from_env()).await;
    let prefix = format!("dp-foreign-{}", std::process::id());
    let names = recon_aws::identity::derived_names(&clients, &prefix).await.unwrap();
    // A main queue of the deployment's name, made by someone else (no tag), as CloudFormation
    // would have made it: its own visibility timeout.
    let url = clients
        .sqs
        .create_queue()
        .queue_name(&names.main_queue)
        .attributes(QueueAttributeName::VisibilityTimeout, "45")
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let e = ensure_stack(&clients, &names, &StackSettings::default())
        .await
        .unwrap_err();
    assert!(
        e.detail.contains(&format!(
            "queue {} was not created by the local setup",
            names.main_queue
        )),
        "{e}"
    );
    assert!(e.detail.contains("changed nothing"), "{e}");
    // Nothing changed: the queue keeps its settings, and nothing else was created.
    let attrs = clients
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attrs
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout))
            .map(String::as_str),
        Some("45")
    );
    let dlq = clients
        .sqs
        .get_queue_url()
        .queue_name(&names.dead_letter_queue)
        .send()
        .await;
    assert!(dlq.is_err(), "setup created the DLQ before refusing");
    let table = clients
        .dynamodb
        .describe_table()
        .table_name(&names.ledger_table)
        .send()
        .await;
    assert!(table.is_err(), "setup created a table before refusing");
    let _ = clients.sqs.delete_queue().queue_url(&url).send().await;
}

#[tokio::test]
async fn setup_refuses_a_bucket_it_did_not_create_and_leaves_its_retention() {
    let clients = AwsClients::connect(Target::local_from_env()).await;
    let prefix = format!("dp-bucket-{}", std::process::id());
    let names = recon_aws::identity::derived_names(&clients, &prefix).await.unwrap();
    clients
        .s3
        .create_bucket()
        .bucket(&names.quarantine_bucket)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let e = ensure_stack(
        &clients,
        &names,
        &StackSettings {
            worm_retention_days: 30,
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        e.detail.contains(&format!(
            "bucket {} was not created by the local setup",
            names.quarantine_bucket
        )),
        "{e}"
    );
    // Not even a raise: the bucket keeps no default retention, as its owner left it.
    assert_eq!(
        recon_harness::provision::worm_retention(&clients, &names.bucket())
            .await
            .unwrap(),
        None
    );
    let main = clients.sqs.get_queue_url().queue_name(&names.main_queue).send().await;
    assert!(main.is_err(), "setup created a queue before refusing");
}

#[tokio::test]
async fn dlqctl_exits_0_when_well_1_when_a_check_fails_and_2_on_an_operational_error() {
    let s = TestStack::new("dp-exit").await;
    let prefix = s.stack.names.prefix.clone();
    let out = dlqctl(&["--prefix", &prefix, "--json", "stats"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(stats["ledger"]["postings"], 0);

    // A manifest naming a transaction that never arrived: the reconciliation runs and fails.
    let manifest = std::env::temp_dir().join(format!("{prefix}-manifest.jsonl"));
    std::fs::write(&manifest, recon_testkit::builders::tx(1).to_body().unwrap() + "\n").unwrap();
    let out = dlqctl(&[
        "--prefix",
        &prefix,
        "reconcile",
        "--manifest",
        manifest.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("MISSING"));

    // No such deployment: an operational error.
    let out = dlqctl(&["--prefix", "dp-nothing-here", "stats"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_file(&manifest);
    s.cleanup().await;
}

/// `dlqctl` is the control plane's client: on the local stack it asks the same handler, as the
/// operator `--as` names (a role assumed through the local STS); the control plane decides.
#[tokio::test]
async fn through_dlqctl_a_replay_above_the_policy_waits_for_another_person() {
    let s = TestStack::new("dp-approve").await;
    let prefix = s.stack.names.prefix.clone();
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let xau = |n: u32| recon_testkit::builders::tx_in(n, "XAU", "1.5").to_body().unwrap();
    s.send(&[xau(1), xau(2), xau(3)]).await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(10_000)).await;
    s.map_currency("XAU", 4).await;
    // dlqctl as the operator `who` (ROLE:PERSON; "" for the local stack's own identity, no role).
    let run = |who: &str, args: &[&str]| {
        let mut all = vec!["--prefix", prefix.as_str()];
        if !who.is_empty() {
            all.extend(["--as", who]);
        }
        all.extend_from_slice(args);
        let out = dlqctl(&all);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), out.stdout, text)
    };
    let policy = ["policy", "set", "--max-count", "1"];
    let (code, _, text) = run("", &policy);
    assert!(code == Some(2) && text.contains("holds no operator role"), "{text}");
    let (code, _, text) = run("maker:alice", &policy);
    assert!(code == Some(2) && text.contains("403"), "{text}");
    let (code, _, text) = run("admin:ada", &policy);
    assert_eq!(code, Some(0), "{text}");
    let replay = [
        "--json",
        "replay",
        "--root-cause",
        "UNMAPPED_CURRENCY:XAU",
        "--reason",
        "XAU mapped",
        "--yes",
    ];
    let (code, stdout, text) = run("maker:alice", &replay);
    assert_eq!(code, Some(0), "{text}");
    let request: serde_json::Value = serde_json::from_slice(&stdout).expect("--json prints the request");
    assert_eq!(request["request_status"], "PENDING_APPROVAL", "{text}");
    assert_eq!(request["exposure"]["count"], 3);
    let id = request["request_id"].as_str().unwrap().to_owned();
    assert!(
        s.main_queue().receive(10, 1, Some(1)).await.unwrap().is_empty(),
        "nothing re-injected"
    );

    // The requester's own approval, in whichever role: refused (409); a maker may not (403).
    let approve = ["--json", "approve", id.as_str(), "--yes", "--reason", "checked"];
    let (code, _, text) = run("approver:alice", &approve);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("409") && text.contains("self-approval refused"), "{text}");
    let (code, _, text) = run("maker:bob", &approve);
    assert!(code == Some(2) && text.contains("403"), "{text}");

    // Another person, as approver: approved and run.
    let (code, stdout, text) = run("approver:bob", &approve);
    assert_eq!(code, Some(0), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&stdout).expect("--json prints the report");
    assert_eq!(report["reinjected"], 3, "{text}");
    let (code, stdout, text) = run("", &["--json", "requests", "show", &id]);
    assert_eq!(code, Some(0), "{text}");
    let shown: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(shown["request_status"], "EXECUTED");
    assert!(
        shown["decision"]["by"]["arn"]
            .as_str()
            .is_some_and(|a| a.ends_with(&format!("assumed-role/{prefix}-approver/bob"))),
        "{shown}"
    );

    // An edit, as operators make it: proposed by one person, approved (and posted) by another.
    let typo = recon_testkit::builders::tx_in(9, "USX", "42.00").to_body().unwrap();
    s.send(&[typo]).await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(10_000)).await;
    let envelope = s
        .envelopes()
        .await
        .into_iter()
        .find(|e| e.message_id.as_deref() == Some("m-9"))
        .expect("the typo's envelope");
    let edit = |set: &str| {
        let id = envelope.envelope_id.as_str();
        ["--json", "edit", id, "--set", set, "--reason", "USX typed for USD"].map(str::to_owned)
    };
    let args = edit("currency=USD");
    let (code, stdout, text) = run("maker:alice", &args.each_ref().map(String::as_str));
    assert_eq!(code, Some(0), "{text}");
    let request: serde_json::Value = serde_json::from_slice(&stdout).expect("--json prints the request");
    assert_eq!(
        (request["action"].as_str(), request["request_status"].as_str()),
        (Some("EDIT"), Some("PENDING_APPROVAL"))
    );
    let id = request["request_id"].as_str().unwrap().to_owned();
    let (code, _, text) = run("", &["requests", "show", &id]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("currency: \"USX\" -> \"USD\""),
        "the diff is shown: {text}"
    );
    let args = edit("message_id=x");
    let (code, _, text) = run("maker:alice", &args.each_ref().map(String::as_str));
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("cannot be edited"), "{text}");
    let approve = [
        "--json",
        "approve",
        id.as_str(),
        "--yes",
        "--reason",
        "statement says USD",
    ];
    let (code, stdout, text) = run("approver:bob", &approve);
    assert_eq!(code, Some(0), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&stdout).expect("--json prints the report");
    assert_eq!(report["reinjected"], 1, "{text}");
    s.pump(&consumer).await;
    let posted: Vec<_> = s
        .postings()
        .await
        .into_iter()
        .filter(|p| p.message_id == "m-9")
        .collect();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].currency, "USD");
    s.cleanup().await;
}

/// A period is read through the period indexes only when the deployment says they hold what was
/// written before them: setup says so when it created the tables, `index-periods` when it is done;
/// without it (a deployment from before the indexes) `reconcile --period` refuses.
#[tokio::test]
async fn a_period_is_read_only_once_the_deployment_says_its_indexes_are_complete() {
    let s = TestStack::new("dp-periods").await;
    let prefix = s.stack.names.prefix.clone();
    let store = s.envelope_store();
    assert!(
        store.periods_indexed().await.unwrap(),
        "setup created the tables: marked"
    );
    let reconcile = || dlqctl(&["--prefix", &prefix, "reconcile", "--period", "2026-11"]);
    let out = reconcile();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    // A deployment from before the indexes: no marker.
    s.clients
        .dynamodb
        .delete_item()
        .table_name(&s.stack.names.envelope_table)
        .key(
            recon_core::resources::keys::ENVELOPE_PK,
            aws_sdk_dynamodb::types::AttributeValue::S(recon_core::resources::keys::ENVELOPE_PERIODS_MARKER.into()),
        )
        .send()
        .await
        .unwrap();
    let out = reconcile();
    assert_eq!(out.status.code(), Some(2), "refused as an operational error");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("run `dlqctl index-periods` once"), "{said}");
    let export = dlqctl(&[
        "--prefix",
        &prefix,
        "evidence",
        "export",
        "--period",
        "2026-11",
        "--out",
        "/dev/null",
    ]);
    assert_eq!(
        export.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    // Without a period everything is read: nothing to refuse.
    let out = dlqctl(&["--prefix", &prefix, "reconcile"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let out = dlqctl(&["--prefix", &prefix, "index-periods"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(store.periods_indexed().await.unwrap());
    let out = reconcile();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    s.cleanup().await;
}
