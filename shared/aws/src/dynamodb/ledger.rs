//! The reference ledger: one item per `source_hash`, written with `attribute_not_exists`, so the
//! posting *is* the dedup mark.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure};
use recon_core::domain::{CommitOutcome, CommittedRef, HandOff, Posting};
use recon_core::ports::{Ledger, LedgerReader, LedgerScope, PostingPage, StoreResult};
use recon_core::resources::{indexes, keys, ledger_period_shard, ledger_period_shards};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::backfill::{Unindexed, index_unindexed};
use super::{HAND_OFF_BY, committed_ref, item_error, s, scan_all};
use crate::error::{SdkError, store_error};
use crate::item::{Item, from_item, get_s, to_item};

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

    /// The posting of one transaction, if committed (a hand-off to a manual journal is not a
    /// posting: `lookup` reports it).
    pub async fn get(&self, source_hash: &str) -> StoreResult<Option<Posting>> {
        self.item(source_hash)
            .await?
            .filter(|i| !i.contains_key(HAND_OFF_BY))
            .map(|i| from_item(&i).map_err(|e| item_error("posting", e)))
            .transpose()
    }

    async fn item(&self, source_hash: &str) -> StoreResult<Option<Item>> {
        super::get_consistent(&self.client, &self.table, keys::LEDGER_PK, source_hash, "ledger").await
    }

    /// Every posting in the table (a scan: for `dlqctl stats`, tests and reconciliation).
    /// Hand-offs to a manual journal share the table and are not postings: see [`Self::hand_offs`].
    pub async fn scan(&self) -> StoreResult<Vec<Posting>> {
        Ok(self.scan_entries().await?.0)
    }

    /// Every transaction handed to a manual journal (a scan).
    pub async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        Ok(self.scan_entries().await?.1)
    }

    /// The whole table in one scan: the postings, and the hand-offs to manual journals.
    pub async fn scan_entries(&self) -> StoreResult<(Vec<Posting>, Vec<CommittedRef>)> {
        let mut postings = Vec::new();
        let mut hand_offs = Vec::new();
        for i in scan_all(&self.client, &self.table, None).await? {
            if i.contains_key(HAND_OFF_BY) {
                hand_offs.push(committed_ref(&i));
            } else {
                postings.push(from_item::<Posting>(&i).map_err(|e| item_error("ledger scan", e))?);
            }
        }
        Ok((postings, hand_offs))
    }

    /// A conditional put on the transaction's key: `Committed` when written, else what holds it —
    /// returned by the failed condition (`ALL_OLD`), or read after it when the caller's role may
    /// not receive attributes beyond the ones it writes (the replay's hand-off).
    async fn put_new(&self, item: Item, source_hash: &str, old_from_condition: bool) -> StoreResult<CommitOutcome> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", keys::LEDGER_PK)
            .return_values_on_condition_check_failure(if old_from_condition {
                ReturnValuesOnConditionCheckFailure::AllOld
            } else {
                ReturnValuesOnConditionCheckFailure::None
            })
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
                let existing = match existing {
                    None if !old_from_condition => self.lookup(source_hash).await?,
                    found => found,
                };
                match existing {
                    Some(r) => Ok(CommitOutcome::AlreadyCommitted(r)),
                    // DynamoDB always returns the old item here. Should a store not, the item
                    // still exists: report a duplicate of an unknown delivery rather than read it
                    // (the consumer's IAM policy has no GetItem).
                    None => Ok(CommitOutcome::AlreadyCommitted(CommittedRef {
                        source_hash: source_hash.to_owned(),
                        sqs_message_id: String::new(),
                        message_id: String::new(),
                        committed_at: None,
                        manual_journal: None,
                    })),
                }
            }
            Err(e) => Err(store_error("PutItem(ledger)", e)),
        }
    }
}

/// The item of a posting: its fields, and its shard of the period index.
pub fn posting_item(posting: &Posting) -> StoreResult<Item> {
    let mut item = to_item(posting).map_err(|e| item_error("ledger item", e))?;
    if let Some(shard) = ledger_period_shard(&posting.period, &posting.source_hash) {
        item.insert(keys::LEDGER_PERIOD_SHARD.to_owned(), s(shard));
    }
    Ok(item)
}

/// The attributes of a hand-off item: the only ones the replay role may write to the ledger
/// table (its IAM grant is conditioned on `dynamodb:Attributes`), so it can never write a posting.
pub const HAND_OFF_ATTRIBUTES: [&str; 4] = [keys::LEDGER_PK, HAND_OFF_BY, "replay_id", "committed_at"];

fn hand_off_item(h: &HandOff) -> Item {
    let [pk, by, replay, at] = HAND_OFF_ATTRIBUTES;
    Item::from([
        (pk.to_owned(), s(&h.source_hash)),
        (by.to_owned(), s(&h.envelope_id)),
        (replay.to_owned(), s(&h.replay_id)),
        (at.to_owned(), s(h.handed_off_at.to_rfc3339())),
    ])
}

/// Reads of one period query the period index, shard by shard (a segment takes the shards
/// `n % of == index`); reads of the whole history scan the table (a segment is one of the scan's
/// own parallel segments). Neither holds more than a page in memory. The index is eventually
/// consistent: a posting committed a moment ago may show in a period read a moment later.
impl LedgerReader for DynamoLedger {
    async fn posting(&self, source_hash: &str) -> StoreResult<Option<Posting>> {
        self.get(source_hash).await
    }

    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        match &scope.period {
            Some(period) => self.period_page(period, scope, cursor, limit).await,
            None => self.scan_page(scope, cursor, limit).await,
        }
    }

    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        DynamoLedger::hand_offs(self).await
    }
}

