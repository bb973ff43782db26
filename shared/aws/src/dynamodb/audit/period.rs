//! The audit records a reconciliation reads, by accounting period (the `by_period` index: the
//! records of [`AuditKind::reconciled`] kinds only, each under its period's shard), and the
//! entries of the records written before records carried their period.

use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::domain::audit::is_chain;
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::ports::{RecordsOfPeriod, StoreResult};
use recon_core::resources::{exception_period_shard, indexes, keys};

use super::{DynamoAuditLog, chained_from};
use crate::dynamodb::backfill::{Unindexed, index_unindexed};
use crate::dynamodb::{query_period, s};
use crate::item::{Item, get_s};

/// The index entry of a record a reconciliation reads (none for the others).
pub(super) fn period_entry(record: &AuditRecord) -> Option<(String, AttributeValue)> {
    record
        .kind
        .reconciled()
        .then(|| crate::dynamodb::period_entry(record.period.as_deref(), &record.audit_id))
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
            read: &["period"],
        };
        let shard_of = |item: &Item| {
            let id = get_s(item, keys::AUDIT_PK)?;
            Some(exception_period_shard(get_s(item, "period"), id))
        };
        index_unindexed(&self.client, unindexed, shard_of, progress).await
    }
}
