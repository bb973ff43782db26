//! Fault injection around a real ledger, for tests and the demo: makes chosen transactions fail
//! transiently a number of times (or forever) before reaching the store. It is never wired into
//! the deployed functions.

use std::collections::HashMap;
use std::sync::Mutex;

use recon_core::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TransientKind};
use recon_core::ports::{Ledger, StoreError, StoreResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail the next `n` commits of this transaction, then let them through.
    Times(u32),
    /// Fail every commit of this transaction.
    Always,
}

pub struct FaultyLedger<L> {
    inner: L,
    kind: TransientKind,
    plan: Mutex<HashMap<String, Fault>>,
}

impl<L> FaultyLedger<L> {
    pub fn new(inner: L, kind: TransientKind) -> Self {
        FaultyLedger {
            inner,
            kind,
            plan: Mutex::new(HashMap::new()),
        }
    }

    /// Inject `fault` for the transaction with this `source_hash`.
    pub fn inject(&self, source_hash: &str, fault: Fault) {
        self.plan
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(source_hash.to_owned(), fault);
    }

    /// End every injected fault (the outage is over).
    pub fn heal(&self) {
        self.plan.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub fn inner(&self) -> &L {
        &self.inner
    }

    fn should_fail(&self, source_hash: &str) -> bool {
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        match plan.get_mut(source_hash) {
            Some(Fault::Always) => true,
            Some(Fault::Times(n)) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}

impl<L: Ledger> Ledger for FaultyLedger<L> {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        if self.should_fail(&posting.source_hash) {
            return Err(StoreError::new(self.kind, "ledger unavailable (injected fault)"));
        }
        self.inner.commit(posting).await
    }

    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        self.inner.lookup(source_hash).await
    }

    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        if self.should_fail(&hand_off.source_hash) {
            return Err(StoreError::new(self.kind, "ledger unavailable (injected fault)"));
        }
        self.inner.hand_off(hand_off).await
    }
}
