//! The deployment as the infrastructure template describes it: logical ids, the IAM grants of
//! each function's role, and the JSON the template check compares (`dlqctl infra-spec`). The
//! names and settings themselves come from [`recon_core::resources`].

use recon_core::config::SealPolicy;
use recon_core::decisions::DEFAULT_MAX_ATTEMPTS;
use recon_core::resources::{
    CONSUMER_TIMEOUT, DEFAULT_OVERFLOW_HIGH_WATER, DEFAULT_WORM_RETENTION_DAYS, DLQ_RETENTION, DLQ_VISIBILITY,
    ENRICHER_TIMEOUT, MAIN_QUEUE_RETENTION, MAIN_QUEUE_VISIBILITY, MAX_MESSAGE_BYTES, REPLAY_TIMEOUT, ResourceNames,
};

use crate::template::ids as template;

/// The stack's outputs `dlqctl --stack` reads: every name of the deployment. A deployed stack is
/// the source of truth for its names (no rule has to be recomputed, nor agree, outside it).
pub mod outputs {
    pub const STACK_PREFIX: &str = "StackPrefix";
    pub const MAIN_QUEUE_URL: &str = "MainQueueUrl";
    pub const DEAD_LETTER_QUEUE_URL: &str = "DeadLetterQueueUrl";
    pub const LEDGER_TABLE: &str = "LedgerTable";
    pub const ENVELOPE_TABLE: &str = "EnvelopeTable";
    pub const REFERENCE_TABLE: &str = "ReferenceTable";
    pub const AUDIT_TABLE: &str = "AuditTable";
    pub const DEDUP_TABLE: &str = "DedupTable";
    pub const QUARANTINE_BUCKET: &str = "QuarantineBucket";
    pub const QUARANTINE_BUCKET_OWNER: &str = "QuarantineBucketOwner";
    pub const SWEEP_SCHEDULE: &str = "SweepSchedule";
    pub const SEAL_SCHEDULE: &str = "SealSchedule";
    /// The ledger the deployment commits to, and where it is (each only on the deployments of
    /// its kind).
    pub const LEDGER_KIND: &str = "LedgerKind";
    pub const POSTGRES_URL: &str = "PostgresUrl";
    pub const POSTGRES_SECRET_ARN: &str = "PostgresSecretArn";
    pub const HTTP_LEDGER_URL: &str = "HttpLedgerUrl";
    pub const HTTP_LEDGER_SECRET_ARN: &str = "HttpLedgerSecretArn";
}

/// A deployment as its stack's outputs name it: the names, the queues' URLs, and the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployed {
    pub names: ResourceNames,
    pub main_queue_url: String,
    pub dlq_url: String,
    /// The ledger's variables as the stack gives them to its functions (`DLQ_LEDGER` and, on
    /// the kinds that have them, its URL, secret and dedup table).
    pub ledger: Vec<(&'static str, String)>,
}

