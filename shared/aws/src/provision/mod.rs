//! Idempotent creation of a deployment's resources from [`recon_core::resources`]: used by
//! `dlqctl setup` against the local stack and by the integration tests (each test run gets its
//! own prefix). On AWS the same settings come from the infrastructure template instead.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, KeySchemaElement, KeyType, Projection, ProjectionType, ScalarAttributeType,
    TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::HashMap;

mod bucket;
mod ownership;

use bucket::ensure_worm_bucket;
pub use bucket::worm_retention;
pub use ownership::CREATED_BY_TAG;
use ownership::refuse_foreign_resources;

use crate::client::AwsClients;
use crate::error::store_error;
use crate::sqs::SqsQueue;
use recon_core::domain::TransientKind;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources::{self, ResourceNames, TABLES, TableSpec};

/// Settings that differ between deployments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackSettings {
    /// `maxReceiveCount` of the redrive policy = the consumer's retry budget.
    pub max_receive_count: u32,
    /// Default COMPLIANCE retention of the quarantine bucket, days.
    pub worm_retention_days: i32,
}

impl Default for StackSettings {
    fn default() -> Self {
        StackSettings {
            max_receive_count: recon_core::decisions::DEFAULT_MAX_ATTEMPTS,
            worm_retention_days: resources::LOCAL_WORM_RETENTION_DAYS,
        }
    }
}

/// The resolved addresses of a deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    pub names: ResourceNames,
    pub main_queue_url: String,
    pub main_queue_arn: String,
    pub dlq_url: String,
    pub dlq_arn: String,
}

impl Stack {
    /// The configuration variables the functions of this stack are given (as the template sets
    /// them): queue URLs and resource names.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        recon_core::config::environment(&self.names, &self.main_queue_url, &self.dlq_url)
    }

    /// A settings lookup for `recon_core::config`'s parsers: every name from this stack's
    /// [`Stack::env`] (a stale `DLQ_*_TABLE` or queue URL in the shell must never redirect a
    /// replay against `--stack prod`), every other setting from `other` (the process
    /// environment, or a test's own values).
    pub fn lookup(&self, other: impl Fn(&str) -> Option<String>) -> impl Fn(&str) -> Option<String> {
        let env = self.env();
        move |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
                .or_else(|| other(k))
        }
    }
}

fn infra(detail: impl Into<String>) -> StoreError {
    StoreError::new(TransientKind::Infrastructure, detail)
}

async fn queue_url(clients: &AwsClients, name: &str) -> StoreResult<Option<String>> {
    match clients.sqs.get_queue_url().queue_name(name).send().await {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_queue_does_not_exist()) => Ok(None),
        Err(e) => Err(store_error("GetQueueUrl", e)),
    }
}

async fn ensure_queue(
    clients: &AwsClients,
    name: &str,
    attributes: HashMap<QueueAttributeName, String>,
) -> StoreResult<String> {
    let mut attributes = attributes;
    if let Some(url) = queue_url(clients, name).await? {
        clients
            .sqs
            .set_queue_attributes()
            .queue_url(&url)
            .set_attributes(Some(attributes))
            .send()
            .await
            .map_err(|e| store_error("SetQueueAttributes", e))?;
        return Ok(url);
    }
    // A queue is made FIFO when it is created (SQS changes that never after). Producers that
    // set no deduplication id get content-based deduplication; the consumer and the replay set
    // their own.
    if name.ends_with(resources::FIFO_SUFFIX) {
        attributes.insert(QueueAttributeName::FifoQueue, "true".into());
        attributes.insert(QueueAttributeName::ContentBasedDeduplication, "true".into());
    }
    let out = clients
        .sqs
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes))
        .tags(CREATED_BY_TAG.0, CREATED_BY_TAG.1)
        .send()
        .await
        .map_err(|e| store_error("CreateQueue", e))?;
    out.queue_url()
        .map(str::to_owned)
        .ok_or_else(|| infra(format!("CreateQueue {name}: no URL returned")))
}

async fn queue_arn(clients: &AwsClients, url: &str) -> StoreResult<String> {
    SqsQueue::new(clients.sqs.clone(), url)
        .attribute(QueueAttributeName::QueueArn)
        .await?
        .ok_or_else(|| infra(format!("queue {url} has no ARN")))
}

fn key_element(name: &str, t: KeyType) -> StoreResult<KeySchemaElement> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(t)
        .build()
        .map_err(|e| infra(e.to_string()))
}