/// Where a period read stands: the shard, and the last key read in it (none: from its start).
fn period_cursor(cursor: Option<&str>, first: u32) -> StoreResult<(u32, Option<String>)> {
    let Some(c) = cursor else {
        return Ok((first, None));
    };
    let bad = || item_error("ledger period cursor", format!("{c:?} is not SHARD:KEY"));
    let (shard, key) = c.split_once(':').ok_or_else(bad)?;
    let shard = shard.parse().map_err(|_| bad())?;
    Ok((shard, (!key.is_empty()).then(|| key.to_owned())))
}

impl DynamoLedger {
    fn page(items: Option<Vec<Item>>) -> StoreResult<Vec<Posting>> {
        items
            .unwrap_or_default()
            .iter()
            .map(|i| from_item::<Posting>(i).map_err(|e| item_error("ledger read", e)))
            .collect()
    }

    async fn period_page(
        &self,
        period: &str,
        scope: &LedgerScope,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<PostingPage> {
        let shards: Vec<(u32, String)> = ledger_period_shards(period)
            .filter(|(n, _)| scope.segment.is_none_or(|s| s.of > 0 && n % s.of == s.index))
            .collect();
        let Some(first) = shards.first().map(|(n, _)| *n) else {
            return Ok(PostingPage::default());
        };
        let (shard, after) = period_cursor(cursor, first)?;
        let Some(pos) = shards.iter().position(|(n, _)| *n == shard) else {
            return Err(item_error(
                "ledger period cursor",
                format!("shard {shard} is not in {scope:?}"),
            ));
        };
        let index = &indexes::LEDGER_BY_PERIOD;
        let key = shards[pos].1.clone();
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(index.name)
            .key_condition_expression("#shard = :shard")
            .expression_attribute_names("#shard", index.partition_key)
            .expression_attribute_values(":shard", s(&key))
            .limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX))
            .set_exclusive_start_key(after.map(|a| {
                Item::from([
                    (index.partition_key.to_owned(), s(&key)),
                    (keys::LEDGER_PK.to_owned(), s(a)),
                ])
            }));
        if let Some(entity) = &scope.entity {
            req = req
                .filter_expression("#entity = :entity")
                .expression_attribute_names("#entity", "ledger_entity")
                .expression_attribute_values(":entity", s(entity));
        }
        let out = req
            .send()
            .await
            .map_err(|e| store_error("Query(ledger by_period)", e))?;
        let postings = Self::page(out.items)?;
        let next = match out
            .last_evaluated_key
            .as_ref()
            .and_then(|k| crate::item::get_s(k, keys::LEDGER_PK))
        {
            Some(last) => Some(format!("{shard}:{last}")),
            None => shards.get(pos + 1).map(|(n, _)| format!("{n}:")),
        };
        Ok(PostingPage { postings, next })
    }

    /// Give each posting written before the period index existed its entry in it: a scan of the
    /// postings without a `period_shard`, each given one by an update conditional on the posting
    /// being there still without one. Returns how many it indexed (a second run: none);
    /// `progress` hears the count after each page.
    pub async fn index_periods(&self, progress: impl FnMut(u64)) -> StoreResult<u64> {
        let unindexed = Unindexed {
            table: &self.table,
            pk: keys::LEDGER_PK,
            shard: keys::LEDGER_PERIOD_SHARD,
            filter: "attribute_not_exists(#f0)",
            names: &[HAND_OFF_BY],
            values: Vec::new(),
            read: &["period"],
        };
        let shard_of = |item: &Item| ledger_period_shard(get_s(item, "period")?, get_s(item, keys::LEDGER_PK)?);
        index_unindexed(&self.client, unindexed, shard_of, progress).await
    }

    async fn scan_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        let mut filter = vec!["attribute_not_exists(#handoff)"];
        let mut req = self
            .client
            .scan()
            .table_name(&self.table)
            .consistent_read(true)
            .limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX))
            .expression_attribute_names("#handoff", HAND_OFF_BY)
            .set_exclusive_start_key(cursor.map(|c| Item::from([(keys::LEDGER_PK.to_owned(), s(c))])));
        if let Some(segment) = scope.segment.filter(|s| s.of > 1) {
            req = req
                .segment(i32::try_from(segment.index).unwrap_or(i32::MAX))
                .total_segments(i32::try_from(segment.of).unwrap_or(i32::MAX));
        }
        if let Some(entity) = &scope.entity {
            filter.push("#entity = :entity");
            req = req
                .expression_attribute_names("#entity", "ledger_entity")
                .expression_attribute_values(":entity", s(entity));
        }
        let out = req
            .filter_expression(filter.join(" AND "))
            .send()
            .await
            .map_err(|e| store_error("Scan(ledger)", e))?;
        let postings = Self::page(out.items)?;
        let next = out
            .last_evaluated_key
            .as_ref()
            .and_then(|k| crate::item::get_s(k, keys::LEDGER_PK))
            .map(str::to_owned);
        Ok(PostingPage { postings, next })
    }
}

impl Ledger for DynamoLedger {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let item = posting_item(posting)?;
        self.put_new(item, &posting.source_hash, true).await
    }

    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(self.item(source_hash).await?.as_ref().map(committed_ref))
    }

    /// One strongly consistent `BatchGetItem` per hundred hashes.
    async fn lookup_many(
        &self,
        source_hashes: &[String],
    ) -> StoreResult<std::collections::HashMap<String, CommittedRef>> {
        Ok(
            super::batch::get_many(&self.client, &self.table, keys::LEDGER_PK, source_hashes)
                .await?
                .iter()
                .map(committed_ref)
                .map(|c| (c.source_hash.clone(), c))
                .collect(),
        )
    }

    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        self.put_new(hand_off_item(hand_off), &hand_off.source_hash, false)
            .await
    }
}
