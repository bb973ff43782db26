//! `DlqEnvelope`: the contract between the failing worker and every remediation step after it.
//! It keeps the original message verbatim (body bytes and message attributes), why it failed, how
//! much retry budget it spent, the idempotency anchor, the business labels used for triage, and
//! its status with the history of every change.
//!
//! [`envelope_from_dlq_message`] builds one from a DLQ delivery, for both arrivals: a message the
//! consumer dead-lettered (rich `dlq.*` attributes) and a bare SQS redrive after crash/timeout
//! loops. It is pure; a DLQ message delivered twice yields the same `envelope_id`, and the WORM
//! document is derived from the stored envelope only, so it is written once per envelope.

use aws_lambda_events::event::sqs::SqsMessage;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

use super::attrs;
use super::dead_letter::{DeadLetterContext, OriginalAttribute};
use super::failure::{FailureCode, RootCause, bounded_detail};
use super::hash::sha256_hex;
use super::message::{decode, labels};
use super::sqs;
use super::status::{EnvelopeStatus, StatusChange};
use super::tx_key::TxKey;

/// A replay's hold on an envelope while it re-injects it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayClaim {
    pub replay_id: String,
    pub triggered_by: String,
    pub reason: String,
    pub claimed_at: DateTime<Utc>,
    /// After this instant another replay may take the envelope over.
    pub lease_until: DateTime<Utc>,
}

/// Who dead-lettered a message SQS's redrive policy moved to the DLQ (no consumer decided it).
pub const SQS_REDRIVE: &str = "sqs-redrive";

/// Provenance of one replay decision on an envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayRecord {
    pub replay_id: String,
    pub triggered_by: String,
    pub reason: String,
    pub at: DateTime<Utc>,
    /// `REPLAYED`, `SUPPRESSED_DUPLICATE`, `QUARANTINED` or `PENDING` (released).
    pub outcome: EnvelopeStatus,
    /// The SQS message id of the re-injected copy.
    pub sqs_message_id: Option<String>,
    /// The copy's transaction when it is not the envelope's own (an approved edit's): what a
    /// reconciliation looks the copy's posting up by, in whichever period the edit put it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_source_hash: Option<String>,
    /// The period of that transaction's value date (an edit may move it): where a ledger keyed
    /// by period finds the copy's posting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_period: Option<String>,
    /// Released because its hand-off must wait: a request to a general ledger that cannot void
    /// keys may still be applied until then. No replay claims it before (and it is not a failed
    /// re-injection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_doubt_until: Option<DateTime<Utc>>,
}

/// How far the envelope's `source_hash` can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HashKind {
    /// The body decodes and its content hashes to the claimed `source_hash`.
    Verified,
    /// The body carries a well-formed `source_hash` that could not be checked (schema failure).
    Claimed,
    /// No usable hash: `raw:<sha256 of the body bytes>`.
    RawDigest,
}

/// The original message, verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalMessage {
    /// The body, when it fits the envelope item (see `INLINE_BODY_LIMIT`); otherwise in S3.
    pub body: Option<String>,
    /// S3 key of the body bytes when they are not inline (large bodies, quarantined payloads).
    pub body_key: Option<String>,
    pub body_sha256: String,
    pub body_bytes: u64,
    #[serde(default)]
    pub attributes: BTreeMap<String, OriginalAttribute>,
    /// The SQS message id on the main queue.
    pub source_message_id: String,
    pub source_queue_arn: Option<String>,
    pub sent_at: Option<DateTime<Utc>>,
    /// The FIFO message group it was sent in (a re-injected copy goes back into it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
    /// The X-Ray trace header it was delivered with (a re-injected copy continues the trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_trace_header: Option<String>,
}

/// The WORM copy of an envelope in the Object Lock bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WormRef {
    pub bucket: String,
    pub key: String,
    /// SHA-256 of the object's bytes, hex.
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqEnvelope {
    pub envelope_id: String,
    pub status: EnvelopeStatus,
    pub failure_code: FailureCode,
    /// `NAME[:detail]` (see `RootCause`), kept as text so unknown causes survive.
    pub root_cause: String,
    pub attempt_count: u32,
    pub error_detail: String,
    pub source_hash: String,
    pub source_hash_kind: HashKind,
    pub trace_id: Option<String>,
    pub message_id: Option<String>,
    pub ledger_entity: Option<String>,
    /// Decimal string as sent (may be invalid: that can be the failure).
    pub amount: Option<String>,
    pub currency: Option<String>,
    pub value_date: Option<String>,
    /// `YYYY-MM`, from a valid `value_date`.
    pub accounting_period: Option<String>,
    pub match_decision: Option<String>,
    pub dead_lettered_at: DateTime<Utc>,
    pub enriched_at: DateTime<Utc>,
    /// The DLQ delivery this envelope was built from.
    pub dlq_message_id: String,
    /// Who dead-lettered it (the consumer's function name, or `sqs-redrive`).
    pub dead_lettered_by: String,
    pub original: OriginalMessage,
    pub worm: Option<WormRef>,
    #[serde(default)]
    pub status_history: Vec<StatusChange>,
    /// How many replays led to this dead letter (0: it failed on first ingestion). Carried by the
    /// `replay.generation` attribute of re-injected messages, so repeat offenders are capped.
    #[serde(default)]
    pub replay_generation: u32,
    /// The current (or last) replay claim.
    pub replay: Option<ReplayClaim>,
    #[serde(default)]
    pub replays: Vec<ReplayRecord>,
}