fn string_attribute(name: &str) -> StoreResult<AttributeDefinition> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| infra(e.to_string()))
}

fn projection(index: &resources::IndexSpec) -> Projection {
    let kind = if index.keys_only {
        ProjectionType::KeysOnly
    } else {
        ProjectionType::All
    };
    Projection::builder().projection_type(kind).build()
}

fn index_definition(index: &resources::IndexSpec) -> StoreResult<GlobalSecondaryIndex> {
    GlobalSecondaryIndex::builder()
        .index_name(index.name)
        .key_schema(key_element(index.partition_key, KeyType::Hash)?)
        .key_schema(key_element(index.sort_key, KeyType::Range)?)
        .projection(projection(index))
        .build()
        .map_err(|e| infra(e.to_string()))
}

/// A table created by an older version lacks newer indexes: add them (one per call, as
/// DynamoDB requires).
async fn add_missing_indexes(
    clients: &AwsClients,
    name: &str,
    spec: &TableSpec,
    existing: &[String],
) -> StoreResult<()> {
    for index in spec.indexes.iter().filter(|i| !existing.iter().any(|e| e == i.name)) {
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(index.name)
            .key_schema(key_element(index.partition_key, KeyType::Hash)?)
            .key_schema(key_element(index.sort_key, KeyType::Range)?)
            .projection(projection(index))
            .build()
            .map_err(|e| infra(e.to_string()))?;
        clients
            .dynamodb
            .update_table()
            .table_name(name)
            .attribute_definitions(string_attribute(index.partition_key)?)
            .attribute_definitions(string_attribute(index.sort_key)?)
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(create).build())
            .send()
            .await
            .map_err(|e| store_error("UpdateTable(add index)", e))?;
        wait_index_active(clients, name, index.name).await?;
    }
    Ok(())
}

/// DynamoDB builds one index at a time: wait until `index` is ACTIVE (up to ten minutes).
async fn wait_index_active(clients: &AwsClients, table: &str, index: &str) -> StoreResult<()> {
    let active = |t: &aws_sdk_dynamodb::types::TableDescription| {
        t.global_secondary_indexes().iter().any(|g| {
            g.index_name() == Some(index) && g.index_status() == Some(&aws_sdk_dynamodb::types::IndexStatus::Active)
        })
    };
    wait_table(
        clients,
        table,
        active,
        600,
        &format!("index {index} of {table} did not become ACTIVE in ten minutes"),
    )
    .await
}

/// Describe `table` once a second until `ready` says so, at most `secs` times; then `timeout`.
async fn wait_table(
    clients: &AwsClients,
    table: &str,
    ready: impl Fn(&aws_sdk_dynamodb::types::TableDescription) -> bool,
    secs: u32,
    timeout: &str,
) -> StoreResult<()> {
    for _ in 0..secs {
        let out = clients
            .dynamodb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| store_error("DescribeTable", e))?;
        if out.table().is_some_and(&ready) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Err(infra(timeout.to_owned()))
}

