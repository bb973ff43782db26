//! The reference ledger: one item per transaction, keyed by its period's shard and its
//! `source_hash`, written with `attribute_not_exists`, so the posting *is* the dedup mark.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure};
use recon_core::domain::hash::is_hash_hex;
use recon_core::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TxKey};
use recon_core::ports::{EnvelopeStore, Ledger, LedgerReader, LedgerScope, PostingPage, StoreResult};
use recon_core::resources::{keys, ledger_period_shard, ledger_period_shards};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{HAND_OFF_BY, committed_ref, item_error, s, scan_all};
use crate::error::{SdkError, store_error};
use crate::item::{Item, from_item, get_s, to_item};

/// The reference ledger: one item per transaction under its key (its period's shard, its
/// `source_hash`), written with `attribute_not_exists`. The hash covers the value date, so a
/// transaction has one key: the posting *is* the dedup mark, and a crash can neither lose a
/// posting that was acknowledged nor post one twice. A period is read from the table itself
/// (its shards are partitions): no index to write, so a commit is one request and one write unit
/// for a posting of up to 1 KB.
#[derive(Clone, Debug)]
pub struct DynamoLedger {
    client: Client,
    table: String,
    /// Write capacity units DynamoDB reported for commits (happy path and duplicates).
    write_units_milli: Arc<AtomicU64>,
}

