//! Several items in one request: `BatchGetItem` (strongly consistent, 100 keys a request) and
//! `BatchWriteItem` deletes (25 a request), each following what DynamoDB left unprocessed.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{DeleteRequest, KeysAndAttributes, WriteRequest};
use recon_core::domain::TransientKind;
use recon_core::ports::{StoreError, StoreResult};

use super::{item_error, s};
use crate::error::store_error;
use crate::item::Item;

/// Keys one `BatchGetItem` may ask for.
const GET_BATCH: usize = 100;
/// Requests one `BatchWriteItem` may carry.
const WRITE_BATCH: usize = 25;
/// Rounds of unprocessed keys (or items) followed before the call fails transiently.
const ROUNDS: u32 = 8;

fn key(pk: &str, value: &str) -> Item {
    Item::from([(pk.to_owned(), s(value))])
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
    let unique: Vec<&String> = values.iter().collect::<BTreeSet<_>>().into_iter().collect();
    let mut found = Vec::new();
    for chunk in unique.chunks(GET_BATCH) {
        let mut wanted = Some(
            KeysAndAttributes::builder()
                .set_keys(Some(chunk.iter().map(|v| key(pk, v)).collect()))
                .consistent_read(true)
                .build()
                .map_err(|e| item_error("BatchGetItem keys", e))?,
        );
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
                Some(left) if !left.keys().is_empty() => Some(
                    KeysAndAttributes::builder()
                        .set_keys(Some(left.keys().to_vec()))
                        .consistent_read(true)
                        .build()
                        .map_err(|e| item_error("BatchGetItem keys", e))?,
                ),
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
