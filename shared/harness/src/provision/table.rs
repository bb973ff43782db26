//! A table as the template declares it: keys, attribute types, indexes, stream and TTL. A table
//! that exists gets the indexes it lacks; the settings a local emulator has no use for are left to
//! AWS, named in [`LEFT_TO_AWS`].

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TableDescription, TimeToLiveSpecification,
};
use serde_json::{Map, Value};

use super::{CREATED_BY_TAG, refuse_unknown_properties, template_error};
use recon_aws::client::AwsClients;
use recon_aws::error::store_error;
use recon_core::ports::{StoreError, StoreResult};

/// Table properties the local stack does not build: deletion protection (tests and the demo
/// delete their tables), point-in-time recovery and encryption at rest (DynamoDB Local has
/// neither). AWS builds them from the template; nothing here can check them.
pub const LEFT_TO_AWS: [&str; 4] = [
    "DeletionProtectionEnabled",
    "PointInTimeRecoverySpecification",
    "SSESpecification",
    "Tags",
];

/// Every table property the local stack builds or knowingly leaves to AWS; any other is an error.
const BUILT: [&str; 7] = [
    "TableName",
    "BillingMode",
    "KeySchema",
    "AttributeDefinitions",
    "GlobalSecondaryIndexes",
    "StreamSpecification",
    "TimeToLiveSpecification",
];

fn text<'a>(v: &'a Value, key: &str, at: &str) -> StoreResult<&'a str> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| template_error(format!("{at}: no {key}")))
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn built<T, E: std::fmt::Display>(r: Result<T, E>) -> StoreResult<T> {
    r.map_err(|e| StoreError::infra(e.to_string()))
}

/// A table's declaration in the SDK's terms.
struct TableDeclaration {
    name: String,
    keys: Vec<KeySchemaElement>,
    attributes: Vec<AttributeDefinition>,
    indexes: Vec<GlobalSecondaryIndex>,
    stream: Option<StreamViewType>,
    ttl: Option<String>,
}

fn key_schema(keys: &[Value], at: &str) -> StoreResult<Vec<KeySchemaElement>> {
    keys.iter()
        .map(|k| {
            built(
                KeySchemaElement::builder()
                    .attribute_name(text(k, "AttributeName", at)?)
                    .key_type(KeyType::from(text(k, "KeyType", at)?))
                    .build(),
            )
        })
        .collect()
}

fn declaration(id: &str, p: &Map<String, Value>) -> StoreResult<TableDeclaration> {
    refuse_unknown_properties(id, p, &BUILT, &LEFT_TO_AWS, "table.rs")?;
    let props = Value::Object(p.clone());
    if let Some(mode) = p.get("BillingMode").and_then(Value::as_str)
        && mode != "PAY_PER_REQUEST"
    {
        return Err(template_error(format!(
            "{id}: BillingMode {mode}: the local stack builds PAY_PER_REQUEST tables only"
        )));
    }
    let mut attributes = Vec::new();
    for a in list(&props, "AttributeDefinitions") {
        attributes.push(built(
            AttributeDefinition::builder()
                .attribute_name(text(a, "AttributeName", id)?)
                .attribute_type(ScalarAttributeType::from(text(a, "AttributeType", id)?))
                .build(),
        )?);
    }
    let mut indexes = Vec::new();
    for g in list(&props, "GlobalSecondaryIndexes") {
        let at = format!("{id} index {}", text(g, "IndexName", id)?);
        let projection = g.get("Projection").cloned().unwrap_or(Value::Null);
        let kind = projection
            .get("ProjectionType")
            .and_then(Value::as_str)
            .unwrap_or("ALL");
        let non_key: Vec<String> = list(&projection, "NonKeyAttributes")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        indexes.push(built(
            GlobalSecondaryIndex::builder()
                .index_name(text(g, "IndexName", id)?)
                .set_key_schema(Some(key_schema(list(g, "KeySchema"), &at)?))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::from(kind))
                        .set_non_key_attributes((!non_key.is_empty()).then_some(non_key))
                        .build(),
                )
                .build(),
        )?);
    }
    let ttl = p
        .get("TimeToLiveSpecification")
        .filter(|t| t.get("Enabled").and_then(Value::as_bool) == Some(true))
        .map(|t| text(t, "AttributeName", id).map(str::to_owned))
        .transpose()?;
    Ok(TableDeclaration {
        name: text(&props, "TableName", id)?.to_owned(),
        keys: key_schema(list(&props, "KeySchema"), id)?,
        attributes,
        indexes,
        stream: p
            .get("StreamSpecification")
            .map(|s| text(s, "StreamViewType", id).map(StreamViewType::from))
            .transpose()?,
        ttl,
    })
}

