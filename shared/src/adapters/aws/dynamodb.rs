//! DynamoDB adapters: the reference ledger (posting = dedup mark, one conditional put), the
//! reference data table (cached snapshot), and the audit table.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::item::{Item, from_item, get_s, to_item};
use super::{SdkError, store_error};
use crate::domain::{
    AuditRecord, CommitOutcome, CommittedRef, CurrencyMapping, PeriodRecord, PeriodStatus, Posting, ReferenceSnapshot,
    TransientKind,
};
use crate::ports::{AuditLog, ClaimOutcome, DedupTable, Ledger, ReferenceData, StoreError, StoreResult};
use crate::resources::keys;

fn item_error(op: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::new(TransientKind::Infrastructure, format!("{op}: {e}"))
}

fn committed_ref(item: &Item) -> CommittedRef {
    CommittedRef {
        source_hash: get_s(item, keys::LEDGER_PK).unwrap_or_default().to_owned(),
        sqs_message_id: get_s(item, "sqs_message_id").unwrap_or_default().to_owned(),
        message_id: get_s(item, "message_id").unwrap_or_default().to_owned(),
        committed_at: get_s(item, "committed_at").and_then(|t| t.parse().ok()),
    }
}

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

    /// Write a posting as it is, without the condition (restoring a record in tests).
    pub async fn commit_raw(&self, posting: &Posting) {
        if let Ok(item) = to_item(posting) {
            let _ = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .send()
                .await;
        }
    }

    /// The posting of one transaction, if committed.
    pub async fn get(&self, source_hash: &str) -> StoreResult<Option<Posting>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::LEDGER_PK, AttributeValue::S(source_hash.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(ledger)", e))?;
        out.item()
            .map(|i| from_item(i).map_err(|e| item_error("posting", e)))
            .transpose()
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

/// All items of a table, following pagination; `pk` filters on the partition key when given.
pub async fn scan_all(client: &Client, table: &str, pk: Option<(&str, &str)>) -> StoreResult<Vec<Item>> {
    let mut items = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let mut req = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take());
        if let Some((name, value)) = pk {
            req = req
                .filter_expression("#k = :v")
                .expression_attribute_names("#k", name)
                .expression_attribute_values(":v", AttributeValue::S(value.to_owned()));
        }
        let out = req.send().await.map_err(|e| store_error("Scan", e))?;
        items.extend(out.items.unwrap_or_default());
        match out.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return Ok(items),
        }
    }
}

/// Every item of an index whose partition key `key` is `value`, in sort-key order, all pages.
pub async fn query_index(
    client: &Client,
    table: &str,
    index: &crate::resources::IndexSpec,
    value: &str,
) -> StoreResult<Vec<Item>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .query()
            .table_name(table)
            .index_name(index.name)
            .key_condition_expression("#k = :v")
            .expression_attribute_names("#k", index.partition_key)
            .expression_attribute_values(":v", AttributeValue::S(value.to_owned()))
            .scan_index_forward(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| store_error(&format!("Query({})", index.name), e))?;
        items.extend(page.items().iter().cloned());
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return Ok(items),
        }
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
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::LEDGER_PK, AttributeValue::S(source_hash.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(ledger)", e))?;
        Ok(out.item().map(committed_ref))
    }
}

const CURRENCY_PK: &str = "CURRENCY";
const PERIOD_PK_PREFIX: &str = "PERIOD#";

/// Reference data in one small table, read whole into a snapshot that is cached for `ttl`
/// (so the hot path costs no request). A period close therefore takes effect within `ttl`.
pub struct DynamoReferenceData {
    client: Client,
    table: String,
    ttl: Duration,
    cache: tokio::sync::Mutex<Option<(Instant, Arc<ReferenceSnapshot>)>>,
}

