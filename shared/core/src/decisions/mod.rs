//! Pure decision logic: what to do with a failure, how long to back off, how to group dead letters.

pub mod escalation;
pub mod retry;
pub mod totals;
pub mod triage;

pub use retry::{DEFAULT_MAX_ATTEMPTS, FailureDecision, RetryPolicy, decide_failure};
pub use triage::{TriageGroup, triage};
