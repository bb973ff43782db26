//! A deployed stack as `dlqctl --stack` reads it (its outputs), and what the code needs of the
//! template as JSON for the Python tools (`dlqctl infra-spec`). The resources themselves are the template's.

use recon_core::resources::ResourceNames;

/// The template's logical ids of the resources the code names.
pub mod ids {
    use recon_core::resources::TableKind;

    pub const MAIN_QUEUE: &str = "MainQueue";
    pub const DEAD_LETTER_QUEUE: &str = "DeadLetterQueue";
    pub const PARKING_QUEUE: &str = "ParkingQueue";
    pub const QUARANTINE_BUCKET: &str = "QuarantineBucket";
    pub const CONSUMER_FUNCTION: &str = "ConsumerFunction";
    pub const ENRICHER_FUNCTION: &str = "EnricherFunction";
    pub const REPLAY_FUNCTION: &str = "ReplayFunction";
    pub const REFERENCE_AUDIT_FUNCTION: &str = "ReferenceAuditFunction";
    pub const CONTROL_FUNCTION: &str = "ControlFunction";
    pub const REPLAY_SCHEDULE: &str = "ReplaySchedule";
    pub const SEAL_SCHEDULE: &str = "AuditSealSchedule";

    pub fn table(kind: TableKind) -> &'static str {
        match kind {
            TableKind::Ledger => "LedgerTable",
            TableKind::Envelopes => "EnvelopeTable",
            TableKind::Reference => "ReferenceTable",
            TableKind::Audit => "AuditTable",
            TableKind::Dedup => "DedupTable",
        }
    }
}

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
    /// Where operators ask the control plane (`dlqctl` on AWS).
    pub const CONTROL_API_URL: &str = "ControlApiUrl";
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
        // The template names it after the DLQ's prefix (and FIFO-ness).
        parking_queue: queue_name(&dlq_url).replacen("-dead-letter", "-parked", 1),
        ledger_table: get(outputs::LEDGER_TABLE, Rule::TableName)?,
        envelope_table: get(outputs::ENVELOPE_TABLE, Rule::TableName)?,
        reference_table: get(outputs::REFERENCE_TABLE, Rule::TableName)?,
        audit_table: get(outputs::AUDIT_TABLE, Rule::TableName)?,
        // Only a deployment with the reservation protocol (an HTTP ledger) has a dedup table; otherwise
        // the name it would have, which nothing uses.
        dedup_table: match output(outputs::DEDUP_TABLE) {
            Some(_) => get(outputs::DEDUP_TABLE, Rule::TableName)?,
            None => {
                let prefix = get(outputs::STACK_PREFIX, Rule::Prefix)?;
                ResourceNames::derive(&prefix, "000000000000", "none").dedup_table
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

/// The control plane's URL, from stack `stack`'s `ControlApiUrl` output (HTTPS on AWS).
pub async fn control_api_url(clients: &crate::AwsClients, stack: &str) -> Result<String, String> {
    let outputs = stack_outputs(clients, stack).await?;
    match outputs.get(outputs::CONTROL_API_URL) {
        Some(url) if url.starts_with("https://") => Ok(url.clone()),
        Some(url) => Err(format!(
            "stack {stack}: the output {} is {url:?}, not an HTTPS URL",
            outputs::CONTROL_API_URL
        )),
        None => Err(format!(
            "stack {stack} has no output {}: deploy this version's template (make deploy)",
            outputs::CONTROL_API_URL
        )),
    }
}

/// A deployed CloudFormation stack's outputs (`cloudformation:DescribeStacks`).
async fn stack_outputs(
    clients: &crate::AwsClients,
    stack: &str,
) -> Result<std::collections::HashMap<String, String>, String> {
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
    Ok(found
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
        .collect())
}

/// Read a deployed CloudFormation stack's outputs as a deployment.
pub async fn read_stack(clients: &crate::AwsClients, stack: &str) -> Result<Deployed, String> {
    let outputs = stack_outputs(clients, stack).await?;
    from_outputs(|k| outputs.get(k).cloned()).map_err(|e| format!("stack {stack}: {e}"))
}

/// The five functions as `make deploy-code` updates them: the binary, the function's logical id,
/// and the outputs naming the deployed function and its role (the stack is the source of truth;
/// the timeout and memory size are the template's).
fn functions_spec() -> Vec<serde_json::Value> {
    [
        ("consumer", ids::CONSUMER_FUNCTION, "ConsumerRole"),
        ("enricher", ids::ENRICHER_FUNCTION, "EnricherRole"),
        ("replay", ids::REPLAY_FUNCTION, "ReplayRole"),
        ("reference-audit", ids::REFERENCE_AUDIT_FUNCTION, "ReferenceAuditRole"),
        ("control", ids::CONTROL_FUNCTION, "ControlRole"),
    ]
    .into_iter()
    .map(|(binary, function, role)| {
        serde_json::json!({
            "binary": binary,
            "logical_id": function,
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

/// The variables each function's code needs (the ledger's too, for those that commit).
fn function_env_spec() -> serde_json::Map<String, serde_json::Value> {
    use recon_core::config::{needs, vars};
    [
        (ids::CONSUMER_FUNCTION, needs::CONSUMER, true),
        (ids::ENRICHER_FUNCTION, needs::ENRICHER, false),
        (ids::REPLAY_FUNCTION, needs::REPLAY, true),
        (ids::REFERENCE_AUDIT_FUNCTION, needs::REFERENCE_AUDIT, false),
        (ids::CONTROL_FUNCTION, needs::CONTROL, true),
    ]
    .into_iter()
    .map(|(function, needed, commits)| {
        let mut list: Vec<&str> = needed.to_vec();
        if commits {
            list.push(vars::LEDGER);
        }
        (function.to_owned(), serde_json::json!(list))
    })
    .collect()
}

/// What the code needs of the template that the template alone cannot say, as JSON for the
/// template check, the deploy rehearsal and `make deploy-code` (`dlqctl infra-spec`): the
/// functions' binaries and the variables each one's code reads. What each role may do is the
/// template's alone: `tests/iam.rs` holds each function's calls on the local stack to its role.
pub fn spec_json() -> serde_json::Value {
    serde_json::json!({
        "functions": functions_spec(),
        "metrics_namespace": recon_core::resources::DEFAULT_METRICS_NAMESPACE,
        // The `alarm` field of the log line of a credential the ledger refused (the template's
        // metric filters count it).
        "credential_refused_alarm": recon_core::ports::CREDENTIAL_REFUSED,
        "function_env": function_env_spec(),
        // The condition each ledger kind's grants stand under, and the kind it must mean.
        "ledger_conditions": {"UseDynamoLedger": "dynamodb", "UsePostgres": "postgres", "UseReservationProtocol": "http"},
        "variables": recon_core::config::VARIABLES.iter().map(|v| v.name).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests;
