//! Approval requests in the envelope table: `#request#<id>` items, listed newest first through
//! the status index under their own status value (never among envelopes: every envelope read
//! skips `#` keys). Each change is a put conditional on the version it was made from.

use aws_sdk_dynamodb::types::Put;
use recon_core::domain::AuditRecord;
use recon_core::domain::approval::ApprovalRequest;
use recon_core::ports::{ApprovalRequests, RequestPage, StoreResult};
use recon_core::resources::{indexes, keys};

use super::envelopes::{DynamoEnvelopeStore, outbox_put};
use super::transact::{transact_applied, tx_put};
use super::{decode_cursor, encode_cursor, item_error, n, s};
use crate::error::store_error;
use crate::item::{Item, from_item, to_item};

fn key(id: &str) -> String {
    format!("{}{id}", keys::ENVELOPE_REQUEST_PREFIX)
}

fn request_item(r: &ApprovalRequest) -> StoreResult<Item> {
    let mut item = to_item(r).map_err(|e| item_error("approval request item", e))?;
    item.insert(keys::ENVELOPE_PK.into(), s(key(&r.request_id)));
    item.insert(keys::ENVELOPE_STATUS.into(), s(keys::ENVELOPE_REQUEST_STATUS));
    item.insert(
        keys::ENVELOPE_AGE.into(),
        s(format!(
            "{}#{}",
            r.created_at.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
            r.request_id
        )),
    );
    Ok(item)
}

fn request_of(item: &Item) -> StoreResult<ApprovalRequest> {
    from_item(item).map_err(|e| item_error("approval request", e))
}

impl DynamoEnvelopeStore {
    /// Put `r` under `condition`, with `record` in the outbox, in one transaction.
    async fn put_request(
        &self,
        r: &ApprovalRequest,
        record: Option<&AuditRecord>,
        condition: &str,
        prev: Option<u64>,
    ) -> StoreResult<bool> {
        let mut put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(request_item(r)?))
            .condition_expression(condition)
            .expression_attribute_names("#pk", keys::ENVELOPE_PK);
        if let Some(prev) = prev {
            put = put
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":prev", n(i64::try_from(prev).unwrap_or(i64::MAX)));
        }
        let mut req = self
            .client
            .transact_write_items()
            .transact_items(tx_put(put, "approval request put")?);
        if let Some(record) = record {
            req = req.transact_items(outbox_put(&self.table, record)?);
        }
        transact_applied(req, "TransactWriteItems(approval request)").await
    }
}

impl ApprovalRequests for DynamoEnvelopeStore {
    async fn create_request(&self, r: &ApprovalRequest, record: &AuditRecord) -> StoreResult<bool> {
        self.put_request(r, Some(record), "attribute_not_exists(#pk)", None)
            .await
    }

    async fn get_request(&self, id: &str) -> StoreResult<Option<ApprovalRequest>> {
        self.item(&key(id), "approval request")
            .await?
            .as_ref()
            .map(request_of)
            .transpose()
    }

    async fn list_requests(&self, cursor: Option<String>, limit: usize) -> StoreResult<RequestPage> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(indexes::BY_STATUS_AGE.name)
            .key_condition_expression("#status = :s")
            .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
            .expression_attribute_values(":s", s(keys::ENVELOPE_REQUEST_STATUS))
            .scan_index_forward(false)
            .limit(i32::try_from(limit.clamp(1, 100)).unwrap_or(100))
            .set_exclusive_start_key(decode_cursor(cursor)?)
            .send()
            .await
            .map_err(|e| store_error("Query(approval requests)", e))?;
        // An item that does not read back as a request is named in the log and left out: one
        // bad item must not hide every other request.
        let requests = out
            .items()
            .iter()
            .filter_map(|i| {
                request_of(i)
                    .inspect_err(
                        |e| tracing::error!(error = %e, "an approval request item does not read back; left out"),
                    )
                    .ok()
            })
            .collect();
        Ok((requests, encode_cursor(out.last_evaluated_key)))
    }

    async fn update_request(&self, r: &ApprovalRequest, record: Option<&AuditRecord>) -> StoreResult<bool> {
        let prev = r.version.saturating_sub(1);
        self.put_request(r, record, "attribute_exists(#pk) AND #v = :prev", Some(prev))
            .await
    }
}
