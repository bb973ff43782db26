//! The audit trail in memory, chained exactly like the DynamoDB one; it can be tampered with,
//! for the tests of `audit verify`, and made to refuse appends of one kind.

use recon_core::domain::audit::{ChainHead, ChainedRecord, GENESIS, chain_of, link};
use recon_core::domain::{AuditKind, AuditRecord, TransientKind};
use recon_core::ports::{AuditLog, ChainPage, RecordsOfPeriod, StoreError, StoreResult};
use std::collections::HashMap;
use std::sync::Mutex;

use super::lock;

/// The audit trail in memory, chained exactly like the DynamoDB one.
#[derive(Default)]
pub struct MemoryAuditLog {
    state: Mutex<AuditState>,
}

#[derive(Default)]
struct AuditState {
    /// In append order.
    records: Vec<ChainedRecord>,
    heads: HashMap<String, (u64, String)>,
    /// Appends of this kind fail (the table is unavailable to them).
    failing: Option<AuditKind>,
    /// The trail id the table names.
    trail: Option<String>,
    /// The newest seal noted, per trail.
    sealed: std::collections::BTreeMap<String, u64>,
}

impl MemoryAuditLog {
    /// The records, in append order.
    pub fn records(&self) -> Vec<AuditRecord> {
        lock(&self.state).records.iter().map(|c| c.record.clone()).collect()
    }
    /// Make appends of `kind` fail (`None`: none fails).
    pub fn fail_appends_of(&self, kind: Option<AuditKind>) {
        lock(&self.state).failing = kind;
    }
    /// Point the table at another trail id (`None`: at none), as someone who can write to it could.
    pub fn set_trail(&self, trail: Option<&str>) {
        lock(&self.state).trail = trail.map(str::to_owned);
    }
    /// Tamper with the stored trail (tests of `audit verify`).
    pub fn tamper(&self, f: impl FnOnce(&mut Vec<ChainedRecord>)) {
        f(&mut lock(&self.state).records);
    }
}

impl RecordsOfPeriod for MemoryAuditLog {
    async fn records_of_period(&self, period: Option<&str>) -> StoreResult<Vec<AuditRecord>> {
        let s = lock(&self.state);
        Ok(s.records
            .iter()
            .map(|c| &c.record)
            .filter(|r| r.kind.reconciled() && r.period.as_deref() == period)
            .cloned()
            .collect())
    }

    async fn record(&self, audit_id: &str) -> StoreResult<Option<AuditRecord>> {
        let s = lock(&self.state);
        Ok(s.records
            .iter()
            .map(|c| &c.record)
            .find(|r| r.audit_id == audit_id)
            .cloned())
    }
}

impl MemoryAuditLog {
    /// [`AuditLog::append`], at once (another store links records in its own writes with it).
    pub fn append_now(&self, record: &AuditRecord) -> StoreResult<Option<u64>> {
        let mut s = lock(&self.state);
        if s.failing == Some(record.kind) {
            return Err(StoreError::new(
                TransientKind::ServiceUnavailable,
                "audit table unavailable (injected)",
            ));
        }
        if s.records.iter().any(|r| r.record.audit_id == record.audit_id) {
            return Ok(None);
        }
        let chain = chain_of(&record.audit_id);
        let (seq, hash) = s.heads.get(&chain).cloned().unwrap_or((0, GENESIS.to_owned()));
        let linked = link(record.clone(), &chain, seq, &hash);
        s.heads.insert(chain, (linked.seq, linked.hash.clone()));
        let seq = linked.seq;
        s.records.push(linked);
        Ok(Some(seq))
    }
}

impl AuditLog for MemoryAuditLog {
    async fn append(&self, record: &AuditRecord) -> StoreResult<Option<u64>> {
        self.append_now(record)
    }

    /// The cursor is how many of the chain's records from `from_seq` on (in `seq` order, records at
    /// one `seq` in append order) the pages before returned: an append lands after them all.
    async fn chain_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        let skip: usize = match cursor {
            None => 0,
            Some(c) => c.parse().map_err(|_| {
                StoreError::new(
                    TransientKind::Infrastructure,
                    format!("audit chain page cursor {c:?} is not one this log returned"),
                )
            })?,
        };
        let s = lock(&self.state);
        let mut all: Vec<&ChainedRecord> = s
            .records
            .iter()
            .filter(|r| r.chain == chain && r.seq >= from_seq)
            .collect();
        all.sort_by_key(|r| r.seq);
        let end = skip.saturating_add(limit.max(1)).min(all.len());
        let page = all
            .get(skip..end)
            .unwrap_or_default()
            .iter()
            .map(|r| (*r).clone())
            .collect();
        Ok((page, (end < all.len()).then(|| end.to_string())))
    }

    async fn current_trail(&self) -> StoreResult<Option<String>> {
        Ok(lock(&self.state).trail.clone())
    }

    async fn start_trail(&self, candidate: &str) -> StoreResult<String> {
        Ok(lock(&self.state)
            .trail
            .get_or_insert_with(|| candidate.to_owned())
            .clone())
    }

    async fn sealed_up_to(&self, trail: &str) -> StoreResult<Option<u64>> {
        Ok(lock(&self.state).sealed.get(trail).copied())
    }

    async fn note_seal(&self, trail: &str, seq: u64) -> StoreResult<()> {
        let mut state = lock(&self.state);
        let noted = state.sealed.entry(trail.to_owned()).or_default();
        *noted = (*noted).max(seq);
        Ok(())
    }

    async fn heads(&self) -> StoreResult<Vec<ChainHead>> {
        let mut out: Vec<_> = lock(&self.state)
            .heads
            .iter()
            .map(|(chain, (seq, hash))| ChainHead {
                chain: chain.clone(),
                seq: *seq,
                hash: hash.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.chain.cmp(&b.chain));
        Ok(out)
    }
}
