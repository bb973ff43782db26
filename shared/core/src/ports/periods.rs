//! The exceptions of one accounting period, read through the stores' period indexes: what a
//! reconciliation of one period reads instead of every envelope and the whole audit trail, so
//! that it costs that period's exceptions, not the history's.

use std::future::Future;

use super::StoreResult;
use crate::domain::{AuditRecord, DlqEnvelope};

port! {
    /// Envelopes by the accounting period of their body's value date.
    pub trait EnvelopesOfPeriod {
        /// Every envelope of `period` (`None`: those whose body gave no readable period).
        fn envelopes_of_period(&self, period: Option<&str>) -> impl Future<Output = StoreResult<Vec<DlqEnvelope>>> + Send;
        /// Does every envelope and record written before the period indexes have its entry
        /// there? Until then a period's read could miss them, and none is made.
        fn periods_indexed(&self) -> impl Future<Output = StoreResult<bool>> + Send;
    }

    /// The audit records a reconciliation reads ([`crate::domain::AuditKind::reconciled`]) by the
    /// accounting period they carry.
    pub trait RecordsOfPeriod {
        /// Those records of `period` (`None`: of no known period, records from before records
        /// carried one among them).
        fn records_of_period(&self, period: Option<&str>) -> impl Future<Output = StoreResult<Vec<AuditRecord>>> + Send;
        /// The record `audit_id`, if the trail holds it (on a chain).
        fn record(&self, audit_id: &str) -> impl Future<Output = StoreResult<Option<AuditRecord>>> + Send;
    }
}
