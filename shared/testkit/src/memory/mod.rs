//! In-memory adapters with the same semantics as the AWS ones (conditional commit, idempotent
//! audit ids, the envelope life cycle, the PENDING count), for unit tests, benchmarks and the
//! deterministic simulator. One module per port.

mod audit;
mod clock;
mod envelopes;
pub mod journal;
mod ledger;
pub mod limits;
mod metrics;
mod queues;
mod reference;
mod signer;
mod worm;

pub use audit::MemoryAuditLog;
pub use clock::FixedClock;
pub use envelopes::MemoryEnvelopeStore;
pub use ledger::{MemoryDedupTable, MemoryGeneralLedger, MemoryLedger};
pub use metrics::MemoryMetrics;
pub use queues::{MemoryDeadLetterQueue, MemoryReplayQueue, MemoryWorkQueue};
pub use reference::MemoryReferenceData;
pub use signer::MemorySigner;
pub use worm::MemoryWorm;

use std::sync::{Mutex, MutexGuard};

/// Lock a mutex, recovering from poisoning: a panicking test thread must not hide the state.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
