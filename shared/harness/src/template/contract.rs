//! The code's side of the template, checked on the template as CloudFormation resolves it: each
//! function is given the variables its configuration parser needs, naming the deployment's own
//! resources; every parameter feeding a whole-number variable allows only values the function
//! accepts; the outputs `dlqctl --stack` reads name the same resources; the timeouts are the ones
//! the functions budget for. The resources themselves need no such check: the local stack is
//! built from the template.

use crate::template::{BUCKET, Created, Deployment, QUEUE, TABLE, Template, ids};
use recon_aws::deployment::from_outputs;
use recon_core::config::{
    self, ConsumerSettings, ControlSettings, EnricherSettings, LedgerSettings, MAX_PREFIX_LEN, ReferenceAuditSettings,
    ReplaySettings, Rule, needs, vars,
};
use recon_core::resources as r;
use serde_json::Value;
use serde_json::json;
use std::collections::BTreeMap;

const ACCOUNT: &str = "123456789012";
const REGION: &str = "ap-southeast-3";

/// A CA file a PostgreSQL deployment names (from a layer of its own).
const CA_FILE: &str = "/opt/certs/ledger-ca.pem";

/// The parameters a deployment on each ledger kind needs (the template's rules require them).
fn ledger_parameters(kind: &str) -> Vec<(&'static str, Value)> {
    let mut p = vec![("StackPrefix", json!("acme-finance")), ("LedgerKind", json!(kind))];
    match kind {
        "postgres" => p.extend([
            ("PostgresUrl", json!("postgres://ledger@db.internal:5432/gl")),
            (
                "PostgresSecretArn",
                json!("arn:aws:secretsmanager:ap-southeast-3:123456789012:secret:gl-AbCdEf"),
            ),
            ("PostgresCaFile", json!(CA_FILE)),
            (
                "PostgresCaLayerArn",
                json!("arn:aws:lambda:ap-southeast-3:123456789012:layer:ledger-ca:3"),
            ),
        ]),
        "http" => p.extend([
            ("HttpLedgerUrl", json!("https://gl.example.com/api")),
            (
                "HttpLedgerSecretArn",
                json!("arn:aws:secretsmanager:ap-southeast-3:123456789012:secret:token-AbCdEf"),
            ),
        ]),
        _ => {}
    }
    p
}

/// The unique id IAM would give role `id` (what SQS names its sessions' messages by).
fn role_id(id: &str) -> String {
    format!("AROA{}", id.to_ascii_uppercase())
}

