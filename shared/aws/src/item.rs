//! Serde <-> DynamoDB item conversion through `serde_json::Value`: strings are `S`, numbers `N`,
//! booleans `BOOL`, objects `M`, arrays `L`; `null` fields are left out. Money is always a
//! decimal *string* in our types, so no amount ever passes through a float here.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;

pub type Item = HashMap<String, AttributeValue>;

#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error("value is not a JSON object")]
    NotAnObject,
    #[error("cannot convert: {0}")]
    Serde(#[from] serde_json::Error),
    #[error("number `{0}` is not representable")]
    Number(String),
}

fn to_attr(v: Value) -> Option<AttributeValue> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => AttributeValue::Bool(b),
        Value::Number(n) => AttributeValue::N(n.to_string()),
        Value::String(s) => AttributeValue::S(s),
        Value::Array(a) => AttributeValue::L(a.into_iter().filter_map(to_attr).collect()),
        Value::Object(o) => AttributeValue::M(o.into_iter().filter_map(|(k, v)| Some((k, to_attr(v)?))).collect()),
    })
}

fn from_attr(a: &AttributeValue) -> Result<Value, ItemError> {
    Ok(match a {
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) => serde_json::from_str::<serde_json::Number>(n)
            .map(Value::Number)
            .map_err(|_| ItemError::Number(n.clone()))?,
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::L(l) => Value::Array(l.iter().map(from_attr).collect::<Result<_, _>>()?),
        AttributeValue::M(m) => Value::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), from_attr(v)?)))
                .collect::<Result<_, ItemError>>()?,
        ),
        AttributeValue::Ss(ss) => Value::Array(ss.iter().cloned().map(Value::String).collect()),
        AttributeValue::Ns(ns) => Value::Array(
            ns.iter()
                .map(|n| from_attr(&AttributeValue::N(n.clone())))
                .collect::<Result<_, _>>()?,
        ),
        AttributeValue::B(b) => Value::String(aws_smithy_types::base64::encode(b.as_ref())),
        _ => Value::Null,
    })
}

/// A serialisable value (a struct) as a DynamoDB item.
pub fn to_item<T: Serialize>(value: &T) -> Result<Item, ItemError> {
    match serde_json::to_value(value)? {
        Value::Object(o) => Ok(o.into_iter().filter_map(|(k, v)| Some((k, to_attr(v)?))).collect()),
        _ => Err(ItemError::NotAnObject),
    }
}

/// A DynamoDB item as a deserialisable value.
pub fn from_item<T: DeserializeOwned>(item: &Item) -> Result<T, ItemError> {
    let obj = item
        .iter()
        .map(|(k, v)| Ok((k.clone(), from_attr(v)?)))
        .collect::<Result<serde_json::Map<_, _>, ItemError>>()?;
    Ok(serde_json::from_value(Value::Object(obj))?)
}

/// A string attribute of an item.
pub fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

/// A number attribute of an item, when it reads as a `T`.
pub fn get_n<T: std::str::FromStr>(item: &Item, name: &str) -> Option<T> {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone, Utc};
    use recon_core::domain::{MatchDecision, Posting};
    use rust_decimal::Decimal;
    use std::str::FromStr;

    #[test]
    fn postings_round_trip_with_exact_amounts() {
        let p = Posting {
            source_hash: "ab".repeat(32),
            sqs_message_id: "sqs-1".into(),
            message_id: "m-1".into(),
            trace_id: "t-1".into(),
            ledger_entity: "E1".into(),
            currency: "USD".into(),
            amount: Decimal::from_str("12345678901234567890.12").unwrap(),
            value_date: NaiveDate::from_ymd_opt(2026, 11, 30).unwrap(),
            period: "2026-11".into(),
            match_decision: MatchDecision::Partial,
            external_ref: "R".into(),
            counterparty: String::new(),
            attempt_count: 3,
            committed_at: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            replay_of: None,
        };
        let item = to_item(&p).unwrap();
        assert_eq!(
            item.get("amount"),
            Some(&AttributeValue::S("12345678901234567890.12".into()))
        );
        assert_eq!(item.get("attempt_count"), Some(&AttributeValue::N("3".into())));
        assert!(!item.contains_key("replay_of"), "nulls are left out");
        assert_eq!(from_item::<Posting>(&item).unwrap(), p);
    }
}
