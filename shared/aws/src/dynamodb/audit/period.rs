//! The audit records a reconciliation reads, by accounting period (the `by_period` index: the
//! records of [`AuditKind::reconciled`] kinds only, each under its period's shard), and the
//! entries of the records written before records carried their period.

use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::ports::{RecordsOfPeriod, StoreResult};
use recon_core::resources::{exception_period_shard, exception_period_shards, indexes, keys};

use super::{DynamoAuditLog, chained_from};
use crate::dynamodb::backfill::{Unindexed, index_unindexed};
use crate::dynamodb::{query_index, s};
use crate::item::{Item, get_s};

/// The index entry of a record a reconciliation reads (none for the others).
pub(super) fn period_entry(record: &AuditRecord) -> Option<(String, AttributeValue)> {
    record.kind.reconciled().then(|| {
        (
            keys::EXCEPTION_PERIOD_SHARD.to_owned(),
            s(exception_period_shard(record.period.as_deref(), &record.audit_id)),
        )
    })
}

impl RecordsOfPeriod for DynamoAuditLog {
    async fn records_of_period(&self, period: Option<&str>) -> StoreResult<Vec<AuditRecord>> {
        let shards: Vec<String> = exception_period_shards(period).collect();
        let pages = futures::future::try_join_all(
            shards
                .iter()
                .map(|shard| query_index(&self.client, &self.table, &indexes::AUDIT_BY_PERIOD, shard)),
        )
        .await?;
        Ok(pages
            .iter()
            .flatten()
            .map(|item| chained_from(item).record)
            .filter(|r| r.kind.reconciled())
            .collect())
    }
}

impl DynamoAuditLog {
    /// Give each record a reconciliation reads that was written before its period index its
    /// entry there: under the period it carries, or — a record from before records carried one —
    /// under no period, which every period's reconciliation reads. Returns how many it indexed.
    pub async fn index_periods(&self, progress: impl FnMut(u64)) -> StoreResult<u64> {
        let kinds = AuditKind::RECONCILED.iter().map(|k| s(k.as_str())).collect();
        let unindexed = Unindexed {
            table: &self.table,
            pk: keys::AUDIT_PK,
            shard: keys::EXCEPTION_PERIOD_SHARD,
            filter: "#f0 IN (:f0, :f1, :f2, :f3)",
            names: &["kind"],
            values: kinds,
            read: &["period"],
        };
        let shard_of = |item: &Item| {
            let id = get_s(item, keys::AUDIT_PK)?;
            Some(exception_period_shard(get_s(item, "period"), id))
        };
        index_unindexed(&self.client, unindexed, shard_of, progress).await
    }
}
