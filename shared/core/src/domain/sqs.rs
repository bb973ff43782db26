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

/// The system attribute in which SQS names a message's sender: on AWS a role session's
/// `ROLE_UNIQUE_ID:SESSION` (a user's unique id, an account's id); on LocalStack the account.
/// SQS sets it; no sender chooses it.
pub const SENDER_ID: &str = "SenderId";

/// LocalStack's sender id for every caller of its default account. No AWS account has it, so a
/// deployment given it by mistake trusts no one.
pub const LOCAL_ACCOUNT: &str = "000000000000";

/// Senders by SQS's `SenderId`, comma-separated: an id (a 12-digit account on LocalStack, an IAM
/// user's unique id), or a role's unique id followed by `:` (any session of that role).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Senders(Vec<String>);

impl std::str::FromStr for Senders {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ids: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        let valid = |id: &String| {
            let bare = id.strip_suffix(':').unwrap_or(id);
            (12..=128).contains(&bare.len()) && bare.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        };
        match ids.iter().find(|id| !valid(id)) {
            Some(bad) => Err(format!(
                "`{bad}` is not a sender id (A-Z 0-9, 12-128, a role's ending in `:`)"
            )),
            None if ids.is_empty() => Err("no sender named".into()),
            None => Ok(Senders(ids)),
        }
    }
}

impl Senders {
    /// LocalStack's one sender ([`LOCAL_ACCOUNT`]).
    pub fn local() -> Senders {
        Senders(vec![LOCAL_ACCOUNT.to_owned()])
    }

    /// Whether one of these sent `m` (a message without a sender id was sent by none of them).
    pub fn sent(&self, m: &SqsMessage) -> bool {
        let Some(id) = m.attributes.get(SENDER_ID) else {
            return false;
        };
        self.0.iter().any(|s| {
            if s.ends_with(':') {
                id.starts_with(s.as_str())
            } else {
                id == s
            }
        })
    }
}

/// Who may set the attributes the functions act on: `dlq.*` (a dead letter's failure, its
/// context) only the consumer; `replay.*` (a re-injected copy's lineage and generation) only the
/// replay and the control plane. The queue policies decide who may send at all; this decides
/// what of a permitted sender's message is believed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trust {
    pub dead_letters: Senders,
    pub replays: Senders,
}

impl Trust {
    /// The local stack's: every caller is the one account.
    pub fn local() -> Trust {
        Trust {
            dead_letters: Senders::local(),
            replays: Senders::local(),
        }
    }

    /// `m` without the attributes its sender may not set (dropped, not believed).
    pub fn believed<'m>(&self, m: &'m SqsMessage) -> std::borrow::Cow<'m, SqsMessage> {
        let (dlq, replay) = (!self.dead_letters.sent(m), !self.replays.sent(m));
        let forged = |name: &str| (dlq && name.starts_with("dlq.")) || (replay && name.starts_with("replay."));
        if !m.message_attributes.keys().any(|k| forged(k)) {
            return std::borrow::Cow::Borrowed(m);
        }
        let mut clean = m.clone();
        clean.message_attributes.retain(|k, _| !forged(k));
        std::borrow::Cow::Owned(clean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::event::sqs::SqsMessageAttribute;

    fn sent_by(sender: Option<&str>, attributes: &[&str]) -> SqsMessage {
        let mut m = SqsMessage::default();
        if let Some(s) = sender {
            m.attributes.insert(SENDER_ID.into(), s.into());
        }
        for a in attributes {
            let mut v = SqsMessageAttribute::default();
            v.string_value = Some("x".into());
            m.message_attributes.insert((*a).into(), v);
        }
        m
    }

    #[test]
    fn only_the_named_senders_set_our_attributes() {
        let trust = Trust {
            dead_letters: "AROACONSUMER0000001:".parse().unwrap(),
            replays: "AROAREPLAY00000001:,AROACONTROL0000001:".parse().unwrap(),
        };
        let names = ["dlq.failure_code", "replay.of", "bank.ref"];
        let kept = |sender: Option<&str>| {
            let m = sent_by(sender, &names);
            let mut k: Vec<String> = trust.believed(&m).message_attributes.keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            kept(Some("AROACONSUMER0000001:recon-consumer")),
            ["bank.ref", "dlq.failure_code"]
        );
        assert_eq!(
            kept(Some("AROACONTROL0000001:recon-control")),
            ["bank.ref", "replay.of"]
        );
        // A producer, a sender whose id only begins like a trusted role's, no sender at all.
        for other in [Some("AROABANKFEED000001:feed"), Some("AROACONTROL00000012:x"), None] {
            assert_eq!(kept(other), ["bank.ref"], "{other:?}");
        }
        assert!(Trust::local().replays.sent(&sent_by(Some(LOCAL_ACCOUNT), &[])));
        assert!(!Trust::local().replays.sent(&sent_by(Some("111111111111"), &[])));
        for bad in ["", "aroa:", "AROA", "AROA-X:"] {
            assert!(bad.parse::<Senders>().is_err(), "{bad}");
        }
    }
}