/// Deterministic envelope id: one per message that reached the DLQ, however often it is delivered.
pub fn envelope_id(source_message_id: &str) -> String {
    let digest = Sha256::digest(format!("recon-envelope/v1;{source_message_id}").as_bytes());
    format!("env_{}", &hex::encode(digest)[..32])
}

/// Build the envelope of a DLQ delivery. `now` is the enrichment time; `actor` the enricher.
pub fn envelope_from_dlq_message(m: &SqsMessage, now: DateTime<Utc>, actor: &str) -> DlqEnvelope {
    let body = m.body.clone().unwrap_or_default();
    let dlq_message_id = m.message_id.clone().unwrap_or_default();
    let receive_count = sqs::receive_count(m);

    // Consumer-dead-lettered messages carry their context; a bare redrive has none. A code this
    // version does not know (a newer consumer's) is read as POISON_MESSAGE: the envelope waits
    // for the replay's gates, which validate the body again, and the detail names the code.
    let raw_code = sqs::string_attr(m, attrs::FAILURE_CODE);
    let unknown_code = raw_code.filter(|c| c.parse::<FailureCode>().is_err());
    let code = raw_code.map(|c| c.parse::<FailureCode>().unwrap_or(FailureCode::PoisonMessage));
    let context: Option<DeadLetterContext> =
        sqs::string_attr(m, attrs::CONTEXT).and_then(|c| serde_json::from_str(c).ok());
    let ctx = context.as_ref();
    let (failure_code, root_cause, attempt_count, error_detail, dead_lettered_at, dead_lettered_by) = match code {
        Some(code) => (
            code,
            sqs::string_attr(m, attrs::ROOT_CAUSE).unwrap_or("UNKNOWN").to_owned(),
            sqs::string_attr(m, attrs::ATTEMPT_COUNT)
                .and_then(|a| a.parse().ok())
                .unwrap_or(receive_count),
            {
                let detail = ctx.map(|c| c.error_detail.clone()).unwrap_or_default();
                match unknown_code {
                    Some(c) => format!(
                        "unknown failure code `{}` (read as POISON_MESSAGE); {detail}",
                        bounded_detail(c)
                    ),
                    None => detail,
                }
            },
            ctx.map_or(now, |c| c.dead_lettered_at),
            ctx.map_or_else(|| "consumer".to_owned(), |c| c.actor.clone()),
        ),
        None => (
            FailureCode::PoisonMessage,
            RootCause::RedrivenBySqs.to_string(),
            receive_count,
            format!(
                "moved to the DLQ by the redrive policy of {} after repeated receives without an acknowledgement (crash or timeout)",
                m.attributes
                    .get("DeadLetterQueueSourceArn")
                    .map_or("the main queue", String::as_str)
            ),
            // SQS keeps no move time; the first receive is the closest stable instant.
            sqs::epoch_millis_attr(m, "ApproximateFirstReceiveTimestamp").unwrap_or(now),
            SQS_REDRIVE.to_owned(),
        ),
    };
    // The message id on the main queue: kept in the context, or the same id (SQS keeps the
    // message id when the redrive policy moves a message).
    let source_message_id = ctx.map_or_else(|| dlq_message_id.clone(), |c| c.source_message_id.clone());
    let original_attributes = ctx.map_or_else(|| sqs::original_attributes(m), |c| c.original_attributes.clone());

    let replay_generation = original_attributes
        .get(attrs::REPLAY_GENERATION)
        .and_then(|a| a.string_value.as_deref())
        .and_then(|g| g.parse().ok())
        .unwrap_or(0);
    let l = labels(&body);
    let body_sha256 = sha256_hex(body.as_bytes());
    let (source_hash, source_hash_kind) = match decode(&body) {
        Ok(msg) => (msg.source_hash, HashKind::Verified),
        Err(_) => match (&l.source_hash, failure_code) {
            (Some(h), FailureCode::PoisonMessage) => (h.clone(), HashKind::Claimed),
            _ => (format!("raw:{body_sha256}"), HashKind::RawDigest),
        },
    };
    let status = if failure_code == FailureCode::UnrecoverablePayload {
        EnvelopeStatus::Quarantined
    } else {
        EnvelopeStatus::Pending
    };
    let reason = match status {
        EnvelopeStatus::Quarantined => "unidentifiable payload: quarantined at enrichment".to_owned(),
        _ => format!("dead-lettered: {failure_code} {root_cause}"),
    };
    let accounting_period = l.period();
    DlqEnvelope {
        envelope_id: envelope_id(&source_message_id),
        status,
        failure_code,
        root_cause,
        attempt_count,
        error_detail: bounded_detail(&error_detail).to_owned(),
        source_hash,
        source_hash_kind,
        trace_id: ctx.and_then(|c| c.trace_id.clone()).or(l.trace_id),
        message_id: l.message_id,
        ledger_entity: l.ledger_entity,
        amount: l.amount,
        currency: l.currency,
        value_date: l.value_date,
        accounting_period,
        match_decision: l.match_decision,
        dead_lettered_at,
        enriched_at: now,
        dlq_message_id,
        dead_lettered_by,
        original: OriginalMessage {
            body_bytes: body.len() as u64,
            body: Some(body),
            body_key: None,
            body_sha256,
            attributes: original_attributes,
            source_message_id,
            source_queue_arn: ctx
                .and_then(|c| c.source_queue_arn.clone())
                .or_else(|| m.attributes.get("DeadLetterQueueSourceArn").cloned()),
            sent_at: ctx
                .and_then(|c| c.sent_at)
                .or_else(|| sqs::epoch_millis_attr(m, "SentTimestamp")),
            // A bare redrive keeps its group on a FIFO dead-letter queue.
            message_group_id: ctx
                .and_then(|c| c.message_group_id.clone())
                .or_else(|| m.attributes.get("MessageGroupId").cloned()),
            // The consumer's context names the original's; a bare redrive keeps its own.
            aws_trace_header: ctx
                .and_then(|c| c.aws_trace_header.clone())
                .or_else(|| m.attributes.get(sqs::AWS_TRACE_HEADER).cloned()),
        },
        worm: None,
        status_history: vec![StatusChange {
            status,
            at: now,
            actor: actor.to_owned(),
            reason,
            manual_journal: false,
        }],
        replay_generation,
        replay: None,
        replays: Vec::new(),
    }
}

