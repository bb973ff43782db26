//! A dead letter: the original message, verbatim, plus the context of its failure, as the
//! consumer sends it to the DLQ. The enricher turns it into a `DlqEnvelope`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::failure::{FailureCode, RootCause};

/// A message attribute of the original message, kept verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalAttribute {
    pub data_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    /// Base64 of the binary value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<String>,
}

/// Everything about the failure that does not fit a short attribute; travels as JSON in the
/// `dlq.context` message attribute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterContext {
    /// Bounded to `MAX_ERROR_DETAIL` bytes.
    pub error_detail: String,
    pub dead_lettered_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    pub first_received_at: Option<DateTime<Utc>>,
    pub source_queue_arn: Option<String>,
    pub source_message_id: String,
    pub message_group_id: Option<String>,
    pub trace_id: Option<String>,
    /// The X-Ray trace header the original was delivered with (SQS's `AWSTraceHeader` system
    /// attribute): the dead letter and any replayed copy continue that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_trace_header: Option<String>,
    pub source_hash: Option<String>,
    /// Who dead-lettered it (function name).
    pub actor: String,
    /// The original message's own attributes, verbatim.
    #[serde(default)]
    pub original_attributes: BTreeMap<String, OriginalAttribute>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The original body, byte for byte.
    pub body: String,
    pub failure_code: FailureCode,
    pub root_cause: RootCause,
    pub attempt_count: u32,
    pub context: DeadLetterContext,
}
