//! A run's workload, from its seed: valid transactions (the largest valid amounts among them),
//! duplicates re-sent under the same or another message id, poison of every root cause, payloads
//! that cannot be identified, and bodies near SQS's 1 MiB limit, each sent at a virtual instant.

use recon_core::domain::{MatchDecision, NewMessage};
use std::time::Duration;

use super::rng::Rng;

/// What a message is, by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Valid,
    /// The same body again (the producer re-sent it).
    Resent,
    /// The same transaction under another message id, formatted differently.
    Reformatted,
    /// In XAU, which the operator maps during the run (or not).
    UnmappedCurrency,
    /// In ACME-US's closed period 2026-10 (which the operator may reopen).
    ClosedPeriod,
    ScaleExceeded,
    InvalidDecimal,
    SchemaViolation,
    /// A schema violation whose `ledger_entity` label is the empty string.
    EmptyEntity,
    NotJson,
    MissingHash,
    HashMismatch,
    /// A valid transaction whose body is close to SQS's 1 MiB limit.
    LargeValid,
    /// An unmapped-currency transaction whose body is close to the limit.
    LargePoison,
}

#[derive(Clone, Debug)]
pub struct Produced {
    pub kind: Kind,
    pub body: String,
    /// Message attributes the producer sets: (name, data type, value; base64 for `Binary`).
    pub attributes: Vec<(String, String, String)>,
    /// When the producer sends it, from the start of the run.
    pub at: Duration,
}

pub const CLOSED_ENTITY: &str = "ACME-US";
pub const CLOSED_PERIOD: &str = "2026-10";

const ENTITIES: [(&str, &str, u32); 4] = [
    ("ACME-US", "USD", 2),
    ("ACME-JP", "JPY", 0),
    ("ACME-BH", "BHD", 3),
    ("ACME-EU", "EUR", 2),
];

/// An amount as text: integer part, and the fraction at `scale` digits (no float anywhere).
fn amount_text(integer: u128, scale: u32, fraction: u128) -> String {
    if scale == 0 {
        integer.to_string()
    } else {
        format!("{integer}.{fraction:0width$}", width = scale as usize)
    }
}

fn transaction(rng: &mut Rng, n: usize) -> NewMessage {
    let (entity, currency, scale) = *rng.pick(&ENTITIES);
    // Mostly ordinary amounts; now and then the largest a body may carry (28 digits), whose sums
    // no longer fit a decimal.
    let amount = if rng.chance(80_000) {
        let integer_digits = 28 - scale;
        let integer = 10u128.pow(integer_digits) - 1 - u128::from(rng.below(1000));
        amount_text(integer, scale, 10u128.pow(scale).saturating_sub(1))
    } else {
        amount_text(
            u128::from(rng.between(1, 5_000_000)),
            scale,
            u128::from(rng.below(10u64.pow(scale))),
        )
    };
    NewMessage {
        message_id: format!("sim-{n:05}"),
        ledger_entity: entity.into(),
        currency: currency.into(),
        amount,
        match_decision: *rng.pick(&[MatchDecision::Matched, MatchDecision::Partial, MatchDecision::Unmatched]),
        trace_id: format!("trace-{:016x}", rng.next_u64()),
        value_date: format!("2026-11-{:02}", rng.between(1, 28)),
        external_ref: format!("BANK-{:08}", rng.below(100_000_000)),
        counterparty: rng
            .pick(&["Globex", "Initech", "Umbrella", "Hooli", "Café Röma"])
            .to_string(),
    }
}

fn body(m: &NewMessage) -> String {
    m.to_body().unwrap_or_else(|_| m.to_body_with_hash(&"0".repeat(64)))
}

fn json(m: &NewMessage) -> serde_json::Value {
    serde_json::from_str(&body(m)).unwrap_or_default()
}

/// Pad a body with a narrative field (not part of the schema or the hash) to about `bytes`.
fn padded(m: &NewMessage, bytes: usize) -> String {
    let mut v = json(m);
    let have = body(m).len();
    v["statement_narrative"] = "x".repeat(bytes.saturating_sub(have + 30)).into();
    v.to_string()
}

