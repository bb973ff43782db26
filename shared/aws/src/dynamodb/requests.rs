//! Approval requests in the envelope table: `#request#<id>` items, listed newest first through
//! the status index under their own status value (never among envelopes: every envelope read
//! skips `#` keys). Each change is a put conditional on the version it was made from.

use aws_sdk_dynamodb::types::Put;
use recon_core::domain::AuditRecord;
use recon_core::domain::approval::ApprovalRequest;
use recon_core::ports::{ApprovalRequests, RequestPage, StoreResult};
use recon_core::resources::keys;

use super::envelopes::{DynamoEnvelopeStore, outbox_put};
use super::transact::{transact_applied, tx_put};
use super::{item_error, n, s};
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
        let limit = limit.clamp(1, 100);
        let (items, next) = self
            .query_status(
                keys::ENVELOPE_REQUEST_STATUS,
                false,
                limit,
                cursor,
                "Query(approval requests)",
            )
            .await?;
        // An item that does not read back as a request is named in the log and left out: one
        // bad item must not hide every other request.
        let requests = items
            .iter()
            .filter_map(|i| {
                request_of(i)
                    .inspect_err(
                        |e| tracing::error!(error = %e, "an approval request item does not read back; left out"),
                    )
                    .ok()
            })
            .collect();
        Ok((requests, next))
    }

    async fn update_request(&self, r: &ApprovalRequest, record: Option<&AuditRecord>) -> StoreResult<bool> {
        let prev = r.version.saturating_sub(1);
        self.put_request(r, record, "attribute_exists(#pk) AND #v = :prev", Some(prev))
            .await
    }
}
