//! Failure codes, root causes and the typed processing error.
//!
//! A *failure code* is the coarse, machine-readable class an operator filters on (the source
//! document's four codes). A *root cause* refines it so that dead letters can be triaged and
//! replayed in bulk: every message whose root cause is `UNMAPPED_CURRENCY:XAU` is fixed by one
//! reference-data change. Root causes render as `NAME` or `NAME:detail` strings.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

named! {
    /// The named, machine-readable classification of a DLQ decision.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum FailureCode {
        /// Fails deterministically (bad data, unmapped reference data, closed period), or kept
        /// failing transiently until the retry budget ran out.
        PoisonMessage = "POISON_MESSAGE",
        /// The transaction is already committed; the repeat was suppressed, never posted.
        ReplayDuplicate = "REPLAY_DUPLICATE",
        /// The DLQ holds more pending envelopes than its high-water mark.
        DlqOverflow = "DLQ_OVERFLOW",
        /// The payload cannot even be identified (not JSON, no or bad `source_hash`, hash mismatch).
        UnrecoverablePayload = "UNRECOVERABLE_PAYLOAD",
    }
}

/// A name that is not one of ours (failure code, root cause, transient kind).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown name `{0}`")]
pub struct UnknownName(pub String);

named! {
    /// What kind of transient fault a store or queue reported.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum TransientKind {
        /// Throttling or provisioned-throughput errors.
        Throttled = "THROTTLED",
        /// A request or the whole operation timed out.
        Timeout = "TIMEOUT",
        /// The service answered 5xx / unavailable.
        ServiceUnavailable = "SERVICE_UNAVAILABLE",
        /// A write conflicted with a concurrent one (transaction conflict, lease held elsewhere).
        Conflict = "CONFLICT",
        /// The request never reached the service (connection refused, DNS, TLS).
        Network = "NETWORK",
        /// Anything else the infrastructure reported (misconfiguration included): retried, never
        /// blamed on the message.
        Infrastructure = "INFRASTRUCTURE",
    }
}

/// Why a message failed, precise enough to group dead letters for a bulk fix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RootCause {
    /// The body is not JSON at all.
    NotJson,
    /// The body is JSON but not an object with unique keys.
    NotAnObject,
    MissingSourceHash,
    /// `source_hash` is not 64 hex digits.
    MalformedSourceHash,
    /// `source_hash` does not match the message's business content.
    HashMismatch,
    /// A field is missing, of the wrong JSON type, or out of its allowed form.
    SchemaViolation(String),
    /// `amount` is not a plain decimal string.
    InvalidDecimal,
    /// The currency is neither ISO 4217 nor in the reference table.
    UnmappedCurrency(String),
    /// The amount has more decimal places than the currency's minor unit allows.
    ScaleExceedsCurrency(String),
    /// The accounting period of the transaction is closed for its ledger entity.
    ClosedPeriod {
        entity: String,
        period: String,
    },
    /// The retry budget ran out on transient faults; the last one is named.
    TransientExhausted(TransientKind),
    /// SQS moved the message to the DLQ itself (the consumer crashed or timed out).
    RedrivenBySqs,
    /// The ledger refused the posting by a rule of its own (`<SQLSTATE>:<constraint>` on
    /// PostgreSQL): every message that breaks the same rule groups under it.
    LedgerRefused(String),
}

impl RootCause {
    /// The name without its detail, e.g. `UNMAPPED_CURRENCY` for `UNMAPPED_CURRENCY:XAU`.
    pub fn name(&self) -> &'static str {
        match self {
            RootCause::NotJson => "NOT_JSON",
            RootCause::NotAnObject => "NOT_AN_OBJECT",
            RootCause::MissingSourceHash => "MISSING_SOURCE_HASH",
            RootCause::MalformedSourceHash => "MALFORMED_SOURCE_HASH",
            RootCause::HashMismatch => "HASH_MISMATCH",
            RootCause::SchemaViolation(_) => "SCHEMA_VIOLATION",
            RootCause::InvalidDecimal => "INVALID_DECIMAL",
            RootCause::UnmappedCurrency(_) => "UNMAPPED_CURRENCY",
            RootCause::ScaleExceedsCurrency(_) => "SCALE_EXCEEDS_CURRENCY",
            RootCause::ClosedPeriod { .. } => "CLOSED_PERIOD",
            RootCause::TransientExhausted(_) => "TRANSIENT_EXHAUSTED",
            RootCause::RedrivenBySqs => "REDRIVEN_BY_SQS",
            RootCause::LedgerRefused(_) => "LEDGER_REFUSED",
        }
    }
}

impl fmt::Display for RootCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            RootCause::SchemaViolation(detail)
            | RootCause::LedgerRefused(detail)
            | RootCause::UnmappedCurrency(detail)
            | RootCause::ScaleExceedsCurrency(detail) => write!(f, ":{detail}"),
            RootCause::ClosedPeriod { entity, period } => write!(f, ":{entity}:{period}"),
            RootCause::TransientExhausted(kind) => write!(f, ":{kind}"),
            _ => Ok(()),
        }
    }
}

