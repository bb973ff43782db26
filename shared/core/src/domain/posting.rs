//! A ledger posting: what the consumer commits for a valid message.
//!
//! The posting is the happy path's durable evidence: it carries the same audit fields as every
//! other decision record (trace id, source hash, match decision, attempt count, time).

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::message::{MatchDecision, ReconMessage};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posting {
    pub source_hash: String,
    /// The SQS message id of the delivery that committed it: tells a redelivery of the same
    /// SQS message (crash after commit) from a new message carrying the same transaction.
    pub sqs_message_id: String,
    pub message_id: String,
    pub trace_id: String,
    pub ledger_entity: String,
    pub currency: String,
    #[serde(with = "rust_decimal::serde::str")]
    pub amount: Decimal,
    pub value_date: NaiveDate,
    /// `YYYY-MM`.
    pub period: String,
    pub match_decision: MatchDecision,
    pub external_ref: String,
    pub counterparty: String,
    pub attempt_count: u32,
    pub committed_at: DateTime<Utc>,
    /// The envelope this posting was replayed from, if it came through a replay.
    #[serde(default)]
    pub replay_of: Option<String>,
}

impl Posting {
    pub fn from_message(
        msg: &ReconMessage<'_>,
        sqs_message_id: &str,
        attempt_count: u32,
        committed_at: DateTime<Utc>,
        replay_of: Option<String>,
    ) -> Self {
        Posting {
            source_hash: msg.source_hash.clone(),
            sqs_message_id: sqs_message_id.to_owned(),
            message_id: msg.message_id.to_string(),
            trace_id: msg.trace_id.to_string(),
            ledger_entity: msg.ledger_entity.to_string(),
            currency: msg.currency.to_string(),
            amount: msg.amount,
            value_date: msg.value_date,
            period: msg.period(),
            match_decision: msg.match_decision,
            external_ref: msg.external_ref.to_string(),
            counterparty: msg.counterparty.to_string(),
            attempt_count,
            committed_at,
            replay_of,
        }
    }
}

/// Which delivery already holds the posting for a `source_hash`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedRef {
    pub source_hash: String,
    pub sqs_message_id: String,
    pub message_id: String,
    pub committed_at: Option<DateTime<Utc>>,
}

impl From<&Posting> for CommittedRef {
    fn from(p: &Posting) -> Self {
        CommittedRef {
            source_hash: p.source_hash.clone(),
            sqs_message_id: p.sqs_message_id.clone(),
            message_id: p.message_id.clone(),
            committed_at: Some(p.committed_at),
        }
    }
}

/// What a commit attempt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// This call wrote the posting.
    Committed,
    /// A posting for this `source_hash` already existed; nothing was written.
    AlreadyCommitted(CommittedRef),
}