/// A deployment with its queues, tables, bucket and roles created as CloudFormation names them.
fn deployed(given: &[(&str, Value)]) -> Deployment<'static> {
    let mut d = Template::ours().unwrap().deploy(ACCOUNT, REGION, given).unwrap();
    for id in d.resources_of(&["AWS::IAM::Role"]).unwrap() {
        let attributes = [("RoleId".to_owned(), role_id(&id))].into();
        d.created(
            &id,
            Created {
                reference: id.clone(),
                attributes,
            },
        );
    }
    for id in d.resources_of(&[QUEUE, TABLE, BUCKET]).unwrap() {
        let created = match d.template().resource_type(&id).unwrap() {
            QUEUE => {
                let name = d.text(&id, "QueueName").unwrap();
                Created {
                    reference: format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"),
                    attributes: [("Arn".to_owned(), format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"))].into(),
                }
            }
            TABLE => Created {
                reference: d.text(&id, "TableName").unwrap(),
                attributes: Default::default(),
            },
            _ => Created {
                reference: d.text(&id, "BucketName").unwrap(),
                attributes: Default::default(),
            },
        };
        d.created(&id, created);
    }
    d
}

/// The functions, the variables each one's code needs, and whether it commits to the ledger.
const FUNCTIONS: [(&str, &[&str], bool); 5] = [
    (ids::CONSUMER_FUNCTION, needs::CONSUMER, true),
    (ids::ENRICHER_FUNCTION, needs::ENRICHER, false),
    (ids::REPLAY_FUNCTION, needs::REPLAY, true),
    (ids::REFERENCE_AUDIT_FUNCTION, needs::REFERENCE_AUDIT, false),
    (ids::CONTROL_FUNCTION, needs::CONTROL, true),
];

/// The function's settings as its code parses them from `env`: the ledger, for those that commit.
fn parses(function: &str, env: &BTreeMap<String, String>) -> Result<Option<LedgerSettings>, config::ConfigError> {
    let get = |k: &str| env.get(k).cloned();
    match function {
        ids::CONSUMER_FUNCTION => ConsumerSettings::from_lookup(get).map(|s| Some(s.ledger)),
        ids::ENRICHER_FUNCTION => EnricherSettings::from_lookup(get).map(|_| None),
        ids::REPLAY_FUNCTION => ReplaySettings::from_lookup(get).map(|s| Some(s.ledger)),
        ids::CONTROL_FUNCTION => ControlSettings::from_lookup(get).map(|s| Some(s.replay.ledger)),
        _ => ReferenceAuditSettings::from_lookup(get).map(|_| None),
    }
}

#[test]
fn each_function_starts_with_the_template_s_environment_and_names_the_deployment_s_resources() {
    for kind in LedgerSettings::KINDS {
        let d = deployed(&ledger_parameters(kind));
        let names = d.names().unwrap();
        let url = |id: &str| d.reference_of(id).unwrap().to_owned();
        let wanted = config::environment(
            &names,
            &url(ids::MAIN_QUEUE),
            &url(ids::DEAD_LETTER_QUEUE),
            &url(ids::PARKING_QUEUE),
        );
        // On AWS a sender is its role's session (the local stack's are all the account's).
        let senders = [
            (vars::CONSUMER_SENDERS, format!("{}:", role_id("ConsumerRole"))),
            (
                vars::REPLAY_SENDERS,
                format!("{}:,{}:", role_id("ReplayRole"), role_id("ControlRole")),
            ),
        ];
        for (function, needed, commits) in FUNCTIONS {
            let env = d.function_environment(function).unwrap();
            for var in needed {
                let want = senders
                    .iter()
                    .chain(wanted.iter())
                    .find(|(k, _)| k == var)
                    .map(|(_, v)| v);
                assert_eq!(env.get(*var), want, "{kind}: {function} {var}");
            }
            let ledger = parses(function, &env).unwrap_or_else(|e| panic!("{kind}: {function} would not start: {e}"));
            if commits {
                assert_eq!(ledger.map(|l| l.kind()), Some(kind), "{function}");
                if kind == "http" {
                    assert_eq!(env.get(vars::DEDUP_TABLE), Some(&names.dedup_table), "{function}");
                }
                let ca_file = (kind == "postgres").then_some(CA_FILE);
                assert_eq!(
                    env.get(vars::POSTGRES_CA_FILE).map(String::as_str),
                    ca_file,
                    "{function}"
                );
            } else {
                assert!(
                    !env.contains_key(vars::LEDGER),
                    "{function} is given a ledger it never uses"
                );
            }
            assert!(
                !env.contains_key("RUST_LOG"),
                "{function}: RUST_LOG overrides the LogLevel parameter"
            );
        }
    }
}

#[test]
fn a_parameter_feeding_a_whole_number_variable_allows_only_values_the_functions_accept() {
    let template = Template::ours().unwrap();
    let mut checked = 0;
    for (function, ..) in FUNCTIONS {
        let declared = template.declaration(function).unwrap();
        let globals = template.raw("/Globals/Function/Environment/Variables");
        let own = declared.pointer("/Properties/Environment/Variables");
        for (var, value) in [globals, own]
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .flatten()
        {
            let (Some(parameter), Some(variable)) = (value.get("Ref").and_then(Value::as_str), config::variable(var))
            else {
                continue;
            };
            let Rule::Whole { .. } = variable.rule else { continue };
            let declaration = template.parameter_declaration(parameter).unwrap();
            for bound in ["MinValue", "MaxValue"] {
                let limit = declaration
                    .get(bound)
                    .unwrap_or_else(|| panic!("parameter {parameter} (for {var}) has no {bound}"));
                let at_limit = template.deploy(ACCOUNT, REGION, &[(parameter, limit.clone())]).unwrap();
                let text = at_limit.parameter(parameter).unwrap();
                assert!(
                    variable.rule.admits(&text),
                    "{parameter}={text} is refused as {var}: {}",
                    variable.rule.allowed()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 8, "only {checked} bounds checked");
}

#[test]
fn the_outputs_dlqctl_reads_name_the_deployment_s_resources() {
    for kind in LedgerSettings::KINDS {
        let d = deployed(&ledger_parameters(kind));
        let read = from_outputs(|key| d.output(key).unwrap()).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let mut names = d.names().unwrap();
        if kind != "http" {
            // No dedup table: the name it would have, which nothing uses.
            names.dedup_table = read.names.dedup_table.clone();
        }
        assert_eq!(read.names, names, "{kind}");
        assert_eq!(read.main_queue_url, d.reference_of(ids::MAIN_QUEUE).unwrap());
        assert_eq!(read.dlq_url, d.reference_of(ids::DEAD_LETTER_QUEUE).unwrap());
        // The ledger as the stack gives it to the functions that commit.
        let env = d.function_environment(ids::REPLAY_FUNCTION).unwrap();
        for (var, value) in &read.ledger {
            assert_eq!(env.get(*var), Some(value), "{kind}: output for {var}");
        }
    }
}

#[test]
fn each_function_s_timeout_is_the_one_its_code_budgets_for() {
    let template = Template::ours().unwrap();
    for (function, timeout) in [
        (ids::CONSUMER_FUNCTION, r::CONSUMER_TIMEOUT),
        (ids::ENRICHER_FUNCTION, r::ENRICHER_TIMEOUT),
        (ids::REPLAY_FUNCTION, r::REPLAY_TIMEOUT),
        (ids::REFERENCE_AUDIT_FUNCTION, r::REFERENCE_AUDIT_TIMEOUT),
        (ids::CONTROL_FUNCTION, r::CONTROL_TIMEOUT),
    ] {
        let declared = template.declaration(function).unwrap().pointer("/Properties/Timeout");
        assert_eq!(declared.and_then(Value::as_u64), Some(timeout.as_secs()), "{function}");
    }
}

#[test]
fn each_schedule_s_event_names_the_schedule_the_replay_accepts() {
    let d = deployed(&[]);
    let names = d.names().unwrap();
    for (id, name) in [
        (ids::REPLAY_SCHEDULE, &names.sweep_schedule),
        (ids::SEAL_SCHEDULE, &names.seal_schedule),
    ] {
        let target = d
            .template()
            .declaration(id)
            .unwrap()
            .pointer("/Properties/Target/Input")
            .unwrap();
        let input = d.resolve(target, id).unwrap();
        let input = input.as_ref().and_then(Value::as_str).unwrap();
        let event: Value = serde_json::from_str(input).unwrap();
        assert_eq!(event["resources"], json!([name]), "{id}");
    }
}

#[test]
fn the_template_s_defaults_are_the_code_s() {
    let d = deployed(&[]);
    let seal = config::SealPolicy::default();
    for (parameter, code) in [
        (
            "MaxReceiveCount",
            recon_core::decisions::DEFAULT_MAX_ATTEMPTS.to_string(),
        ),
        ("SealEveryMinutes", seal.every_minutes.to_string()),
        ("SealEveryRecords", seal.every_records.to_string()),
        ("OverflowHighWater", r::DEFAULT_OVERFLOW_HIGH_WATER.to_string()),
        ("LedgerKind", LedgerSettings::KINDS[0].to_owned()),
    ] {
        assert_eq!(d.parameter(parameter).unwrap(), code, "{parameter}");
    }
    let template = Template::ours().unwrap();
    let kinds = template
        .parameter_declaration("LedgerKind")
        .and_then(|p| p.get("AllowedValues"));
    assert_eq!(kinds, Some(&json!(LedgerSettings::KINDS)));
    // The longest prefix the template allows still names a bucket S3 takes, in every region.
    let pattern = template
        .parameter_declaration("StackPrefix")
        .and_then(|p| p.get("AllowedPattern"));
    assert_eq!(
        pattern,
        Some(&json!(format!("^[a-z][a-z0-9-]{{2,{}}}$", MAX_PREFIX_LEN - 1)))
    );
    // (REGION is as long as the longest region's name.)
    let longest = deployed(&[("StackPrefix", json!("a".repeat(MAX_PREFIX_LEN)))]);
    let bucket = longest.names().unwrap().quarantine_bucket;
    assert!(bucket.len() <= 63, "{bucket}");
}

const ALARM: &str = "AWS::CloudWatch::Alarm";

/// Every alarm the template has, by its name without the stack's prefix (on every ledger kind).
fn alarm_names() -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for kind in LedgerSettings::KINDS {
        let d = deployed(&ledger_parameters(kind));
        let prefix = format!("{}-", d.parameter("StackPrefix").unwrap());
        for id in d.resources_of(&[ALARM]).unwrap() {
            let name = d.text(&id, "AlarmName").unwrap();
            names.insert(name.strip_prefix(&prefix).unwrap_or(&name).to_owned());
        }
    }
    names
}

#[test]
fn every_alarm_has_its_runbook_entry_and_every_entry_its_alarm() {
    let runbook = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/RUNBOOK.md")).unwrap();
    let table = runbook
        .split("\n## Every alarm\n")
        .nth(1)
        .expect("docs/RUNBOOK.md has an \"Every alarm\" section");
    let entries: std::collections::BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(entries, alarm_names());
}

#[test]
fn the_heartbeat_alarms_watch_the_code_s_heartbeats_and_page_when_they_stop() {
    use recon_core::replay::{SEAL_WRITTEN, SWEEP_COMPLETED};
    let d = deployed(&[]);
    let mut watched = std::collections::BTreeSet::new();
    for id in d.resources_of(&[ALARM]).unwrap() {
        if d.text(&id, "TreatMissingData").ok().as_deref() == Some("breaching") {
            assert_eq!(d.text(&id, "Namespace").unwrap(), r::DEFAULT_METRICS_NAMESPACE, "{id}");
            watched.insert(d.text(&id, "MetricName").unwrap());
        }
    }
    let heartbeats: std::collections::BTreeSet<String> = [SWEEP_COMPLETED, SEAL_WRITTEN]
        .iter()
        .map(|m| (*m).to_owned())
        .collect();
    assert_eq!(watched, heartbeats);
}