impl FromStr for RootCause {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, detail) = s.split_once(':').map_or((s, None), |(n, d)| (n, Some(d)));
        let unknown = || UnknownName(s.to_owned());
        Ok(match (name, detail) {
            ("NOT_JSON", None) => RootCause::NotJson,
            ("NOT_AN_OBJECT", None) => RootCause::NotAnObject,
            ("MISSING_SOURCE_HASH", None) => RootCause::MissingSourceHash,
            ("MALFORMED_SOURCE_HASH", None) => RootCause::MalformedSourceHash,
            ("HASH_MISMATCH", None) => RootCause::HashMismatch,
            ("SCHEMA_VIOLATION", Some(f)) => RootCause::SchemaViolation(f.to_owned()),
            ("INVALID_DECIMAL", None) => RootCause::InvalidDecimal,
            ("UNMAPPED_CURRENCY", Some(c)) => RootCause::UnmappedCurrency(c.to_owned()),
            ("SCALE_EXCEEDS_CURRENCY", Some(c)) => RootCause::ScaleExceedsCurrency(c.to_owned()),
            ("CLOSED_PERIOD", Some(rest)) => {
                // The entity may not contain ':' (schema rule), the period never does.
                let (entity, period) = rest.rsplit_once(':').ok_or_else(unknown)?;
                RootCause::ClosedPeriod {
                    entity: entity.to_owned(),
                    period: period.to_owned(),
                }
            }
            ("TRANSIENT_EXHAUSTED", Some(k)) => RootCause::TransientExhausted(k.parse()?),
            ("REDRIVEN_BY_SQS", None) => RootCause::RedrivenBySqs,
            ("LEDGER_REFUSED", Some(rule)) if !rule.is_empty() => RootCause::LedgerRefused(rule.to_owned()),
            _ => return Err(unknown()),
        })
    }
}

/// Longest error detail we carry anywhere (DLQ attribute, envelope, log line).
pub const MAX_ERROR_DETAIL: usize = 1024;

/// Cut `detail` to at most [`MAX_ERROR_DETAIL`] bytes on a character boundary.
pub fn bounded_detail(detail: &str) -> &str {
    &detail[..detail.floor_char_boundary(MAX_ERROR_DETAIL)]
}

/// The typed failure of processing one message: the class decides what happens next.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// Cannot be identified: dead-letter at once as `UNRECOVERABLE_PAYLOAD`.
    #[error("unrecoverable payload ({cause}): {detail}")]
    Unrecoverable { cause: RootCause, detail: String },
    /// Deterministic: dead-letter at once as `POISON_MESSAGE`; no retry budget spent.
    #[error("poison message ({cause}): {detail}")]
    Poison { cause: RootCause, detail: String },
    /// Environmental: retry with backoff while the budget lasts.
    #[error("transient failure ({kind}): {detail}")]
    Transient { kind: TransientKind, detail: String },
}

impl ProcessError {
    pub fn unrecoverable(cause: RootCause, detail: impl Into<String>) -> Self {
        ProcessError::Unrecoverable {
            cause,
            detail: detail.into(),
        }
    }
    pub fn poison(cause: RootCause, detail: impl Into<String>) -> Self {
        ProcessError::Poison {
            cause,
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_causes_round_trip_through_their_strings() {
        let all = [
            RootCause::NotJson,
            RootCause::NotAnObject,
            RootCause::MissingSourceHash,
            RootCause::MalformedSourceHash,
            RootCause::HashMismatch,
            RootCause::SchemaViolation("amount".into()),
            RootCause::InvalidDecimal,
            RootCause::UnmappedCurrency("XAU".into()),
            RootCause::ScaleExceedsCurrency("JPY".into()),
            RootCause::ClosedPeriod {
                entity: "ACME-US".into(),
                period: "2026-10".into(),
            },
            RootCause::TransientExhausted(TransientKind::Throttled),
            RootCause::RedrivenBySqs,
            RootCause::LedgerRefused("23514:amount_within_limit".into()),
        ];
        for cause in all {
            let text = cause.to_string();
            assert_eq!(text.parse::<RootCause>(), Ok(cause), "{text}");
        }
        assert_eq!(
            RootCause::ClosedPeriod {
                entity: "E1".into(),
                period: "2026-10".into()
            }
            .to_string(),
            "CLOSED_PERIOD:E1:2026-10"
        );
        assert!("UNMAPPED_CURRENCY".parse::<RootCause>().is_err());
        assert!("SOMETHING_ELSE".parse::<RootCause>().is_err());
    }

    #[test]
    fn failure_codes_use_the_operator_names() {
        for code in FailureCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(code.as_str().parse::<FailureCode>(), Ok(code));
        }
    }

    #[test]
    fn error_detail_is_bounded_on_a_char_boundary() {
        let long = "é".repeat(MAX_ERROR_DETAIL);
        let cut = bounded_detail(&long);
        assert!(cut.len() <= MAX_ERROR_DETAIL);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(bounded_detail("short"), "short");
    }
}
