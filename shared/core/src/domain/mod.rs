//! The domain: messages, their canonical hash, failure classification, reference data, ledger
//! postings, dead letters, envelopes and their life cycle, audit records. Pure data and pure
//! functions; no I/O, and nothing from the rest of the crate (a test checks it).

pub mod approval;
pub mod attrs;
pub mod audit;
pub mod canary;
pub mod canonical;
pub mod change_set;
pub mod dead_letter;
pub mod edit;
pub mod envelope;
pub mod failure;
pub mod hash;
pub mod input;
pub mod message;
pub mod money;
pub mod policy;
pub mod posting;
pub mod reference;
pub mod seal;
pub mod segment;
pub mod sqs;
pub mod status;
pub mod total;

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
