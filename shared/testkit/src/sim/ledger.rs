//! The ledger a run posts to, drawn from its seed: the reference ledger (one conditional write per
//! transaction), or a general ledger behind the reserve -> post -> commit protocol
//! (`recon_core::reservation`), its GL ([`super::gl::SimGl`]) and its dedup table each behind the fault
//! injector. [`SimLedger`] is what the flows are given; [`Books`] is what the oracle reads, with
//! no fault between it and the stores.

use recon_core::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TransientKind, TxKey};
use recon_core::ports::{
    Clock, DedupTable, ExternalLedger, Ledger, LedgerReader, LedgerScope, PostingPage, StoreError, StoreResult,
};
use recon_core::reservation::{ReservationSettings, ReservingLedger};
use std::sync::Arc;

use super::faulty::Faulty;
use super::gl::SimGl;
use crate::memory::{MemoryDedupTable, MemoryLedger};

pub type ClaimingGl = ReservingLedger<Faulty<Arc<SimGl>>, Faulty<Arc<MemoryDedupTable>>>;

/// The ledger as the flows use it.
#[derive(Clone)]
pub enum SimLedger {
    Reference(Arc<MemoryLedger>),
    Claiming(Arc<ClaimingGl>),
}

impl Ledger for SimLedger {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        match self {
            SimLedger::Reference(l) => l.commit(posting).await,
            SimLedger::Claiming(l) => l.commit(posting).await,
        }
    }
    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        match self {
            SimLedger::Reference(l) => l.lookup(key).await,
            SimLedger::Claiming(l) => l.lookup(key).await,
        }
    }
    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        match self {
            SimLedger::Reference(l) => l.hand_off(hand_off).await,
            SimLedger::Claiming(l) => l.hand_off(hand_off).await,
        }
    }
}

/// The stores behind the ledger, as the oracle reads them.
#[derive(Clone)]
pub enum Books {
    Reference(Arc<MemoryLedger>),
    Claiming {
        gl: Arc<SimGl>,
        dedup: Arc<MemoryDedupTable>,
    },
}

impl Books {
    /// The ledger the flows use over these stores (a general ledger's parts behind `faults`).
    pub fn ledger(&self, faults: &Arc<super::faults::Injector>, clock: Arc<dyn Clock>) -> SimLedger {
        match self {
            Books::Reference(l) => SimLedger::Reference(l.clone()),
            Books::Claiming { gl, dedup } => SimLedger::Claiming(Arc::new(ReservingLedger::new(
                Faulty::new(gl.clone(), faults.clone()),
                Faulty::new(dedup.clone(), faults.clone()),
                ReservationSettings::default(),
                clock,
            ))),
        }
    }

    /// The postings so far (a general ledger's requests in progress left so).
    pub fn postings_now(&self) -> Vec<Posting> {
        match self {
            Books::Reference(l) => l.postings(),
            Books::Claiming { gl, .. } => gl.postings_now(),
        }
    }

    /// Every posting (a general ledger's requests still due applied first).
    pub fn postings(&self) -> Vec<Posting> {
        match self {
            Books::Reference(l) => l.postings(),
            Books::Claiming { gl, .. } => gl.postings(),
        }
    }

    /// When each transaction was first committed — posted, or handed off — in the journal's
    /// order (a general ledger: applied by the GL, or marked in the dedup table).
    pub fn commit_log(&self) -> Vec<(u64, String)> {
        let mut log = match self {
            Books::Reference(l) => l.commit_log(),
            Books::Claiming { gl, dedup } => gl.commit_log().into_iter().chain(dedup.commit_log()).collect(),
        };
        log.sort();
        log
    }

    /// Every transaction handed to a manual journal (`manual_journal` names the envelope).
    pub fn hand_offs(&self) -> Vec<CommittedRef> {
        match self {
            Books::Reference(l) => MemoryLedger::hand_offs(l).iter().map(HandOff::committed_ref).collect(),
            Books::Claiming { dedup, .. } => dedup.hand_offs(),
        }
    }
}

impl LedgerReader for Books {
    async fn posting(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        match self {
            Books::Reference(l) => l.posting(key).await,
            Books::Claiming { gl, .. } => gl.posting(key).await,
        }
    }
    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        match self {
            Books::Reference(l) => l.postings_page(scope, cursor, limit).await,
            Books::Claiming { gl, .. } => gl.postings_page(scope, cursor, limit).await,
        }
    }
    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        Ok(Books::hand_offs(self))
    }
}

/// Reads only: the oracle asks what is committed, as the flows' ledger answers it.
impl Ledger for Books {
    async fn commit(&self, _: &Posting) -> StoreResult<CommitOutcome> {
        Err(read_only())
    }
    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        match self {
            Books::Reference(l) => l.lookup(key).await,
            Books::Claiming { gl, dedup } => match dedup.lookup(&key.source_hash).await? {
                Some(c) => Ok(Some(c)),
                None => gl.posted(&key.source_hash).await,
            },
        }
    }
    async fn hand_off(&self, _: &HandOff) -> StoreResult<CommitOutcome> {
        Err(read_only())
    }
}

fn read_only() -> StoreError {
    StoreError::new(
        TransientKind::Infrastructure,
        "the oracle's view of the ledger is read-only",
    )
}
