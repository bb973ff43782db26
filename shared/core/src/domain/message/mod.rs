//! `ReconMessage`: the JSON body on the main queue, its decoding and its validation.
//!
//! One implementation serves the consumer and the replay integrity gate, so "would this message
//! post today?" has exactly one answer. Decoding is staged so that every failure lands in the
//! right class:
//!
//! 1. not JSON / not an object                        -> `UNRECOVERABLE_PAYLOAD`
//! 2. `source_hash` missing or not 64 hex digits       -> `UNRECOVERABLE_PAYLOAD`
//! 3. a field missing, mistyped or malformed            -> `POISON_MESSAGE` (`SCHEMA_VIOLATION:<field>`,
//!    `INVALID_DECIMAL`)
//! 4. `source_hash` does not match the content          -> `UNRECOVERABLE_PAYLOAD` (`HASH_MISMATCH`)
//! 5. reference data: unmapped currency, scale beyond the currency's minor units, closed
//!    accounting period                                 -> `POISON_MESSAGE`
//!
//! The decoder borrows from the body wherever the JSON has no escapes: no allocation on the
//! common path.

use chrono::{Datelike, NaiveDate};
use rust_decimal::Decimal;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use super::canonical;
use super::hash::is_hash_hex;
use super::tx_key::TxKey;

use super::failure::{ProcessError, RootCause};
use super::reference::{PeriodStatus, ReferenceSnapshot};

mod hashed;
mod producer;
use hashed::Hashed;
pub use hashed::identified_by_content;
pub use producer::NewMessage;

/// The only schema version this code understands.
pub const SCHEMA_VERSION: u64 = 1;

/// Field length limits (bytes). They keep every ledger item well under 1 KB (one write unit).
pub const MAX_ID_LEN: usize = 128;
pub const MAX_ENTITY_LEN: usize = 64;
pub const MAX_REF_LEN: usize = 128;
pub const MAX_COUNTERPARTY_LEN: usize = 256;

named! {
    /// The upstream matcher's verdict, carried through for audit.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum MatchDecision {
        Matched = "MATCHED",
        Partial = "PARTIAL",
        Unmatched = "UNMATCHED",
    }
}

/// A decoded, schema-valid, hash-verified message. Strings borrow from the body when they can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconMessage<'a> {
    pub schema_version: u64,
    pub message_id: Cow<'a, str>,
    /// 64 lowercase hex digits, verified against the content.
    pub source_hash: String,
    pub ledger_entity: Cow<'a, str>,
    /// Upper-case.
    pub currency: Cow<'a, str>,
    pub amount: Decimal,
    pub match_decision: MatchDecision,
    pub trace_id: Cow<'a, str>,
    pub value_date: NaiveDate,
    pub external_ref: Cow<'a, str>,
    pub counterparty: Cow<'a, str>,
}

impl ReconMessage<'_> {
    /// The accounting period the transaction belongs to: the month of its value date, `YYYY-MM`.
    pub fn period(&self) -> String {
        period_of(self.value_date)
    }

    /// Where a ledger finds this transaction.
    pub fn key(&self) -> TxKey {
        TxKey::new(&self.source_hash, Some(self.period()))
    }
}

pub fn period_of(date: NaiveDate) -> String {
    format!("{:04}-{:02}", date.year(), date.month())
}

/// What can be learned about a body even when it fails validation: used to label dead letters
/// (trace id, entity, amount) as well as possible.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageLabels {
    pub message_id: Option<String>,
    pub source_hash: Option<String>,
    pub trace_id: Option<String>,
    pub ledger_entity: Option<String>,
    pub currency: Option<String>,
    pub amount: Option<String>,
    pub value_date: Option<String>,
    pub match_decision: Option<String>,
}

impl MessageLabels {
    /// The accounting period of the value date, when the body has a readable one.
    pub fn period(&self) -> Option<String> {
        self.value_date.as_deref().and_then(parse_date).map(period_of)
    }
}

