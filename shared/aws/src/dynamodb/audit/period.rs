//! The audit records a reconciliation reads, by accounting period (the `by_period` index: the
//! records of [`AuditKind::reconciled`] kinds only, each under its period's shard of its
//! transaction), and the entries of the records written before records carried their period.
//!
//! Those records are in no other index but `by_chain`: the records about one transaction that
//! `by_source_hash` holds are the others ([`in_by_source_hash`]), and [`DynamoAuditLog::about`]
//! finds a transaction's reconciled records here, in the one shard of each period its hash names.
//! A duplicate's or a dead letter's append so writes the record, its chain's head and two index
//! entries (`by_chain`, `by_period`), where it wrote three (DynamoDB Local counts 16 write units,
//! not 20). Records written before this rule are in both indexes, their shard named by their id.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::domain::audit::{ChainedRecord, is_chain};
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::ports::{RecordsOfPeriod, StoreResult};
use recon_core::resources::{exception_period_shard, indexes, keys};

use super::{DynamoAuditLog, chained_from};
use crate::dynamodb::backfill::{Unindexed, index_unindexed};
use crate::dynamodb::{query_index, query_index_where, query_period, s};
use crate::item::{Item, get_s};

/// The index entry of a record a reconciliation reads (none for the others): the shard its
/// transaction's hash names (its id's, without one), so a transaction's records share one.
pub(super) fn period_entry(record: &AuditRecord) -> Option<(String, AttributeValue)> {
    record.kind.reconciled().then(|| {
        let within = sharded_by(record.source_hash.as_deref(), &record.audit_id);
        crate::dynamodb::period_entry(record.period.as_deref(), within)
    })
}

/// What picks a record's `by_period` shard: the transaction it is about (`source_hash`), or its
/// own `id` when it is about none; the writer's rule and the backfill's.
fn sharded_by<'a>(source_hash: Option<&'a str>, id: &'a str) -> &'a str {
    source_hash.unwrap_or(id)
}

/// Whether `record` is in the `by_source_hash` index (it has its sort key): the records about a
/// transaction a reconciliation does not read (replays, edits, escalations); those it reads are
/// found by period. Records written before this rule are in both.
pub(super) fn in_by_source_hash(record: &AuditRecord) -> bool {
    !record.kind.reconciled()
}

impl RecordsOfPeriod for DynamoAuditLog {
    async fn records_of_period(&self, period: Option<&str>) -> StoreResult<Vec<AuditRecord>> {
        let items = query_period(&self.client, &self.table, &indexes::AUDIT_BY_PERIOD, period).await?;
        // Only what verification sees (a record on a chain, readable) and what is what it says
        // it is (of this period): an index entry is not hashed, the record is.
        Ok(items
            .iter()
            .map(chained_from)
            .filter(|c| is_chain(&c.chain))
            .map(|c| c.record)
            .filter(|r| r.kind.reconciled() && r.period.as_deref() == period)
            .collect())
    }

    async fn record(&self, audit_id: &str) -> StoreResult<Option<AuditRecord>> {
        Ok(self
            .item(audit_id, "audit record")
            .await?
            .as_ref()
            .map(chained_from)
            .filter(|c| is_chain(&c.chain))
            .map(|c| c.record))
    }
}

