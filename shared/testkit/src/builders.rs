//! The builders every test crate shares: transactions, SQS deliveries as Lambda hands them over,
//! replay requests, settings through the production parser, and the tests' fixed instant.

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use base64::Engine as _;
use chrono::{DateTime, TimeZone, Utc};
use recon_core::config::ConfigError;
use recon_core::domain::sqs::{LOCAL_ACCOUNT, SENDER_ID};
use recon_core::domain::{
    DlqEnvelope, EnvelopeStatus, MatchDecision, NewMessage, ReplayClaim, ReplayRecord, StatusChange, attrs,
    envelope_from_dlq_message,
};
use recon_core::ports::{EnvelopeStore, OutgoingMessage, is_binary};
use recon_core::replay::{ReplayRequest, Selector};
use std::sync::Arc;

use crate::memory::FixedClock;

/// The instant the memory tests call "now": 2026-12-02 12:00 UTC.
pub fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0)
        .single()
        .unwrap_or(DateTime::UNIX_EPOCH)
}

/// A clock standing at [`now`].
pub fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock::new(now()))
}

/// A valid USD transaction of ACME-US in an open period, numbered: `m-<n>`, amount `<n>.10`,
/// trace `trace-<n>`.
pub fn tx(n: u32) -> NewMessage {
    NewMessage {
        message_id: format!("m-{n}"),
        ledger_entity: "ACME-US".into(),
        currency: "USD".into(),
        amount: format!("{n}.10"),
        match_decision: MatchDecision::Matched,
        trace_id: format!("trace-{n}"),
        value_date: "2026-11-30".into(),
        external_ref: format!("BANK-{n:06}"),
        counterparty: "Globex".into(),
    }
}

/// [`tx`] in another currency and amount.
pub fn tx_in(n: u32, currency: &str, amount: &str) -> NewMessage {
    NewMessage {
        currency: currency.into(),
        amount: amount.into(),
        ..tx(n)
    }
}

/// The body of `m` (its `source_hash` computed).
pub fn body(m: &NewMessage) -> String {
    m.to_body()
        .unwrap_or_else(|e| panic!("a test transaction must serialise: {e}"))
}

/// A message of the main queue as Lambda hands it to the consumer: id, receipt handle, body,
/// `ApproximateReceiveCount`, `SentTimestamp` and the queue's ARN.
pub fn delivery(id: &str, body: &str, receive_count: u32) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.receipt_handle = Some(format!("rh-{id}-{receive_count}"));
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), receive_count.to_string());
    m.attributes.insert("SentTimestamp".into(), "1764676800000".into());
    m.attributes.insert(SENDER_ID.into(), LOCAL_ACCOUNT.into());
    m.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:recon-dlq-main".into());
    m
}

/// `m` with a string message attribute.
pub fn with_attribute(mut m: SqsMessage, name: &str, value: &str) -> SqsMessage {
    let mut a = SqsMessageAttribute::default();
    a.data_type = Some("String".into());
    a.string_value = Some(value.into());
    m.message_attributes.insert(name.into(), a);
    m
}

/// A sent message (a dead letter, a re-injected copy) as SQS delivers it, first receive.
pub fn delivered(id: &str, sent: &OutgoingMessage) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.receipt_handle = Some(format!("rh-{id}"));
    m.body = Some(sent.body.clone());
    m.attributes.insert("ApproximateReceiveCount".into(), "1".into());
    m.attributes.insert(SENDER_ID.into(), LOCAL_ACCOUNT.into());
    for (name, data_type, value) in &sent.attributes {
        m.message_attributes.insert(name.clone(), attribute(data_type, value));
    }
    m
}

