//! The envelope table: envelopes with their triage index keys, the PENDING counter and overflow
//! flag (one item), and the sweep cursors. Every status change is one transaction with the
//! counter, and is checked against the envelope life cycle (`domain::status`) before it is sent.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use chrono::{DateTime, Utc};
use recon_core::decisions::totals::{Contribution, Totals, TotalsKey};
use recon_core::domain::status::{check_initial, check_transition};
use recon_core::domain::{
    AuditRecord, DlqEnvelope, EnvelopeStatus, FailureCode, ReplayClaim, ReplayRecord, StatusChange, TransientKind,
};
use recon_core::ports::{
    AuditOutbox, Backlog, CreateOutcome, EnvelopePage, EnvelopeStore, Finish, FlowResult, Settled, StoreError,
    StoreResult, SweepCursors,
};
use recon_core::resources::keys;

use super::{applied, decode_cursor, encode_cursor, item_error, n, s};

mod period;
mod totals;
mod transitions;
use super::transact::{first_condition_failed, transact, transact_applied, tx_put, tx_update};
use crate::error::store_error;
use crate::item::{Item, from_item, get_n, get_s, to_item};
use transitions::{ClaimValues, FROM_PENDING, TAKEOVER, claim_update, finish_update, from_pending, takeover};

#[derive(Clone, Debug)]
pub struct DynamoEnvelopeStore {
    pub(super) client: Client,
    pub(super) table: String,
    /// The trail the replay's records are linked into when their envelopes are settled in groups
    /// (`None`: through the outbox).
    pub(super) trail: Option<super::DynamoAuditLog>,
}

fn envelope_item(e: &DlqEnvelope) -> StoreResult<Item> {
    let mut item = to_item(e).map_err(|err| item_error("envelope item", err))?;
    let index = e.index_keys();
    item.insert(keys::ENVELOPE_CAUSE.into(), s(index.cause));
    item.insert(keys::ENVELOPE_ENTITY.into(), s(index.entity));
    item.insert(keys::ENVELOPE_AGE.into(), s(index.age));
    item.extend([period::period_entry(e)]);
    Ok(item)
}

fn envelopes_of(items: &[Item]) -> StoreResult<Vec<DlqEnvelope>> {
    items
        .iter()
        .filter(|i| get_s(i, keys::ENVELOPE_PK).is_some_and(|id| !id.starts_with('#')))
        .map(|i| from_item(i).map_err(|e| item_error("envelope", e)))
        .collect()
}

/// The totals items moved by `envelopes` entering (`sign` 1) or leaving (-1) PENDING.
fn totals_moved<'e>(
    table: &str,
    envelopes: impl IntoIterator<Item = &'e DlqEnvelope>,
    sign: i64,
) -> StoreResult<Vec<TransactWriteItem>> {
    let contributions: Vec<Contribution> = envelopes.into_iter().map(Contribution::of).collect();
    totals::updates(table, &contributions, sign)
}

fn pending_delta(table: &str, delta: i64) -> StoreResult<TransactWriteItem> {
    let update = Update::builder()
        .table_name(table)
        .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID))
        .update_expression("ADD pending :d")
        .expression_attribute_values(":d", n(delta));
    tx_update(update, "pending counter")
}

