//! DynamoDB's limits on an item, as the memory stores enforce them: its size (names and values of
//! every attribute, as DynamoDB counts them) and non-empty string values for index key attributes.
//! DynamoDB Local checks some of this, not all; AWS checks all of it.

use recon_core::domain::DlqEnvelope;
use recon_core::domain::TransientKind;
use recon_core::domain::approval::ApprovalRequest;
use recon_core::ports::StoreError;
use recon_core::resources::{DYNAMODB_MAX_ITEM_BYTES, keys};
use serde_json::Value;

/// The size DynamoDB counts for a value: strings by their UTF-8 bytes, numbers about one byte per
/// two significant digits plus one, booleans and nulls one byte, lists and maps three bytes plus
/// one per element plus their elements (and, for maps, the names).
pub fn value_size(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 1,
        Value::Number(n) => {
            let digits = n.to_string().chars().filter(char::is_ascii_digit).count();
            digits.div_ceil(2) + 1
        }
        Value::String(s) => s.len(),
        Value::Array(items) => 3 + items.iter().map(|i| value_size(i) + 1).sum::<usize>(),
        Value::Object(map) => {
            3 + map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| k.len() + value_size(v) + 1)
                .sum::<usize>()
        }
    }
}

/// The size of an envelope's item: its attributes (nulls left out, as the adapter writes it) and
/// the index key attributes the adapter adds.
pub fn envelope_item_size(e: &DlqEnvelope) -> usize {
    let attributes = match serde_json::to_value(e) {
        Ok(Value::Object(map)) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| k.len() + value_size(v))
            .sum(),
        _ => 0,
    };
    let index = e.index_keys();
    attributes
        + keys::ENVELOPE_CAUSE.len()
        + index.cause.len()
        + keys::ENVELOPE_ENTITY.len()
        + index.entity.len()
        + keys::ENVELOPE_AGE.len()
        + index.age.len()
}

/// Would DynamoDB store this envelope? The error is the one it answers (a `ValidationException`,
/// which no retry changes).
pub fn check_envelope_item(e: &DlqEnvelope) -> Result<(), StoreError> {
    let index = e.index_keys();
    let key_values = [
        (keys::ENVELOPE_STATUS, index.status),
        (keys::ENVELOPE_AGE, index.age.as_str()),
        (keys::ENVELOPE_CODE, index.failure_code),
        (keys::ENVELOPE_CAUSE, index.cause.as_str()),
        (keys::ENVELOPE_ENTITY, index.entity.as_str()),
    ];
    if let Some((name, _)) = key_values.iter().find(|(_, v)| v.is_empty()) {
        return Err(StoreError::new(
            TransientKind::Infrastructure,
            format!(
                "ValidationException: One or more parameter values are not valid. A value specified for a secondary index key is not supported. The AttributeValue for a key attribute cannot contain an empty string value. IndexName: {name}"
            ),
        ));
    }
    let size = envelope_item_size(e);
    if size > DYNAMODB_MAX_ITEM_BYTES {
        return Err(StoreError::new(
            TransientKind::Infrastructure,
            format!("ValidationException: Item size has exceeded the maximum allowed size ({size} bytes)"),
        ));
    }
    Ok(())
}

/// Would DynamoDB store this approval request as the envelope table's item (its attributes and
/// the key, status and age attributes the adapter adds)?
pub fn check_request_item(r: &ApprovalRequest) -> Result<(), StoreError> {
    let attributes: usize = match serde_json::to_value(r) {
        Ok(Value::Object(map)) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| k.len() + value_size(v))
            .sum(),
        _ => 0,
    };
    let size = attributes
        + keys::ENVELOPE_PK.len()
        + keys::ENVELOPE_REQUEST_PREFIX.len()
        + r.request_id.len()
        + keys::ENVELOPE_STATUS.len()
        + keys::ENVELOPE_REQUEST_STATUS.len()
        + keys::ENVELOPE_AGE.len()
        + 35;
    if size > DYNAMODB_MAX_ITEM_BYTES {
        return Err(StoreError::new(
            TransientKind::Infrastructure,
            format!("ValidationException: Item size has exceeded the maximum allowed size ({size} bytes)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_count_as_dynamodb_counts_them() {
        assert_eq!(value_size(&Value::String("Ü".into())), 2);
        assert_eq!(value_size(&serde_json::json!(12345)), 4);
        assert_eq!(value_size(&serde_json::json!(true)), 1);
        assert_eq!(value_size(&serde_json::json!(["ab", "c"])), 3 + 3 + 2);
        assert_eq!(value_size(&serde_json::json!({"ab": "c", "n": null})), 3 + 2 + 1 + 1);
    }
}
