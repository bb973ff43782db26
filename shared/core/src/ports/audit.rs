//! Durable audit records, hash-chained (see `domain::audit`).

use std::future::Future;

use super::StoreResult;
use crate::domain::AuditRecord;
use crate::domain::audit::{ChainHead, ChainedRecord};

/// A page of one chain's records and the opaque cursor of the next page (`None`: the chain ends
/// here).
pub type ChainPage = (Vec<ChainedRecord>, Option<String>);

port! {
    pub trait AuditLog {
        /// Link the record into its chain. Idempotent on `audit_id`: a second append of the same
        /// decision leaves the first record. Returns the `seq` it was linked at (`None`: already
        /// recorded).
        fn append(&self, record: &AuditRecord) -> impl Future<Output = StoreResult<Option<u64>>> + Send;
        /// [`AuditLog::append`] of several records, each idempotent on its `audit_id`; the `seq`
        /// of each, in order. A store that can link records of several chains in one write does so;
        /// the default appends one after another. On an error some records may be linked: appending
        /// them all again links the rest and leaves those.
        fn append_many(&self, records: &[AuditRecord]) -> impl Future<Output = StoreResult<Vec<Option<u64>>>> + Send {
            async move {
                let mut linked = Vec::with_capacity(records.len());
                for r in records {
                    linked.push(self.append(r).await?);
                }
                Ok(linked)
            }
        }
        /// Records were linked into the trail at these `seq`s by another writer of the same store
        /// (the envelope store, in the write that settled their envelopes): a wrapper that acts on
        /// its own appends (sealing) acts as after them. The default does nothing.
        fn linked_elsewhere(&self, _seqs: &[u64]) -> impl Future<Output = ()> + Send {
            async {}
        }
        /// The records of one chain from `from_seq` on (`seq >= from_seq`), a page at a time, so that a
        /// reader holds one page, not the chain: at most `limit` records (a `limit` of 0 is taken as
        /// 1), in `seq` order, from where `cursor` left off (`None`: the first page; otherwise the
        /// cursor the page before returned, with the same `chain` and `from_seq`).
        ///
        /// The chain ends when the cursor returned is `None`; a page may hold fewer than `limit`
        /// records, even none, and still name a next one (a store's own limits on a response). Every
        /// record is on exactly one page, two records at the same `seq` (a forged one) included: the
        /// cursor marks a record, not a `seq`, so the next page starts with the record after it.
        /// Records appended while the pages are read may be on a later page. The one read of a
        /// chain: [`read_chain`] reads one whole, page by page.
        fn chain_page(
            &self,
            chain: &str,
            from_seq: u64,
            cursor: Option<String>,
            limit: usize,
        ) -> impl Future<Output = StoreResult<ChainPage>> + Send;
        /// The head of every chain that has records.
        fn heads(&self) -> impl Future<Output = StoreResult<Vec<ChainHead>>> + Send;
        /// The trail id the table names (a mutable pointer: the trail's identity is its anchor in the
        /// WORM bucket, see `evidence`). `None` before the first seal.
        fn current_trail(&self) -> impl Future<Output = StoreResult<Option<String>>> + Send;
        /// The trail id the table names, or `candidate` stored as it when it names none (a
        /// conditional write: concurrent callers agree on one).
        fn start_trail(&self, candidate: &str) -> impl Future<Output = StoreResult<String>> + Send;
        /// The number of the newest seal of `trail` a sealer noted ([`AuditLog::note_seal`]):
        /// where the next sealer starts reading the bucket. A hint, never evidence: a wrong one
        /// costs a longer read. The default notes nothing (`None`: read every seal).
        fn sealed_up_to(&self, _trail: &str) -> impl Future<Output = StoreResult<Option<u64>>> + Send {
            async { Ok(None) }
        }
        /// Note that seal `seq` of `trail` was written (kept only if higher than the one noted).
        fn note_seal(&self, _trail: &str, _seq: u64) -> impl Future<Output = StoreResult<()>> + Send {
            async { Ok(()) }
        }
    }
}

/// Records a [`read_chain`] page holds.
const READ_PAGE: usize = 1000;

/// The records of one chain from `from_seq` on (`seq >= from_seq`), in `seq` order, read a page at
/// a time ([`AuditLog::chain_page`]) into one list: for a caller that wants the chain whole (the
/// evidence streams pages instead).
pub async fn read_chain<A: AuditLog + ?Sized>(log: &A, chain: &str, from_seq: u64) -> StoreResult<Vec<ChainedRecord>> {
    let (mut out, mut cursor) = (Vec::new(), super::ledger::Cursor::new("audit chain read"));
    while let Some(at) = cursor.at() {
        let (page, next) = log.chain_page(chain, from_seq, at, READ_PAGE).await?;
        out.extend(page);
        cursor.follow(next)?;
    }
    Ok(out)
}
