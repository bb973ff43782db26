//! Several items in one request: `BatchGetItem` (strongly consistent, 100 keys a request) and
//! `BatchWriteItem` deletes (25 a request), each following what DynamoDB left unprocessed; and
//! how many items one transaction may carry (`groups`).

use std::collections::BTreeSet;
use std::ops::Range;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{DeleteRequest, KeysAndAttributes, WriteRequest};
use recon_core::domain::TransientKind;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources::DYNAMODB_MAX_ITEM_BYTES;

use super::{item_error, s};
use crate::error::store_error;
use crate::item::Item;

/// Keys one `BatchGetItem` may ask for.
const GET_BATCH: usize = 100;
/// Requests one `BatchWriteItem` may carry.
const WRITE_BATCH: usize = 25;
/// Rounds of unprocessed keys (or items) followed before the call fails transiently.
const ROUNDS: u32 = 8;

/// Items one `TransactWriteItems` may carry (AWS's limit).
pub const TRANSACT_ITEMS: usize = 100;
/// The size of the items one transaction writes, kept well below AWS's 4 MB: each item's is
/// estimated ([`estimated_size`]).
pub const TRANSACT_BYTES: usize = 3_000_000;
/// What a write adds to an item (a claim, a settlement, a chain link) and its index keys, at most.
const MARGIN: usize = 4 * 1024;
/// An item's size after a write, at most: its JSON text (DynamoDB counts names and values no
/// larger, but for a one-digit number: the margin covers those) and [`MARGIN`].
pub fn estimated_size<T: serde::Serialize>(value: &T) -> usize {
    json_size(value) + MARGIN
}

/// The length of a value's JSON text (what it adds to an item, at most; an item's largest when it
/// does not serialise).
pub fn json_size<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(DYNAMODB_MAX_ITEM_BYTES, |v| v.len())
}

/// Consecutive groups of entries, each entry costing `(items, bytes)`, none with more than
/// `max_items` items or `max_bytes` bytes (an entry over a limit on its own is a group of one).
pub fn groups(costs: &[(usize, usize)], max_items: usize, max_bytes: usize) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut items, mut bytes) = (0, 0usize, 0usize);
    for (i, &(its, by)) in costs.iter().enumerate() {
        if i > start && (items + its > max_items || bytes.saturating_add(by) > max_bytes) {
            groups.push(start..i);
            (start, items, bytes) = (i, 0, 0);
        }
        items += its;
        bytes = bytes.saturating_add(by);
    }
    if start < costs.len() {
        groups.push(start..costs.len());
    }
    groups
}

fn key(pk: &str, value: &str) -> Item {
    Item::from([(pk.to_owned(), s(value))])
}

/// These keys read strongly consistent.
fn consistent(keys: Vec<Item>) -> StoreResult<KeysAndAttributes> {
    let keys = KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true);
    keys.build().map_err(|e| item_error("BatchGetItem keys", e))
}

/// Back off before asking again for what DynamoDB left unprocessed (throttling).
async fn pause(round: u32) {
    tokio::time::sleep(Duration::from_millis(10u64 << round.min(6))).await;
}

fn throttled(op: &str, left: usize) -> StoreError {
    StoreError::new(
        TransientKind::Throttled,
        format!("{op}: {left} keys still unprocessed after {ROUNDS} rounds"),
    )
}

/// The items of `table` under these partition-key values (a value appearing twice is asked once);
/// those that exist, in no particular order. Strongly consistent, like `GetItem` with
/// `ConsistentRead`.
pub async fn get_many(client: &Client, table: &str, pk: &str, values: &[String]) -> StoreResult<Vec<Item>> {
    let unique: BTreeSet<&String> = values.iter().collect();
    get_keys(client, table, unique.into_iter().map(|v| key(pk, v)).collect()).await
}