impl DynamoReferenceData {
    pub fn new(client: Client, table: impl Into<String>, ttl: Duration) -> Self {
        DynamoReferenceData {
            client,
            table: table.into(),
            ttl,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    /// Read the whole table (no cache).
    pub async fn load(&self) -> StoreResult<(Vec<CurrencyMapping>, Vec<PeriodRecord>)> {
        let mut currencies = Vec::new();
        let mut periods = Vec::new();
        for item in scan_all(&self.client, &self.table, None).await? {
            let (Some(pk), Some(sk)) = (get_s(&item, keys::REFERENCE_PK), get_s(&item, keys::REFERENCE_SK)) else {
                continue;
            };
            if pk == CURRENCY_PK {
                let minor_units = item
                    .get("minor_units")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse::<u32>().ok());
                if let Some(minor_units) = minor_units {
                    currencies.push(CurrencyMapping {
                        code: sk.to_owned(),
                        minor_units,
                        description: get_s(&item, "description").unwrap_or_default().to_owned(),
                    });
                }
            } else if let Some(entity) = pk.strip_prefix(PERIOD_PK_PREFIX) {
                if let Some(status) = get_s(&item, "status").and_then(|s| s.parse::<PeriodStatus>().ok()) {
                    periods.push(PeriodRecord {
                        entity: entity.to_owned(),
                        period: sk.to_owned(),
                        status,
                    });
                }
            }
        }
        Ok((currencies, periods))
    }

    /// Forget the cached snapshot (after a write through this adapter).
    pub async fn invalidate(&self) {
        *self.cache.lock().await = None;
    }
}

impl ReferenceData for DynamoReferenceData {
    async fn snapshot(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        let mut cache = self.cache.lock().await;
        if let Some((at, snap)) = cache.as_ref() {
            if at.elapsed() < self.ttl {
                return Ok(snap.clone());
            }
        }
        let (currencies, periods) = self.load().await?;
        let snap = Arc::new(ReferenceSnapshot::new(currencies, periods));
        *cache = Some((Instant::now(), snap.clone()));
        Ok(snap)
    }

    async fn refresh(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        // At most one reload a second, however many messages fail on reference data at once.
        const MIN_AGE: Duration = Duration::from_secs(1);
        let mut cache = self.cache.lock().await;
        if let Some((at, snap)) = cache.as_ref() {
            if at.elapsed() < MIN_AGE {
                return Ok(snap.clone());
            }
        }
        let (currencies, periods) = self.load().await?;
        let snap = Arc::new(ReferenceSnapshot::new(currencies, periods));
        *cache = Some((Instant::now(), snap.clone()));
        Ok(snap)
    }

    async fn put_currency(&self, m: &CurrencyMapping) -> StoreResult<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item(keys::REFERENCE_PK, AttributeValue::S(CURRENCY_PK.into()))
            .item(keys::REFERENCE_SK, AttributeValue::S(m.code.clone()))
            .item("minor_units", AttributeValue::N(m.minor_units.to_string()))
            .item("description", AttributeValue::S(m.description.clone()))
            .send()
            .await
            .map_err(|e| store_error("PutItem(reference currency)", e))?;
        self.invalidate().await;
        Ok(())
    }

    async fn put_period(&self, p: &PeriodRecord) -> StoreResult<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item(
                keys::REFERENCE_PK,
                AttributeValue::S(format!("{PERIOD_PK_PREFIX}{}", p.entity)),
            )
            .item(keys::REFERENCE_SK, AttributeValue::S(p.period.clone()))
            .item("status", AttributeValue::S(p.status.as_str().into()))
            .send()
            .await
            .map_err(|e| store_error("PutItem(reference period)", e))?;
        self.invalidate().await;
        Ok(())
    }
}

/// The audit trail: one item per record, linked into one of `AUDIT_CHAINS` hash chains, plus one
/// head item per chain. An append reads the head, then writes the record (only if its id is new:
/// idempotent) and moves the head (only if it has not moved: no lost link) in one transaction,
/// retrying when another writer moved the head first. Chains are independent, so writers rarely
/// meet and never wait on a global lock.
#[derive(Clone, Debug)]
pub struct DynamoAuditLog {
    client: Client,
    table: String,
}

