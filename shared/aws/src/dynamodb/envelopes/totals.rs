//! Triage's totals in the envelope table (`recon_core::decisions::totals`): one item per key
//! (failure code, root cause, day), `#totals#<day>#<code>#<digest of the cause>`, moved by an
//! `ADD` in the transaction of every change into or out of PENDING (beside the PENDING counter,
//! which every such transaction holds already, so the totals add no new meeting point). The items
//! sit in the status index under the partition [`PARTITION`]: triage reads them in one query.
//!
//! Attributes: `n` (count), `w` (without an amount), `a:<currency>` (amounts), `e:<period>:<entity>`
//! (count per accounting period and entity; neither holds `:`), `h:<hours since the epoch>`.
//! A change whose totals item refuses it (on AWS, one that would grow past 400 KB: a new
//! attribute, a longer number, or an envelope written without its totals taken away) is written
//! without them and says so on the counter's item ([`LOST`]); triage then counts envelopes.

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem, Update};
use chrono::{DateTime, Utc};
use recon_core::decisions::totals::{Contribution, Totals, TotalsKey};
use recon_core::domain::FailureCode;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources::{indexes, keys};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::str::FromStr;

use super::DynamoEnvelopeStore;
use crate::dynamodb::transact::{transact, tx_update};
use crate::dynamodb::{decode_cursor, encode_cursor, s};
use crate::error::store_error;
use crate::item::{Item, get_s};

/// The status index's partition of the totals items (no envelope's status).
const PARTITION: &str = keys::ENVELOPE_TOTALS_STATUS;
/// On the counter's item: an envelope was written without its totals.
pub(super) const LOST: &str = "totals_lost";

/// Was a change's transaction (its items, the counter, then its totals from item `from` on)
/// refused for a validation error, that of a totals item (AWS: cancelled, `ValidationError` for
/// an item that would grow past 400 KB) or the request's (`ValidationException`)? Sent again
/// without its totals, it is refused again where the change or the counter was the cause, and
/// nothing is written.
pub(super) fn refused(e: &crate::dynamodb::transact::TransactError, from: usize) -> bool {
    use aws_smithy_types::error::metadata::ProvideErrorMetadata;
    let totals_item = crate::dynamodb::transact::cancellation_codes(e)
        .iter()
        .skip(from)
        .any(|c| c.as_deref() == Some("ValidationError"));
    totals_item || e.as_service_error().and_then(|se| se.code()) == Some("ValidationException")
}

/// The item of `key`'s totals.
fn item_id(key: &TotalsKey) -> String {
    let digest = Sha256::digest(key.root_cause.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}{}#{}#{hex}",
        keys::ENVELOPE_TOTALS_PREFIX,
        key.day,
        key.failure_code.as_str()
    )
}

/// The `ADD` of `delta` to `key`'s item, as a transaction item (every sum that is not zero; the
/// item's key attributes set on each write, so that its first write makes it whole).
pub(super) fn update(table: &str, key: &TotalsKey, delta: &Totals) -> StoreResult<TransactWriteItem> {
    let id = item_id(key);
    let mut adds: Vec<(String, AttributeValue)> = Vec::new();
    let mut count = |name: String, v: i64| {
        if v != 0 {
            adds.push((name, AttributeValue::N(v.to_string())));
        }
    };
    count("n".into(), delta.count);
    count("w".into(), delta.without_amount);
    for ((entity, period), v) in &delta.entity_periods {
        count(format!("e:{period}:{entity}"), *v);
    }
    for (hour, v) in &delta.hours {
        count(format!("h:{hour}"), *v);
    }
    for (currency, a) in &delta.amounts {
        if !a.is_zero() {
            adds.push((format!("a:{currency}"), AttributeValue::N(a.normalize().to_string())));
        }
    }
    let clauses: Vec<String> = (0..adds.len()).map(|i| format!("#{i} :{i}")).collect();
    let mut expression = "SET #st = :st, #age = :id, tc = :code, tr = :cause, td = :day".to_owned();
    if !clauses.is_empty() {
        expression.push_str(" ADD ");
        expression.push_str(&clauses.join(", "));
    }
    let mut u = Update::builder()
        .table_name(table)
        .key(keys::ENVELOPE_PK, s(&id))
        .update_expression(expression)
        .expression_attribute_names("#st", keys::ENVELOPE_STATUS)
        .expression_attribute_names("#age", keys::ENVELOPE_AGE)
        .expression_attribute_values(":st", s(PARTITION))
        .expression_attribute_values(":id", s(id))
        .expression_attribute_values(":code", s(key.failure_code.as_str()))
        .expression_attribute_values(":cause", s(&key.root_cause))
        .expression_attribute_values(":day", s(&key.day));
    for (i, (name, v)) in adds.into_iter().enumerate() {
        u = u
            .expression_attribute_names(format!("#{i}"), name)
            .expression_attribute_values(format!(":{i}"), v);
    }
    tx_update(u, "triage totals")
}

/// The updates adding (`sign` 1) or taking away (-1) `contributions`, one for each key.
pub(super) fn updates<'c>(
    table: &str,
    contributions: impl IntoIterator<Item = &'c Contribution>,
    sign: i64,
) -> StoreResult<Vec<TransactWriteItem>> {
    let mut deltas: BTreeMap<&TotalsKey, Totals> = BTreeMap::new();
    for c in contributions {
        deltas
            .entry(&c.key)
            .or_default()
            .apply(c, sign)
            .map_err(StoreError::infra)?;
    }
    deltas.iter().map(|(k, t)| update(table, k, t)).collect()
}