/// One JSON value as the decoder sees it: strings are kept (borrowed if possible), everything
/// else only by kind.
#[derive(Clone, Debug, PartialEq)]
enum Scalar<'a> {
    Str(Cow<'a, str>),
    UInt(u64),
    OtherNumber,
    Bool,
    Compound,
}

impl Scalar<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Scalar::Str(_) => "a string",
            Scalar::UInt(_) | Scalar::OtherNumber => "a number",
            Scalar::Bool => "a boolean",
            Scalar::Compound => "an array or object",
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Scalar<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::UInt(v))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Scalar::OtherNumber)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Scalar::OtherNumber)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Compound)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Compound)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The wire shape: every known field, any JSON type, absent or `null` = `None`. Unknown fields
/// are ignored (producers may add metadata; it never enters the hash).
#[derive(Deserialize, Default)]
struct Wire<'a> {
    #[serde(borrow, default)]
    schema_version: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    message_id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    source_hash: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    ledger_entity: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    currency: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    amount: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    match_decision: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    trace_id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    value_date: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    external_ref: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    counterparty: Option<Scalar<'a>>,
}

fn schema(field: &str, detail: impl Into<String>) -> ProcessError {
    ProcessError::poison(RootCause::SchemaViolation(field.to_owned()), detail)
}

fn string_field<'a>(
    name: &'static str,
    value: Option<Scalar<'a>>,
    max_len: usize,
) -> Result<Option<Cow<'a, str>>, ProcessError> {
    match value {
        None => Ok(None),
        Some(Scalar::Str(s)) => {
            if s.len() > max_len {
                return Err(schema(name, format!("`{name}` is longer than {max_len} bytes")));
            }
            if has_control(&s) {
                return Err(schema(name, format!("`{name}` contains control characters")));
            }
            Ok(Some(s))
        }
        Some(other) => Err(schema(name, format!("`{name}` must be a string, not {}", other.kind()))),
    }
}

fn required<'a>(name: &'static str, value: Option<Scalar<'a>>, max_len: usize) -> Result<Cow<'a, str>, ProcessError> {
    match string_field(name, value, max_len)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        Some(_) => Err(schema(name, format!("`{name}` is empty"))),
        None => Err(schema(name, format!("`{name}` is missing"))),
    }
}

/// Does `s` hold a control character (C0, DEL or C1)? Byte-wise: C1 controls are U+0080-U+009F,
/// encoded as `0xC2 0x80..=0x9F` in UTF-8.
fn has_control(s: &str) -> bool {
    let b = s.as_bytes();
    // Fast path (vectorises): printable ASCII only.
    if b.iter().all(|c| (0x20..0x7f).contains(c)) {
        return false;
    }
    b.iter()
        .enumerate()
        .any(|(i, &c)| c < 0x20 || c == 0x7f || (c == 0xc2 && b.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n))))
}

/// Parse exactly `YYYY-MM-DD` into a calendar date (no strftime machinery on the hot path).
pub fn parse_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| {
        b[r].iter().try_fold(0u32, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
        })
    };
    let year = i32::try_from(num(0..4)?).ok()?;
    NaiveDate::from_ymd_opt(year, num(5..7)?, num(8..10)?)
}

/// A hashed text field in canonical form ([`canonical::text`]), or why it cannot be one.
pub(crate) fn canonical_text<'a>(name: &str, s: Cow<'a, str>) -> Result<Cow<'a, str>, ProcessError> {
    if let Some(c) = canonical::invisible(&s) {
        return Err(schema(
            name,
            format!("`{name}` contains the invisible character U+{:04X}", u32::from(c)),
        ));
    }
    if let Some(c) = canonical::look_alike_space(&s) {
        return Err(schema(
            name,
            format!(
                "`{name}` contains the space U+{:04X} inside: use a plain space (U+0020), which it looks like",
                u32::from(c)
            ),
        ));
    }
    Ok(canonical::text_cow(s))
}

