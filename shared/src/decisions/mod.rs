//! Pure decision logic: what to do with a failure, how long to back off.

pub mod retry;

pub use retry::{FailureDecision, RetryPolicy, decide_failure};
