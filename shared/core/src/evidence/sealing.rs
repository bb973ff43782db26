//! The append path's seal: an audit log that seals the trail whenever one of its chains reaches a
//! multiple of `every_records`, so the unsealed window is bounded by the volume of records whatever
//! the health of the sweep (the seal schedule bounds it in time).

use std::sync::Arc;

use super::anchors::seal;
use crate::domain::AuditRecord;
use crate::domain::audit::ChainHead;
use crate::ports::{AuditLog, ChainPage, Clock, RecordsOfPeriod, StoreResult, Worm};

pub struct SealingAuditLog<A, W> {
    pub log: A,
    pub worm: W,
    pub clock: Arc<dyn Clock>,
    /// Seal when an append links a record at a multiple of this `seq`.
    pub every_records: u64,
}

impl<A: AuditLog, W: Worm> SealingAuditLog<A, W> {
    /// Seal when one of the records was linked at a multiple of `every_records` (one seal
    /// covers every chain, so one is enough for several such records).
    async fn seal_at(&self, linked: impl IntoIterator<Item = u64>) {
        let due = self.every_records > 0 && linked.into_iter().any(|seq| seq % self.every_records == 0);
        if due {
            // The records are in the trail either way: a seal that fails here is the seal
            // schedule's to write, and verify reports the tail until one is.
            match seal(&self.log, &self.worm, self.clock.now()).await {
                Ok((key, s)) => tracing::info!(seal = %key, root = %s.root, "audit chains sealed on the append path"),
                Err(e) => tracing::warn!(error = %e, "append-path seal not written; the seal schedule writes the next"),
            }
        }
    }
}

impl<A: RecordsOfPeriod, W: Send + Sync> RecordsOfPeriod for SealingAuditLog<A, W> {
    async fn records_of_period(&self, period: Option<&str>) -> StoreResult<Vec<AuditRecord>> {
        self.log.records_of_period(period).await
    }
    async fn record(&self, audit_id: &str) -> StoreResult<Option<AuditRecord>> {
        self.log.record(audit_id).await
    }
}

impl<A: AuditLog, W: Worm> AuditLog for SealingAuditLog<A, W> {
    async fn append(&self, record: &AuditRecord) -> StoreResult<Option<u64>> {
        let linked = self.log.append(record).await?;
        self.seal_at(linked).await;
        Ok(linked)
    }
    async fn append_many(&self, records: &[AuditRecord]) -> StoreResult<Vec<Option<u64>>> {
        let linked = self.log.append_many(records).await?;
        self.seal_at(linked.iter().flatten().copied()).await;
        Ok(linked)
    }
    async fn linked_elsewhere(&self, seqs: &[u64]) {
        self.log.linked_elsewhere(seqs).await;
        self.seal_at(seqs.iter().copied()).await;
    }
    async fn chain_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        self.log.chain_page(chain, from_seq, cursor, limit).await
    }
    async fn heads(&self) -> StoreResult<Vec<ChainHead>> {
        self.log.heads().await
    }
    async fn current_trail(&self) -> StoreResult<Option<String>> {
        self.log.current_trail().await
    }
    async fn start_trail(&self, candidate: &str) -> StoreResult<String> {
        self.log.start_trail(candidate).await
    }
    async fn sealed_up_to(&self, trail: &str) -> StoreResult<Option<u64>> {
        self.log.sealed_up_to(trail).await
    }
    async fn note_seal(&self, trail: &str, seq: u64) -> StoreResult<()> {
        self.log.note_seal(trail, seq).await
    }
}
