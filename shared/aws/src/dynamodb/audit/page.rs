//! One page of a chain (`AuditLog::chain_page`): a Query on the chain index with a `Limit`, from
//! the key the page before ended on, so a reader of the whole chain costs one Query per page and
//! holds one page.

use recon_core::domain::audit::ChainedRecord;
use recon_core::ports::{ChainPage, StoreResult};
use recon_core::resources::{indexes, keys};

use super::{DynamoAuditLog, audit_records};
use crate::dynamodb::s;
use crate::dynamodb::{decode_cursor, encode_cursor};
use crate::error::store_error;
use crate::item::get_s;

impl DynamoAuditLog {
    /// The records of `chain` with `seq >= from_seq` (a key condition on the index's zero-padded
    /// `seq_key`), at most `limit`, after the index key `cursor` names. The cursor is the Query's
    /// `LastEvaluatedKey` (which names the record, by its id, not only its `seq`): pages follow
    /// the index's order and skip nothing, two records at one `seq` included. A record whose
    /// `seq_key` was edited is read where the index puts it (verification names it out of order).
    pub(super) async fn read_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        let index = &indexes::AUDIT_BY_CHAIN;
        let start = decode_cursor(cursor)?;
        // The record this page should start with: the one after the key the page before ended on.
        let first = start
            .as_ref()
            .and_then(|k| get_s(k, keys::AUDIT_SEQ_KEY))
            .and_then(|k| k.parse::<u64>().ok())
            .map_or(from_seq.max(1), |seq| seq.saturating_add(1));
        let limit = i32::try_from(limit.max(1)).unwrap_or(i32::MAX);
        let mut attempt = 0;
        loop {
            let mut req = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index.name)
                .key_condition_expression("#k = :v")
                .expression_attribute_names("#k", index.partition_key)
                .expression_attribute_values(":v", s(chain))
                .scan_index_forward(true)
                .limit(limit)
                .set_exclusive_start_key(start.clone());
            if from_seq > 0 {
                req = req
                    .key_condition_expression("#k = :v AND #s >= :from")
                    .expression_attribute_names("#s", index.sort_key)
                    .expression_attribute_values(":from", s(format!("{from_seq:012}")));
            }
            let out = req
                .send()
                .await
                .map_err(|e| store_error("Query(by_chain, one page)", e))?;
            let mut records = audit_records(out.items())?;
            for (item, r) in out.items().iter().zip(records.iter_mut()) {
                edited_index_key(item, r);
            }
            // The index's sort key is an attribute of its own: what it says is not trusted.
            records.retain(|r| r.seq >= from_seq);
            records.sort_by_key(|r| r.seq);
            let next = encode_cursor(out.last_evaluated_key);
            attempt += 1;
            if attempt >= 20 || self.caught_up(chain, first, &records, next.is_none()).await? {
                return Ok((records, next));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Whether the chain index, eventually consistent, shows every record this page should hold:
    /// from `first` without a gap, and on the chain's last page up to its head (read consistently).
    /// A page with no gap that is not the last needs no head read. A page that has not caught up
    /// is read again, a bounded number of times: a gap that stays (a record deleted) is the
    /// verifier's to name.
    async fn caught_up(
        &self,
        chain: &str,
        first: u64,
        records: &[ChainedRecord],
        last_page: bool,
    ) -> StoreResult<bool> {
        let page_end = records.last().map_or(0, |r| r.seq);
        if !last_page && holds_every(first, page_end, records) {
            return Ok(true);
        }
        let (head, _) = self.head(chain).await?;
        let upto = if last_page { head } else { page_end.min(head) };
        Ok(holds_every(first, upto, records))
    }
}

/// A record whose index key `seq_key` is not its own `seq` (which the hash covers) was edited:
/// it is read as unreadable, so verification names it, instead of reading it where the edited key
/// puts it, where the index's order alone would hide or misplace it.
fn edited_index_key(item: &crate::item::Item, r: &mut ChainedRecord) {
    let key = get_s(item, keys::AUDIT_SEQ_KEY);
    if r.unreadable.is_some() || key == Some(format!("{:012}", r.seq).as_str()) {
        return;
    }
    let why = format!(
        "its index key {} is {:?}, not its seq {}: edited",
        keys::AUDIT_SEQ_KEY,
        key.unwrap_or_default(),
        r.seq
    );
    *r = ChainedRecord::unreadable(&r.record.audit_id, &r.chain, r.seq, &r.prev_hash, &r.hash, why);
}

/// Whether `records` hold every `seq` from `first` to `upto` (none when `upto < first`).
fn holds_every(first: u64, upto: u64, records: &[ChainedRecord]) -> bool {
    let mut seqs: Vec<u64> = records
        .iter()
        .map(|r| r.seq)
        .filter(|seq| (first..=upto).contains(seq))
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    seqs.len() as u64 >= upto.saturating_add(1).saturating_sub(first)
}

#[cfg(test)]
mod tests {
    use super::holds_every;
    use recon_core::domain::audit::{ChainedRecord, GENESIS, link};
    use recon_core::domain::{AuditKind, AuditRecord};

    fn records(seqs: &[u64]) -> Vec<ChainedRecord> {
        seqs.iter()
            .map(|&seq| {
                let r = AuditRecord::system(
                    AuditKind::DlqOverflow,
                    &seq.to_string(),
                    chrono::DateTime::UNIX_EPOCH,
                    "t",
                    String::new(),
                );
                link(r, "c0", seq - 1, GENESIS)
            })
            .collect()
    }

    #[test]
    fn a_page_has_caught_up_when_it_holds_every_record_up_to_where_it_must_reach() {
        assert!(holds_every(5, 7, &records(&[5, 6, 7])));
        assert!(
            holds_every(5, 7, &records(&[5, 6, 6, 7, 8])),
            "a record twice is no gap"
        );
        assert!(!holds_every(5, 7, &records(&[5, 7])), "6 not yet in the index");
        assert!(!holds_every(5, 9, &records(&[5, 6, 7])), "the head is further on");
        assert!(
            holds_every(5, 4, &[]),
            "nothing to hold: an empty last page at the head"
        );
        assert!(holds_every(1, 0, &[]), "a chain without records");
        assert!(
            !holds_every(1, u64::MAX, &records(&[1])),
            "no overflow on an edited seq"
        );
    }
}