/// The table key of a transaction of `period`.
fn key_of(period: &str, source_hash: &str) -> StoreResult<Item> {
    let shard = ledger_period_shard(period, source_hash)
        .ok_or_else(|| item_error("ledger key", format!("{source_hash:?} is not a transaction hash")))?;
    Ok(Item::from([
        (keys::LEDGER_PK.to_owned(), s(shard)),
        (keys::LEDGER_SK.to_owned(), s(source_hash)),
    ]))
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
    pub async fn get(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        self.item(key)
            .await?
            .filter(|i| !i.contains_key(HAND_OFF_BY))
            .map(|i| from_item(&i).map_err(|e| item_error("posting", e)))
            .transpose()
    }

    /// The item under `key`: one strongly consistent read under its period, else a search
    /// ([`Self::search`]). A hash that is no transaction's (a raw digest, `raw:…`) is in no key:
    /// not found, without a request.
    async fn item(&self, key: &TxKey) -> StoreResult<Option<Item>> {
        if !is_hash_hex(&key.source_hash) {
            return Ok(None);
        }
        let Some(period) = &key.period else {
            return Ok(self.search(&[&key.source_hash]).await?.into_iter().next());
        };
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_of(period, &key.source_hash)?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(ledger)", e))?;
        Ok(out.item)
    }

    /// The items under these keys: those of a known period in `BatchGetItem`s, those without one
    /// in one search; a hash that is no transaction's is in none.
    async fn items(&self, keys: &[TxKey]) -> StoreResult<Vec<Item>> {
        let unique: BTreeSet<&TxKey> = keys.iter().filter(|k| is_hash_hex(&k.source_hash)).collect();
        let mut placed = Vec::new();
        let mut unplaced = Vec::new();
        for key in unique {
            match &key.period {
                Some(period) => placed.push(key_of(period, &key.source_hash)?),
                None => unplaced.push(key.source_hash.as_str()),
            }
        }
        let mut found = super::batch::get_keys(&self.client, &self.table, placed).await?;
        found.extend(self.search(&unplaced).await?);
        Ok(found)
    }

    /// The items of these hashes in whichever period: a strongly consistent scan of the table,
    /// page by page, a hundred hashes at a time (a filter holds at most a hundred values). The
    /// price of a transaction named without its period: a hash a body claims without a readable
    /// value date, a record from before records carried their period. Logged.
    async fn search(&self, hashes: &[&str]) -> StoreResult<Vec<Item>> {
        let mut found = Vec::new();
        for chunk in hashes.chunks(100) {
            tracing::info!(
                hashes = chunk.len(),
                "ledger lookup without a period: scanning the table"
            );
            let names: Vec<String> = (0..chunk.len()).map(|i| format!(":h{i}")).collect();
            let mut start: Option<Item> = None;
            loop {
                let mut scan = self
                    .client
                    .scan()
                    .table_name(&self.table)
                    .consistent_read(true)
                    .filter_expression(format!("#h IN ({})", names.join(", ")))
                    .expression_attribute_names("#h", keys::LEDGER_SK)
                    .set_exclusive_start_key(start.take());
                for (name, hash) in names.iter().zip(chunk) {
                    scan = scan.expression_attribute_values(name, s(*hash));
                }
                let out = scan.send().await.map_err(|e| store_error("Scan(ledger, by hash)", e))?;
                found.extend(out.items.unwrap_or_default());
                match out.last_evaluated_key {
                    Some(next) if !next.is_empty() => start = Some(next),
                    _ => break,
                }
            }
        }
        Ok(found)
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
    async fn put_new(&self, item: Item, key: &TxKey, old_from_condition: bool) -> StoreResult<CommitOutcome> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#sk)")
            .expression_attribute_names("#sk", keys::LEDGER_SK)
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
                    None if !old_from_condition => self.lookup(key).await?,
                    found => found,
                };
                match existing {
                    Some(r) => Ok(CommitOutcome::AlreadyCommitted(r)),
                    // DynamoDB always returns the old item here. Should a store not, the item
                    // still exists: report a duplicate of an unknown delivery rather than read it
                    // (the consumer's IAM policy has no GetItem).
                    None => Ok(CommitOutcome::AlreadyCommitted(CommittedRef {
                        source_hash: key.source_hash.clone(),
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

/// The item of a posting: its fields, under its key.
pub fn posting_item(posting: &Posting) -> StoreResult<Item> {
    let mut item = to_item(posting).map_err(|e| item_error("ledger item", e))?;
    item.extend(key_of(&posting.period, &posting.source_hash)?);
    Ok(item)
}

/// The attributes of a hand-off item: the only ones the replay role may write to the ledger
/// table (its IAM grant is conditioned on `dynamodb:Attributes`), so it can never write a posting.
pub const HAND_OFF_ATTRIBUTES: [&str; 5] = [
    keys::LEDGER_PK,
    keys::LEDGER_SK,
    HAND_OFF_BY,
    "replay_id",
    "committed_at",
];

/// A hand-off sits under the key the transaction's posting would have (so the two exclude each
/// other): one without its period cannot be placed.
fn hand_off_item(h: &HandOff) -> StoreResult<Item> {
    let period = h.period.as_deref().ok_or_else(|| {
        item_error(
            "ledger hand-off",
            format!("the hand-off of {} names no period", h.source_hash),
        )
    })?;
    let [_, _, by, replay, at] = HAND_OFF_ATTRIBUTES;
    let mut item = key_of(period, &h.source_hash)?;
    item.extend([
        (by.to_owned(), s(&h.envelope_id)),
        (replay.to_owned(), s(&h.replay_id)),
        (at.to_owned(), s(h.handed_off_at.to_rfc3339())),
    ]);
    Ok(item)
}

/// Reads of one period query that period's partitions of the table, shard by shard (a segment
/// takes the shards `n % of == index`), strongly consistent; reads of the whole history scan the
/// table (a segment is one of the scan's own parallel segments). Neither holds more than a page
/// in memory.
impl LedgerReader for DynamoLedger {
    async fn posting(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        self.get(key).await
    }

    /// [`Self::items`]: the keys of a known period in batches, those without one in one search.
    async fn postings_of(&self, keys: &[TxKey]) -> StoreResult<Vec<Posting>> {
        self.items(keys)
            .await?
            .iter()
            .filter(|i| !i.contains_key(HAND_OFF_BY))
            .map(|i| from_item(i).map_err(|e| item_error("posting", e)))
            .collect()
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

/// A scan's cursor: the last key read, `<period shard>/<source_hash>`.
fn scan_cursor(key: &Item) -> Option<String> {
    Some(format!(
        "{}/{}",
        get_s(key, keys::LEDGER_PK)?,
        get_s(key, keys::LEDGER_SK)?
    ))
}

fn scan_start(cursor: &str) -> StoreResult<Item> {
    let (shard, hash) = cursor
        .split_once('/')
        .ok_or_else(|| item_error("ledger scan cursor", format!("{cursor:?} is not SHARD/HASH")))?;
    Ok(Item::from([
        (keys::LEDGER_PK.to_owned(), s(shard)),
        (keys::LEDGER_SK.to_owned(), s(hash)),
    ]))
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
        let key = shards[pos].1.clone();
        let mut filter = vec!["attribute_not_exists(#handoff)"];
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#shard = :shard")
            .expression_attribute_names("#shard", keys::LEDGER_PK)
            .expression_attribute_names("#handoff", HAND_OFF_BY)
            .expression_attribute_values(":shard", s(&key))
            .limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX))
            .set_exclusive_start_key(after.map(|a| {
                Item::from([
                    (keys::LEDGER_PK.to_owned(), s(&key)),
                    (keys::LEDGER_SK.to_owned(), s(a)),
                ])
            }));
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
            .map_err(|e| store_error("Query(ledger period)", e))?;
        let postings = Self::page(out.items)?;
        let next = match out.last_evaluated_key.as_ref().and_then(|k| get_s(k, keys::LEDGER_SK)) {
            Some(last) => Some(format!("{shard}:{last}")),
            None => shards.get(pos + 1).map(|(n, _)| format!("{n}:")),
        };
        Ok(PostingPage { postings, next })
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
            .set_exclusive_start_key(cursor.map(scan_start).transpose()?);
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
        let next = out.last_evaluated_key.as_ref().and_then(scan_cursor);
        Ok(PostingPage { postings, next })
    }
}

impl Ledger for DynamoLedger {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        let item = posting_item(posting)?;
        self.put_new(item, &posting.key(), true).await
    }

    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        Ok(self.item(key).await?.as_ref().map(committed_ref))
    }

    /// One strongly consistent `BatchGetItem` per hundred keys of a known period; those without
    /// one in one search.
    async fn lookup_many(&self, keys: &[TxKey]) -> StoreResult<HashMap<String, CommittedRef>> {
        Ok(self
            .items(keys)
            .await?
            .iter()
            .map(committed_ref)
            .map(|c| (c.source_hash.clone(), c))
            .collect())
    }

    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        self.put_new(hand_off_item(hand_off)?, &hand_off.key(), false).await
    }
}

/// What [`DynamoLedger::rekey_from`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rekeyed {
    /// Items written under their new key.
    pub copied: u64,
    /// Items whose key held them already (a run before): left as they are.
    pub present: u64,
    /// Keys held by something else than the old item (a posting where the old table has a
    /// hand-off, a hand-off where it has a posting, another delivery's posting: written in the
    /// new table before the copy): left as they are, by their hash, for a person to settle.
    pub conflicts: Vec<String>,
    /// Items that could not be placed, by their hash: a hand-off whose envelope names no period
    /// (or is gone), a posting without one.
    pub unplaced: Vec<String>,
}

