//! Decoding, validation and labels of message bodies.

use super::*;
use crate::domain::reference::{CurrencyMapping, PeriodRecord};

pub(crate) fn sample() -> NewMessage {
    NewMessage {
        message_id: "m-1".into(),
        ledger_entity: "ACME-US".into(),
        currency: "USD".into(),
        amount: "10.50".into(),
        match_decision: MatchDecision::Matched,
        trace_id: "t-1".into(),
        value_date: "2026-11-30".into(),
        external_ref: "BANK-2026-0001".into(),
        counterparty: "Globex Supplies".into(),
    }
}

fn cause(r: Result<ReconMessage<'_>, ProcessError>) -> (String, String) {
    match r {
        Err(ProcessError::Unrecoverable { cause, .. }) => ("UNRECOVERABLE".into(), cause.to_string()),
        Err(ProcessError::Poison { cause, .. }) => ("POISON".into(), cause.to_string()),
        Err(ProcessError::Transient { kind, .. }) => ("TRANSIENT".into(), kind.to_string()),
        Ok(_) => ("OK".into(), String::new()),
    }
}

fn with(field: &str, value: serde_json::Value) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&sample().to_body().unwrap()).unwrap();
    if value.is_null() {
        v.as_object_mut().unwrap().remove(field);
    } else {
        v[field] = value;
    }
    v.to_string()
}

#[test]
fn a_valid_message_decodes_and_borrows() {
    let body = sample().to_body().unwrap();
    let msg = validate(&body, &ReferenceSnapshot::default()).unwrap();
    assert_eq!(msg.amount, Decimal::from_str("10.50").unwrap());
    assert_eq!(msg.period(), "2026-11");
    assert!(matches!(msg.ledger_entity, Cow::Borrowed(_)));
    assert_eq!(msg.source_hash, sample().compute_hash().unwrap());
}

#[test]
fn unidentifiable_bodies_are_unrecoverable() {
    let body = sample().to_body().unwrap();
    assert_eq!(cause(decode("not json {")), ("UNRECOVERABLE".into(), "NOT_JSON".into()));
    assert_eq!(cause(decode("[1,2]")), ("UNRECOVERABLE".into(), "NOT_AN_OBJECT".into()));
    assert_eq!(
        cause(decode(&with("source_hash", serde_json::Value::Null))).1,
        "MISSING_SOURCE_HASH"
    );
    assert_eq!(
        cause(decode(&with("source_hash", "abc".into()))).1,
        "MALFORMED_SOURCE_HASH"
    );
    assert_eq!(cause(decode(&with("source_hash", 7.into()))).1, "MALFORMED_SOURCE_HASH");
    let tampered = body.replace("10.50", "10.51");
    assert_eq!(
        cause(decode(&tampered)),
        ("UNRECOVERABLE".into(), "HASH_MISMATCH".into())
    );
    let dup = body.replacen('{', "{\"currency\":\"EUR\",", 1);
    assert_eq!(cause(decode(&dup)).1, "NOT_AN_OBJECT");
}

#[test]
fn schema_violations_are_poison_with_the_field_named() {
    assert_eq!(
        cause(decode(&with("ledger_entity", serde_json::Value::Null))).1,
        "SCHEMA_VIOLATION:ledger_entity"
    );
    assert_eq!(cause(decode(&with("amount", 10.5.into()))).1, "SCHEMA_VIOLATION:amount");
    assert_eq!(
        cause(decode(&with("match_decision", "MAYBE".into()))).1,
        "SCHEMA_VIOLATION:match_decision"
    );
    assert_eq!(
        cause(decode(&with("value_date", "2026-02-30".into()))).1,
        "SCHEMA_VIOLATION:value_date"
    );
    assert_eq!(
        cause(decode(&with("schema_version", 2.into()))).1,
        "SCHEMA_VIOLATION:schema_version"
    );
    assert_eq!(
        cause(decode(&with("ledger_entity", "A:B".into()))).1,
        "SCHEMA_VIOLATION:ledger_entity"
    );
    assert_eq!(
        cause(decode(&with("amount", "1e5".into()))),
        ("POISON".into(), "INVALID_DECIMAL".into())
    );
    assert_eq!(cause(decode(&with("amount", "12,50".into()))).1, "INVALID_DECIMAL");
}

