//! Reference data: currencies and accounting periods, read by validation and changed by
//! operators.

use std::future::Future;
use std::sync::Arc;

use super::StoreResult;
use crate::domain::approval::ApprovalPolicy;
use crate::domain::{CurrencyMapping, PeriodRecord, ReferenceSnapshot};

port! {
    pub trait ReferenceData {
        /// A recent view of all reference data (adapters may cache it briefly; see docs/contract.md, "Reference data").
        fn snapshot(&self) -> impl Future<Output = StoreResult<Arc<ReferenceSnapshot>>> + Send;
        /// A snapshot at most a moment old: after a validation failed on reference data, so that a
        /// fix (a currency mapped, a period reopened) is seen at once rather than after the cache.
        fn refresh(&self) -> impl Future<Output = StoreResult<Arc<ReferenceSnapshot>>> + Send;
        fn put_currency(&self, mapping: &CurrencyMapping) -> impl Future<Output = StoreResult<()>> + Send;
        /// Write a period's status. A record with a planned close (`closes_on`) is written only
        /// over an open or unrecorded period: a conflict if it is closed (never reopened by a plan).
        fn put_period(&self, record: &PeriodRecord) -> impl Future<Output = StoreResult<()>> + Send;
        /// Replace the approval policy (the reference table's stream audits the change).
        fn put_approval_policy(&self, policy: &ApprovalPolicy) -> impl Future<Output = StoreResult<()>> + Send;
    }
}
