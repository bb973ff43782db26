//! The demo's workload, generated from a seed: valid transactions, duplicates (exact re-sends and
//! the same economic content reformatted), poison of five root causes, unrecoverable payloads,
//! and transactions whose ledger write fails transiently — each with what it is expected to become.

use anyhow::Result;
use recon_core::domain::{MatchDecision, NewMessage};
use recon_testkit::sim::faults::Fault;
use rust_decimal::Decimal;

use super::DemoArgs;

/// What the workload expects of each message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Expect {
    Commit,
    Duplicate,
    DeadLetter(String),
}

pub struct Workload {
    pub bodies: Vec<String>,
    pub expect: Vec<Expect>,
    /// source_hash -> injected fault
    pub faults: Vec<(String, Fault)>,
}

/// SplitMix64: a small, seeded, reproducible generator (no dependency needed for a demo).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const ENTITIES: [(&str, &str, u32); 4] = [
    ("ACME-US", "USD", 2),
    ("ACME-JP", "JPY", 0),
    ("ACME-BH", "BHD", 3),
    ("ACME-EU", "EUR", 2),
];
pub const CLOSED: (&str, &str) = ("ACME-US", "2026-10");

fn transaction(rng: &mut Rng, n: usize) -> NewMessage {
    let (entity, currency, scale) = ENTITIES[rng.below(ENTITIES.len() as u64) as usize];
    let amount = Decimal::new(rng.below(5_000_000) as i64 + 1, scale);
    NewMessage {
        message_id: format!("demo-{n:05}"),
        ledger_entity: entity.into(),
        currency: currency.into(),
        amount: amount.to_string(),
        match_decision: [MatchDecision::Matched, MatchDecision::Partial, MatchDecision::Unmatched]
            [rng.below(3) as usize],
        trace_id: format!("trace-{:016x}", rng.next()),
        value_date: format!("2026-11-{:02}", 1 + rng.below(28)),
        external_ref: format!("BANK-{:08}", rng.below(100_000_000)),
        counterparty: ["Globex", "Initech", "Umbrella", "Hooli"][rng.below(4) as usize].into(),
    }
}

fn body(m: &NewMessage) -> Result<String> {
    Ok(m.to_body()?)
}

pub fn generate(args: &DemoArgs) -> Result<(Workload, Workload)> {
    let mut rng = Rng(args.seed);
    let mut n = 0;
    let mut next = |rng: &mut Rng| {
        n += 1;
        transaction(rng, n)
    };

    // Phase 1: the happy path only, to measure what a committed message costs.
    let valid: Vec<NewMessage> = (0..args.valid).map(|_| next(&mut rng)).collect();
    let happy = Workload {
        bodies: valid.iter().map(body).collect::<Result<_>>()?,
        expect: vec![Expect::Commit; valid.len()],
        faults: Vec::new(),
    };

    let mut w = Workload {
        bodies: Vec::new(),
        expect: Vec::new(),
        faults: Vec::new(),
    };
    let push = |w: &mut Workload, b: String, e: Expect| {
        w.bodies.push(b);
        w.expect.push(e);
    };
    // Duplicates: exact re-sends, and the same economic content under a new message id with
    // other formatting (trailing zeros, lower-case currency).
    for m in valid.iter().take(10) {
        push(&mut w, body(m)?, Expect::Duplicate);
    }
    for m in valid.iter().skip(10).take(10) {
        let mut again = m.clone();
        again.message_id = format!("{}-resent", m.message_id);
        again.amount = format!("{}{}", m.amount, if m.amount.contains('.') { "00" } else { ".000" });
        again.currency = m.currency.to_lowercase();
        push(&mut w, body(&again)?, Expect::Duplicate);
    }
    // Poison: deterministic failures, dead-lettered on the first receive.
    for _ in 0..8 {
        let mut m = next(&mut rng);
        m.currency = "XAU".into();
        m.amount = "1.2500".into();
        push(&mut w, body(&m)?, Expect::DeadLetter("UNMAPPED_CURRENCY:XAU".into()));
    }
    for _ in 0..4 {
        let mut m = next(&mut rng);
        m.ledger_entity = "ACME-JP".into();
        m.currency = "JPY".into();
        m.amount = "1500.5".into();
        push(
            &mut w,
            body(&m)?,
            Expect::DeadLetter("SCALE_EXCEEDS_CURRENCY:JPY".into()),
        );
    }
    for _ in 0..4 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        v["amount"] = "1,250.00".into();
        push(&mut w, v.to_string(), Expect::DeadLetter("INVALID_DECIMAL".into()));
    }
    for _ in 0..4 {
        let mut m = next(&mut rng);
        m.ledger_entity = CLOSED.0.into();
        m.currency = "USD".into();
        m.amount = "99.95".into();
        m.value_date = format!("{}-15", CLOSED.1);
        push(
            &mut w,
            body(&m)?,
            Expect::DeadLetter(format!("CLOSED_PERIOD:{}:{}", CLOSED.0, CLOSED.1)),
        );
    }
    for _ in 0..4 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("match_decision");
        }
        push(
            &mut w,
            v.to_string(),
            Expect::DeadLetter("SCHEMA_VIOLATION:match_decision".into()),
        );
    }
    // Unrecoverable: cannot even be identified.
    for i in 0..3 {
        push(
            &mut w,
            format!("<ISO20022 truncated frame {i}"),
            Expect::DeadLetter("NOT_JSON".into()),
        );
    }
    for _ in 0..3 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("source_hash");
        }
        push(&mut w, v.to_string(), Expect::DeadLetter("MISSING_SOURCE_HASH".into()));
    }
    for _ in 0..3 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        v["amount"] = "0.01".into();
        push(&mut w, v.to_string(), Expect::DeadLetter("HASH_MISMATCH".into()));
    }
    // Transient: the ledger fails twice then recovers; or never recovers.
    for _ in 0..6 {
        let m = next(&mut rng);
        w.faults.push((m.compute_hash()?, Fault::Times(2)));
        push(&mut w, body(&m)?, Expect::Commit);
    }
    for _ in 0..3 {
        let m = next(&mut rng);
        w.faults.push((m.compute_hash()?, Fault::Always));
        push(
            &mut w,
            body(&m)?,
            Expect::DeadLetter("TRANSIENT_EXHAUSTED:THROTTLED".into()),
        );
    }
    Ok((happy, w))
}

pub fn count<'a>(it: impl Iterator<Item = &'a Expect>, f: impl Fn(&Expect) -> bool) -> u64 {
    it.filter(|e| f(e)).count() as u64
}
