//! The hashed fields of a body: what identifies its transaction, parsed into canonical form,
//! and the hash they reproduce.

use chrono::NaiveDate;
use rust_decimal::Decimal;
use std::borrow::Cow;

use super::{
    MAX_COUNTERPARTY_LEN, MAX_ENTITY_LEN, MAX_REF_LEN, Scalar, Wire, canonical_text, is_hash_hex, parse_date, required,
    schema, string_field, without_bom,
};
use crate::domain::canonical;
use crate::domain::failure::ProcessError;
use crate::domain::hash::{HashInput, source_hash_bytes};
use crate::domain::money::parse_amount;
use crate::domain::tx_key::TxKey;

impl<'a> Wire<'a> {
    /// Its hashed fields, parsed (taken out of it).
    pub(super) fn hashed(&mut self) -> Result<Hashed<'a>, ProcessError> {
        Hashed::parse(
            self.ledger_entity.take(),
            self.currency.take(),
            self.amount.take(),
            self.value_date.take(),
            self.external_ref.take(),
            self.counterparty.take(),
        )
    }
}

/// The hashed fields of a body, parsed and in canonical form: what identifies its transaction.
pub(super) struct Hashed<'a> {
    pub(super) ledger_entity: Cow<'a, str>,
    pub(super) currency: Cow<'a, str>,
    pub(super) amount: Decimal,
    pub(super) value_date_text: Cow<'a, str>,
    pub(super) value_date: NaiveDate,
    pub(super) external_ref: Cow<'a, str>,
    pub(super) counterparty: Cow<'a, str>,
}

impl<'a> Hashed<'a> {
    pub(super) fn parse(
        ledger_entity: Option<Scalar<'a>>,
        currency: Option<Scalar<'a>>,
        amount: Option<Scalar<'a>>,
        value_date: Option<Scalar<'a>>,
        external_ref: Option<Scalar<'a>>,
        counterparty: Option<Scalar<'a>>,
    ) -> Result<Self, ProcessError> {
        let ledger_entity = required("ledger_entity", ledger_entity, MAX_ENTITY_LEN)?;
        // Not empty and within its length (`required`): only the characters are left to check.
        if let Some(problem) = canonical::entity_problem(&ledger_entity, MAX_ENTITY_LEN) {
            return Err(schema("ledger_entity", problem));
        }
        let ledger_entity = canonical::entity(ledger_entity);
        let currency = required("currency", currency, 12)?;
        if currency.len() < 3 || !currency.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(schema("currency", "`currency` must be 3 to 12 letters or digits"));
        }
        let currency = if currency.bytes().any(|b| b.is_ascii_lowercase()) {
            Cow::Owned(currency.to_ascii_uppercase())
        } else {
            currency
        };
        let amount = match amount {
            Some(Scalar::Str(s)) => parse_amount(&s)?,
            None => return Err(schema("amount", "`amount` is missing")),
            Some(other) => {
                return Err(schema(
                    "amount",
                    format!(
                        "`amount` must be a decimal string, not {} (floats lose cents)",
                        other.kind()
                    ),
                ));
            }
        };
        let value_date_text = required("value_date", value_date, 10)?;
        let value_date = parse_date(&value_date_text)
            .ok_or_else(|| schema("value_date", "`value_date` must be a calendar date YYYY-MM-DD"))?;
        let external_ref = canonical_text("external_ref", required("external_ref", external_ref, MAX_REF_LEN)?)?;
        let counterparty = canonical_text(
            "counterparty",
            string_field("counterparty", counterparty, MAX_COUNTERPARTY_LEN)?.unwrap_or(Cow::Borrowed("")),
        )?;
        Ok(Hashed {
            ledger_entity,
            currency,
            amount,
            value_date_text,
            value_date,
            external_ref,
            counterparty,
        })
    }

    pub(super) fn hash(&self) -> [u8; 32] {
        source_hash_bytes(&HashInput {
            ledger_entity: &self.ledger_entity,
            external_ref: &self.external_ref,
            counterparty: &self.counterparty,
            value_date: &self.value_date_text,
            currency: &self.currency,
            amount: self.amount,
        })
    }
}

/// The transaction a body that does not decode still names: the `source_hash` it claims, when
/// every hashed field parses and reproduces it. An unhashed field that fails (a missing
/// `match_decision`, a wrong `schema_version`) does not change which transaction it is, so a
/// manual journal of it is handed off under that hash and a corrected resend cannot post beside
/// it. `None` when the body is not a JSON object, claims no well-formed hash, a hashed field is
/// missing or malformed, or its content hashes to another transaction than it claims.
pub fn identified_by_content(body: &str) -> Option<TxKey> {
    let mut wire: Wire<'_> = serde_json::from_str(without_bom(body)).ok()?;
    let claimed = match wire.source_hash.take() {
        Some(Scalar::Str(s)) if is_hash_hex(&s) => s.to_ascii_lowercase(),
        _ => return None,
    };
    let h = wire.hashed().ok()?;
    (hex::encode(h.hash()) == claimed).then(|| TxKey::new(claimed, Some(super::period_of(h.value_date))))
}
