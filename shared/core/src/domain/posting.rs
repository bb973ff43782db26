//! A ledger posting: what the consumer commits for a valid message.
//!
//! The posting is the happy path's durable evidence: it carries the same audit fields as every
//! other decision record (trace id, source hash, match decision, attempt count, time).

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::message::{MatchDecision, ReconMessage};
use super::tx_key::TxKey;

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
    pub replay_of: Option<String>,
}

impl Posting {
    /// Where a ledger finds this posting.
    pub fn key(&self) -> TxKey {
        TxKey::new(&self.source_hash, Some(self.period.clone()))
    }

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

/// Which delivery already holds the posting for a `source_hash` — or which envelope handed the
/// transaction to a manual journal ([`HandOff`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedRef {
    pub source_hash: String,
    /// Empty for a hand-off (never equal to a delivery's id).
    pub sqs_message_id: String,
    pub message_id: String,
    pub committed_at: Option<DateTime<Utc>>,
    /// The envelope whose replay handed the transaction to a manual journal: no posting exists,
    /// and none may be made (an accountant books it by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_journal: Option<String>,
}

impl CommittedRef {
    /// Who holds the transaction, for messages: a delivery, or a manual journal.
    pub fn holder(&self) -> String {
        match &self.manual_journal {
            Some(envelope) => {
                format!("a hand-off by envelope {envelope} (to a manual journal, or to its approved edit)")
            }
            None => format!("message {} (SQS {})", self.message_id, self.sqs_message_id),
        }
    }

    /// Did `envelope_id` itself hand this transaction to a manual journal?
    pub fn handed_off_by(&self, envelope_id: &str) -> bool {
        self.manual_journal.as_deref() == Some(envelope_id)
    }
}

/// A transaction handed to a manual journal by a replay's quarantine decision. It is written to
/// the ledger's own idempotency key (`source_hash`) with the same condition as a posting, so the
/// two exclude each other: once handed off, every later commit of the transaction — a duplicate
/// delivery, another copy's replay — answers `AlreadyCommitted`, and a hand-off after a posting
/// answers the posting. No transaction is booked both by the pipeline and by hand.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOff {
    pub source_hash: String,
    /// The period of the transaction's value date: a ledger keyed by period puts the hand-off
    /// where the posting would be (a hand-off without one is refused there).
    #[serde(default)]
    pub period: Option<String>,
    pub envelope_id: String,
    pub replay_id: String,
    pub handed_off_at: DateTime<Utc>,
}

impl HandOff {
    /// Where a ledger finds this hand-off.
    pub fn key(&self) -> TxKey {
        TxKey::new(&self.source_hash, self.period.clone())
    }

    /// What the ledger answers for a handed-off transaction.
    pub fn committed_ref(&self) -> CommittedRef {
        CommittedRef {
            source_hash: self.source_hash.clone(),
            sqs_message_id: String::new(),
            message_id: String::new(),
            committed_at: Some(self.handed_off_at),
            manual_journal: Some(self.envelope_id.clone()),
        }
    }
}

impl From<&Posting> for CommittedRef {
    fn from(p: &Posting) -> Self {
        CommittedRef {
            source_hash: p.source_hash.clone(),
            sqs_message_id: p.sqs_message_id.clone(),
            message_id: p.message_id.clone(),
            committed_at: Some(p.committed_at),
            manual_journal: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// This call wrote the posting.
    Committed,
    /// A posting for this `source_hash` already existed; nothing was written.
    AlreadyCommitted(CommittedRef),
    /// The ledger refused the posting by a rule of its own (a constraint, a trigger of your
    /// ledger): it would refuse it again, so the message is poison, dead-lettered with
    /// `LEDGER_REFUSED:<rule>` for a fix and a replay. Nothing was written.
    Refused { rule: String, detail: String },
    /// A hand-off that must wait: a request under the transaction's key may still be applied by
    /// a general ledger that cannot void keys, until `until`. Nothing was written; only
    /// [`crate::ports::Ledger::hand_off`] answers it.
    InDoubt { until: DateTime<Utc> },
}