/// `members` in runs of one totals key each (`key(i)`; `None`, counted in none, with the first
/// run), in the order each key first appears: a transaction of one run moves one totals item.
pub(super) fn by_key(members: &[usize], key: impl Fn(usize) -> Option<TotalsKey>) -> Vec<Vec<usize>> {
    let mut runs: Vec<(Option<TotalsKey>, Vec<usize>)> = Vec::new();
    for &i in members {
        let k = key(i);
        match runs.iter_mut().find(|(rk, _)| *rk == k || k.is_none() || rk.is_none()) {
            Some((rk, run)) => {
                if rk.is_none() {
                    *rk = k;
                }
                run.push(i);
            }
            None => runs.push((k, vec![i])),
        }
    }
    runs.into_iter().map(|(_, run)| run).collect()
}

/// One totals item read back.
fn totals_of(item: &Item) -> StoreResult<(TotalsKey, Totals)> {
    let bad = |why: &str| {
        StoreError::infra(format!(
            "triage totals item {:?}: {why}",
            get_s(item, keys::ENVELOPE_PK)
        ))
    };
    let key = TotalsKey {
        failure_code: FailureCode::from_str(get_s(item, "tc").ok_or_else(|| bad("no code"))?)
            .map_err(|_| bad("an unknown code"))?,
        root_cause: get_s(item, "tr").ok_or_else(|| bad("no cause"))?.to_owned(),
        day: get_s(item, "td").ok_or_else(|| bad("no day"))?.to_owned(),
    };
    let mut t = Totals::default();
    for (name, v) in item {
        let Ok(number) = v.as_n() else { continue };
        let count = || number.parse::<i64>().map_err(|_| bad("a count that is not an integer"));
        match name.split_once(':') {
            None if name == "n" => t.count = count()?,
            None if name == "w" => t.without_amount = count()?,
            Some(("a", currency)) => {
                let a = Decimal::from_str(number).map_err(|_| bad("an amount that is not a decimal"))?;
                t.amounts.insert(currency.to_owned(), a);
            }
            Some(("e", rest)) => {
                let (period, entity) = rest.split_once(':').ok_or_else(|| bad("an entity without a period"))?;
                t.entity_periods
                    .insert((entity.to_owned(), period.to_owned()), count()?);
            }
            Some(("h", hour)) => {
                let h = hour.parse::<i64>().map_err(|_| bad("an hour that is not an integer"))?;
                t.hours.insert(h, count()?);
            }
            _ => {}
        }
    }
    Ok((key, t))
}

impl DynamoEnvelopeStore {
    /// Every totals item (the status index, eventually consistent), or `None` when the table
    /// is not known to have kept them for every envelope.
    pub(super) async fn read_totals(&self) -> StoreResult<Option<BTreeMap<TotalsKey, Totals>>> {
        let kept = self
            .item(keys::ENVELOPE_TOTALS_MARKER, "totals marker")
            .await?
            .is_some();
        if !kept || self.totals_lost().await? {
            return Ok(None);
        }
        let mut out: BTreeMap<TotalsKey, Totals> = BTreeMap::new();
        let mut cursor = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(indexes::BY_STATUS_AGE.name)
                .key_condition_expression("#status = :s")
                .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
                .expression_attribute_values(":s", s(PARTITION))
                .set_exclusive_start_key(decode_cursor(cursor)?)
                .send()
                .await
                .map_err(|e| store_error("Query(triage totals)", e))?;
            for item in page.items() {
                let (key, t) = totals_of(item)?;
                out.entry(key).or_default().merge(&t).map_err(StoreError::infra)?;
            }
            cursor = encode_cursor(page.last_evaluated_key);
            if cursor.is_none() {
                // Lost while they were read: not an answer either.
                return Ok((!self.totals_lost().await?).then_some(out));
            }
        }
    }

    /// Has a change been written without its totals ([`LOST`])?
    async fn totals_lost(&self) -> StoreResult<bool> {
        Ok(self
            .item(keys::ENVELOPE_META_ID, "pending counter")
            .await?
            .is_some_and(|i| i.contains_key(LOST)))
    }

    /// Say that the totals cover every envelope: only while no envelope was ever PENDING in the
    /// table (no PENDING counter yet), so that none was written before the totals were kept.
    /// `Ok(false)`: the table held PENDING envelopes; triage keeps counting envelopes.
    pub async fn mark_totals_kept(&self, how: &str, at: DateTime<Utc>) -> StoreResult<bool> {
        if self
            .item(keys::ENVELOPE_TOTALS_MARKER, "totals marker")
            .await?
            .is_some()
        {
            return Ok(true);
        }
        let never_pending = ConditionCheck::builder()
            .table_name(&self.table)
            .key(keys::ENVELOPE_PK, s(keys::ENVELOPE_META_ID))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", keys::ENVELOPE_PK)
            .build()
            .map_err(|e| crate::dynamodb::item_error("totals marker", e))?;
        let marker = Put::builder()
            .table_name(&self.table)
            .item(keys::ENVELOPE_PK, s(keys::ENVELOPE_TOTALS_MARKER))
            .item("how", s(how))
            .item("at", s(at.to_rfc3339()))
            .build()
            .map_err(|e| crate::dynamodb::item_error("totals marker", e))?;
        let req = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().condition_check(never_pending).build())
            .transact_items(TransactWriteItem::builder().put(marker).build());
        match transact(req).await {
            Ok(_) => Ok(true),
            Err(e)
                if crate::dynamodb::transact::cancellation_codes(&e)
                    .first()
                    .and_then(|c| c.as_deref())
                    == Some("ConditionalCheckFailed") =>
            {
                Ok(false)
            }
            Err(e) => Err(store_error("TransactWriteItems(totals marker)", e)),
        }
    }
}
