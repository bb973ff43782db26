//! Durable audit records, hash-chained (see `domain::audit`).

use std::future::Future;
use std::sync::Arc;

use super::StoreResult;
use crate::domain::AuditRecord;
use crate::domain::audit::{ChainHead, ChainedRecord};

pub trait AuditLog: Send + Sync {
    /// Link the record into its chain. Idempotent on `audit_id`: a second append of the same
    /// decision leaves the first record.
    fn append(&self, record: &AuditRecord) -> impl Future<Output = StoreResult<()>> + Send;
    /// Every record of one chain, in `seq` order.
    fn chain(&self, chain: &str) -> impl Future<Output = StoreResult<Vec<ChainedRecord>>> + Send;
    /// The head of every chain that has records.
    fn heads(&self) -> impl Future<Output = StoreResult<Vec<ChainHead>>> + Send;
    /// This trail's identity (created with the trail): seals belong to one trail, so a trail that
    /// is rebuilt (a reset local stack) is not checked against another trail's seals.
    fn trail_id(&self) -> impl Future<Output = StoreResult<String>> + Send;
}

impl<T: AuditLog> AuditLog for Arc<T> {
    fn append(&self, record: &AuditRecord) -> impl Future<Output = StoreResult<()>> + Send {
        (**self).append(record)
    }
    fn chain(&self, chain: &str) -> impl Future<Output = StoreResult<Vec<ChainedRecord>>> + Send {
        (**self).chain(chain)
    }
    fn heads(&self) -> impl Future<Output = StoreResult<Vec<ChainHead>>> + Send {
        (**self).heads()
    }
    fn trail_id(&self) -> impl Future<Output = StoreResult<String>> + Send {
        (**self).trail_id()
    }
}