#[test]
fn reference_checks() {
    let reference = ReferenceSnapshot::new(
        [CurrencyMapping {
            code: "XAU".into(),
            minor_units: 4,
            description: String::new(),
        }],
        [PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        }],
    );
    let body = |f: &dyn Fn(&mut NewMessage)| {
        let mut m = sample();
        f(&mut m);
        m.to_body().unwrap()
    };
    let b = body(&|m| m.currency = "XAG".into());
    assert_eq!(
        cause(validate(&b, &reference)),
        ("POISON".into(), "UNMAPPED_CURRENCY:XAG".into())
    );
    let b = body(&|m| m.currency = "xau".into());
    assert_eq!(cause(validate(&b, &reference)).0, "OK");
    let b = body(&|m| {
        m.currency = "JPY".into();
        m.amount = "100.5".into();
    });
    assert_eq!(cause(validate(&b, &reference)).1, "SCALE_EXCEEDS_CURRENCY:JPY");
    let b = body(&|m| {
        m.currency = "JPY".into();
        m.amount = "100.000".into();
    });
    assert_eq!(
        cause(validate(&b, &reference)).0,
        "OK",
        "trailing zeros are not precision"
    );
    let b = body(&|m| {
        m.currency = "BHD".into();
        m.amount = "1.235".into();
    });
    assert_eq!(cause(validate(&b, &reference)).0, "OK");
    let b = body(&|m| m.value_date = "2026-10-31".into());
    assert_eq!(cause(validate(&b, &reference)).1, "CLOSED_PERIOD:ACME-US:2026-10");
}

#[test]
fn dates_and_control_characters() {
    assert_eq!(parse_date("2024-02-29"), NaiveDate::from_ymd_opt(2024, 2, 29));
    for bad in [
        "2023-02-29",
        "2026-13-01",
        "2026-1-01",
        "2026/01/01",
        "20260101",
        "2026-01-01T",
        "+026-01-01",
    ] {
        assert_eq!(parse_date(bad), None, "{bad}");
    }
    assert!(has_control("a\u{0}b") && has_control("tab\t") && has_control("c1\u{85}"));
    assert!(!has_control("Société Générale — €") && !has_control("plain"));
}

#[test]
fn labels_survive_invalid_bodies() {
    let l = labels(&with("amount", "x".into()));
    assert_eq!(l.ledger_entity.as_deref(), Some("ACME-US"));
    assert_eq!(l.amount.as_deref(), Some("x"));
    assert_eq!(labels("garbage"), MessageLabels::default());
}

#[test]
fn a_byte_order_mark_before_a_valid_body_is_not_a_failure() {
    // Regression: producers that write UTF-8 with a BOM sent valid transactions that were
    // quarantined as NOT_JSON.
    let body = format!("\u{feff}{}", sample().to_body().unwrap());
    let m = decode(&body).expect("a BOM is not part of the JSON");
    assert_eq!(m.message_id, "m-1");
    assert_eq!(labels(&body).message_id.as_deref(), Some("m-1"));
    // Only at the start: inside, it is just a character of a string value.
    assert!(matches!(decode("{\u{feff}}"), Err(ProcessError::Unrecoverable { .. })));
}

/// The canonical-form decisions (docs/contract.md, "The canonical `source_hash`"), as vectors another
/// language can check.
mod canonical_form {
    use super::*;

    const SAMPLE_HASH: &str = "178528a37b60124c2397dd57099b5fa5f323de8f4205037da59a2e94f146db44";

    fn variant(f: impl FnOnce(&mut NewMessage)) -> NewMessage {
        let mut m = sample();
        f(&mut m);
        m
    }

    #[test]
    fn the_entity_is_case_insensitive_and_stored_upper_case() {
        let lower = variant(|m| m.ledger_entity = "acme-us".into());
        assert_eq!(lower.compute_hash().unwrap(), SAMPLE_HASH);
        let body = lower.to_body().unwrap();
        let msg = decode(&body).unwrap();
        assert_eq!(msg.ledger_entity, "ACME-US");
        assert_eq!(labels(&body).ledger_entity.as_deref(), Some("ACME-US"));
    }

    #[test]
    fn a_lower_case_entity_does_not_escape_a_closed_period() {
        // Regression: `acme-us` was another entity than `ACME-US`, so a transaction sent as
        // `acme-us` posted into ACME-US's closed period.
        let closed = ReferenceSnapshot::new(
            [],
            [PeriodRecord {
                entity: "ACME-US".into(),
                period: "2026-11".into(),
                status: PeriodStatus::Closed,
                closes_on: None,
            }],
        );
        let body = variant(|m| m.ledger_entity = "acme-us".into()).to_body().unwrap();
        assert_eq!(cause(validate(&body, &closed)).1, "CLOSED_PERIOD:ACME-US:2026-11");
        // A period recorded in lower case governs the entity too.
        let closed_lower = ReferenceSnapshot::new(
            [],
            [PeriodRecord {
                entity: "acme-us".into(),
                period: "2026-11".into(),
                status: PeriodStatus::Closed,
                closes_on: None,
            }],
        );
        let upper = sample().to_body().unwrap();
        assert_eq!(cause(validate(&upper, &closed_lower)).0, "POISON");
    }

