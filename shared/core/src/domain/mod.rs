//! The domain: messages, their canonical hash, failure classification, reference data, ledger
//! postings, dead letters, envelopes and their life cycle, audit records. Pure data and pure
//! functions; no I/O, and nothing from the rest of the crate (a test checks it).

/// An enum whose variants each have one stable name (upper snake case): the name operators see,
/// stored records carry and serde writes, so the three never drift apart. Generates `ALL`,
/// `as_str`, `Display` (padded, for tables) and `FromStr` (an [`failure::UnknownName`] error).
macro_rules! named {
    ($(#[$meta:meta])* $vis:vis enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
    }) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::domain::failure::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .into_iter()
                    .find(|x| x.as_str() == s)
                    .ok_or_else(|| $crate::domain::failure::UnknownName(s.to_owned()))
            }
        }
    };
}
pub(crate) use named;

pub mod approval;
pub mod attrs;
pub mod audit;
pub mod canary;
pub mod canonical;
pub mod change_set;
pub mod console;
pub mod dead_letter;
pub mod edit;
pub mod envelope;
pub mod failure;
pub mod hash;
pub mod identity;
pub mod input;
pub mod message;
pub mod money;
pub mod operator;
pub mod policy;
pub mod posting;
pub mod reference;
pub mod seal;
pub mod segment;
pub mod sqs;
pub mod status;
pub mod total;
pub mod totals;
pub mod tx_key;

pub use audit::{AuditKind, AuditRecord};
pub use dead_letter::{DeadLetter, DeadLetterContext, OriginalAttribute};
pub use envelope::{
    DlqEnvelope, HashKind, OriginalMessage, ReplayClaim, ReplayRecord, WormRef, envelope_from_dlq_message,
};
pub use failure::{FailureCode, ProcessError, RootCause, TransientKind, bounded_detail};
pub use hash::{HashInput, source_hash};
pub use message::{
    MatchDecision, MessageLabels, NewMessage, ReconMessage, decode, identified_by_content, labels, validate,
};
pub use posting::{CommitOutcome, CommittedRef, HandOff, Posting};
pub use reference::{CurrencyMapping, PeriodRecord, PeriodStatus, ReferenceSnapshot};
pub use segment::Segment;
pub use status::{EnvelopeStatus, IllegalTransition, StatusChange};
pub use total::{Tally, Total, TotalOverflow};
pub use tx_key::TxKey;

#[cfg(test)]
mod tests {
    use super::approval::RequestStatus;
    use super::*;

    #[test]
    fn each_named_enum_writes_reads_shows_and_parses_one_name() {
        macro_rules! check {
            ($($t:ty),+) => {$(
                for x in <$t>::ALL {
                    let name = x.as_str();
                    assert_eq!(serde_json::to_value(x).unwrap(), name);
                    assert_eq!(serde_json::from_value::<$t>(name.into()).unwrap(), x);
                    assert_eq!(name.parse::<$t>(), Ok(x));
                    assert_eq!(format!("{x:<24}|"), format!("{name:<24}|"));
                }
                assert_eq!("NOT_A_NAME".parse::<$t>(), Err(failure::UnknownName("NOT_A_NAME".into())));
            )+};
        }
        check!(
            AuditKind,
            EnvelopeStatus,
            FailureCode,
            MatchDecision,
            PeriodStatus,
            RequestStatus,
            TransientKind
        );
    }
}