impl DynamoEnvelopeStore {
    /// Send a change into or out of PENDING: `change` (its first item the envelope's, whose
    /// condition failing is the answer `false`), the PENDING counter moved by `delta`, and
    /// `totals`. Where a totals item refuses its `ADD` (DynamoDB's validation: on AWS, an item
    /// that would grow past 400 KB), the change is sent once more without its totals, the
    /// counter's item saying that they no longer cover every envelope (triage then counts the
    /// envelopes themselves); refused again, nothing is written. Its callers box it: a debug
    /// build's replay would not hold it in its stack frames.
    async fn send_counted(
        &self,
        change: Vec<TransactWriteItem>,
        delta: i64,
        totals: Vec<TransactWriteItem>,
        op: &str,
    ) -> StoreResult<bool> {
        let from = change.len() + 1;
        let mut items = change.clone();
        items.push(pending_delta(&self.table, delta)?);
        items.extend(totals);
        let req = self.client.transact_write_items().set_transact_items(Some(items));
        match transact(req).await {
            Ok(_) => Ok(true),
            Err(e) if totals::refused(&e, from) => {
                tracing::warn!(
                    op,
                    "a triage totals item refused the change: written without; triage counts envelopes"
                );
                let lost = Update::builder()
                    .table_name(&self.table)
                    .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID))
                    .update_expression(format!("ADD pending :d SET {} = :t", totals::LOST))
                    .expression_attribute_values(":d", n(delta))
                    .expression_attribute_values(":t", AttributeValue::Bool(true));
                let mut items = change;
                items.push(tx_update(lost, "pending counter, totals lost")?);
                let req = self.client.transact_write_items().set_transact_items(Some(items));
                transact_applied(req, op).await
            }
            Err(e) if first_condition_failed(&e) => Ok(false),
            Err(e) => Err(store_error(op, e)),
        }
    }

    pub(super) async fn item(&self, key: &str, op: &str) -> StoreResult<Option<Item>> {
        super::get_consistent(&self.client, &self.table, keys::ENVELOPE_PK, key, op).await
    }

    /// A page of the status index's items under `status` (oldest first, or newest when not
    /// `forward`), at most `limit`, from `cursor`; and the cursor of the next page.
    pub(super) async fn query_status(
        &self,
        status: &str,
        forward: bool,
        limit: usize,
        cursor: Option<String>,
        op: &str,
    ) -> StoreResult<(Vec<Item>, Option<String>)> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(recon_core::resources::indexes::BY_STATUS_AGE.name)
            .key_condition_expression("#status = :s")
            .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
            .expression_attribute_values(":s", s(status))
            .scan_index_forward(forward)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(decode_cursor(cursor)?)
            .send()
            .await
            .map_err(|e| store_error(op, e))?;
        Ok((out.items.unwrap_or_default(), encode_cursor(out.last_evaluated_key)))
    }

    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoEnvelopeStore {
            client,
            table: table.into(),
            trail: None,
        }
    }

    /// The store linking the audit records of settlements made in groups (`finish_many`)
    /// straight into `trail`, in the transaction that settles their envelopes, instead of
    /// through the outbox (two writes fewer a record); the outbox still serves when the chains'
    /// heads keep moving under it.
    pub fn with_trail(self, trail: super::DynamoAuditLog) -> Self {
        DynamoEnvelopeStore {
            trail: Some(trail),
            ..self
        }
    }
}