impl DynamoAuditLog {
    /// The records about one transaction, in time order, each once: [`Self::by_hash`] and
    /// [`Self::reconciled_in`] each of `periods` and no period.
    pub async fn about<'a>(
        &self,
        source_hash: &str,
        periods: impl IntoIterator<Item = &'a str>,
    ) -> StoreResult<Vec<ChainedRecord>> {
        let by_hash = self.by_hash(source_hash).await?;
        self.with_reconciled(by_hash, source_hash, periods).await
    }

    /// `by_hash` (the transaction's records [`Self::by_hash`] read) with those
    /// [`Self::reconciled_in`] each of `periods` and no period: [`Self::about`], for a caller that
    /// read the first to learn the periods.
    pub async fn with_reconciled<'a>(
        &self,
        by_hash: Vec<ChainedRecord>,
        source_hash: &str,
        periods: impl IntoIterator<Item = &'a str>,
    ) -> StoreResult<Vec<ChainedRecord>> {
        let periods: Vec<Option<&str>> = periods.into_iter().map(Some).chain([None]).collect();
        let reconciled = self.reconciled_in(source_hash, &periods).await?;
        Ok(in_time_order(by_hash.into_iter().chain(reconciled)))
    }

    /// The records about one transaction that `by_source_hash` holds: those a reconciliation does
    /// not read, and every one written before that rule.
    pub async fn by_hash(&self, source_hash: &str) -> StoreResult<Vec<ChainedRecord>> {
        let items = query_index(&self.client, &self.table, &indexes::AUDIT_BY_SOURCE_HASH, source_hash).await?;
        Ok(items.iter().map(chained_from).collect())
    }

    /// The records about one transaction a reconciliation reads, of each of `periods` (`None`:
    /// of no known period), from the one `by_period` shard of each that its hash names. A record
    /// of a period not named is not found.
    pub async fn reconciled_in(&self, source_hash: &str, periods: &[Option<&str>]) -> StoreResult<Vec<ChainedRecord>> {
        let shards: BTreeSet<String> = periods
            .iter()
            .map(|p| exception_period_shard(*p, source_hash))
            .collect();
        let index = &indexes::AUDIT_BY_PERIOD;
        let of_shard = |shard| {
            query_index_where(
                &self.client,
                &self.table,
                index,
                shard,
                (keys::AUDIT_SOURCE_HASH, source_hash),
            )
        };
        let items = futures::future::try_join_all(shards.iter().map(|shard| of_shard(shard))).await?;
        // The filter matched each item's source_hash; one that no longer reads as a record (an
        // edited field) is kept, for verification's name of it.
        Ok(items.iter().flatten().map(chained_from).collect())
    }

    /// Give each record a reconciliation reads that was written before its period index its
    /// entry there: under the period it carries, or — a record from before records carried one —
    /// under no period, which every period's reconciliation reads. Returns how many it indexed.
    pub async fn index_periods(&self, progress: impl FnMut(u64)) -> StoreResult<u64> {
        let kinds = AuditKind::RECONCILED.iter().map(|k| s(k.as_str())).collect();
        let placeholders: Vec<String> = (0..AuditKind::RECONCILED.len()).map(|i| format!(":f{i}")).collect();
        let filter = format!("#f0 IN ({})", placeholders.join(", "));
        let unindexed = Unindexed {
            table: &self.table,
            pk: keys::AUDIT_PK,
            shard: keys::EXCEPTION_PERIOD_SHARD,
            filter: &filter,
            names: &["kind"],
            values: kinds,
            read: &["period", keys::AUDIT_SOURCE_HASH],
        };
        let shard_of = |item: &Item| {
            let id = get_s(item, keys::AUDIT_PK)?;
            let within = sharded_by(get_s(item, keys::AUDIT_SOURCE_HASH), id);
            Some(exception_period_shard(get_s(item, "period"), within))
        };
        index_unindexed(&self.client, unindexed, shard_of, progress).await
    }
}

/// `records` each once (a record written before the rule is in both indexes), in time order.
fn in_time_order(records: impl IntoIterator<Item = ChainedRecord>) -> Vec<ChainedRecord> {
    let once: BTreeMap<String, ChainedRecord> = records.into_iter().map(|c| (c.record.audit_id.clone(), c)).collect();
    let mut records: Vec<ChainedRecord> = once.into_values().collect();
    records.sort_by(|a, b| (a.record.at, &a.record.audit_id).cmp(&(b.record.at, &b.record.audit_id)));
    records
}
