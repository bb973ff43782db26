//! Reading the parts of a delivered SQS message that the flows need: the receive count, SQS's
//! timestamps, string message attributes, and the message attributes verbatim.

use aws_lambda_events::event::sqs::SqsMessage;
use base64::Engine as _;
use chrono::{DateTime, TimeZone, Utc};
use std::collections::BTreeMap;

use super::dead_letter::OriginalAttribute;

/// The system attribute in which SQS carries a message's X-Ray trace header.
pub const AWS_TRACE_HEADER: &str = "AWSTraceHeader";

/// `ApproximateReceiveCount` of a delivered message (1 when SQS did not say).
pub fn receive_count(m: &SqsMessage) -> u32 {
    m.attributes
        .get("ApproximateReceiveCount")
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

pub fn epoch_millis_attr(m: &SqsMessage, name: &str) -> Option<DateTime<Utc>> {
    let ms = m.attributes.get(name)?.parse::<i64>().ok()?;
    Utc.timestamp_millis_opt(ms).single()
}

pub fn string_attr<'m>(m: &'m SqsMessage, name: &str) -> Option<&'m str> {
    m.message_attributes.get(name).and_then(|a| a.string_value.as_deref())
}

/// The original message attributes, verbatim (dead letters, envelopes).
pub fn original_attributes(m: &SqsMessage) -> BTreeMap<String, OriginalAttribute> {
    m.message_attributes
        .iter()
        .map(|(name, a)| {
            let binary = a
                .binary_value
                .as_ref()
                .map(|b| base64::engine::general_purpose::STANDARD.encode(&b.0));
            (
                name.clone(),
                OriginalAttribute {
                    data_type: a.data_type.clone().unwrap_or_else(|| "String".into()),
                    string_value: a.string_value.clone(),
                    binary_value: binary,
                },
            )
        })
        .collect()
}
