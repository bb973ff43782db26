//! Approval requests: kept beside the envelopes they name, each change written only over the
//! version it was made from (two approvers, or an approval racing an expiry, cannot both win).

use std::future::Future;

use super::StoreResult;
use crate::domain::AuditRecord;
use crate::domain::approval::ApprovalRequest;

/// A page of requests, newest first, and the opaque cursor of the next one.
pub type RequestPage = (Vec<ApprovalRequest>, Option<String>);

port! {
    pub trait ApprovalRequests {
        /// Store a new request with its audit record in the outbox, at once (`false`: one with its
        /// id exists, nothing written).
        fn create_request(
            &self,
            r: &ApprovalRequest,
            record: &AuditRecord,
        ) -> impl Future<Output = StoreResult<bool>> + Send;
        fn get_request(&self, id: &str) -> impl Future<Output = StoreResult<Option<ApprovalRequest>>> + Send;
        fn list_requests(
            &self,
            cursor: Option<String>,
            limit: usize,
        ) -> impl Future<Output = StoreResult<RequestPage>> + Send;
        /// Replace the request stored at version `r.version - 1` by `r`, with the step's audit record
        /// (if it has one) in the outbox, at once (`false`: it has moved on, nothing written).
        fn update_request(
            &self,
            r: &ApprovalRequest,
            record: Option<&AuditRecord>,
        ) -> impl Future<Output = StoreResult<bool>> + Send;
    }
}
