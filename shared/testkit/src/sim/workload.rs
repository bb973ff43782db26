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
    /// A schema violation the producer corrects and sends again later: the same transaction,
    /// valid now (under the same message id, or a new one).
    Corrected,
    /// A copy of a valid transaction whose amount was altered after hashing (under a new
    /// message id): it must never post its own content.
    Tampered,
}

impl Kind {
    /// Whether a message of this kind is invalid whatever the reference data says: it must never
    /// post, and must reach an envelope.
    pub fn invalid_by_construction(self) -> bool {
        matches!(
            self,
            Kind::ScaleExceeded
                | Kind::InvalidDecimal
                | Kind::SchemaViolation
                | Kind::EmptyEntity
                | Kind::NotJson
                | Kind::MissingHash
                | Kind::HashMismatch
                | Kind::Tampered
        )
    }
}

/// A transaction as the generator made it: what every valid message carrying it must post, and
/// nothing else (compared field by field, never by its hash alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    /// The generator's number for it: the oracle's identity of a transaction, independent of
    /// the `source_hash` the ledger is keyed on.
    pub id: usize,
    /// The canonical spelling (upper-case entity and currency).
    pub ledger_entity: String,
    pub currency: String,
    pub amount: rust_decimal::Decimal,
    pub value_date: String,
    /// Its correct `source_hash`, by the producer's own computation.
    pub source_hash: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Produced {
    pub kind: Kind,
    pub body: String,
    /// The transaction it carries, by construction (`None`: a body that names none).
    pub txn: Option<usize>,
    /// Message attributes the producer sets: (name, data type, value; base64 for `Binary`).
    pub attributes: Vec<(String, String, String)>,
    /// When the producer sends it, from the start of the run.
    pub at: Duration,
    /// The SQS message id the queue gave it (once sent).
    pub sqs_id: String,
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

/// What the producer sends, and the transactions it means (the oracle's ground truth).
#[derive(Clone, Debug, Default)]
pub struct Workload {
    pub messages: Vec<Produced>,
    pub transactions: Vec<Transaction>,
}

/// The transaction `m` carries, as the generator means it.
fn truth(id: usize, m: &NewMessage) -> Transaction {
    Transaction {
        id,
        ledger_entity: m.ledger_entity.to_uppercase(),
        currency: m.currency.to_uppercase(),
        amount: recon_core::domain::money::parse_amount(&m.amount)
            .map(|a| a.normalize())
            .unwrap_or_default(),
        value_date: m.value_date.clone(),
        source_hash: m.compute_hash().ok(),
    }
}

pub fn generate(rng: &mut Rng) -> Workload {
    let valid = rng.between(8, 30) as usize;
    let mut transactions: Vec<Transaction> = Vec::new();
    let mut n = 0;
    // A new transaction (its truth recorded as it will be sent, after `shape` changes it).
    let mut next = |rng: &mut Rng, transactions: &mut Vec<Transaction>, shape: &dyn Fn(&mut NewMessage, &mut Rng)| {
        n += 1;
        let mut m = transaction(rng, n);
        shape(&mut m, rng);
        transactions.push(truth(n, &m));
        (m, n)
    };
    let plain = |_: &mut NewMessage, _: &mut Rng| {};
    // (kind, body, transaction, extra delay after the ten minutes' spread).
    let mut out: Vec<(Kind, String, Option<usize>, Option<Duration>)> = Vec::new();
    let originals: Vec<(NewMessage, usize)> = (0..valid).map(|_| next(rng, &mut transactions, &plain)).collect();
    for (m, t) in &originals {
        out.push((Kind::Valid, body(m), Some(*t), None));
    }
    let mut unmapped: Vec<(NewMessage, usize)> = Vec::new();
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
            Kind::SchemaViolation,
            Kind::EmptyEntity,
            Kind::NotJson,
            Kind::MissingHash,
            Kind::HashMismatch,
            Kind::Tampered,
            Kind::LargeValid,
            Kind::LargePoison,
        ]);
        let (body, txn) = match kind {
            Kind::Resent => {
                let (m, t) = rng.pick(&originals);
                (body(m), Some(*t))
            }
            Kind::Reformatted => {
                let (m, t) = rng.pick(&originals);
                let mut m = m.clone();
                m.message_id = format!("{}-again-{}", m.message_id, rng.below(1000));
                // A trailing zero, where the amount has a digit to spare (28 at most).
                let digits = m
                    .amount
                    .trim_start_matches('0')
                    .chars()
                    .filter(char::is_ascii_digit)
                    .count();
                if digits < 28 {
                    m.amount = if m.amount.contains('.') {
                        format!("{}0", m.amount)
                    } else {
                        format!("{}.0", m.amount)
                    };
                }
                m.currency = m.currency.to_lowercase();
                // The canonical form: another spelling of the same entity and references.
                m.ledger_entity = m.ledger_entity.to_lowercase();
                m.external_ref = format!("\u{a0}{} ", m.external_ref);
                m.counterparty = m.counterparty.replace('é', "e\u{301}").replace('ö', "o\u{308}");
                (body(&m), Some(*t))
            }
            Kind::Tampered => {
                // Hashed as sent, then the amount changed on the way: a copy of a valid
                // transaction, or of one dead-lettered for its currency (both then wait in the
                // DLQ, where an operator may quarantine them together).
                let (m, t) = if !unmapped.is_empty() && rng.chance(500_000) {
                    rng.pick(&unmapped)
                } else {
                    rng.pick(&originals)
                };
                let mut m = m.clone();
                m.message_id = format!("{}-tampered-{}", m.message_id, rng.below(1000));
                let mut v = json(&m);
                v["amount"] = "0.01".into();
                (v.to_string(), Some(*t))
            }
            Kind::UnmappedCurrency => {
                let (m, t) = next(rng, &mut transactions, &|m, rng| {
                    m.currency = "XAU".into();
                    m.amount = format!("{}.{:04}", rng.between(1, 99), rng.below(10_000));
                });
                unmapped.push((m.clone(), t));
                (body(&m), Some(t))
            }
            Kind::ClosedPeriod => {
                let (m, t) = next(rng, &mut transactions, &|m, rng| {
                    // Half of them spell the entity in lower case: the same closed period.
                    m.ledger_entity = if rng.chance(500_000) {
                        CLOSED_ENTITY.to_lowercase()
                    } else {
                        CLOSED_ENTITY.into()
                    };
                    m.currency = "USD".into();
                    m.amount = format!("{}.{:02}", rng.between(1, 9999), rng.below(100));
                    m.value_date = format!("{CLOSED_PERIOD}-{:02}", rng.between(1, 28));
                });
                (body(&m), Some(t))
            }
            Kind::ScaleExceeded => {
                let (m, t) = next(rng, &mut transactions, &|m, rng| {
                    m.ledger_entity = "ACME-JP".into();
                    m.currency = "JPY".into();
                    m.amount = format!("{}.5", rng.between(1, 99_999));
                });
                (body(&m), Some(t))
            }
            Kind::InvalidDecimal => {
                let (m, t) = next(rng, &mut transactions, &plain);
                let mut v = json(&m);
                v["amount"] = "1,250.00".into();
                (v.to_string(), Some(t))
            }
            Kind::SchemaViolation => {
                // An unhashed field missing: the hashed ones parse and reproduce the hash.
                let (m, t) = next(rng, &mut transactions, &plain);
                let mut v = json(&m);
                if let Some(o) = v.as_object_mut() {
                    o.remove("match_decision");
                }
                // Half the time the producer finds out, corrects it and sends it again later.
                if rng.chance(500_000) {
                    let mut fixed = m.clone();
                    if rng.chance(500_000) {
                        fixed.message_id = format!("{}-corrected", m.message_id);
                    }
                    let later = Duration::from_secs(60 * rng.between(20, 100));
                    out.push((Kind::Corrected, body(&fixed), Some(t), Some(later)));
                }
                (v.to_string(), Some(t))
            }
            Kind::EmptyEntity => {
                let (m, t) = next(rng, &mut transactions, &plain);
                let mut v = json(&m);
                v["ledger_entity"] = "".into();
                (v.to_string(), Some(t))
            }
            Kind::NotJson => (format!("<ISO20022 truncated frame {}", rng.below(1000)), None),
            Kind::MissingHash => {
                let (m, t) = next(rng, &mut transactions, &plain);
                let mut v = json(&m);
                if let Some(o) = v.as_object_mut() {
                    o.remove("source_hash");
                }
                (v.to_string(), Some(t))
            }
            Kind::HashMismatch => {
                let (m, t) = next(rng, &mut transactions, &plain);
                let mut v = json(&m);
                v["amount"] = "0.01".into();
                (v.to_string(), Some(t))
            }
            Kind::LargeValid => {
                let (m, t) = next(rng, &mut transactions, &plain);
                (padded(&m, 1_048_576 - rng.between(200, 8000) as usize), Some(t))
            }
            Kind::LargePoison => {
                let (m, t) = next(rng, &mut transactions, &|m, _| {
                    m.currency = "XAU".into();
                    m.amount = "1.5".into();
                });
                (padded(&m, 1_048_576 - rng.between(200, 8000) as usize), Some(t))
            }
            Kind::Valid | Kind::Corrected => {
                let (m, t) = next(rng, &mut transactions, &plain);
                (body(&m), Some(t))
            }
        };
        out.push((kind, body, txn, None));
    }
    // Some producers write a byte-order mark before the JSON.
    for (kind, body, _, _) in out.iter_mut() {
        if *kind == Kind::Valid && rng.chance(50_000) {
            body.insert(0, '\u{feff}');
        }
    }
    // Shuffle, then spread the sends over the first ten virtual minutes (a correction goes out
    // later, after its malformed message).
    for i in (1..out.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        out.swap(i, j);
    }
    let mut at = Duration::ZERO;
    let mut messages: Vec<Produced> = out
        .into_iter()
        .map(|(kind, body, txn, later)| {
            at += Duration::from_millis(rng.below(20_000));
            let attributes = attributes(rng);
            Produced {
                kind,
                body,
                txn,
                attributes,
                at: at + later.unwrap_or_default(),
                sqs_id: String::new(),
            }
        })
        .collect();
    messages.sort_by_key(|p| p.at);
    Workload { messages, transactions }
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