/// Read a deployment from its stack's outputs (`output` looks one up by key). Every output is
/// checked with the rule the functions apply to the same value; the error names the output.
pub fn from_outputs(output: impl Fn(&str) -> Option<String>) -> Result<Deployed, String> {
    use recon_core::config::{Rule, vars};
    let get = |key: &str, rule: Rule| -> Result<String, String> {
        match output(key) {
            None => Err(format!(
                "the stack has no output {key}: deploy this version's template (make deploy)"
            )),
            Some(v) if rule.admits(&v) => Ok(v),
            Some(v) => Err(format!("the stack's output {key}={v:?} is not {}", rule.allowed())),
        }
    };
    let queue_name = |url: &str| url.rsplit('/').next().unwrap_or_default().to_owned();
    let main_queue_url = get(outputs::MAIN_QUEUE_URL, Rule::QueueUrl)?;
    let dlq_url = get(outputs::DEAD_LETTER_QUEUE_URL, Rule::QueueUrl)?;
    let names = ResourceNames {
        prefix: get(outputs::STACK_PREFIX, Rule::Prefix)?,
        main_queue: queue_name(&main_queue_url),
        dead_letter_queue: queue_name(&dlq_url),
        ledger_table: get(outputs::LEDGER_TABLE, Rule::TableName)?,
        envelope_table: get(outputs::ENVELOPE_TABLE, Rule::TableName)?,
        reference_table: get(outputs::REFERENCE_TABLE, Rule::TableName)?,
        audit_table: get(outputs::AUDIT_TABLE, Rule::TableName)?,
        // Only a deployment with the reservation protocol (an HTTP ledger) has a dedup table; otherwise
        // the name it would have, which nothing uses.
        dedup_table: match output(outputs::DEDUP_TABLE) {
            Some(_) => get(outputs::DEDUP_TABLE, Rule::TableName)?,
            None => {
                ResourceNames::derive(&get(outputs::STACK_PREFIX, Rule::Prefix)?, "000000000000", "none").dedup_table
            }
        },
        quarantine_bucket: get(outputs::QUARANTINE_BUCKET, Rule::BucketName)?,
        account: get(outputs::QUARANTINE_BUCKET_OWNER, Rule::AccountId)?,
        sweep_schedule: get(outputs::SWEEP_SCHEDULE, Rule::ScheduleName)?,
        seal_schedule: get(outputs::SEAL_SCHEDULE, Rule::ScheduleName)?,
    };
    let mut ledger = vec![(
        recon_core::config::vars::LEDGER,
        get(
            outputs::LEDGER_KIND,
            Rule::OneOf(&recon_core::config::LedgerSettings::KINDS),
        )?,
    )];
    for (key, var, rule) in [
        (outputs::POSTGRES_URL, vars::POSTGRES_URL, Rule::PostgresUrl),
        (outputs::POSTGRES_SECRET_ARN, vars::POSTGRES_SECRET_ARN, Rule::SecretArn),
        (outputs::HTTP_LEDGER_URL, vars::HTTP_LEDGER_URL, Rule::HttpUrl),
        (
            outputs::HTTP_LEDGER_SECRET_ARN,
            vars::HTTP_LEDGER_SECRET_ARN,
            Rule::SecretArn,
        ),
        (outputs::DEDUP_TABLE, vars::DEDUP_TABLE, Rule::TableName),
    ] {
        if output(key).is_some() {
            ledger.push((var, get(key, rule)?));
        }
    }
    Ok(Deployed {
        names,
        main_queue_url,
        dlq_url,
        ledger,
    })
}

/// A CloudFormation client for the clients' target (LocalStack's, locally).
pub async fn cloudformation(clients: &crate::AwsClients) -> aws_sdk_cloudformation::Client {
    let shared = crate::client::shared_config(&clients.target, crate::ClientTimeouts::INTERACTIVE).await;
    let mut cfn = aws_sdk_cloudformation::config::Builder::from(&shared);
    if let crate::Target::Local { edge_url, .. } = &clients.target {
        cfn = cfn.endpoint_url(edge_url);
    }
    aws_sdk_cloudformation::Client::from_conf(cfn.build())
}

/// Read a deployed CloudFormation stack's outputs (`cloudformation:DescribeStacks`).
pub async fn read_stack(clients: &crate::AwsClients, stack: &str) -> Result<Deployed, String> {
    let out = cloudformation(clients)
        .await
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .map_err(|e| {
            format!(
                "cannot read stack {stack} (cloudformation:DescribeStacks): {}",
                aws_sdk_cloudformation::error::DisplayErrorContext(e)
            )
        })?;
    let Some(found) = out.stacks().first() else {
        return Err(format!("stack {stack} does not exist in this account and region"));
    };
    let outputs: std::collections::HashMap<&str, &str> = found
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?, o.output_value()?)))
        .collect();
    from_outputs(|k| outputs.get(k).map(|v| (*v).to_owned())).map_err(|e| format!("stack {stack}: {e}"))
}

