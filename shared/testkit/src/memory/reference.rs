//! Reference data in memory: currencies and periods, one snapshot rebuilt on every write.

use recon_core::domain::approval::ApprovalPolicy;
use recon_core::domain::{CurrencyMapping, PeriodRecord, PeriodStatus, ReferenceSnapshot};
use recon_core::ports::{ReferenceData, StoreResult};
use std::sync::{Arc, Mutex, RwLock};

use super::lock;

#[derive(Default)]
pub struct MemoryReferenceData {
    currencies: Mutex<Vec<CurrencyMapping>>,
    periods: Mutex<Vec<PeriodRecord>>,
    approval: Mutex<ApprovalPolicy>,
    snapshot: RwLock<Arc<ReferenceSnapshot>>,
}

impl MemoryReferenceData {
    fn rebuild(&self) {
        let snap = ReferenceSnapshot::new(lock(&self.currencies).clone(), lock(&self.periods).clone())
            .with_approval(lock(&self.approval).clone());
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snap);
    }
}

impl ReferenceData for MemoryReferenceData {
    async fn snapshot(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        Ok(self.snapshot.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
    async fn refresh(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        self.snapshot().await
    }
    async fn put_currency(&self, mapping: &CurrencyMapping) -> StoreResult<()> {
        {
            let mut c = lock(&self.currencies);
            c.retain(|m| m.code != mapping.code);
            c.push(mapping.clone());
        }
        self.rebuild();
        Ok(())
    }
    async fn put_period(&self, record: &PeriodRecord) -> StoreResult<()> {
        {
            let mut p = lock(&self.periods);
            let closed = p
                .iter()
                .any(|r| r.entity == record.entity && r.period == record.period && r.status == PeriodStatus::Closed);
            if record.closes_on.is_some() && closed {
                // As DynamoDB's condition: a planned close never reopens a closed period.
                return Err(recon_core::ports::StoreError::new(
                    recon_core::domain::TransientKind::Conflict,
                    format!(
                        "{} of {} is closed: a closed period has no planned close",
                        record.period, record.entity
                    ),
                ));
            }
            p.retain(|r| !(r.entity == record.entity && r.period == record.period));
            p.push(record.clone());
        }
        self.rebuild();
        Ok(())
    }
    async fn put_approval_policy(&self, policy: &ApprovalPolicy) -> StoreResult<()> {
        *lock(&self.approval) = policy.clone();
        self.rebuild();
        Ok(())
    }
}