fn head_id(chain: &str) -> String {
    format!("{}{chain}", keys::AUDIT_HEAD_PREFIX)
}

impl DynamoAuditLog {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoAuditLog {
            client,
            table: table.into(),
        }
    }

    /// Every record (all chains), without the chain bookkeeping.
    pub async fn scan(&self) -> StoreResult<Vec<AuditRecord>> {
        Ok(self.scan_chained().await?.into_iter().map(|c| c.record).collect())
    }

    pub async fn scan_chained(&self) -> StoreResult<Vec<crate::domain::audit::ChainedRecord>> {
        scan_all(&self.client, &self.table, None)
            .await?
            .iter()
            .filter(|i| get_s(i, keys::AUDIT_PK).is_some_and(|id| !id.starts_with('#')))
            .map(|i| from_item(i).map_err(|e| item_error("audit record", e)))
            .collect()
    }

    /// The records about one transaction, in time order (the `by_source_hash` index).
    pub async fn for_source_hash(&self, source_hash: &str) -> StoreResult<Vec<crate::domain::audit::ChainedRecord>> {
        query_index(
            &self.client,
            &self.table,
            &crate::resources::indexes::AUDIT_BY_SOURCE_HASH,
            source_hash,
        )
        .await
        .and_then(|items| audit_records(&items))
    }

    async fn head(&self, chain: &str) -> StoreResult<(u64, String)> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::AUDIT_PK, s(head_id(chain)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(audit head)", e))?;
        let Some(item) = out.item() else {
            return Ok((0, crate::domain::audit::GENESIS.to_owned()));
        };
        let seq = item
            .get("seq")
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok((
            seq,
            get_s(item, "hash").unwrap_or(crate::domain::audit::GENESIS).to_owned(),
        ))
    }
}

fn audit_records(items: &[Item]) -> StoreResult<Vec<crate::domain::audit::ChainedRecord>> {
    items
        .iter()
        .map(|i| from_item(i).map_err(|e| item_error("audit record", e)))
        .collect()
}

/// Index attributes of a chained record.
fn audit_item(c: &crate::domain::audit::ChainedRecord) -> StoreResult<Item> {
    let mut item = to_item(c).map_err(|e| item_error("audit item", e))?;
    item.insert(keys::AUDIT_SEQ_KEY.into(), s(format!("{:012}", c.seq)));
    item.insert(
        keys::AUDIT_AT_KEY.into(),
        s(format!(
            "{}#{}",
            c.record.at.format("%Y-%m-%dT%H:%M:%S%.9fZ"),
            c.record.audit_id
        )),
    );
    Ok(item)
}