/// How the template must spell each name-valued variable and output: a reference to the
/// resource (or pseudo parameter), or the `!Sub` text of a name it cannot reference (a schedule
/// targets the replay function, so the function cannot reference the schedule).
fn template_value(var: &str) -> serde_json::Value {
    use recon_core::config::vars;
    use recon_core::resources::TableKind;
    let spelled = ResourceNames::as_template_spells_them();
    let r = |logical: &str| serde_json::json!({ "Ref": logical });
    match var {
        vars::STACK_PREFIX => r("StackPrefix"),
        vars::MAIN_QUEUE_URL => r(template::MAIN_QUEUE),
        vars::DEAD_LETTER_QUEUE_URL => r(template::DEAD_LETTER_QUEUE),
        vars::LEDGER_TABLE => r(template::table(TableKind::Ledger)),
        vars::ENVELOPE_TABLE => r(template::table(TableKind::Envelopes)),
        vars::REFERENCE_TABLE => r(template::table(TableKind::Reference)),
        vars::AUDIT_TABLE => r(template::table(TableKind::Audit)),
        vars::QUARANTINE_BUCKET => r(template::QUARANTINE_BUCKET),
        vars::QUARANTINE_BUCKET_OWNER => r("AWS::AccountId"),
        vars::SWEEP_SCHEDULE => serde_json::json!({ "Fn::Sub": spelled.sweep_schedule }),
        vars::SEAL_SCHEDULE => serde_json::json!({ "Fn::Sub": spelled.seal_schedule }),
        other => serde_json::json!({ "unknown": other }),
    }
}