/// The index key attributes of an envelope (status and age; failure code and `root_cause#age`;
/// ledger entity and age).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexKeys {
    pub status: &'static str,
    pub age: String,
    pub failure_code: &'static str,
    pub cause: String,
    pub entity: String,
}

/// The WORM document of an envelope: everything about the dead letter that never changes (no
/// enrichment time, no status), serialised deterministically from the stored envelope, so every
/// retry writes byte-identical content to the same content-addressed key.
#[derive(Serialize)]
pub struct WormDocument<'a> {
    pub schema: &'static str,
    pub envelope_id: &'a str,
    pub failure_code: FailureCode,
    pub root_cause: &'a str,
    pub attempt_count: u32,
    pub error_detail: &'a str,
    pub source_hash: &'a str,
    pub source_hash_kind: HashKind,
    pub trace_id: Option<&'a str>,
    pub dead_lettered_at: DateTime<Utc>,
    pub dead_lettered_by: &'a str,
    pub body: &'a str,
    pub body_sha256: &'a str,
    pub attributes: &'a BTreeMap<String, OriginalAttribute>,
    pub source_message_id: &'a str,
    pub source_queue_arn: Option<&'a str>,
    pub sent_at: Option<DateTime<Utc>>,
}

impl DlqEnvelope {
    /// The envelope this dead letter's message was re-injected from, when a replay (or an edit)
    /// sent it (its `replay.of` attribute).
    pub fn replay_of(&self) -> Option<&str> {
        self.original
            .attributes
            .get(attrs::REPLAY_OF)
            .and_then(|a| a.string_value.as_deref())
    }

    /// Where a ledger finds the envelope's transaction: its hash, and, when the body decoded to
    /// that hash, the period its labels read from the body's value date. A hash the body merely
    /// claims is asked without a period: the labels may name another than the hash's (an altered
    /// value date).
    pub fn decoded_key(&self) -> TxKey {
        let period = (self.source_hash_kind == HashKind::Verified)
            .then(|| self.accounting_period.clone())
            .flatten();
        TxKey::new(&self.source_hash, period)
    }

    /// The transaction hash the message claims, as the ledger would be keyed on it: none for a
    /// raw digest (a body that names no hash is never in the ledger).
    pub fn claimed_hash(&self) -> Option<&str> {
        (self.source_hash_kind != HashKind::RawDigest).then_some(self.source_hash.as_str())
    }

    /// Quarantined and flagged for a manual journal: an accountant books it by hand.
    pub fn left_for_manual_journal(&self) -> bool {
        self.status == EnvelopeStatus::Quarantined && self.status_history.iter().any(|c| c.manual_journal)
    }

