//! The retry budget and backoff schedule, as pure functions.
//!
//! The attempt number is SQS's `ApproximateReceiveCount`: it travels with the message, so a
//! worker restart never grants a fresh budget. The delay is held by the queue (a visibility
//! timeout), not by a sleeping worker.

use crate::domain::{FailureCode, ProcessError, RootCause, TransientKind};

/// The retry budget: the consumer dead-letters a transiently failing message itself on this
/// receive, and the main queue's redrive policy uses it as `maxReceiveCount` (the safety net
/// for crashes and timeouts, which then moves the message on the next receive).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// SQS refuses visibility timeouts above 12 hours.
pub const MAX_VISIBILITY_SECS: u32 = 43_200;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RetryPolicy {
    /// Receives allowed; on this receive a transient failure is dead-lettered by the consumer.
    pub max_attempts: u32,
    /// `base` in `base * 2^(n-1) + jitter`, seconds (the jitter is below `base`).
    pub backoff_base_secs: u32,
    /// Upper bound of any delay, seconds.
    pub backoff_cap_secs: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_base_secs: 2,
            backoff_cap_secs: 300,
        }
    }
}

impl RetryPolicy {
    /// Seconds to hide a message after its `attempt`-th receive failed transiently:
    /// `min(cap, base * 2^(attempt-1) + jitter)`, jitter in `[0, base)`, so that successive delays
    /// strictly grow until the cap. The jitter is derived from `seed` (the SQS message id) so that
    /// the schedule is reproducible per message while messages that failed together spread out.
    pub fn delay_secs(&self, attempt: u32, seed: &str) -> u32 {
        let exp = attempt.saturating_sub(1).min(31);
        let backoff = u64::from(self.backoff_base_secs).saturating_mul(1u64 << exp);
        let jitter = fnv1a(seed.as_bytes(), attempt) % u64::from(self.backoff_base_secs.max(1));
        let capped = backoff.saturating_add(jitter).min(u64::from(self.backoff_cap_secs));
        u32::try_from(capped)
            .unwrap_or(MAX_VISIBILITY_SECS)
            .min(MAX_VISIBILITY_SECS)
    }
}

fn fnv1a(bytes: &[u8], salt: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes.iter().chain(salt.to_le_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What to do with a message whose processing failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureDecision {
    /// Send it to the DLQ now with this context, then acknowledge it.
    DeadLetter {
        code: FailureCode,
        cause: RootCause,
        detail: String,
    },
    /// Report it failed and hide it for `delay_secs`; SQS delivers it again.
    Retry {
        delay_secs: u32,
        kind: TransientKind,
        detail: String,
    },
}

/// Classify a failure on receive number `attempt`. Deterministic failures never spend budget;
/// transient ones do, until the last allowed attempt.
pub fn decide_failure(err: ProcessError, attempt: u32, policy: &RetryPolicy, seed: &str) -> FailureDecision {
    match err {
        ProcessError::Unrecoverable { cause, detail } => FailureDecision::DeadLetter {
            code: FailureCode::UnrecoverablePayload,
            cause,
            detail,
        },
        ProcessError::Poison { cause, detail } => FailureDecision::DeadLetter {
            code: FailureCode::PoisonMessage,
            cause,
            detail,
        },
        ProcessError::Transient { kind, detail } if attempt >= policy.max_attempts => FailureDecision::DeadLetter {
            code: FailureCode::PoisonMessage,
            cause: RootCause::TransientExhausted(kind),
            detail: format!(
                "retry budget of {} attempts exhausted; last error: {detail}",
                policy.max_attempts
            ),
        },
        ProcessError::Transient { kind, detail } => FailureDecision::Retry {
            delay_secs: policy.delay_secs(attempt, seed),
            kind,
            detail,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            backoff_base_secs: 2,
            backoff_cap_secs: 60,
        }
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter_and_a_cap() {
        let p = policy();
        for seed in ["a", "b", "msg-42", "00000000-0000"] {
            for n in 1..=4u32 {
                let d = p.delay_secs(n, seed);
                let base = 2u32 * (1 << (n - 1));
                assert!((base..base + 2).contains(&d), "attempt {n}: {d}");
                if n > 1 {
                    assert!(d > p.delay_secs(n - 1, seed), "delays strictly grow");
                }
            }
            assert_eq!(p.delay_secs(10, seed), 60, "capped");
            assert_eq!(p.delay_secs(1000, seed), 60, "no overflow");
            assert_eq!(p.delay_secs(3, seed), p.delay_secs(3, seed), "reproducible");
        }
        let spread: std::collections::HashSet<u32> = (0..50).map(|i| p.delay_secs(1, &format!("m{i}"))).collect();
        assert!(spread.len() > 1, "jitter spreads messages that failed together");
    }

    #[test]
    fn deterministic_failures_dead_letter_on_first_attempt() {
        let d = decide_failure(ProcessError::poison(RootCause::InvalidDecimal, "x"), 1, &policy(), "m");
        assert!(matches!(
            d,
            FailureDecision::DeadLetter {
                code: FailureCode::PoisonMessage,
                ..
            }
        ));
        let d = decide_failure(ProcessError::unrecoverable(RootCause::NotJson, "x"), 1, &policy(), "m");
        assert!(matches!(
            d,
            FailureDecision::DeadLetter {
                code: FailureCode::UnrecoverablePayload,
                ..
            }
        ));
    }

    #[test]
    fn transient_failures_retry_until_the_last_attempt() {
        let t = || ProcessError::Transient {
            kind: TransientKind::Throttled,
            detail: "slow down".into(),
        };
        for n in 1..5 {
            assert!(
                matches!(decide_failure(t(), n, &policy(), "m"), FailureDecision::Retry { .. }),
                "attempt {n}"
            );
        }
        match decide_failure(t(), 5, &policy(), "m") {
            FailureDecision::DeadLetter { code, cause, .. } => {
                assert_eq!(code, FailureCode::PoisonMessage);
                assert_eq!(cause.to_string(), "TRANSIENT_EXHAUSTED:THROTTLED");
            }
            other => panic!("expected dead letter, got {other:?}"),
        }
    }
}
