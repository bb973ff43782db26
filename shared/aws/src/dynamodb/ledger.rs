//! The reference ledger: one item per `source_hash`, written with `attribute_not_exists`, so the
//! posting *is* the dedup mark.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure};
use recon_core::domain::{CommitOutcome, CommittedRef, Posting};
use recon_core::ports::{Ledger, StoreResult};
use recon_core::resources::keys;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{committed_ref, item_error, scan_all};
use crate::error::{SdkError, store_error};
use crate::item::{Item, from_item, to_item};

/// The reference ledger: one item per `source_hash`, written with
/// `attribute_not_exists(source_hash)`. The posting *is* the dedup mark, so a crash can neither
/// lose a posting that was acknowledged nor post one twice. One request and one write unit per
/// committed message of up to 1 KB.
#[derive(Clone, Debug)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    /// Write capacity units DynamoDB reported for commits (happy path and duplicates).
    write_units_milli: Arc<AtomicU64>,
}

impl DynamoLedger {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoLedger {
            client,
            table: table.into(),
            write_units_milli: Arc::default(),
        }
    }

    /// Write units consumed by commits so far (as reported by DynamoDB).
    pub fn write_units(&self) -> f64 {
        self.write_units_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// The posting of one transaction, if committed.
    pub async fn get(&self, source_hash: &str) -> StoreResult<Option<Posting>> {
        self.item(source_hash)
            .await?
            .map(|i| from_item(&i).map_err(|e| item_error("posting", e)))
            .transpose()
    }

    /// The item of one transaction (a strongly consistent read).
    async fn item(&self, source_hash: &str) -> StoreResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::LEDGER_PK, AttributeValue::S(source_hash.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(ledger)", e))?;
        Ok(out.item)
    }

    /// Every posting in the table (a scan: for `dlqctl stats`, tests and reconciliation).
    pub async fn scan(&self) -> StoreResult<Vec<Posting>> {
        scan_all(&self.client, &self.table, None)
            .await?
            .iter()
            .map(|i| from_item::<Posting>(i).map_err(|e| item_error("ledger scan", e)))
            .collect()
    }
}

impl Ledger for DynamoLedger {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let item = to_item(posting).map_err(|e| item_error("ledger item", e))?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", keys::LEDGER_PK)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                if let Some(units) = out.consumed_capacity().and_then(|c| c.capacity_units()) {
                    self.write_units_milli
                        .fetch_add((units * 1000.0).round() as u64, Ordering::Relaxed);
                }
                Ok(CommitOutcome::Committed)
            }
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                let existing = match e.err() {
                    PutItemError::ConditionalCheckFailedException(c) => c.item().map(committed_ref),
                    _ => None,
                };
                match existing {
                    Some(r) => Ok(CommitOutcome::AlreadyCommitted(r)),
                    // DynamoDB always returns the old item here. Should a store not, the posting
                    // still exists: report a duplicate of an unknown delivery rather than read it
                    // (the consumer's IAM policy has no GetItem).
                    None => Ok(CommitOutcome::AlreadyCommitted(CommittedRef {
                        source_hash: posting.source_hash.clone(),
                        sqs_message_id: String::new(),
                        message_id: String::new(),
                        committed_at: None,
                    })),
                }
            }
            Err(e) => Err(store_error("PutItem(ledger)", e)),
        }
    }

    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(self.item(source_hash).await?.as_ref().map(committed_ref))
    }
}