impl AuditLog for DynamoAuditLog {
    async fn append(&self, record: &AuditRecord) -> StoreResult<()> {
        use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
        let chain = crate::domain::audit::chain_of(&record.audit_id);
        for attempt in 0..50u32 {
            let (seq, hash) = self.head(&chain).await?;
            let linked = crate::domain::audit::link(record.clone(), &chain, seq, &hash);
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(audit_item(&linked)?))
                .condition_expression("attribute_not_exists(#id)")
                .expression_attribute_names("#id", keys::AUDIT_PK)
                .build()
                .map_err(|e| item_error("audit put", e))?;
            let head = Update::builder()
                .table_name(&self.table)
                .key(keys::AUDIT_PK, s(head_id(&chain)))
                .update_expression("SET #seq = :seq, #hash = :hash")
                .condition_expression("(attribute_not_exists(#id) AND :prev = :zero) OR #seq = :prev")
                .expression_attribute_names("#id", keys::AUDIT_PK)
                .expression_attribute_names("#seq", "seq")
                .expression_attribute_names("#hash", "hash")
                .expression_attribute_values(":seq", n(i64::try_from(linked.seq).unwrap_or(i64::MAX)))
                .expression_attribute_values(":hash", s(&linked.hash))
                .expression_attribute_values(":prev", n(i64::try_from(seq).unwrap_or(i64::MAX)))
                .expression_attribute_values(":zero", n(0))
                .build()
                .map_err(|e| item_error("audit head", e))?;
            let result = self
                .client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().put(put).build())
                .transact_items(TransactWriteItem::builder().update(head).build())
                .send()
                .await;
            let err = match result {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
            let reasons: Vec<Option<String>> = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(t)) => t
                    .cancellation_reasons()
                    .iter()
                    .map(|r| r.code().map(str::to_owned))
                    .collect(),
                _ => return Err(store_error("TransactWriteItems(audit append)", err)),
            };
            let failed = |i: usize| reasons.get(i).and_then(|r| r.as_deref()) == Some("ConditionalCheckFailed");
            if failed(0) {
                return Ok(()); // this decision is already recorded
            }
            if !failed(1) && !reasons.iter().flatten().any(|r| r == "TransactionConflict") {
                return Err(store_error("TransactWriteItems(audit append)", err));
            }
            // Another writer moved this chain's head: read it again and relink.
            tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt % 8) * 5 + 1)).await;
        }
        Err(StoreError::new(
            TransientKind::Conflict,
            format!("audit chain {chain} too contended; append not done"),
        ))
    }

    async fn chain(&self, chain: &str) -> StoreResult<Vec<crate::domain::audit::ChainedRecord>> {
        query_index(
            &self.client,
            &self.table,
            &crate::resources::indexes::AUDIT_BY_CHAIN,
            chain,
        )
        .await
        .and_then(|items| audit_records(&items))
    }

    async fn trail_id(&self) -> StoreResult<String> {
        let key = format!("{}trail", keys::AUDIT_HEAD_PREFIX);
        let read = || async {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .key(keys::AUDIT_PK, s(&key))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| store_error("GetItem(audit trail id)", e))?;
            Ok::<_, StoreError>(out.item().and_then(|i| get_s(i, "trail")).map(str::to_owned))
        };
        if let Some(id) = read().await? {
            return Ok(id);
        }
        let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default();
        let id = crate::domain::envelope::sha256_hex(format!("{}{nanos}", self.table).as_bytes())[..16].to_owned();
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(keys::AUDIT_PK, s(&key))
            .item("trail", s(&id))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", keys::AUDIT_PK)
            .send()
            .await;
        match put {
            Ok(_) => Ok(id),
            // Someone else created it first: theirs is the trail's id.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|x| x.is_conditional_check_failed_exception()) =>
            {
                read()
                    .await?
                    .ok_or_else(|| StoreError::new(TransientKind::Conflict, "audit trail id vanished"))
            }
            Err(e) => Err(store_error("PutItem(audit trail id)", e)),
        }
    }

    async fn heads(&self) -> StoreResult<Vec<crate::domain::audit::ChainHead>> {
        let mut heads = Vec::new();
        for i in 0..crate::domain::audit::AUDIT_CHAINS {
            let chain = format!("c{i}");
            let (seq, hash) = self.head(&chain).await?;
            if seq > 0 {
                heads.push(crate::domain::audit::ChainHead { chain, seq, hash });
            }
        }
        Ok(heads)
    }
}

/// The dedup table of the claim -> post -> commit protocol (see [`crate::claim`]).
#[derive(Clone, Debug)]
pub struct DynamoDedupTable {
    client: Client,
    table: String,
}

const CLAIMED: &str = "CLAIMED";
const COMMITTED: &str = "COMMITTED";

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}
fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

impl DynamoDedupTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDedupTable {
            client,
            table: table.into(),
        }
    }
}