/// Create the table unless it exists (then add the indexes it lacks). `true`: created here, with
/// every index from the start.
async fn ensure_table(clients: &AwsClients, name: &str, spec: &TableSpec) -> StoreResult<bool> {
    match clients.dynamodb.describe_table().table_name(name).send().await {
        Ok(out) => {
            let existing: Vec<String> = out
                .table()
                .map(|t| {
                    t.global_secondary_indexes()
                        .iter()
                        .filter_map(|g| g.index_name().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            add_missing_indexes(clients, name, spec, &existing).await?;
            return Ok(false);
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) => {}
        Err(e) => return Err(store_error("DescribeTable", e)),
    }
    let mut req = clients
        .dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .tags(
            aws_sdk_dynamodb::types::Tag::builder()
                .key(CREATED_BY_TAG.0)
                .value(CREATED_BY_TAG.1)
                .build()
                .map_err(|e| infra(e.to_string()))?,
        )
        .key_schema(key_element(spec.partition_key, KeyType::Hash)?);
    let mut defined = vec![spec.partition_key];
    if let Some(sk) = spec.sort_key {
        req = req.key_schema(key_element(sk, KeyType::Range)?);
        defined.push(sk);
    }
    for index in spec.indexes {
        for attr in [index.partition_key, index.sort_key] {
            if !defined.contains(&attr) {
                defined.push(attr);
            }
        }
        req = req.global_secondary_indexes(index_definition(index)?);
    }
    for attr in defined {
        req = req.attribute_definitions(string_attribute(attr)?);
    }
    if spec.stream {
        req = req.stream_specification(
            aws_sdk_dynamodb::types::StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages)
                .build()
                .map_err(|e| infra(e.to_string()))?,
        );
    }
    match req.send().await {
        Ok(_) => {}
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {
            return Ok(false);
        }
        Err(e) => return Err(store_error("CreateTable", e)),
    }
    if let Some(ttl) = spec.ttl_attribute {
        let spec = TimeToLiveSpecification::builder()
            .attribute_name(ttl)
            .enabled(true)
            .build()
            .map_err(|e| infra(e.to_string()))?;
        clients
            .dynamodb
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(spec)
            .send()
            .await
            .map_err(|e| store_error("UpdateTimeToLive", e))?;
    }
    Ok(true)
}

/// Every table of `names` created here (a new deployment): nothing was written before the period
/// indexes, so say so once the envelope table is ACTIVE.
async fn mark_new_tables_indexed(clients: &AwsClients, names: &ResourceNames) -> StoreResult<()> {
    let table = names.table(resources::TableKind::Envelopes);
    let active = |t: &aws_sdk_dynamodb::types::TableDescription| {
        t.table_status() == Some(&aws_sdk_dynamodb::types::TableStatus::Active)
    };
    wait_table(
        clients,
        table,
        active,
        300,
        &format!("table {table} did not become ACTIVE in five minutes"),
    )
    .await?;
    crate::dynamodb::DynamoEnvelopeStore::new(clients.dynamodb.clone(), table)
        .mark_periods_indexed("setup created the tables with their period indexes", chrono::Utc::now())
        .await
}

/// Create (or bring up to date) every resource of a deployment. Safe to run again.
pub async fn ensure_stack(clients: &AwsClients, names: &ResourceNames, settings: &StackSettings) -> StoreResult<Stack> {
    refuse_foreign_resources(clients, names).await?;
    let secs = |d: std::time::Duration| d.as_secs().to_string();
    let dlq_url = ensure_queue(
        clients,
        &names.dead_letter_queue,
        HashMap::from([
            (
                QueueAttributeName::MessageRetentionPeriod,
                secs(resources::DLQ_RETENTION),
            ),
            (QueueAttributeName::VisibilityTimeout, secs(resources::DLQ_VISIBILITY)),
            (
                QueueAttributeName::MaximumMessageSize,
                resources::MAX_MESSAGE_BYTES.to_string(),
            ),
        ]),
    )
    .await?;
    let dlq_arn = queue_arn(clients, &dlq_url).await?;
    let main_queue_url = ensure_queue(
        clients,
        &names.main_queue,
        HashMap::from([
            (
                QueueAttributeName::MessageRetentionPeriod,
                secs(resources::MAIN_QUEUE_RETENTION),
            ),
            (
                QueueAttributeName::VisibilityTimeout,
                secs(resources::MAIN_QUEUE_VISIBILITY),
            ),
            (
                QueueAttributeName::RedrivePolicy,
                redrive_policy(&dlq_arn, settings.max_receive_count),
            ),
            (
                QueueAttributeName::MaximumMessageSize,
                resources::MAX_MESSAGE_BYTES.to_string(),
            ),
        ]),
    )
    .await?;
    let main_queue_arn = queue_arn(clients, &main_queue_url).await?;
    let mut created = true;
    for spec in &TABLES {
        created &= ensure_table(clients, names.table(spec.kind), spec).await?;
    }
    if created {
        mark_new_tables_indexed(clients, names).await?;
    }
    ensure_worm_bucket(clients, &names.bucket(), settings.worm_retention_days).await?;
    Ok(Stack {
        names: names.clone(),
        main_queue_url,
        main_queue_arn,
        dlq_url,
        dlq_arn,
    })
}

/// Find an existing deployment's queues (fails with a hint when they do not exist).
pub async fn resolve_stack(clients: &AwsClients, names: &ResourceNames) -> StoreResult<Stack> {
    let missing = |q: &str| {
        infra(format!(
            "queue {q} does not exist: run `dlqctl setup` (or `make local-up`) first"
        ))
    };
    // A deployment with FIFO queues is found by its prefix too.
    let (names, main_queue_url) = match queue_url(clients, &names.main_queue).await? {
        Some(url) => (names.clone(), url),
        None => {
            let fifo = names.clone().with_fifo_queues();
            match queue_url(clients, &fifo.main_queue).await? {
                Some(url) if !names.fifo() => (fifo, url),
                _ => return Err(missing(&names.main_queue)),
            }
        }
    };
    let dlq_url = queue_url(clients, &names.dead_letter_queue)
        .await?
        .ok_or_else(|| missing(&names.dead_letter_queue))?;
    Ok(Stack {
        names,
        main_queue_arn: queue_arn(clients, &main_queue_url).await?,
        dlq_arn: queue_arn(clients, &dlq_url).await?,
        main_queue_url,
        dlq_url,
    })
}

/// Who retires a trail when the local demo resets its tables.
pub const DEMO_RETIRER: &str = "dlqctl demo (local reset)";

/// Empty the queues and tables of a deployment (local demo and tests only; the WORM bucket
/// cannot be emptied, by design). The audit trail the table held is retired first, in the bucket:
/// verification lists it as retired instead of calling the new trail a replacement.
pub async fn reset_data(clients: &AwsClients, stack: &Stack) -> StoreResult<()> {
    let audit = crate::dynamodb::DynamoAuditLog::new(clients.dynamodb.clone(), &stack.names.audit_table);
    let worm = crate::s3::S3Worm::new(clients.s3.clone(), &stack.names.bucket());
    // A first run has no table, so no trail, yet.
    let audit_table = clients
        .dynamodb
        .describe_table()
        .table_name(&stack.names.audit_table)
        .send()
        .await;
    if audit_table.is_ok() {
        let why = "the local demo resets its tables";
        recon_core::evidence::retire_trail(&audit, &worm, chrono::Utc::now(), DEMO_RETIRER, why).await?;
    }
    for url in [&stack.main_queue_url, &stack.dlq_url] {
        clients
            .sqs
            .purge_queue()
            .queue_url(url)
            .send()
            .await
            .map_err(|e| store_error("PurgeQueue", e))?;
    }
    for spec in &TABLES {
        let name = stack.names.table(spec.kind);
        match clients.dynamodb.delete_table().table_name(name).send().await {
            Ok(_) => {}
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) => {}
            Err(e) => return Err(store_error("DeleteTable", e)),
        }
        ensure_table(clients, name, spec).await?;
    }
    mark_new_tables_indexed(clients, &stack.names).await
}

/// Delete the queues and tables of a deployment (test clean-up).
pub async fn delete_stack(clients: &AwsClients, stack: &Stack) -> StoreResult<()> {
    for url in [&stack.main_queue_url, &stack.dlq_url] {
        let _ = clients.sqs.delete_queue().queue_url(url).send().await;
    }
    for spec in &TABLES {
        let _ = clients
            .dynamodb
            .delete_table()
            .table_name(stack.names.table(spec.kind))
            .send()
            .await;
    }
    Ok(())
}

/// The redrive policy JSON for the main queue.
pub fn redrive_policy(dlq_arn: &str, max_receive_count: u32) -> String {
    serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::config::vars;

    #[test]
    fn a_stale_shell_variable_never_redirects_a_stacks_names() {
        let names = ResourceNames::derive("prod", "123456789012", "eu-west-1");
        let stack = Stack {
            main_queue_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/prod-main".into(),
            main_queue_arn: "arn:aws:sqs:eu-west-1:123456789012:prod-main".into(),
            dlq_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/prod-dead-letter".into(),
            dlq_arn: "arn:aws:sqs:eu-west-1:123456789012:prod-dead-letter".into(),
            names,
        };
        let shell = |k: &str| match k {
            vars::ENVELOPE_TABLE => Some("local-envelopes".to_owned()),
            vars::MAIN_QUEUE_URL => Some("http://127.0.0.1:4566/000000000000/local-main".to_owned()),
            vars::MAX_ATTEMPTS => Some("9".to_owned()),
            _ => None,
        };
        let get = stack.lookup(shell);
        assert_eq!(get(vars::ENVELOPE_TABLE).as_deref(), Some("prod-envelopes"));
        assert_eq!(get(vars::MAIN_QUEUE_URL), Some(stack.main_queue_url.clone()));
        // Settings that are not names still come from the environment.
        assert_eq!(get(vars::MAX_ATTEMPTS).as_deref(), Some("9"));
    }
}
