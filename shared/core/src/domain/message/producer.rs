//! Building a body as a producer does (`dlqctl send`, the demo, tests): the JSON with a correct
//! `source_hash`.

use serde::{Deserialize, Serialize};

use std::borrow::Cow;

use super::{MatchDecision, SCHEMA_VERSION, canonical_text};
use crate::domain::canonical;
use crate::domain::failure::ProcessError;
use crate::domain::hash::{HashInput, source_hash};
use crate::domain::money::parse_amount;

/// The fields of a new message, for producers (`dlqctl send`, the demo, tests): builds the JSON
/// body with a correct `source_hash`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewMessage {
    pub message_id: String,
    pub ledger_entity: String,
    pub currency: String,
    pub amount: String,
    pub match_decision: MatchDecision,
    pub trace_id: String,
    pub value_date: String,
    pub external_ref: String,
    #[serde(default)]
    pub counterparty: String,
}

impl NewMessage {
    /// The canonical hash of this content, or why the content cannot be hashed.
    pub fn compute_hash(&self) -> Result<String, ProcessError> {
        let amount = parse_amount(&self.amount)?;
        let currency = self.currency.to_ascii_uppercase();
        let external_ref = canonical_text("external_ref", Cow::Borrowed(&self.external_ref))?;
        let counterparty = canonical_text("counterparty", Cow::Borrowed(&self.counterparty))?;
        Ok(source_hash(&HashInput {
            ledger_entity: &canonical::entity(Cow::Borrowed(&self.ledger_entity)),
            external_ref: &external_ref,
            counterparty: &counterparty,
            value_date: &self.value_date,
            currency: &currency,
            amount,
        }))
    }

    /// The JSON body with the given `source_hash` (use [`NewMessage::to_body`] for the right one).
    pub fn to_body_with_hash(&self, source_hash: &str) -> String {
        serde_json::json!({
            "schema_version": SCHEMA_VERSION,
            "message_id": self.message_id,
            "source_hash": source_hash,
            "ledger_entity": self.ledger_entity,
            "currency": self.currency,
            "amount": self.amount,
            "match_decision": self.match_decision,
            "trace_id": self.trace_id,
            "value_date": self.value_date,
            "external_ref": self.external_ref,
            "counterparty": self.counterparty,
        })
        .to_string()
    }

    /// The JSON body with its correct `source_hash`.
    pub fn to_body(&self) -> Result<String, ProcessError> {
        Ok(self.to_body_with_hash(&self.compute_hash()?))
    }
}