fn claim_outcome_from(item: &Item) -> ClaimOutcome {
    if get_s(item, "state") == Some(COMMITTED) {
        return ClaimOutcome::AlreadyCommitted(committed_ref(item));
    }
    let lease_until = item
        .get("lease_until")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .unwrap_or_default();
    ClaimOutcome::HeldElsewhere {
        owner: get_s(item, "owner").unwrap_or_default().to_owned(),
        lease_until,
    }
}

impl DedupTable for DynamoDedupTable {
    async fn claim(
        &self,
        source_hash: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<ClaimOutcome> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(keys::DEDUP_PK, s(source_hash))
            .item("state", s(CLAIMED))
            .item("owner", s(owner))
            .item("lease_until", n(lease_until.timestamp_millis()))
            .item(keys::DEDUP_TTL, n(expires_at.timestamp()))
            .condition_expression("attribute_not_exists(#pk) OR (#state = :claimed AND #lease < :now)")
            .expression_attribute_names("#pk", keys::DEDUP_PK)
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#lease", "lease_until")
            .expression_attribute_values(":claimed", s(CLAIMED))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(ClaimOutcome::Claimed),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                match e.err() {
                    PutItemError::ConditionalCheckFailedException(c) => match c.item() {
                        Some(item) => Ok(claim_outcome_from(item)),
                        None => Err(StoreError::new(
                            TransientKind::Conflict,
                            "claim refused without the current item",
                        )),
                    },
                    _ => Err(StoreError::new(TransientKind::Conflict, "claim refused")),
                }
            }
            Err(e) => Err(store_error("PutItem(dedup claim)", e)),
        }
    }

    async fn commit(&self, owner: &str, committed: &CommittedRef) -> StoreResult<bool> {
        let at = committed.committed_at.map(|t| t.to_rfc3339()).unwrap_or_default();
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(keys::DEDUP_PK, s(&committed.source_hash))
            .update_expression(
                "SET #state = :committed, sqs_message_id = :sqs, message_id = :mid, committed_at = :at REMOVE #lease",
            )
            .condition_expression("#state = :claimed AND #owner = :owner")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#lease", "lease_until")
            .expression_attribute_values(":committed", s(COMMITTED))
            .expression_attribute_values(":claimed", s(CLAIMED))
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":sqs", s(&committed.sqs_message_id))
            .expression_attribute_values(":mid", s(&committed.message_id))
            .expression_attribute_values(":at", s(at))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|x| x.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(store_error("UpdateItem(dedup commit)", e)),
        }
    }

    async fn release(&self, source_hash: &str, owner: &str) -> StoreResult<()> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(keys::DEDUP_PK, s(source_hash))
            .condition_expression("#state = :claimed AND #owner = :owner")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":claimed", s(CLAIMED))
            .expression_attribute_values(":owner", s(owner))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|x| x.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(store_error("DeleteItem(dedup release)", e)),
        }
    }

    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::DEDUP_PK, s(source_hash))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(dedup)", e))?;
        Ok(out
            .item()
            .filter(|i| get_s(i, "state") == Some(COMMITTED))
            .map(committed_ref))
    }
}

/// The envelope table with its triage indexes and the PENDING counter.
#[derive(Clone, Debug)]
pub struct DynamoEnvelopeStore {
    client: Client,
    table: String,
}

fn envelope_item(e: &crate::domain::DlqEnvelope) -> StoreResult<Item> {
    let mut item = to_item(e).map_err(|err| item_error("envelope item", err))?;
    let age = e.age_key();
    item.insert(keys::ENVELOPE_CAUSE.into(), s(format!("{}#{age}", e.root_cause)));
    item.insert(
        keys::ENVELOPE_ENTITY.into(),
        s(e.ledger_entity.clone().unwrap_or_else(|| "-".into())),
    );
    item.insert(keys::ENVELOPE_AGE.into(), s(age));
    Ok(item)
}

fn encode_cursor(key: Option<Item>) -> Option<String> {
    let key = key.filter(|k| !k.is_empty())?;
    let map: std::collections::BTreeMap<String, String> = key
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_s().ok()?.clone())))
        .collect();
    serde_json::to_string(&map).ok()
}