impl EnvelopeStore for DynamoEnvelopeStore {
    async fn create(&self, envelope: &DlqEnvelope) -> FlowResult<CreateOutcome> {
        check_initial(envelope.status)?;
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(envelope_item(envelope)?))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", keys::ENVELOPE_PK);
        let put = tx_put(put, "envelope put")?;
        let written = if envelope.status == EnvelopeStatus::Pending {
            let totals = totals_moved(&self.table, [envelope], 1)?;
            Box::pin(self.send_counted(vec![put], 1, totals, "TransactWriteItems(envelope create)")).await?
        } else {
            let req = self.client.transact_write_items().transact_items(put);
            transact_applied(req, "TransactWriteItems(envelope create)").await?
        };
        if written {
            return Ok(CreateOutcome::Created);
        }
        match self.get(&envelope.envelope_id).await? {
            Some(existing) => Ok(CreateOutcome::Exists(Box::new(existing))),
            None => Err(StoreError::new(TransientKind::Conflict, "envelope create refused but not found").into()),
        }
    }

    async fn get(&self, envelope_id: &str) -> StoreResult<Option<DlqEnvelope>> {
        self.item(envelope_id, "envelope")
            .await?
            .as_ref()
            .map(|i| from_item(i).map_err(|e| item_error("envelope", e)))
            .transpose()
    }

    async fn list_by_status(
        &self,
        status: EnvelopeStatus,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<EnvelopePage> {
        let limit = limit.clamp(1, 1000);
        let (items, next) = self
            .query_status(status.as_str(), true, limit, cursor, "Query(envelopes by status)")
            .await?;
        Ok((envelopes_of(&items)?, next))
    }

    async fn list_by_cause(
        &self,
        code: FailureCode,
        cause: &str,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<EnvelopePage> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(recon_core::resources::indexes::BY_FAILURE_CAUSE.name)
            .key_condition_expression("#code = :code AND begins_with(#cause, :prefix)")
            .expression_attribute_names("#code", keys::ENVELOPE_CODE)
            .expression_attribute_names("#cause", keys::ENVELOPE_CAUSE)
            .expression_attribute_values(":code", s(code.as_str()))
            .expression_attribute_values(":prefix", s(format!("{cause}#")))
            .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
            .set_exclusive_start_key(decode_cursor(cursor)?)
            .send()
            .await
            .map_err(|e| store_error("Query(envelopes by cause)", e))?;
        // The prefix also takes in a cause that goes on after `#`: only the cause itself.
        let mut envelopes = envelopes_of(out.items())?;
        let next = encode_cursor(out.last_evaluated_key);
        envelopes.retain(|e| e.root_cause == cause);
        Ok((envelopes, next))
    }

    /// The index's key of `e` (the status index's, or the cause index's for a group), as
    /// DynamoDB gives it for the last item of a page.
    fn cursor_after(&self, e: &DlqEnvelope, group: Option<(FailureCode, &str)>) -> String {
        let index = e.index_keys();
        let key: Item = match group {
            None => vec![
                (keys::ENVELOPE_PK, e.envelope_id.clone()),
                (keys::ENVELOPE_STATUS, index.status.to_owned()),
                (keys::ENVELOPE_AGE, index.age),
            ],
            Some(_) => vec![
                (keys::ENVELOPE_PK, e.envelope_id.clone()),
                (keys::ENVELOPE_CODE, index.failure_code.to_owned()),
                (keys::ENVELOPE_CAUSE, index.cause),
            ],
        }
        .into_iter()
        .map(|(k, v)| (k.to_owned(), s(v)))
        .collect();
        encode_cursor(Some(key)).unwrap_or_default()
    }

    async fn list_all(&self, cursor: Option<String>, limit: usize) -> StoreResult<EnvelopePage> {
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

    async fn claim(
        &self,
        envelope_id: &str,
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
        seen: Option<usize>,
    ) -> FlowResult<bool> {
        check_transition(EnvelopeStatus::Pending, change.status)?;
        let values = ClaimValues::of(claim, change)?;
        let update = |condition: &str| claim_update(&self.table, envelope_id, &values, seen, condition);
        // What it adds to triage's totals: from fields that never change once it is created.
        let Some(envelope) = Box::pin(self.get(envelope_id)).await? else {
            return Ok(false);
        };
        // From PENDING: leaves the pending count and the totals, in the same transaction.
        let totals = totals_moved(&self.table, [&envelope], -1)?;
        let claimed = vec![from_pending(update(FROM_PENDING))?];
        if Box::pin(self.send_counted(claimed, -1, totals, "TransactWriteItems(replay claim)")).await? {
            return Ok(true);
        }
        // From an expired REPLAYING claim (a replay crashed): no count change.
        let req = self
            .client
            .transact_write_items()
            .transact_items(takeover(update(TAKEOVER), now)?);
        Ok(transact_applied(req, "TransactWriteItems(replay takeover)").await?)
    }

    async fn renew(
        &self,
        envelope_id: &str,
        replay_id: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        change: &StatusChange,
    ) -> FlowResult<bool> {
        recon_core::domain::status::check_renewal(change.status)?;
        let entry = crate::item::to_item(change).map_err(|e| super::item_error("status change", e))?;
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(envelope_id))
            .update_expression(
                "SET #lease = :lease, #replay.#until = :until, status_history = list_append(status_history, :change)",
            )
            .condition_expression("#status = :replaying AND #replay.#rid = :rid AND #lease >= :now")
            .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
            .expression_attribute_names("#lease", keys::ENVELOPE_LEASE)
            .expression_attribute_names("#replay", "replay")
            .expression_attribute_names("#rid", "replay_id")
            .expression_attribute_names("#until", "lease_until")
            .expression_attribute_values(":replaying", s(EnvelopeStatus::Replaying.as_str()))
            .expression_attribute_values(":rid", s(replay_id))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .expression_attribute_values(":lease", n(lease_until.timestamp_millis()))
            .expression_attribute_values(
                ":until",
                s(lease_until.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
            )
            .expression_attribute_values(":change", AttributeValue::L(vec![AttributeValue::M(entry)]))
            .send()
            .await;
        Ok(applied(result, "UpdateItem(replay renew)")?)
    }

    async fn finish(
        &self,
        envelope_id: &str,
        replay_id: &str,
        change: &StatusChange,
        record: &ReplayRecord,
        audit: Option<&AuditRecord>,
    ) -> FlowResult<bool> {
        check_transition(EnvelopeStatus::Replaying, change.status)?;
        let mut items = vec![finish_update(&self.table, envelope_id, replay_id, change, record)?];
        if let Some(r) = audit {
            items.push(outbox_put(&self.table, r)?);
        }
        if change.status != EnvelopeStatus::Pending {
            let req = self.client.transact_write_items().set_transact_items(Some(items));
            return Ok(transact_applied(req, "TransactWriteItems(replay finish)").await?);
        }
        // Back to PENDING: into the count and the totals again (what it adds, from fields that
        // never change once it is created; gone, its claim is too).
        let Some(envelope) = Box::pin(self.get(envelope_id)).await? else {
            return Ok(false);
        };
        let totals = totals_moved(&self.table, [&envelope], 1)?;
        Ok(Box::pin(self.send_counted(items, 1, totals, "TransactWriteItems(replay finish)")).await?)
    }

    async fn claim_many(
        &self,
        envelopes: &[&DlqEnvelope],
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
    ) -> Vec<FlowResult<bool>> {
        self.claim_group(envelopes, claim, now, change).await
    }

    async fn finish_many(&self, replay_id: &str, settlements: &[Finish<'_>]) -> Vec<FlowResult<Settled>> {
        self.finish_group(replay_id, settlements).await
    }
}

/// The outbox item of an audit record, in the envelope table (the same transaction as the state
/// change it records): listed oldest first through the status index.
pub(super) fn outbox_put(table: &str, r: &AuditRecord) -> StoreResult<TransactWriteItem> {
    let record = to_item(r).map_err(|e| item_error("outbox record", e))?;
    let put = Put::builder()
        .table_name(table)
        .item(
            keys::ENVELOPE_PK,
            s(format!("{}{}", keys::ENVELOPE_OUTBOX_PREFIX, r.audit_id)),
        )
        .item(keys::ENVELOPE_STATUS, s(keys::ENVELOPE_OUTBOX_STATUS))
        .item(
            keys::ENVELOPE_AGE,
            s(format!("{}#{}", r.at.format("%Y-%m-%dT%H:%M:%S%.9fZ"), r.audit_id)),
        )
        .item("record", AttributeValue::M(record));
    tx_put(put, "outbox put")
}

impl SweepCursors for DynamoEnvelopeStore {
    async fn load_cursor(&self, name: &str) -> StoreResult<Option<String>> {
        let key = format!("{}{name}", keys::ENVELOPE_CURSOR_PREFIX);
        let item = self.item(&key, "sweep cursor").await?;
        Ok(item.as_ref().and_then(|i| get_s(i, "cursor")).map(str::to_owned))
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

    async fn take_sends(&self, second: i64, count: u32, limit: u32) -> StoreResult<bool> {
        // Room for all `count`: at most limit - count taken before (negative when count > limit:
        // the first take of the second only).
        let room = i64::from(limit) - i64::from(count);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(format!("{}{second}", keys::ENVELOPE_RATE_PREFIX)))
            .update_expression("ADD #taken :n")
            .condition_expression("attribute_not_exists(#taken) OR #taken <= :room")
            .expression_attribute_names("#taken", "taken")
            .expression_attribute_values(":n", n(i64::from(count)))
            .expression_attribute_values(":room", n(room))
            .send()
            .await;
        applied(result, "UpdateItem(replay rate window)")
    }
}

impl Backlog for DynamoEnvelopeStore {
    async fn pending_count(&self) -> StoreResult<i64> {
        Ok(self
            .item(keys::ENVELOPE_META_ID, "pending counter")
            .await?
            .and_then(|i| get_n(&i, "pending"))
            .unwrap_or(0))
    }

    async fn triage_totals(&self) -> StoreResult<Option<std::collections::BTreeMap<TotalsKey, Totals>>> {
        self.read_totals().await
    }

    async fn raise_overflow(&self, record: &(dyn Fn(u64) -> AuditRecord + Sync)) -> StoreResult<Option<u64>> {
        let meta = self.item(keys::ENVELOPE_META_ID, "overflow flag").await?;
        let item = meta.as_ref();
        if item.and_then(|i| i.get("overflow")).and_then(|v| v.as_bool().ok()) == Some(&true) {
            return Ok(None);
        }
        let episodes: u64 = item.and_then(|i| get_n(i, "episodes")).unwrap_or(0);
        let episode = episodes + 1;
        // The flag and the episode move only from what was read; the record goes in with them.
        let raise = Update::builder()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID))
            .update_expression("SET overflow = :t, episodes = :next")
            .condition_expression(
                "(attribute_not_exists(overflow) OR overflow = :f) AND \
                 ((attribute_not_exists(episodes) AND :seen = :zero) OR episodes = :seen)",
            )
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .expression_attribute_values(":next", n(i64::try_from(episode).unwrap_or(i64::MAX)))
            .expression_attribute_values(":seen", n(i64::try_from(episodes).unwrap_or(i64::MAX)))
            .expression_attribute_values(":zero", n(0));
        let req = self
            .client
            .transact_write_items()
            .transact_items(tx_update(raise, "overflow flag")?)
            .transact_items(outbox_put(&self.table, &record(episode))?);
        // Not written: another writer raised it (or moved the episode) first, theirs to report.
        Ok(transact_applied(req, "TransactWriteItems(overflow raise)")
            .await?
            .then_some(episode))
    }

    async fn clear_overflow(&self) -> StoreResult<()> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID))
            .update_expression("SET overflow = :f")
            .condition_expression("overflow = :t")
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .expression_attribute_values(":f", AttributeValue::Bool(false))
            .send()
            .await;
        applied(result, "UpdateItem(overflow flag)")?;
        Ok(())
    }
}

impl AuditOutbox for DynamoEnvelopeStore {
    async fn pending_records(&self, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        let limit = limit.clamp(1, 1000);
        let (items, _) = self
            .query_status(keys::ENVELOPE_OUTBOX_STATUS, true, limit, None, "Query(audit outbox)")
            .await?;
        items
            .iter()
            .filter_map(|i| i.get("record").and_then(|r| r.as_m().ok()))
            .map(|m| from_item(m).map_err(|e| item_error("outbox record", e)))
            .collect()
    }

    async fn record_written(&self, audit_id: &str) -> StoreResult<()> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(
                keys::ENVELOPE_PK,
                s(format!("{}{audit_id}", keys::ENVELOPE_OUTBOX_PREFIX)),
            )
            .send()
            .await
            .map_err(|e| store_error("DeleteItem(audit outbox)", e))?;
        Ok(())
    }

    async fn records_written(&self, audit_ids: &[String]) -> StoreResult<()> {
        let ids: Vec<String> = audit_ids
            .iter()
            .map(|id| format!("{}{id}", keys::ENVELOPE_OUTBOX_PREFIX))
            .collect();
        super::batch::delete_many(&self.client, &self.table, keys::ENVELOPE_PK, &ids).await
    }
}