/// Every output the CLI reads, with the value the template must give it.
fn outputs_spec() -> serde_json::Map<String, serde_json::Value> {
    use recon_core::config::vars;
    use recon_core::resources::TableKind;
    let r = |logical: &str| serde_json::json!({ "Ref": logical });
    [
        (outputs::STACK_PREFIX, template_value(vars::STACK_PREFIX)),
        (outputs::MAIN_QUEUE_URL, template_value(vars::MAIN_QUEUE_URL)),
        (
            outputs::DEAD_LETTER_QUEUE_URL,
            template_value(vars::DEAD_LETTER_QUEUE_URL),
        ),
        (outputs::LEDGER_TABLE, template_value(vars::LEDGER_TABLE)),
        (outputs::ENVELOPE_TABLE, template_value(vars::ENVELOPE_TABLE)),
        (outputs::REFERENCE_TABLE, template_value(vars::REFERENCE_TABLE)),
        (outputs::AUDIT_TABLE, template_value(vars::AUDIT_TABLE)),
        (outputs::DEDUP_TABLE, r(template::table(TableKind::Dedup))),
        (outputs::QUARANTINE_BUCKET, template_value(vars::QUARANTINE_BUCKET)),
        (
            outputs::QUARANTINE_BUCKET_OWNER,
            template_value(vars::QUARANTINE_BUCKET_OWNER),
        ),
        (outputs::SWEEP_SCHEDULE, template_value(vars::SWEEP_SCHEDULE)),
        (outputs::SEAL_SCHEDULE, template_value(vars::SEAL_SCHEDULE)),
        (outputs::LEDGER_KIND, r("LedgerKind")),
        (outputs::POSTGRES_URL, r("PostgresUrl")),
        (outputs::POSTGRES_SECRET_ARN, r("PostgresSecretArn")),
        (outputs::HTTP_LEDGER_URL, r("HttpLedgerUrl")),
        (outputs::HTTP_LEDGER_SECRET_ARN, r("HttpLedgerSecretArn")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The four functions as `make deploy-code` updates them: the binary, the function's logical id,
/// its timeout and memory size, and the outputs naming the deployed function and its role (the
/// stack is the source of truth).
fn functions_spec() -> Vec<serde_json::Value> {
    use recon_core::resources as r;
    [
        (
            "consumer",
            template::CONSUMER_FUNCTION,
            "ConsumerRole",
            CONSUMER_TIMEOUT,
            r::CONSUMER_MEMORY_MB,
        ),
        (
            "enricher",
            template::ENRICHER_FUNCTION,
            "EnricherRole",
            ENRICHER_TIMEOUT,
            r::ENRICHER_MEMORY_MB,
        ),
        (
            "replay",
            template::REPLAY_FUNCTION,
            "ReplayRole",
            REPLAY_TIMEOUT,
            r::REPLAY_MEMORY_MB,
        ),
        (
            "reference-audit",
            template::REFERENCE_AUDIT_FUNCTION,
            "ReferenceAuditRole",
            r::REFERENCE_AUDIT_TIMEOUT,
            r::REFERENCE_AUDIT_MEMORY_MB,
        ),
    ]
    .into_iter()
    .map(|(binary, function, role, timeout, memory_mb)| {
        serde_json::json!({
            "binary": binary,
            "logical_id": function,
            "timeout_secs": timeout.as_secs(),
            "memory_mb": memory_mb,
            "function_output": function,
            "role_output": role,
            "outputs": {
                function: { "Ref": function },
                role: { "Fn::GetAtt": [role, "Arn"] },
            },
        })
    })
    .collect()
}

/// Each function's name-valued variables, as the template must set them.
fn function_env_spec() -> serde_json::Map<String, serde_json::Value> {
    use recon_core::config::needs;
    [
        (template::CONSUMER_FUNCTION, needs::CONSUMER),
        (template::ENRICHER_FUNCTION, needs::ENRICHER),
        (template::REPLAY_FUNCTION, needs::REPLAY),
        (template::REFERENCE_AUDIT_FUNCTION, needs::REFERENCE_AUDIT),
    ]
    .into_iter()
    .map(|(function, vars)| {
        let mut env: serde_json::Map<String, serde_json::Value> =
            vars.iter().map(|v| ((*v).to_owned(), template_value(v))).collect();
        if function == template::CONSUMER_FUNCTION || function == template::REPLAY_FUNCTION {
            env.extend(ledger_env_spec());
        }
        (function.to_owned(), serde_json::Value::Object(env))
    })
    .collect()
}

/// The ledger's variables, as the template gives them to the consumer and the replay (one choice
/// for both): the kind always, the PostgreSQL settings only on a PostgreSQL deployment.
fn ledger_env_spec() -> serde_json::Map<String, serde_json::Value> {
    use recon_core::config::vars;
    let when = |condition: &str, parameter: &str| serde_json::json!({"Fn::If": [condition, {"Ref": parameter}, {"Ref": "AWS::NoValue"}]});
    [
        (vars::LEDGER, serde_json::json!({"Ref": "LedgerKind"})),
        (vars::POSTGRES_URL, when("UsePostgres", "PostgresUrl")),
        (
            vars::POSTGRES_SECRET_ARN,
            when("HasPostgresSecret", "PostgresSecretArn"),
        ),
        (vars::HTTP_LEDGER_URL, when("UseReservationProtocol", "HttpLedgerUrl")),
        (
            vars::HTTP_LEDGER_SECRET_ARN,
            when("HasHttpSecret", "HttpLedgerSecretArn"),
        ),
        (vars::DEDUP_TABLE, when("UseReservationProtocol", "DedupTable")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

pub mod iam;

/// Everything the template check compares, as JSON (`dlqctl infra-spec`).
pub fn spec_json() -> serde_json::Value {
    let names = ResourceNames::as_template_spells_them();
    serde_json::json!({
        "max_receive_count": DEFAULT_MAX_ATTEMPTS,
        "consumer_timeout_secs": CONSUMER_TIMEOUT.as_secs(),
        "enricher_timeout_secs": ENRICHER_TIMEOUT.as_secs(),
        "replay_timeout_secs": REPLAY_TIMEOUT.as_secs(),
        "reference_audit_timeout_secs": recon_core::resources::REFERENCE_AUDIT_TIMEOUT.as_secs(),
        "functions": functions_spec(),
        "main_queue": {
            "logical_id": template::MAIN_QUEUE,
            "name": names.main_queue,
            "fifo_name": names.clone().with_fifo_queues().main_queue,
            "visibility_timeout_secs": MAIN_QUEUE_VISIBILITY.as_secs(),
            "retention_secs": MAIN_QUEUE_RETENTION.as_secs(),
            "max_message_bytes": MAX_MESSAGE_BYTES,
        },
        "dead_letter_queue": {
            "logical_id": template::DEAD_LETTER_QUEUE,
            "name": names.dead_letter_queue,
            "fifo_name": names.clone().with_fifo_queues().dead_letter_queue,
            "visibility_timeout_secs": DLQ_VISIBILITY.as_secs(),
            "retention_secs": DLQ_RETENTION.as_secs(),
            "max_message_bytes": MAX_MESSAGE_BYTES,
        },
        "worm": {
            "logical_id": template::QUARANTINE_BUCKET,
            "name": names.quarantine_bucket,
            "mode": "COMPLIANCE",
            "default_retention_days": DEFAULT_WORM_RETENTION_DAYS,
        },
        "overflow_high_water": DEFAULT_OVERFLOW_HIGH_WATER,
        "metrics_namespace": recon_core::resources::DEFAULT_METRICS_NAMESPACE,
        "sweep_schedule": {
            "logical_id": template::REPLAY_SCHEDULE,
            "name": names.sweep_schedule,
        },
        "seal_schedule": {
            "logical_id": template::SEAL_SCHEDULE,
            "name": names.seal_schedule,
            "every_minutes_default": SealPolicy::default().every_minutes,
            "every_records_default": SealPolicy::default().every_records,
        },
        "outputs": outputs_spec(),
        "function_env": function_env_spec(),
        "ledger_kinds": recon_core::config::LedgerSettings::KINDS,
        // The condition each ledger kind's grants stand under (deployment/iam.rs), and the kind
        // it must mean.
        "ledger_conditions": {"UseDynamoLedger": "dynamodb", "UsePostgres": "postgres", "UseReservationProtocol": "http"},
        "max_prefix_len": recon_core::config::MAX_PREFIX_LEN,
        "variables": recon_core::config::VARIABLES.iter().map(|v| v.name).collect::<Vec<_>>(),
        "whole_ranges": recon_core::config::VARIABLES
            .iter()
            .filter_map(|v| match v.rule {
                recon_core::config::Rule::Whole { min, max, .. } => Some((v.name.to_owned(), serde_json::json!([min, max]))),
                _ => None,
            })
            .collect::<serde_json::Map<_, _>>(),
        "iam": iam::ROLES.iter().map(|(role, grants)| (role.to_string(), serde_json::json!(grants))).collect::<serde_json::Map<_, _>>(),
    })
}

#[cfg(test)]
mod tests {
    /// A stack without the reservation protocol has no dedup table and no such output: its names
    /// still read (the dedup table's is the one it would have, which nothing uses).
    #[test]
    fn a_stack_without_a_dedup_table_reads() {
        use super::outputs;
        let names = recon_core::resources::ResourceNames::derive("acme", "123456789012", "eu-west-1");
        let url = |q: &str| format!("https://sqs.eu-west-1.amazonaws.com/123456789012/{q}");
        let all = [
            (outputs::STACK_PREFIX, names.prefix.clone()),
            (outputs::MAIN_QUEUE_URL, url(&names.main_queue)),
            (outputs::DEAD_LETTER_QUEUE_URL, url(&names.dead_letter_queue)),
            (outputs::LEDGER_TABLE, names.ledger_table.clone()),
            (outputs::ENVELOPE_TABLE, names.envelope_table.clone()),
            (outputs::REFERENCE_TABLE, names.reference_table.clone()),
            (outputs::AUDIT_TABLE, names.audit_table.clone()),
            (outputs::QUARANTINE_BUCKET, names.quarantine_bucket.clone()),
            (outputs::QUARANTINE_BUCKET_OWNER, names.account.clone()),
            (outputs::SWEEP_SCHEDULE, names.sweep_schedule.clone()),
            (outputs::SEAL_SCHEDULE, names.seal_schedule.clone()),
            (outputs::LEDGER_KIND, "dynamodb".into()),
        ];
        let read = super::from_outputs(|k| all.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
        assert_eq!(read.names, names);
        assert_eq!(read.ledger, [(recon_core::config::vars::LEDGER, "dynamodb".to_owned())]);
        let without_audit = super::from_outputs(|k| {
            all.iter()
                .find(|(n, _)| *n == k && *n != outputs::AUDIT_TABLE)
                .map(|(_, v)| v.clone())
        });
        assert!(without_audit.is_err(), "every other output is required");
    }

    #[test]
    fn the_head_keys_the_roles_are_limited_to_are_the_audit_tables_heads() {
        let pattern = super::iam::HEAD_KEYS;
        assert_eq!(pattern, format!("{}*", recon_core::resources::keys::AUDIT_HEAD_PREFIX));
        // The pointers the roles put are not heads.
        assert!(!"#trail#id".starts_with(recon_core::resources::keys::AUDIT_HEAD_PREFIX));
        assert!(!"#config#consumer".starts_with(recon_core::resources::keys::AUDIT_HEAD_PREFIX));
    }
}