/// The transaction a body identifies (its hash and period): the one it decodes to, or, for a
/// body that does not decode, the one it claims when every hashed field parses and reproduces it
/// ([`identified_by_content`]: an unhashed field missing does not change the transaction). Only
/// such a transaction may be handed off to a manual journal: a claimed hash the content does not
/// reproduce may be another transaction's.
pub fn identifies(body: &str) -> Option<TxKey> {
    match decode(body) {
        Ok(m) => Some(m.key()),
        Err(_) => identified_by_content(body),
    }
}

/// Decode and verify a body, without reference data (stages 1-4).
pub fn decode(body: &str) -> Result<ReconMessage<'_>, ProcessError> {
    let (msg, actual) = decode_content(body)?;
    // Stage 4: the claimed hash must be the hash of this content.
    let mut claimed = [0u8; 32];
    if hex::decode_to_slice(&msg.source_hash, &mut claimed).is_err() || claimed != actual {
        return Err(ProcessError::unrecoverable(
            RootCause::HashMismatch,
            format!(
                "`source_hash` {} does not match the content (expected {})",
                msg.source_hash,
                hex::encode(actual)
            ),
        ));
    }
    Ok(msg)
}

/// The `source_hash` of a body's content (stages 1-3 must pass; the hash it claims is not
/// compared): what an edited body must claim.
pub fn content_hash(body: &str) -> Result<String, ProcessError> {
    decode_content(body).map(|(_, actual)| hex::encode(actual))
}

/// Stages 1-3: the message with the hash it claims, and the hash of its content.
fn decode_content(body: &str) -> Result<(ReconMessage<'_>, [u8; 32]), ProcessError> {
    let body = without_bom(body);
    if !body.trim_start().starts_with('{') {
        return Err(match serde_json::from_str::<IgnoredAny>(body) {
            Ok(_) => ProcessError::unrecoverable(RootCause::NotAnObject, "body is JSON but not an object"),
            Err(e) => ProcessError::unrecoverable(RootCause::NotJson, format!("body is not JSON: {e}")),
        });
    }
    let mut wire: Wire<'_> = serde_json::from_str(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ProcessError::unrecoverable(
            RootCause::NotAnObject,
            format!("body is JSON but not a message object with unique keys: {e}"),
        ),
        _ => ProcessError::unrecoverable(RootCause::NotJson, format!("body is not JSON: {e}")),
    })?;

    // Stage 2: the idempotency anchor must be there before anything else is worth checking.
    let claimed_hash = match wire.source_hash.take() {
        None => {
            return Err(ProcessError::unrecoverable(
                RootCause::MissingSourceHash,
                "`source_hash` is missing",
            ));
        }
        Some(Scalar::Str(s)) if is_hash_hex(&s) && !s.bytes().any(|b| b.is_ascii_uppercase()) => s.into_owned(),
        Some(Scalar::Str(s)) if is_hash_hex(&s) => s.to_ascii_lowercase(),
        Some(_) => {
            return Err(ProcessError::unrecoverable(
                RootCause::MalformedSourceHash,
                "`source_hash` must be 64 hexadecimal digits (SHA-256)",
            ));
        }
    };

    // Stage 3: schema.
    let schema_version = match wire.schema_version.take() {
        Some(Scalar::UInt(SCHEMA_VERSION)) => SCHEMA_VERSION,
        None => return Err(schema("schema_version", "`schema_version` is missing")),
        Some(_) => {
            return Err(schema(
                "schema_version",
                format!("`schema_version` must be {SCHEMA_VERSION}"),
            ));
        }
    };
    let message_id = required("message_id", wire.message_id.take(), MAX_ID_LEN)?;
    let h = wire.hashed()?;
    let match_decision = required("match_decision", wire.match_decision, 16)?;
    let match_decision = MatchDecision::from_str(&match_decision).map_err(|_| {
        schema(
            "match_decision",
            "`match_decision` must be MATCHED, PARTIAL or UNMATCHED",
        )
    })?;
    let trace_id = string_field("trace_id", wire.trace_id, MAX_ID_LEN)?
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| message_id.clone());
    let actual = h.hash();
    let Hashed {
        ledger_entity,
        currency,
        amount,
        value_date,
        external_ref,
        counterparty,
        ..
    } = h;
    let msg = ReconMessage {
        schema_version,
        message_id,
        source_hash: claimed_hash,
        ledger_entity,
        currency,
        amount,
        match_decision,
        trace_id,
        value_date,
        external_ref,
        counterparty,
    };
    Ok((msg, actual))
}