impl DynamoLedger {
    /// Copy a ledger table from before the ledger was keyed by period (one item per
    /// `source_hash`, `old_table`) into this one: a posting under its period's key, a hand-off
    /// under the period of the envelope that made it, each with the ledger's own condition, so a
    /// key already held is left as it is and a second run copies nothing; a key held by something
    /// else than the old item is a conflict, named. `progress` hears the counts after each page.
    /// Run it before anything commits to the new table (the consumer, the replay, the control
    /// plane): a transaction committed in the old one only is not yet a duplicate in the new one.
    pub async fn rekey_from<E: EnvelopeStore>(
        &self,
        old_table: &str,
        envelopes: &E,
        mut progress: impl FnMut(&Rekeyed),
    ) -> StoreResult<Rekeyed> {
        let mut done = Rekeyed::default();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(old_table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| store_error("Scan(old ledger)", e))?;
            for mut item in out.items.unwrap_or_default() {
                let hash = get_s(&item, keys::LEDGER_SK).unwrap_or_default().to_owned();
                let period = match get_s(&item, HAND_OFF_BY) {
                    Some(envelope) => envelopes.get(envelope).await?.and_then(|e| e.accounting_period),
                    None => get_s(&item, "period").map(str::to_owned),
                };
                let Some(period) = period else {
                    done.unplaced.push(hash);
                    continue;
                };
                let old = committed_ref(&item);
                item.extend(key_of(&period, &hash)?);
                let key = TxKey::new(hash, Some(period));
                match self.put_new(item, &key, true).await? {
                    CommitOutcome::Committed => done.copied += 1,
                    CommitOutcome::AlreadyCommitted(held)
                        if held.sqs_message_id == old.sqs_message_id && held.manual_journal == old.manual_journal =>
                    {
                        done.present += 1
                    }
                    _ => done.conflicts.push(key.source_hash),
                }
            }
            progress(&done);
            match out.last_evaluated_key {
                Some(next) if !next.is_empty() => start = Some(next),
                _ => return Ok(done),
            }
        }
    }
}