    /// The WORM document bytes and their content-addressed key.
    pub fn worm_document(&self, body: &str) -> (String, Vec<u8>) {
        let doc = WormDocument {
            schema: "recon-dlq/worm-envelope/v1",
            envelope_id: &self.envelope_id,
            failure_code: self.failure_code,
            root_cause: &self.root_cause,
            attempt_count: self.attempt_count,
            error_detail: &self.error_detail,
            source_hash: &self.source_hash,
            source_hash_kind: self.source_hash_kind,
            trace_id: self.trace_id.as_deref(),
            dead_lettered_at: self.dead_lettered_at,
            dead_lettered_by: &self.dead_lettered_by,
            body,
            body_sha256: &self.original.body_sha256,
            attributes: &self.original.attributes,
            source_message_id: &self.original.source_message_id,
            source_queue_arn: self.original.source_queue_arn.as_deref(),
            sent_at: self.original.sent_at,
        };
        // Serialising plain structs, strings and maps cannot fail.
        let bytes = serde_json::to_vec(&doc).unwrap_or_default();
        let key = format!("envelopes/{}/{}.json", self.envelope_id, sha256_hex(&bytes));
        (key, bytes)
    }

    /// `dead_lettered_at` in a fixed-width UTC format + `#` + the id: string order is age order
    /// (the `age_key` of the status and entity indexes, and the memory store's page order).
    pub fn age_key(&self) -> String {
        format!(
            "{}#{}",
            self.dead_lettered_at.format("%Y-%m-%dT%H:%M:%S%.6fZ"),
            self.envelope_id
        )
    }

    /// The values of the envelope table's index key attributes (see `resources::indexes`). The
    /// table refuses an item whose index key attribute is an empty string.
    pub fn index_keys(&self) -> IndexKeys {
        let age = self.age_key();
        IndexKeys {
            status: self.status.as_str(),
            failure_code: self.failure_code.as_str(),
            cause: format!("{}#{age}", self.root_cause),
            entity: self.ledger_entity.clone().unwrap_or_else(|| "-".into()),
            age,
        }
    }

    /// Key of the raw body object (large bodies and quarantined payloads).
    pub fn payload_key(&self) -> String {
        format!("payloads/{}/{}", self.envelope_id, self.original.body_sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::event::sqs::SqsMessageAttribute;

    fn dlq_message(body: &str, attrs: &[(&str, &str)]) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some("dlq-1".into());
        m.body = Some(body.into());
        m.attributes.insert("ApproximateReceiveCount".into(), "4".into());
        for (k, v) in attrs {
            let mut a = SqsMessageAttribute::default();
            a.data_type = Some("String".into());
            a.string_value = Some((*v).into());
            m.message_attributes.insert((*k).into(), a);
        }
        m
    }

    #[test]
    fn a_bare_redrive_is_redriven_by_sqs_with_the_receive_count() {
        let now = Utc::now();
        let e = envelope_from_dlq_message(&dlq_message("{\"partial\":", &[]), now, "enricher");
        assert_eq!(e.root_cause, "REDRIVEN_BY_SQS");
        assert_eq!(e.failure_code, FailureCode::PoisonMessage);
        assert_eq!(e.attempt_count, 4);
        assert_eq!(e.status, EnvelopeStatus::Pending);
        assert_eq!(e.source_hash_kind, HashKind::RawDigest);
        assert_eq!(e.envelope_id, envelope_id("dlq-1"));
        assert_eq!(e.dead_lettered_by, "sqs-redrive");
    }

    #[test]
    fn unrecoverable_payloads_are_quarantined_at_once() {
        let e = envelope_from_dlq_message(
            &dlq_message(
                "garbage",
                &[
                    (attrs::FAILURE_CODE, "UNRECOVERABLE_PAYLOAD"),
                    (attrs::ROOT_CAUSE, "NOT_JSON"),
                ],
            ),
            Utc::now(),
            "enricher",
        );
        assert_eq!(e.status, EnvelopeStatus::Quarantined);
        assert!(e.source_hash.starts_with("raw:"));
        assert_eq!(e.status_history.len(), 1);
    }

    #[test]
    fn the_worm_document_is_deterministic() {
        let m = dlq_message("x", &[]);
        let a = envelope_from_dlq_message(
            &m,
            chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 1, 1, 0, 0, 0).unwrap(),
            "e",
        );
        let mut b = a.clone();
        b.enriched_at = Utc::now();
        b.status = EnvelopeStatus::Replayed;
        assert_eq!(a.worm_document("x"), b.worm_document("x"));
        assert!(
            a.worm_document("x")
                .0
                .starts_with(&format!("envelopes/{}/", a.envelope_id))
        );
    }
}
