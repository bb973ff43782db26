//! What the memory stores did, in one order: every claim and renewal of an envelope, every
//! transaction committed (posted or handed off), every copy a replay re-injected, numbered by one
//! counter. The simulator's oracle checks each layer's own protocol by it (a lease honoured,
//! gate 2 asked under the claim), not only the end state a later layer may rescue.
//!
//! The counter is per thread: a simulated run is one thread, and tests on other threads keep
//! their own.

use chrono::{DateTime, Utc};
use std::cell::Cell;

thread_local! {
    static NEXT: Cell<u64> = const { Cell::new(0) };
}

/// The next position in the order of events.
pub fn tick() -> u64 {
    NEXT.with(|n| {
        let v = n.get() + 1;
        n.set(v);
        v
    })
}

/// A claim of an envelope (or a renewal of one), as the store wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimEvent {
    pub at: u64,
    pub envelope_id: String,
    pub replay_id: String,
    /// The claimer's wall-clock time.
    pub now: DateTime<Utc>,
    pub lease_until: DateTime<Utc>,
    /// A renewal of the claim by its holder (not a new claim).
    pub renewal: bool,
    /// Its status change is flagged for a manual journal: the holder's intent to hand the
    /// transaction off, which a replay taking the claim over must finish.
    pub intent: bool,
    /// The claim it took over (an expired lease), with that claim's last event.
    pub took_over: Option<Box<ClaimEvent>>,
}
