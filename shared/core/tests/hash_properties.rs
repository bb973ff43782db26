//! Property: equal economic content <=> equal `source_hash`, whatever the field order, the
//! amount's formatting, the currency's case or the metadata (message id, trace id, match decision).

use proptest::prelude::*;
use recon_core::domain::{MatchDecision, NewMessage, decode};
use rust_decimal::Decimal;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Content {
    entity: String,
    external_ref: String,
    counterparty: String,
    value_date: String,
    currency: String,
    amount: Decimal,
}

fn content() -> impl Strategy<Value = Content> {
    (
        "[A-Z]{2,6}(-[A-Z0-9]{1,4})?",
        "[A-Z0-9]{1,6}",
        "[a-zA-Z ]{0,8}",
        (2020i32..2030, 1u32..13, 1u32..29),
        prop::sample::select(vec!["USD", "EUR", "JPY", "BHD", "GBP"]),
        (-10_000_000i64..10_000_000, 0u32..3),
    )
        .prop_map(
            |(entity, external_ref, counterparty, (y, m, d), currency, (units, scale))| Content {
                entity,
                external_ref,
                counterparty: counterparty.trim().to_owned(),
                value_date: format!("{y:04}-{m:02}-{d:02}"),
                currency: currency.to_owned(),
                amount: Decimal::new(units, scale),
            },
        )
}

fn message(c: &Content, id: &str) -> NewMessage {
    NewMessage {
        message_id: id.into(),
        ledger_entity: c.entity.clone(),
        currency: c.currency.clone(),
        amount: c.amount.to_string(),
        match_decision: MatchDecision::Matched,
        trace_id: format!("trace-{id}"),
        value_date: c.value_date.clone(),
        external_ref: c.external_ref.clone(),
        counterparty: c.counterparty.clone(),
    }
}

/// Re-format an amount without changing its value: leading zeros, trailing zeros.
fn reformat_amount(a: Decimal, leading: usize, trailing: usize) -> String {
    let s = a.to_string();
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let zeros = "0".repeat(leading);
    let frac = "0".repeat(trailing);
    match (digits.contains('.'), trailing) {
        (_, 0) => format!("{sign}{zeros}{digits}"),
        (true, _) => format!("{sign}{zeros}{digits}{frac}"),
        (false, _) => format!("{sign}{zeros}{digits}.{frac}"),
    }
}

/// A JSON body with the fields in the order given by `order` (a permutation seed).
fn body_in_order(fields: Vec<(&str, serde_json::Value)>, order: &[usize]) -> String {
    let mut idx: Vec<usize> = (0..fields.len()).collect();
    for (i, &o) in order.iter().enumerate().take(idx.len()) {
        let j = o % idx.len();
        idx.swap(i, j);
    }
    let parts: Vec<String> = idx
        .iter()
        .map(|&i| format!("{}:{}", serde_json::json!(fields[i].0), fields[i].1))
        .collect();
    format!("{{{}}}", parts.join(","))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn formatting_and_order_do_not_change_the_hash(
        c in content(),
        order in prop::collection::vec(0usize..20, 11),
        leading in 0usize..3,
        trailing in 0usize..4,
        lower in any::<bool>(),
        pad in any::<bool>(),
    ) {
        let canonical = message(&c, "first");
        let hash = canonical.compute_hash().unwrap();
        let currency = if lower { c.currency.to_lowercase() } else { c.currency.clone() };
        let external_ref = if pad { format!("  {} ", c.external_ref) } else { c.external_ref.clone() };
        let fields = vec![
            ("schema_version", serde_json::json!(1)),
            ("message_id", serde_json::json!("second")),
            ("source_hash", serde_json::json!(hash.to_uppercase())),
            ("ledger_entity", serde_json::json!(c.entity)),
            ("currency", serde_json::json!(currency)),
            ("amount", serde_json::json!(reformat_amount(c.amount, leading, trailing))),
            ("match_decision", serde_json::json!("UNMATCHED")),
            ("trace_id", serde_json::json!("another-trace")),
            ("value_date", serde_json::json!(c.value_date)),
            ("external_ref", serde_json::json!(external_ref)),
            ("counterparty", serde_json::json!(c.counterparty)),
        ];
        let body = body_in_order(fields, &order);
        let decoded = decode(&body).map_err(|e| TestCaseError::fail(format!("{e}: {body}")))?;
        prop_assert_eq!(&decoded.source_hash, &hash);
        let first = canonical.to_body().unwrap();
        prop_assert_eq!(decode(&first).unwrap().source_hash, hash);
    }

    #[test]
    fn different_content_gives_a_different_hash(a in content(), b in content()) {
        let ha = message(&a, "a").compute_hash().unwrap();
        let hb = message(&b, "b").compute_hash().unwrap();
        let same_economy = Content { amount: a.amount.normalize(), ..a.clone() } == Content { amount: b.amount.normalize(), ..b.clone() };
        prop_assert_eq!(same_economy, ha == hb);
    }

    #[test]
    fn one_changed_business_field_changes_the_hash(c in content(), which in 0usize..6) {
        let mut d = c.clone();
        match which {
            0 => d.entity.push('X'),
            1 => d.external_ref.push('9'),
            2 => d.counterparty.push('z'),
            3 => d.value_date = if c.value_date == "2031-01-01" { "2031-01-02".into() } else { "2031-01-01".into() },
            4 => d.currency = if c.currency == "CHF" { "SEK".into() } else { "CHF".into() },
            _ => d.amount += Decimal::new(1, 2),
        }
        prop_assert_ne!(message(&c, "x").compute_hash().unwrap(), message(&d, "x").compute_hash().unwrap());
    }
}
