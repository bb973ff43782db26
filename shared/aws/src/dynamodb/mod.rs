//! DynamoDB adapters, one module per table: the reference ledger (posting = dedup mark, one
//! conditional put), reference data (cached snapshot), the audit trail (hash chains), the dedup
//! table of the reservation protocol, and the envelope table (triage indexes, PENDING counter). Here:
//! what they share.

mod audit;
mod backfill;
mod batch;
mod dedup;
mod envelopes;
mod ledger;
mod reference;
mod requests;
mod transact;

pub use audit::DynamoAuditLog;
pub use dedup::DynamoDedupTable;
pub use envelopes::DynamoEnvelopeStore;
pub use ledger::{DynamoLedger, HAND_OFF_ATTRIBUTES, Rekeyed, posting_item};
pub use reference::DynamoReferenceData;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::domain::CommittedRef;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources::{IndexSpec, keys};

use crate::error::{HttpResponse, SdkError, store_error};
use crate::item::{Item, get_s};

pub(crate) fn item_error(op: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::infra(format!("{op}: {e}"))
}

/// A conditional write's answer: `true` when written, `false` when its condition did not hold.
pub(crate) fn applied<T, E>(result: Result<T, SdkError<E, HttpResponse>>, op: &str) -> StoreResult<bool>
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(SdkError::ServiceError(e)) if e.err().code() == Some("ConditionalCheckFailedException") => Ok(false),
        Err(e) => Err(store_error(op, e)),
    }
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}
pub(crate) fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Which delivery holds a posting (ledger and dedup items carry the same fields).
pub(crate) fn committed_ref(item: &Item) -> CommittedRef {
    CommittedRef {
        source_hash: get_s(item, keys::LEDGER_SK).unwrap_or_default().to_owned(),
        sqs_message_id: get_s(item, "sqs_message_id").unwrap_or_default().to_owned(),
        message_id: get_s(item, "message_id").unwrap_or_default().to_owned(),
        committed_at: get_s(item, "committed_at").and_then(|t| t.parse().ok()),
        manual_journal: get_s(item, HAND_OFF_BY).map(str::to_owned),
    }
}

/// The attribute that marks a ledger (or dedup) item as a hand-off to a manual journal: the
/// envelope that handed it off.
pub(crate) const HAND_OFF_BY: &str = "manual_journal";

/// The item of `table` whose partition key `pk` is `value`, read strongly consistent (`op` names
/// it in an error: `GetItem(op)`).
pub(crate) async fn get_consistent(
    client: &Client,
    table: &str,
    pk: &str,
    value: &str,
    op: &str,
) -> StoreResult<Option<Item>> {
    let out = client
        .get_item()
        .table_name(table)
        .key(pk, s(value))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| store_error(&format!("GetItem({op})"), e))?;
    Ok(out.item)
}

/// All items of a table, following pagination; `pk` filters on the partition key when given.
pub async fn scan_all(client: &Client, table: &str, pk: Option<(&str, &str)>) -> StoreResult<Vec<Item>> {
    let mut req = client.scan().table_name(table).consistent_read(true);
    if let Some((name, value)) = pk {
        req = req
            .filter_expression("#k = :v")
            .expression_attribute_names("#k", name)
            .expression_attribute_values(":v", s(value));
    }
    let items = req.into_paginator().items().send().try_collect().await;
    items.map_err(|e| store_error("Scan", e))
}

/// A page cursor: the last evaluated key's string attributes as JSON (opaque to callers).
pub(crate) fn encode_cursor(key: Option<Item>) -> Option<String> {
    let key = key.filter(|k| !k.is_empty())?;
    let map: std::collections::BTreeMap<String, String> = key
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_s().ok()?.clone())))
        .collect();
    serde_json::to_string(&map).ok()
}

pub(crate) fn decode_cursor(cursor: Option<String>) -> StoreResult<Option<Item>> {
    let Some(c) = cursor else { return Ok(None) };
    let map: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&c).map_err(|e| StoreError::infra(format!("bad page cursor: {e}")))?;
    Ok(Some(map.into_iter().map(|(k, v)| (k, s(v))).collect()))
}

/// An exception's entry in its table's period index: the `period_shard` attribute of `id` of
/// `period` (none: of no known period).
pub(crate) fn period_entry(period: Option<&str>, id: &str) -> (String, AttributeValue) {
    (
        keys::EXCEPTION_PERIOD_SHARD.to_owned(),
        s(recon_core::resources::exception_period_shard(period, id)),
    )
}

/// Every item of `index` under one period's shards (a table's exceptions of `period`), the
/// shards read at once.
pub(crate) async fn query_period(
    client: &Client,
    table: &str,
    index: &IndexSpec,
    period: Option<&str>,
) -> StoreResult<Vec<Item>> {
    let shards: Vec<String> = recon_core::resources::exception_period_shards(period).collect();
    let pages =
        futures::future::try_join_all(shards.iter().map(|shard| query_index(client, table, index, shard))).await?;
    Ok(pages.into_iter().flatten().collect())
}

/// Every item of an index whose partition key `key` is `value`, in sort-key order, all pages.
pub async fn query_index(client: &Client, table: &str, index: &IndexSpec, value: &str) -> StoreResult<Vec<Item>> {
    query_index_from(client, table, index, value, None).await
}

/// [`query_index`], of the items whose sort key is `>= sort_from` only (when given): a key
/// condition, so the items before it are not read.
pub async fn query_index_from(
    client: &Client,
    table: &str,
    index: &IndexSpec,
    value: &str,
    sort_from: Option<&str>,
) -> StoreResult<Vec<Item>> {
    let mut req = index_query(client, table, index, value);
    if let Some(from) = sort_from {
        req = req
            .key_condition_expression("#k = :v AND #s >= :from")
            .expression_attribute_names("#s", index.sort_key)
            .expression_attribute_values(":from", s(from));
    }
    all_pages(req, index).await
}

/// [`query_index`], of the items whose attribute `attribute` is `equal` only: a filter, so the
/// others are read (and paid for) and left.
pub async fn query_index_where(
    client: &Client,
    table: &str,
    index: &IndexSpec,
    value: &str,
    (attribute, equal): (&str, &str),
) -> StoreResult<Vec<Item>> {
    let req = index_query(client, table, index, value)
        .filter_expression("#f = :f")
        .expression_attribute_names("#f", attribute)
        .expression_attribute_values(":f", s(equal));
    all_pages(req, index).await
}

/// The query of `index`'s partition `value`, in sort-key order.
fn index_query(
    client: &Client,
    table: &str,
    index: &IndexSpec,
    value: &str,
) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
    client
        .query()
        .table_name(table)
        .index_name(index.name)
        .key_condition_expression("#k = :v")
        .expression_attribute_names("#k", index.partition_key)
        .expression_attribute_values(":v", s(value))
        .scan_index_forward(true)
}

/// Every page of `req`'s items.
async fn all_pages(
    req: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    index: &IndexSpec,
) -> StoreResult<Vec<Item>> {
    let items = req.into_paginator().items().send().try_collect().await;
    items.map_err(|e| store_error(&format!("Query({})", index.name), e))
}
