//! The life of an envelope: its statuses and the one table of the changes allowed between them.
//!
//! ```text
//!            create                 claim                finish
//!   (new) ─────────► PENDING ───────────────► REPLAYING ─────────► REPLAYED
//!     │                 ▲                     │   ▲  │  ├────────► SUPPRESSED_DUPLICATE
//!     │                 └──── release ────────┘   │  │  ├────────► QUARANTINED
//!     │                                           └──┘  └────────► SUPERSEDED (an approved edit)
//!     │                                    takeover of an expired lease
//!     └──────────────────────────────────────────────────────────► QUARANTINED (unidentifiable)
//! ```
//!
//! Every change happens under a replay's claim (REPLAYING), so two replays never decide one
//! envelope; REPLAYED, SUPPRESSED_DUPLICATE, QUARANTINED and SUPERSEDED are terminal. Every store checks
//! [`check_transition`] (and [`check_initial`] on creation) before it writes, so an illegal
//! change is refused with [`IllegalTransition`] whatever the store, not only where a condition
//! expression happens to catch it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

named! {
    /// Where an envelope is in its life.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum EnvelopeStatus {
        /// Waiting for its root cause to be fixed and a replay.
        Pending = "PENDING",
        /// Claimed by a replay (lease).
        Replaying = "REPLAYING",
        /// Re-injected into the main queue.
        Replayed = "REPLAYED",
        /// Its transaction was already committed: never re-injected.
        SuppressedDuplicate = "SUPPRESSED_DUPLICATE",
        /// Terminal: kept in the WORM bucket for audit and manual handling.
        Quarantined = "QUARANTINED",
        /// Terminal: an approved edit of its body was posted as a new message that names it; the
        /// original stays as it came (its WORM copy untouched).
        Superseded = "SUPERSEDED",
    }
}

/// One entry of an envelope's status history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusChange {
    pub status: EnvelopeStatus,
    pub at: DateTime<Utc>,
    /// Function name, schedule, or operator identity.
    pub actor: String,
    pub reason: String,
    /// Quarantined because it cannot post automatically (closed period, outside the dedup
    /// window): an accountant must book it by hand.
    #[serde(default)]
    pub manual_journal: bool,
}

impl EnvelopeStatus {
    /// No change leaves this status.
    pub fn is_terminal(self) -> bool {
        TRANSITIONS.iter().all(|(from, _)| *from != self)
    }
}

/// Every allowed change of status, and nothing else. Creation is not a change: see [`INITIAL`].
pub const TRANSITIONS: [(EnvelopeStatus, EnvelopeStatus); 7] = {
    use EnvelopeStatus::*;
    [
        // A replay claims it (conditional, with a lease).
        (Pending, Replaying),
        // Another replay takes over a claim whose lease expired (the first one crashed).
        (Replaying, Replaying),
        // The claim ends: released (still failing, or the send failed), or settled.
        (Replaying, Pending),
        (Replaying, Replayed),
        (Replaying, SuppressedDuplicate),
        (Replaying, Quarantined),
        // An approved edit posted its body as a new message.
        (Replaying, Superseded),
    ]
};

/// The statuses an envelope may be created in: PENDING, or QUARANTINED at once when its
/// payload can never be identified.
pub const INITIAL: [EnvelopeStatus; 2] = [EnvelopeStatus::Pending, EnvelopeStatus::Quarantined];

/// A store was asked for a change of status the life cycle does not allow: a defect in the
/// caller, refused before anything is written and never worth a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IllegalTransition {
    #[error("an envelope cannot go from {from} to {to}")]
    Change { from: EnvelopeStatus, to: EnvelopeStatus },
    #[error("an envelope cannot be created {0}")]
    Initial(EnvelopeStatus),
}

pub fn check_transition(from: EnvelopeStatus, to: EnvelopeStatus) -> Result<(), IllegalTransition> {
    if TRANSITIONS.contains(&(from, to)) {
        Ok(())
    } else {
        Err(IllegalTransition::Change { from, to })
    }
}

/// May a claim be renewed with a change to `to`? Only REPLAYING -> REPLAYING: a renewal records
/// what the claim's holder is about to do, it settles nothing.
pub fn check_renewal(to: EnvelopeStatus) -> Result<(), IllegalTransition> {
    match to {
        EnvelopeStatus::Replaying => Ok(()),
        _ => Err(IllegalTransition::Change {
            from: EnvelopeStatus::Replaying,
            to,
        }),
    }
}

pub fn check_initial(status: EnvelopeStatus) -> Result<(), IllegalTransition> {
    if INITIAL.contains(&status) {
        Ok(())
    } else {
        Err(IllegalTransition::Initial(status))
    }
}

#[cfg(test)]
mod tests {
    use super::EnvelopeStatus::*;
    use super::*;

    #[test]
    fn settled_envelopes_never_change_again() {
        for terminal in [Replayed, SuppressedDuplicate, Quarantined] {
            assert!(terminal.is_terminal());
            for to in EnvelopeStatus::ALL {
                assert_eq!(
                    check_transition(terminal, to),
                    Err(IllegalTransition::Change { from: terminal, to })
                );
            }
        }
        assert!(!Pending.is_terminal() && !Replaying.is_terminal());
    }

    #[test]
    fn every_change_goes_through_a_claim() {
        // From PENDING only a claim; everything else is decided under it.
        for to in EnvelopeStatus::ALL {
            assert_eq!(
                check_transition(Pending, to).is_ok(),
                to == Replaying,
                "PENDING -> {to}"
            );
        }
        for to in EnvelopeStatus::ALL {
            assert!(check_transition(Replaying, to).is_ok(), "REPLAYING -> {to}");
        }
        assert_eq!(
            check_transition(Quarantined, Pending).unwrap_err().to_string(),
            "an envelope cannot go from QUARANTINED to PENDING"
        );
    }

    #[test]
    fn envelopes_are_born_pending_or_quarantined() {
        assert!(check_initial(Pending).is_ok() && check_initial(Quarantined).is_ok());
        for s in [Replaying, Replayed, SuppressedDuplicate] {
            assert_eq!(check_initial(s), Err(IllegalTransition::Initial(s)));
        }
    }
}
