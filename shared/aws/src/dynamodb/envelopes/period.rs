//! Envelopes by accounting period: the `by_period` index holds each envelope's key under its
//! period's shard (keys only, so a status change costs the index nothing); a period's envelopes
//! are its keys, then the envelopes themselves, read strongly consistent.

use chrono::{DateTime, Utc};
use recon_core::domain::DlqEnvelope;
use recon_core::ports::{EnvelopesOfPeriod, StoreResult};
use recon_core::resources::{exception_period_shard, indexes, keys};

use super::{DynamoEnvelopeStore, envelopes_of};
use crate::dynamodb::backfill::{Unindexed, index_unindexed};
use crate::dynamodb::batch::get_many;
use crate::dynamodb::{query_period, s};
use crate::error::store_error;
use crate::item::{Item, get_s};

/// The index entry of an envelope.
pub(super) fn period_entry(e: &DlqEnvelope) -> (String, aws_sdk_dynamodb::types::AttributeValue) {
    crate::dynamodb::period_entry(e.accounting_period.as_deref(), &e.envelope_id)
}

impl EnvelopesOfPeriod for DynamoEnvelopeStore {
    async fn envelopes_of_period(&self, period: Option<&str>) -> StoreResult<Vec<DlqEnvelope>> {
        let entries = query_period(&self.client, &self.table, &indexes::ENVELOPES_BY_PERIOD, period).await?;
        let ids: Vec<String> = entries
            .iter()
            .filter_map(|k| get_s(k, keys::ENVELOPE_PK).map(str::to_owned))
            .collect();
        let items = get_many(&self.client, &self.table, keys::ENVELOPE_PK, &ids).await?;
        // The index is read eventually consistent; the envelope itself is the truth.
        let envelopes = envelopes_of(&items)?;
        Ok(envelopes
            .into_iter()
            .filter(|e| e.accounting_period.as_deref() == period)
            .collect())
    }
    async fn periods_indexed(&self) -> StoreResult<bool> {
        DynamoEnvelopeStore::periods_indexed(self).await
    }
}

impl DynamoEnvelopeStore {
    /// Does every item written before the period indexes have its entry there (the marker
    /// [`keys::ENVELOPE_PERIODS_MARKER`], read strongly consistent)?
    pub async fn periods_indexed(&self) -> StoreResult<bool> {
        Ok(self
            .item(keys::ENVELOPE_PERIODS_MARKER, "periods marker")
            .await?
            .is_some())
    }

    /// Say that every item written before the period indexes has its entry there: `how` (the
    /// backfill done, or tables created with their indexes), at `at`.
    pub async fn mark_periods_indexed(&self, how: &str, at: DateTime<Utc>) -> StoreResult<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item(keys::ENVELOPE_PK, s(keys::ENVELOPE_PERIODS_MARKER))
            .item("how", s(how))
            .item("at", s(at.to_rfc3339()))
            .send()
            .await
            .map_err(|e| store_error("PutItem(periods marker)", e))?;
        Ok(())
    }

    /// Give each envelope written before the period index its entry there. Returns how many it
    /// indexed.
    pub async fn index_periods(&self, progress: impl FnMut(u64)) -> StoreResult<u64> {
        let unindexed = Unindexed {
            table: &self.table,
            pk: keys::ENVELOPE_PK,
            shard: keys::EXCEPTION_PERIOD_SHARD,
            filter: "NOT begins_with(#f0, :f0)",
            names: &[keys::ENVELOPE_PK],
            values: vec![s("#")],
            read: &["accounting_period"],
        };
        let shard_of = |item: &Item| {
            let id = get_s(item, keys::ENVELOPE_PK)?;
            Some(exception_period_shard(get_s(item, "accounting_period"), id))
        };
        index_unindexed(&self.client, unindexed, shard_of, progress).await
    }
}