/// The items of `table` under these keys (each asked once: the caller drops repeats); those that
/// exist, in no particular order, strongly consistent.
pub async fn get_keys(client: &Client, table: &str, keys: Vec<Item>) -> StoreResult<Vec<Item>> {
    let mut found = Vec::new();
    for chunk in keys.chunks(GET_BATCH) {
        let mut wanted = Some(consistent(chunk.to_vec())?);
        let mut round = 0;
        while let Some(keys) = wanted.take() {
            let out = client
                .batch_get_item()
                .request_items(table, keys)
                .send()
                .await
                .map_err(|e| store_error("BatchGetItem", e))?;
            if let Some(items) = out.responses().and_then(|r| r.get(table)) {
                found.extend(items.iter().cloned());
            }
            // What is left is asked again as strongly consistent reads, whatever the answer echoes.
            wanted = match out.unprocessed_keys().and_then(|u| u.get(table)) {
                Some(left) if !left.keys().is_empty() => Some(consistent(left.keys().to_vec())?),
                _ => None,
            };
            if let Some(left) = &wanted {
                round += 1;
                if round > ROUNDS {
                    return Err(throttled("BatchGetItem", left.keys().len()));
                }
                pause(round).await;
            }
        }
    }
    Ok(found)
}

/// Delete the items of `table` under these partition-key values (absent ones are no error).
pub async fn delete_many(client: &Client, table: &str, pk: &str, values: &[String]) -> StoreResult<()> {
    let unique: Vec<&String> = values.iter().collect::<BTreeSet<_>>().into_iter().collect();
    for chunk in unique.chunks(WRITE_BATCH) {
        let mut requests = chunk
            .iter()
            .map(|v| {
                DeleteRequest::builder()
                    .set_key(Some(key(pk, v)))
                    .build()
                    .map(|d| WriteRequest::builder().delete_request(d).build())
                    .map_err(|e| item_error("BatchWriteItem delete", e))
            })
            .collect::<StoreResult<Vec<WriteRequest>>>()?;
        let mut round = 0;
        while !requests.is_empty() {
            let out = client
                .batch_write_item()
                .request_items(table, std::mem::take(&mut requests))
                .send()
                .await
                .map_err(|e| store_error("BatchWriteItem", e))?;
            requests = out
                .unprocessed_items()
                .and_then(|u| u.get(table))
                .cloned()
                .unwrap_or_default();
            if !requests.is_empty() {
                round += 1;
                if round > ROUNDS {
                    return Err(throttled("BatchWriteItem", requests.len()));
                }
                pause(round).await;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_to_both_limits_and_the_order() {
        let small = vec![(1, 10); 250];
        assert_eq!(groups(&small, 99, 1_000_000), vec![0..99, 99..198, 198..250]);
        // Two items each (a settlement and its outbox record).
        assert_eq!(groups(&[(2, 10); 100], 99, 1_000_000), vec![0..49, 49..98, 98..100]);
        // 400 KB envelopes: seven to a group below 3 MB.
        let large = vec![(1, 400 * 1024); 20];
        let g = groups(&large, 99, TRANSACT_BYTES);
        assert_eq!(g, vec![0..7, 7..14, 14..20]);
        for r in &g {
            assert!(large[r.clone()].iter().map(|c| c.1).sum::<usize>() <= TRANSACT_BYTES);
        }
        // An entry over a limit on its own is still a group (DynamoDB will answer for it).
        assert_eq!(
            groups(&[(1, 10), (1, 5_000_000), (1, 10)], 99, TRANSACT_BYTES),
            vec![0..1, 1..2, 2..3]
        );
        assert!(groups(&[], 99, TRANSACT_BYTES).is_empty());
    }

    #[test]
    fn an_estimate_is_never_below_what_dynamodb_counts() {
        // Strings and names: their bytes; the JSON adds quotes and punctuation.
        let e = serde_json::json!({"envelope_id": "e-1", "body": "x".repeat(1000), "n": 7, "ok": true});
        let counted = "envelope_id".len() + 3 + "body".len() + 1000 + 1 + 2 + 2 + 1;
        assert!(estimated_size(&e) >= counted);
    }
}