pub fn generate(rng: &mut Rng) -> Vec<Produced> {
    let valid = rng.between(8, 30) as usize;
    let mut n = 0;
    let mut next = |rng: &mut Rng| {
        n += 1;
        transaction(rng, n)
    };
    let mut out: Vec<(Kind, String)> = Vec::new();
    let originals: Vec<NewMessage> = (0..valid).map(|_| next(rng)).collect();
    for m in &originals {
        out.push((Kind::Valid, body(m)));
    }
    let extra = rng.between(6, 24);
    for _ in 0..extra {
        let kind = *rng.pick(&[
            Kind::Resent,
            Kind::Reformatted,
            Kind::UnmappedCurrency,
            Kind::UnmappedCurrency,
            Kind::ClosedPeriod,
            Kind::ScaleExceeded,
            Kind::InvalidDecimal,
            Kind::SchemaViolation,
            Kind::EmptyEntity,
            Kind::NotJson,
            Kind::MissingHash,
            Kind::HashMismatch,
            Kind::LargeValid,
            Kind::LargePoison,
        ]);
        let body = match kind {
            Kind::Resent => body(rng.pick(&originals)),
            Kind::Reformatted => {
                let mut m = rng.pick(&originals).clone();
                m.message_id = format!("{}-again-{}", m.message_id, rng.below(1000));
                m.amount = if m.amount.contains('.') {
                    format!("{}0", m.amount)
                } else {
                    format!("{}.0", m.amount)
                };
                m.currency = m.currency.to_lowercase();
                // The canonical form: another spelling of the same entity and references.
                m.ledger_entity = m.ledger_entity.to_lowercase();
                m.external_ref = format!("\u{a0}{} ", m.external_ref);
                m.counterparty = m.counterparty.replace('é', "e\u{301}").replace('ö', "o\u{308}");
                body(&m)
            }
            Kind::UnmappedCurrency => {
                let mut m = next(rng);
                m.currency = "XAU".into();
                m.amount = format!("{}.{:04}", rng.between(1, 99), rng.below(10_000));
                body(&m)
            }
            Kind::ClosedPeriod => {
                let mut m = next(rng);
                // Half of them spell the entity in lower case: the same closed period.
                m.ledger_entity = if rng.chance(500_000) {
                    CLOSED_ENTITY.to_lowercase()
                } else {
                    CLOSED_ENTITY.into()
                };
                m.currency = "USD".into();
                m.amount = format!("{}.{:02}", rng.between(1, 9999), rng.below(100));
                m.value_date = format!("{CLOSED_PERIOD}-{:02}", rng.between(1, 28));
                body(&m)
            }
            Kind::ScaleExceeded => {
                let mut m = next(rng);
                m.ledger_entity = "ACME-JP".into();
                m.currency = "JPY".into();
                m.amount = format!("{}.5", rng.between(1, 99_999));
                body(&m)
            }
            Kind::InvalidDecimal => {
                let mut v = json(&next(rng));
                v["amount"] = "1,250.00".into();
                v.to_string()
            }
            Kind::SchemaViolation => {
                let mut v = json(&next(rng));
                if let Some(o) = v.as_object_mut() {
                    o.remove("match_decision");
                }
                v.to_string()
            }
            Kind::EmptyEntity => {
                let mut v = json(&next(rng));
                v["ledger_entity"] = "".into();
                v.to_string()
            }
            Kind::NotJson => format!("<ISO20022 truncated frame {}", rng.below(1000)),
            Kind::MissingHash => {
                let mut v = json(&next(rng));
                if let Some(o) = v.as_object_mut() {
                    o.remove("source_hash");
                }
                v.to_string()
            }
            Kind::HashMismatch => {
                let mut v = json(&next(rng));
                v["amount"] = "0.01".into();
                v.to_string()
            }
            Kind::LargeValid => padded(&next(rng), 1_048_576 - rng.between(200, 8000) as usize),
            Kind::LargePoison => {
                let mut m = next(rng);
                m.currency = "XAU".into();
                m.amount = "1.5".into();
                padded(&m, 1_048_576 - rng.between(200, 8000) as usize)
            }
            Kind::Valid => body(&next(rng)),
        };
        out.push((kind, body));
    }
    // Some producers write a byte-order mark before the JSON.
    for (kind, body) in out.iter_mut() {
        if *kind == Kind::Valid && rng.chance(50_000) {
            body.insert(0, '\u{feff}');
        }
    }
    // Shuffle, then spread the sends over the first ten virtual minutes.
    for i in (1..out.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        out.swap(i, j);
    }
    let mut at = Duration::ZERO;
    out.into_iter()
        .map(|(kind, body)| {
            at += Duration::from_millis(rng.below(20_000));
            let attributes = attributes(rng);
            Produced {
                kind,
                body,
                attributes,
                at,
            }
        })
        .collect()
}

/// The producer's own message attributes: mostly none; now and then a few, strings and bytes;
/// now and then all ten SQS allows (a replay cannot add its four to those).
fn attributes(rng: &mut Rng) -> Vec<(String, String, String)> {
    let n = if rng.chance(100_000) {
        10
    } else if rng.chance(200_000) {
        rng.between(1, 4)
    } else {
        0
    };
    (0..n)
        .map(|i| {
            if rng.chance(300_000) {
                let bytes = [0u8, 159, 146, 150];
                (
                    format!("sig-{i}"),
                    "Binary".to_owned(),
                    base64_of(&bytes[..1 + rng.below(4) as usize]),
                )
            } else {
                (
                    format!("origin-{i}"),
                    "String".to_owned(),
                    format!("bank-feed-{}", rng.below(9)),
                )
            }
        })
        .collect()
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