fn decode_cursor(cursor: Option<String>) -> StoreResult<Option<Item>> {
    let Some(c) = cursor else { return Ok(None) };
    let map: std::collections::BTreeMap<String, String> = serde_json::from_str(&c)
        .map_err(|e| StoreError::new(TransientKind::Infrastructure, format!("bad page cursor: {e}")))?;
    Ok(Some(map.into_iter().map(|(k, v)| (k, s(v))).collect()))
}

fn envelopes_of(items: &[Item]) -> StoreResult<Vec<crate::domain::DlqEnvelope>> {
    items
        .iter()
        .filter(|i| get_s(i, keys::ENVELOPE_PK).is_some_and(|id| !id.starts_with('#')))
        .map(|i| from_item(i).map_err(|e| item_error("envelope", e)))
        .collect()
}

fn pending_delta(table: &str, delta: i64) -> StoreResult<aws_sdk_dynamodb::types::TransactWriteItem> {
    let update = aws_sdk_dynamodb::types::Update::builder()
        .table_name(table)
        .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID))
        .update_expression("ADD pending :d")
        .expression_attribute_values(":d", n(delta))
        .build()
        .map_err(|e| item_error("pending counter", e))?;
    Ok(aws_sdk_dynamodb::types::TransactWriteItem::builder()
        .update(update)
        .build())
}

/// Did a transaction fail because its first condition (the envelope's) did not hold?
fn first_condition_failed<R>(
    err: &SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError, R>,
) -> bool {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(t)) => t
            .cancellation_reasons()
            .first()
            .and_then(|r| r.code())
            .is_some_and(|c| c == "ConditionalCheckFailed"),
        _ => false,
    }
}

impl DynamoEnvelopeStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoEnvelopeStore {
            client,
            table: table.into(),
        }
    }
}

impl crate::ports::EnvelopeStore for DynamoEnvelopeStore {
    async fn create(&self, envelope: &crate::domain::DlqEnvelope) -> StoreResult<crate::ports::CreateOutcome> {
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(&self.table)
            .set_item(Some(envelope_item(envelope)?))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", keys::ENVELOPE_PK)
            .build()
            .map_err(|e| item_error("envelope put", e))?;
        let mut req = self
            .client
            .transact_write_items()
            .transact_items(aws_sdk_dynamodb::types::TransactWriteItem::builder().put(put).build());
        if envelope.status == crate::domain::EnvelopeStatus::Pending {
            req = req.transact_items(pending_delta(&self.table, 1)?);
        }
        match req.send().await {
            Ok(_) => Ok(crate::ports::CreateOutcome::Created),
            Err(e) if first_condition_failed(&e) => match self.get(&envelope.envelope_id).await? {
                Some(existing) => Ok(crate::ports::CreateOutcome::Exists(Box::new(existing))),
                None => Err(StoreError::new(
                    TransientKind::Conflict,
                    "envelope create refused but not found",
                )),
            },
            Err(e) => Err(store_error("TransactWriteItems(envelope create)", e)),
        }
    }

    async fn get(&self, envelope_id: &str) -> StoreResult<Option<crate::domain::DlqEnvelope>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(envelope_id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(envelope)", e))?;
        out.item()
            .map(|i| from_item(i).map_err(|e| item_error("envelope", e)))
            .transpose()
    }