    #[test]
    fn white_space_around_references_is_trimmed_exactly_as_unicode_defines_it() {
        for padded in [
            " BANK-2026-0001 ",
            "\u{00A0}BANK-2026-0001\u{00A0}",
            "\u{3000}BANK-2026-0001\u{2003}",
            "\u{202F}BANK-2026-0001\u{205F}",
        ] {
            let m = variant(|m| m.external_ref = padded.into());
            assert_eq!(m.compute_hash().unwrap(), SAMPLE_HASH, "{padded:?}");
            assert_eq!(decode(&m.to_body().unwrap()).unwrap().external_ref, "BANK-2026-0001");
        }
        // Inside a value, white space is part of it.
        let inner = variant(|m| m.counterparty = "Globex  Supplies".into());
        assert_ne!(inner.compute_hash().unwrap(), SAMPLE_HASH);
    }

    #[test]
    fn text_is_compared_in_normalization_form_c() {
        let composed = NewMessage {
            external_ref: "BANK-2026-0002".into(),
            counterparty: "Caf\u{00E9} R\u{00F6}ma".into(),
            currency: "EUR".into(),
            amount: "1250.00".into(),
            ..sample()
        };
        let decomposed = NewMessage {
            counterparty: "Cafe\u{0301} Ro\u{0308}ma".into(),
            ..composed.clone()
        };
        let expected = "0d81f3ae1e7a9b5dc9128f8a0f92be3ee33b2bff0ca009470182a37fcbd2f5c4";
        assert_eq!(composed.compute_hash().unwrap(), expected);
        assert_eq!(decomposed.compute_hash().unwrap(), expected);
        let msg_body = decomposed.to_body().unwrap();
        assert_eq!(decode(&msg_body).unwrap().counterparty, "Caf\u{00E9} R\u{00F6}ma");
    }

    #[test]
    fn invisible_characters_in_references_are_refused() {
        for (field, value) in [
            ("external_ref", "BANK-2026\u{200B}-0001"),
            ("external_ref", "\u{202E}1000-6202-KNAB"),
            ("counterparty", "Globex\u{00AD}Supplies"),
            ("counterparty", "\u{FEFF}Globex"),
        ] {
            let mut m = sample();
            match field {
                "external_ref" => m.external_ref = value.into(),
                _ => m.counterparty = value.into(),
            }
            let refused = m.compute_hash().unwrap_err().to_string();
            assert!(refused.contains("invisible character"), "{refused}");
            let body = m.to_body_with_hash(SAMPLE_HASH);
            assert_eq!(
                cause(decode(&body)),
                ("POISON".into(), format!("SCHEMA_VIOLATION:{field}"))
            );
        }
    }
}

#[test]
fn a_body_failing_an_unhashed_field_is_identified_by_the_hash_its_content_reproduces() {
    let m = NewMessage {
        message_id: "m-1".into(),
        ledger_entity: "acme-us".into(),
        currency: "usd".into(),
        amount: "10.50".into(),
        match_decision: MatchDecision::Matched,
        trace_id: "t".into(),
        value_date: "2026-11-30".into(),
        external_ref: " R-1 ".into(),
        counterparty: "Cafe\u{301}".into(),
    };
    let hash = m.compute_hash().unwrap();
    let with = |f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut v: serde_json::Value = serde_json::from_str(&m.to_body().unwrap()).unwrap();
        f(v.as_object_mut().unwrap());
        v.to_string()
    };
    // Unhashed fields wrong: still that transaction.
    let no_decision = with(&|o| {
        o.remove("match_decision");
    });
    assert!(decode(&no_decision).is_err());
    assert_eq!(
        identified_by_content(&no_decision).map(|k| k.source_hash).as_deref(),
        Some(hash.as_str())
    );
    let bad_version = with(&|o| {
        o.insert("schema_version".into(), 99.into());
    });
    assert_eq!(
        identified_by_content(&bad_version).map(|k| k.source_hash).as_deref(),
        Some(hash.as_str())
    );
    // A hashed field altered or unreadable: not identified.
    let altered = with(&|o| {
        o.insert("amount".into(), "10.51".into());
    });
    assert_eq!(identified_by_content(&altered), None);
    let unreadable = with(&|o| {
        o.insert("amount".into(), "1,050.00".into());
    });
    assert_eq!(identified_by_content(&unreadable), None);
    let no_hash = with(&|o| {
        o.remove("source_hash");
    });
    assert_eq!(identified_by_content(&no_hash), None);
    assert_eq!(identified_by_content("not json"), None);
}
