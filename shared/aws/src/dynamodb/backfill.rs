//! Period index entries for items written before their table's period index existed (`dlqctl
//! index-periods`, once after upgrading): a scan of the items without a shard attribute, each
//! given one by an update conditional on the item being there still without one.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::ports::StoreResult;

use super::{applied, s};
use crate::error::store_error;
use crate::item::Item;

/// Which items of a table lack their period index entry.
pub(crate) struct Unindexed<'a> {
    pub table: &'a str,
    pub pk: &'a str,
    /// The index's partition attribute.
    pub shard: &'a str,
    /// What else an item must match to belong in the index (a filter expression over `#f<n>`
    /// names and `:f<n>` values), or empty.
    pub filter: &'a str,
    pub names: &'a [&'a str],
    pub values: Vec<AttributeValue>,
    /// The attributes its shard is computed from, besides its key.
    pub read: &'a [&'a str],
}

/// Give every item `u` describes its shard (`shard_of` the item as read: its key and `u.read`;
/// `None` leaves it out). Returns how many it indexed (a second run: none); `progress` hears the
/// count after each page.
pub(crate) async fn index_unindexed(
    client: &Client,
    u: Unindexed<'_>,
    shard_of: impl Fn(&Item) -> Option<String>,
    mut progress: impl FnMut(u64),
) -> StoreResult<u64> {
    let mut filter = "attribute_not_exists(#shard)".to_owned();
    if !u.filter.is_empty() {
        filter = format!("{filter} AND ({})", u.filter);
    }
    let projection: Vec<String> = std::iter::once("#pk".to_owned())
        .chain((0..u.read.len()).map(|i| format!("#r{i}")))
        .collect();
    let mut start: Option<Item> = None;
    let mut indexed = 0;
    loop {
        let mut scan = client
            .scan()
            .table_name(u.table)
            .consistent_read(true)
            .filter_expression(&filter)
            .projection_expression(projection.join(", "))
            .expression_attribute_names("#shard", u.shard)
            .expression_attribute_names("#pk", u.pk)
            .set_exclusive_start_key(start.take());
        for (i, name) in u.read.iter().enumerate() {
            scan = scan.expression_attribute_names(format!("#r{i}"), *name);
        }
        for (i, name) in u.names.iter().enumerate() {
            scan = scan.expression_attribute_names(format!("#f{i}"), *name);
        }
        for (i, value) in u.values.iter().enumerate() {
            scan = scan.expression_attribute_values(format!(":f{i}"), value.clone());
        }
        let out = scan
            .send()
            .await
            .map_err(|e| store_error(&format!("Scan({}, not in the period index)", u.table), e))?;
        for item in out.items.unwrap_or_default() {
            let (Some(key), Some(shard)) = (item.get(u.pk), shard_of(&item)) else {
                continue;
            };
            let update = client
                .update_item()
                .table_name(u.table)
                .key(u.pk, key.clone())
                .update_expression("SET #shard = :shard")
                .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#shard)")
                .expression_attribute_names("#shard", u.shard)
                .expression_attribute_names("#pk", u.pk)
                .expression_attribute_values(":shard", s(shard))
                .send()
                .await;
            indexed += u64::from(applied(update, &format!("UpdateItem({}, period index)", u.table))?);
        }
        progress(indexed);
        match out.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(indexed),
        }
    }
}