    async fn transition(
        &self,
        envelope_id: &str,
        from: crate::domain::EnvelopeStatus,
        change: &crate::domain::StatusChange,
    ) -> StoreResult<bool> {
        use crate::domain::EnvelopeStatus::Pending;
        let entry = to_item(change).map_err(|e| item_error("status change", e))?;
        let update = aws_sdk_dynamodb::types::Update::builder()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(envelope_id))
            .update_expression("SET #status = :to, status_history = list_append(status_history, :change)")
            .condition_expression("#status = :from")
            .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
            .expression_attribute_values(":to", s(change.status.as_str()))
            .expression_attribute_values(":from", s(from.as_str()))
            .expression_attribute_values(":change", AttributeValue::L(vec![AttributeValue::M(entry)]))
            .build()
            .map_err(|e| item_error("envelope transition", e))?;
        let mut req = self.client.transact_write_items().transact_items(
            aws_sdk_dynamodb::types::TransactWriteItem::builder()
                .update(update)
                .build(),
        );
        let delta = i64::from(change.status == Pending) - i64::from(from == Pending);
        if delta != 0 {
            req = req.transact_items(pending_delta(&self.table, delta)?);
        }
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if first_condition_failed(&e) => Ok(false),
            Err(e) => Err(store_error("TransactWriteItems(envelope transition)", e)),
        }
    }

    async fn list_by_status(
        &self,
        status: crate::domain::EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<crate::ports::EnvelopePage> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(crate::resources::indexes::BY_STATUS_AGE.name)
            .key_condition_expression("#status = :s")
            .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
            .expression_attribute_values(":s", s(status.as_str()))
            .scan_index_forward(true)
            .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
            .set_exclusive_start_key(decode_cursor(cursor)?)
            .send()
            .await
            .map_err(|e| store_error("Query(envelopes by status)", e))?;
        Ok((envelopes_of(out.items())?, encode_cursor(out.last_evaluated_key)))
    }

    async fn list_all(&self, cursor: Option<String>, limit: usize) -> StoreResult<crate::ports::EnvelopePage> {
        let out = self
            .client
            .scan()
            .table_name(&self.table)
            .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
            .set_exclusive_start_key(decode_cursor(cursor)?)
            .send()
            .await
            .map_err(|e| store_error("Scan(envelopes)", e))?;
        Ok((envelopes_of(out.items())?, encode_cursor(out.last_evaluated_key)))
    }

    async fn pending_count(&self) -> StoreResult<i64> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(pending counter)", e))?;
        Ok(out
            .item()
            .and_then(|i| i.get("pending"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    async fn claim(
        &self,
        envelope_id: &str,
        claim: &crate::domain::ReplayClaim,
        now: DateTime<Utc>,
        change: &crate::domain::StatusChange,
    ) -> StoreResult<bool> {
        use crate::domain::EnvelopeStatus::{Pending, Replaying};
        let claim_item = to_item(claim).map_err(|e| item_error("replay claim", e))?;
        let entry = to_item(change).map_err(|e| item_error("status change", e))?;
        let update = |condition: &str| {
            aws_sdk_dynamodb::types::Update::builder()
                .table_name(&self.table)
                .key(keys::ENVELOPE_PK, s(envelope_id))
                .update_expression(
                    "SET #status = :replaying, replay = :claim, #lease = :lease, status_history = list_append(status_history, :change)",
                )
                .condition_expression(condition)
                .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
                .expression_attribute_names("#lease", keys::ENVELOPE_LEASE)
                .expression_attribute_values(":replaying", s(Replaying.as_str()))
                .expression_attribute_values(":claim", AttributeValue::M(claim_item.clone()))
                .expression_attribute_values(":lease", n(claim.lease_until.timestamp_millis()))
                .expression_attribute_values(":change", AttributeValue::L(vec![AttributeValue::M(entry.clone())]))
        };
        // From PENDING: leaves the pending count, in the same transaction.
        let from_pending = update("#status = :pending")
            .expression_attribute_values(":pending", s(Pending.as_str()))
            .build()
            .map_err(|e| item_error("replay claim", e))?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .update(from_pending)
                    .build(),
            )
            .transact_items(pending_delta(&self.table, -1)?)
            .send()
            .await;
        match result {
            Ok(_) => return Ok(true),
            Err(e) if first_condition_failed(&e) => {}
            Err(e) => return Err(store_error("TransactWriteItems(replay claim)", e)),
        }
        // From an expired REPLAYING claim (a replay crashed): no count change.
        let takeover = update("#status = :replaying AND #lease < :now")
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .build()
            .map_err(|e| item_error("replay takeover", e))?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .update(takeover)
                    .build(),
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if first_condition_failed(&e) => Ok(false),
            Err(e) => Err(store_error("TransactWriteItems(replay takeover)", e)),
        }
    }

    async fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &crate::domain::StatusChange,
        record: &crate::domain::ReplayRecord,
    ) -> StoreResult<bool> {
        use crate::domain::EnvelopeStatus::{Pending, Replaying};
        let entry = to_item(change).map_err(|e| item_error("status change", e))?;
        let record = to_item(record).map_err(|e| item_error("replay record", e))?;
        let update = aws_sdk_dynamodb::types::Update::builder()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(envelope_id))
            .update_expression(
                "SET #status = :to, status_history = list_append(status_history, :change), \
                 replays = list_append(if_not_exists(replays, :empty), :record)",
            )
            .condition_expression("#status = :replaying AND #replay.#rid = :rid")
            .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
            .expression_attribute_names("#replay", "replay")
            .expression_attribute_names("#rid", "replay_id")
            .expression_attribute_values(":to", s(change.status.as_str()))
            .expression_attribute_values(":replaying", s(Replaying.as_str()))
            .expression_attribute_values(":rid", s(replay_id))
            .expression_attribute_values(":change", AttributeValue::L(vec![AttributeValue::M(entry)]))
            .expression_attribute_values(":record", AttributeValue::L(vec![AttributeValue::M(record)]))
            .expression_attribute_values(":empty", AttributeValue::L(vec![]))
            .build()
            .map_err(|e| item_error("replay finish", e))?;
        let mut req = self.client.transact_write_items().transact_items(
            aws_sdk_dynamodb::types::TransactWriteItem::builder()
                .update(update)
                .build(),
        );
        if change.status == Pending {
            req = req.transact_items(pending_delta(&self.table, 1)?);
        }
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if first_condition_failed(&e) => Ok(false),
            Err(e) => Err(store_error("TransactWriteItems(replay finish)", e)),
        }
    }

    async fn load_cursor(&self, name: &str) -> StoreResult<Option<String>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(format!("{}{name}", keys::ENVELOPE_CURSOR_PREFIX)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem(sweep cursor)", e))?;
        Ok(out.item().and_then(|i| get_s(i, "cursor")).map(str::to_owned))
    }

    async fn save_cursor(&self, name: &str, cursor: Option<&str>) -> StoreResult<()> {
        let key = s(format!("{}{name}", keys::ENVELOPE_CURSOR_PREFIX));
        match cursor {
            Some(c) => {
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .item(keys::ENVELOPE_PK, key)
                    .item("cursor", s(c))
                    .send()
                    .await
                    .map_err(|e| store_error("PutItem(sweep cursor)", e))?;
            }
            None => {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .key(keys::ENVELOPE_PK, key)
                    .send()
                    .await
                    .map_err(|e| store_error("DeleteItem(sweep cursor)", e))?;
            }
        }
        Ok(())
    }

    async fn set_overflow(&self, active: bool) -> StoreResult<Option<u64>> {
        let req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID));
        let req = if active {
            req.update_expression("SET overflow = :t ADD episodes :one")
                .condition_expression("attribute_not_exists(overflow) OR overflow = :f")
                .expression_attribute_values(":one", n(1))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
        } else {
            req.update_expression("SET overflow = :f")
                .condition_expression("overflow = :t")
        };
        let result = req
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .send()
            .await;
        match result {
            Ok(out) if active => Ok(out
                .attributes()
                .and_then(|a| a.get("episodes"))
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok())),
            Ok(_) => Ok(None),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|x| x.is_conditional_check_failed_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(store_error("UpdateItem(overflow flag)", e)),
        }
    }
}