/// Describe `table` once a second until `ready` says so, at most `secs` times; then `timeout`.
async fn wait_table(
    clients: &AwsClients,
    table: &str,
    ready: impl Fn(&TableDescription) -> bool,
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
    Err(StoreError::infra(timeout.to_owned()))
}

/// Wait until `table` is ACTIVE (up to five minutes).
pub(super) async fn wait_active(clients: &AwsClients, table: &str) -> StoreResult<()> {
    let active = |t: &TableDescription| t.table_status() == Some(&aws_sdk_dynamodb::types::TableStatus::Active);
    let timeout = format!("table {table} did not become ACTIVE in five minutes");
    wait_table(clients, table, active, 300, &timeout).await
}

/// A table created by an older version lacks newer indexes: add them (one per call, each built
/// before the next, as DynamoDB requires).
async fn add_missing_indexes(clients: &AwsClients, t: &TableDeclaration, existing: &[String]) -> StoreResult<()> {
    for index in t
        .indexes
        .iter()
        .filter(|i| !existing.iter().any(|e| e == i.index_name()))
    {
        let create = built(
            CreateGlobalSecondaryIndexAction::builder()
                .index_name(index.index_name())
                .set_key_schema(Some(index.key_schema().to_vec()))
                .set_projection(index.projection().cloned())
                .build(),
        )?;
        let used: Vec<&str> = index
            .key_schema()
            .iter()
            .map(KeySchemaElement::attribute_name)
            .collect();
        let definitions = t
            .attributes
            .iter()
            .filter(|a| used.contains(&a.attribute_name()))
            .cloned()
            .collect();
        clients
            .dynamodb
            .update_table()
            .table_name(&t.name)
            .set_attribute_definitions(Some(definitions))
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(create).build())
            .send()
            .await
            .map_err(|e| store_error("UpdateTable(add index)", e))?;
        let name = index.index_name();
        let active = |d: &TableDescription| {
            d.global_secondary_indexes()
                .iter()
                .any(|g| g.index_name() == Some(name) && g.index_status() == Some(&IndexStatus::Active))
        };
        let timeout = format!("index {name} of {} did not become ACTIVE in ten minutes", t.name);
        wait_table(clients, &t.name, active, 600, &timeout).await?;
    }
    Ok(())
}

/// The table `id` declares, created unless it exists (then given the indexes it lacks). Its name,
/// and whether it was created here (then with every index from the start).
pub(super) async fn ensure_table(
    clients: &AwsClients,
    id: &str,
    properties: &Map<String, Value>,
) -> StoreResult<(String, bool)> {
    let t = declaration(id, properties)?;
    match clients.dynamodb.describe_table().table_name(&t.name).send().await {
        Ok(out) => {
            let existing: Vec<String> = out
                .table()
                .map(|d| {
                    d.global_secondary_indexes()
                        .iter()
                        .filter_map(|g| g.index_name().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            add_missing_indexes(clients, &t, &existing).await?;
            return Ok((t.name, false));
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) => {}
        Err(e) => return Err(store_error("DescribeTable", e)),
    }
    let tag = built(
        aws_sdk_dynamodb::types::Tag::builder()
            .key(CREATED_BY_TAG.0)
            .value(CREATED_BY_TAG.1)
            .build(),
    )?;
    let stream = t
        .stream
        .clone()
        .map(|view| {
            built(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(view)
                    .build(),
            )
        })
        .transpose()?;
    let created = clients
        .dynamodb
        .create_table()
        .table_name(&t.name)
        .billing_mode(BillingMode::PayPerRequest)
        .tags(tag)
        .set_key_schema(Some(t.keys.clone()))
        .set_attribute_definitions(Some(t.attributes.clone()))
        .set_global_secondary_indexes((!t.indexes.is_empty()).then(|| t.indexes.clone()))
        .set_stream_specification(stream)
        .send()
        .await;
    match created {
        Ok(_) => {}
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => return Ok((t.name, false)),
        Err(e) => return Err(store_error("CreateTable", e)),
    }
    if let Some(attribute) = &t.ttl {
        let spec = built(
            TimeToLiveSpecification::builder()
                .attribute_name(attribute)
                .enabled(true)
                .build(),
        )?;
        clients
            .dynamodb
            .update_time_to_live()
            .table_name(&t.name)
            .time_to_live_specification(spec)
            .send()
            .await
            .map_err(|e| store_error("UpdateTimeToLive", e))?;
    }
    Ok((t.name, true))
}

/// Delete a table if it exists.
pub(super) async fn delete_table(clients: &AwsClients, name: &str) -> StoreResult<()> {
    match clients.dynamodb.delete_table().table_name(name).send().await {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(store_error("DeleteTable", e)),
    }
}