/// A message attribute as Lambda's event carries it: a `Binary` one as its bytes (the outgoing
/// value is their base64), any other as text.
pub fn attribute(data_type: &str, value: &str) -> SqsMessageAttribute {
    let mut a = SqsMessageAttribute::default();
    a.data_type = Some(data_type.to_owned());
    match base64::engine::general_purpose::STANDARD.decode(value) {
        Ok(bytes) if is_binary(data_type) => {
            let mut data = Base64Data::default();
            *data = bytes;
            a.binary_value = Some(data);
        }
        _ => a.string_value = Some(value.to_owned()),
    }
    a
}

/// A Lambda event of `records`.
pub fn event(records: Vec<SqsMessage>) -> SqsEvent {
    let mut e = SqsEvent::default();
    e.records = records;
    e
}

/// A scheduled sweep, as the EventBridge schedule triggers it.
pub fn sweep_request() -> ReplayRequest {
    ReplayRequest {
        selector: Selector::default(),
        dry_run: false,
        reason: "scheduled sweep".into(),
        triggered_by: "schedule:test".into(),
        invocation: None,
        scheduled: true,
        quarantine: false,
    }
}

/// A replay by hand of `selector`, by "alice", because "XAU mapped".
pub fn manual_request(selector: Selector, dry_run: bool) -> ReplayRequest {
    ReplayRequest {
        selector,
        dry_run,
        reason: "XAU mapped".into(),
        triggered_by: "alice".into(),
        invocation: None,
        scheduled: false,
        quarantine: false,
    }
}

/// Settings parsed by the production parser, or the test fails with the parser's message.
pub fn parsed<T>(settings: Result<T, ConfigError>) -> T {
    settings.unwrap_or_else(|e| panic!("test settings must parse: {e}"))
}

/// A PENDING envelope with id `id`: an unmapped-currency dead letter of [`tx`], as the enricher
/// builds it, dead-lettered at [`now`].
pub fn envelope(id: &str) -> DlqEnvelope {
    let dead_letter = with_attribute(
        with_attribute(
            delivery(id, &body(&tx_in(1, "XAU", "1.5")), 1),
            attrs::FAILURE_CODE,
            "POISON_MESSAGE",
        ),
        attrs::ROOT_CAUSE,
        "UNMAPPED_CURRENCY:XAU",
    );
    let mut e = envelope_from_dlq_message(&dead_letter, now(), "test");
    e.envelope_id = id.to_owned();
    e
}

/// A replay's claim on envelopes, by `replay_id` for `reason`, from `at` for `lease`.
pub fn claim(replay_id: &str, reason: &str, at: DateTime<Utc>, lease: chrono::Duration) -> ReplayClaim {
    ReplayClaim {
        replay_id: replay_id.into(),
        triggered_by: "test".into(),
        reason: reason.into(),
        claimed_at: at,
        lease_until: at + lease,
    }
}

/// Settle a PENDING envelope in `status` by hand, the only way the life cycle allows: claimed by
/// a replay "by-hand", then finished. Panics when the store refuses.
pub async fn settle_by_hand<S: EnvelopeStore>(store: &S, envelope_id: &str, status: EnvelopeStatus) {
    let at = Utc::now();
    let change = |status| StatusChange {
        status,
        at,
        actor: "test".into(),
        reason: "by hand".into(),
        manual_journal: false,
    };
    let claim = claim("by-hand", "by hand", at, chrono::Duration::minutes(5));
    let record = ReplayRecord {
        replay_id: "by-hand".into(),
        triggered_by: "test".into(),
        reason: "by hand".into(),
        at,
        outcome: status,
        sqs_message_id: None,
        copy_source_hash: None,
        copy_period: None,
        in_doubt_until: None,
    };
    let claimed = store
        .claim(envelope_id, &claim, at, &change(EnvelopeStatus::Replaying), None)
        .await;
    assert_eq!(claimed, Ok(true), "claim {envelope_id}");
    let finished = store
        .finish(envelope_id, "by-hand", &change(status), &record, None)
        .await;
    assert_eq!(finished, Ok(true), "settle {envelope_id} in {status}");
}