/// The currency is mapped and the amount fits its minor units (the replay integrity gate).
pub fn check_currency(msg: &ReconMessage<'_>, reference: &ReferenceSnapshot) -> Result<(), ProcessError> {
    let Some(minor_units) = reference.minor_units(&msg.currency) else {
        return Err(ProcessError::poison(
            RootCause::UnmappedCurrency(msg.currency.to_string()),
            format!(
                "currency {} is neither ISO 4217 nor mapped in the reference table",
                msg.currency
            ),
        ));
    };
    let scale = msg.amount.normalize().scale();
    if scale > minor_units {
        return Err(ProcessError::poison(
            RootCause::ScaleExceedsCurrency(msg.currency.to_string()),
            format!(
                "amount {} has {scale} decimal places; {} allows {minor_units}",
                msg.amount, msg.currency
            ),
        ));
    }
    Ok(())
}

/// The accounting period is open for the entity (the replay temporal gate).
pub fn check_period(msg: &ReconMessage<'_>, reference: &ReferenceSnapshot) -> Result<(), ProcessError> {
    let period = msg.period();
    if reference.period_status(&msg.ledger_entity, &period) == PeriodStatus::Closed {
        return Err(ProcessError::poison(
            RootCause::ClosedPeriod {
                entity: msg.ledger_entity.to_string(),
                period: period.clone(),
            },
            format!("accounting period {period} is closed for {}", msg.ledger_entity),
        ));
    }
    Ok(())
}

/// Decode, verify and validate against reference data (stage 5): the whole integrity check.
pub fn validate<'a>(body: &'a str, reference: &ReferenceSnapshot) -> Result<ReconMessage<'a>, ProcessError> {
    let msg = decode(body)?;
    check_currency(&msg, reference)?;
    check_period(&msg, reference)?;
    Ok(msg)
}

/// The body without a leading UTF-8 byte-order mark, which some producers write before the JSON
/// (it is not part of the JSON text; the hash covers the fields, not the bytes).
fn without_bom(body: &str) -> &str {
    body.strip_prefix('\u{feff}').unwrap_or(body)
}

/// Best-effort labels of a body that may be invalid: any string field that is present and not
/// empty (an empty label is no label: it would also be refused as an index key of the envelope
/// table, and the dead letter would never become an envelope).
pub fn labels(body: &str) -> MessageLabels {
    let Ok(wire) = serde_json::from_str::<Wire<'_>>(without_bom(body)) else {
        return MessageLabels::default();
    };
    let text = |v: Option<Scalar<'_>>, max: usize| match v {
        Some(Scalar::Str(s)) if !s.is_empty() && s.len() <= max => Some(s.into_owned()),
        _ => None,
    };
    MessageLabels {
        message_id: text(wire.message_id, MAX_ID_LEN),
        source_hash: text(wire.source_hash, 64)
            .filter(|h| is_hash_hex(h))
            .map(|h| h.to_ascii_lowercase()),
        trace_id: text(wire.trace_id, MAX_ID_LEN),
        ledger_entity: text(wire.ledger_entity, MAX_ENTITY_LEN).map(|e| e.to_ascii_uppercase()),
        currency: text(wire.currency, 12).map(|c| c.to_ascii_uppercase()),
        amount: text(wire.amount, 64),
        value_date: text(wire.value_date, 10),
        match_decision: text(wire.match_decision, 16),
    }
}

#[cfg(test)]
mod tests;
