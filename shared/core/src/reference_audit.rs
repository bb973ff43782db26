//! The `reference-audit` Lambda: the reference table's stream to the audit trail. Every change to
//! reference data — a currency mapping, a period opened or closed — becomes a `REFERENCE_CHANGED`
//! record however it was made: through `dlqctl` (which also records its operator's identity) or by
//! a direct write to the table (which only this record reveals). The stream carries no identity,
//! so the record's actor is the stream; its id is the stream record's, so a redelivered batch
//! records each change once.

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_dynamo::AttributeValue;
use std::sync::Arc;

use crate::domain::{AuditKind, AuditRecord};
use crate::ports::{AuditLog, Clock};
use crate::resources::keys;

pub struct ReferenceAuditor<A> {
    pub audit: A,
    pub clock: Arc<dyn Clock>,
    /// Recorded as the actor: `stream:<reference table>`.
    pub actor: String,
}

impl<A: AuditLog> ReferenceAuditor<A> {
    /// Record every change of the batch, in order. On the first record that cannot be written,
    /// report it (and so every later one) as failed: the stream retries from there.
    pub async fn handle(&self, event: &Event) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        for r in &event.records {
            let record = self.describe(r);
            if let Err(e) = self.audit.append(&record).await {
                tracing::error!(event_id = %r.event_id, error = %e, "reference change not recorded; the stream retries it");
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = r.change.sequence_number.clone();
                response.batch_item_failures.push(failure);
                break;
            }
        }
        response
    }

    /// The audit record of one stream record.
    pub fn describe(&self, r: &EventRecord) -> AuditRecord {
        let pk = text(r.change.keys.get(keys::REFERENCE_PK));
        let sk = text(r.change.keys.get(keys::REFERENCE_SK));
        let (what, field) = if pk == keys::REFERENCE_CURRENCY_PK {
            (format!("currency {sk}"), "minor_units")
        } else if let Some(entity) = pk.strip_prefix(keys::REFERENCE_PERIOD_PK_PREFIX) {
            (format!("period {entity} {sk}"), "status")
        } else if pk == keys::REFERENCE_POLICY_PK {
            (format!("policy {sk}"), keys::REFERENCE_POLICY_ATTR)
        } else {
            (format!("item {pk}/{sk}"), "")
        };
        let value = |image: &serde_dynamo::Item| {
            if image.is_empty() {
                "(none)".to_owned()
            } else if field.is_empty() {
                format!("{} attributes", image.len())
            } else {
                let v = image
                    .get(field)
                    .map_or_else(|| "(no value)".to_owned(), |v| text(Some(v)));
                // A period's planned close (`dlqctl period schedule`) is part of its value.
                match image.get("closes_on") {
                    Some(on) => format!("{v} (closes on {})", text(Some(on))),
                    None => v,
                }
            }
        };
        let detail = format!(
            "{} on the reference table's stream: {what}: {} -> {} (the stream names no identity; a change made through dlqctl has its own record with the operator's)",
            r.event_name,
            value(&r.change.old_image),
            value(&r.change.new_image),
        );
        let at = if r.change.approximate_creation_date_time.timestamp() > 0 {
            r.change.approximate_creation_date_time
        } else {
            self.clock.now()
        };
        let mut record = AuditRecord::system(
            AuditKind::ReferenceChanged,
            &format!("stream#{}", r.event_id),
            at,
            &self.actor,
            detail,
        );
        if let Some(entity) = pk.strip_prefix(keys::REFERENCE_PERIOD_PK_PREFIX) {
            record.ledger_entity = Some(entity.to_owned());
        } else if pk == keys::REFERENCE_CURRENCY_PK {
            record.currency = Some(sk.clone());
        }
        record
    }
}

/// A string or number attribute as text (anything else: its kind).
fn text(v: Option<&AttributeValue>) -> String {
    match v {
        Some(AttributeValue::S(s) | AttributeValue::N(s)) => crate::domain::bounded_detail(s).to_owned(),
        Some(AttributeValue::Bool(b)) => b.to_string(),
        Some(AttributeValue::Null(_)) | None => String::new(),
        Some(_) => "(a value of another kind)".into(),
    }
}
