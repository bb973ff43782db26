//! Message bodies, as the consumer classifies them on a first receive.

use super::*;

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |kind, name, shown, expect, got| cases.push(Case::new(kind, name, shown, expect, got));
    let mut body = |name: &'static str, b: String, expect: &'static str| {
        let got = consume(&b);
        add("body", name, shown_body(&b), expect, got);
    };

    // Message bodies, as the consumer classifies them.
    body(
        "empty body",
        String::new(),
        "dead-letter UNRECOVERABLE_PAYLOAD NOT_JSON",
    );
    body(
        "not JSON",
        "amount=10.50".into(),
        "dead-letter UNRECOVERABLE_PAYLOAD NOT_JSON",
    );
    body(
        "a JSON array",
        "[1,2]".into(),
        "dead-letter UNRECOVERABLE_PAYLOAD NOT_AN_OBJECT",
    );
    body(
        "a JSON string",
        "\"hello\"".into(),
        "dead-letter UNRECOVERABLE_PAYLOAD NOT_AN_OBJECT",
    );
    body(
        "nested 10,000 deep",
        "[".repeat(10_000),
        "dead-letter UNRECOVERABLE_PAYLOAD NOT_JSON",
    );
    let mut v = valid();
    v.as_object_mut().map(|o| o.remove("source_hash"));
    body(
        "no source_hash",
        v.to_string(),
        "dead-letter UNRECOVERABLE_PAYLOAD MISSING_SOURCE_HASH",
    );
    let mut v = valid();
    v["source_hash"] = "ab".repeat(31).into();
    body(
        "source_hash of 62 digits",
        v.to_string(),
        "dead-letter UNRECOVERABLE_PAYLOAD MALFORMED_SOURCE_HASH",
    );
    v["source_hash"] = "zz".repeat(32).into();
    body(
        "source_hash not hex",
        v.to_string(),
        "dead-letter UNRECOVERABLE_PAYLOAD MALFORMED_SOURCE_HASH",
    );
    let mut v = valid();
    v["amount"] = "1.11".into();
    body(
        "content altered after hashing",
        v.to_string(),
        "dead-letter UNRECOVERABLE_PAYLOAD HASH_MISMATCH",
    );
    body(
        "schema_version 2",
        body_with("schema_version", 2.into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:schema_version",
    );
    body(
        "no schema_version",
        body_with("schema_version", serde_json::Value::Null),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:schema_version",
    );
    body(
        "amount as a JSON number",
        body_with("amount", serde_json::json!(10.5)),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:amount",
    );
    body(
        "amount with an exponent",
        body_with("amount", "1e3".into()),
        "dead-letter POISON_MESSAGE INVALID_DECIMAL",
    );
    body(
        "amount with a plus sign",
        body_with("amount", "+10.50".into()),
        "dead-letter POISON_MESSAGE INVALID_DECIMAL",
    );
    body(
        "amount with a thousands separator",
        body_with("amount", "1,000.00".into()),
        "dead-letter POISON_MESSAGE INVALID_DECIMAL",
    );
    body(
        "amount of 29 significant digits",
        body_with("amount", "1".repeat(29).into()),
        "dead-letter POISON_MESSAGE INVALID_DECIMAL",
    );
    body(
        "amount empty",
        body_with("amount", "".into()),
        "dead-letter POISON_MESSAGE INVALID_DECIMAL",
    );
    body(
        "cents beyond the currency",
        tx_with(|m| m.amount = "10.125".into()),
        "dead-letter POISON_MESSAGE SCALE_EXCEEDS_CURRENCY:USD",
    );
    body(
        "a currency nobody mapped",
        tx_with(|m| m.currency = "XAU".into()),
        "dead-letter POISON_MESSAGE UNMAPPED_CURRENCY:XAU",
    );
    body(
        "currency of two letters",
        body_with("currency", "US".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:currency",
    );
    body(
        "30 February",
        tx_with(|m| m.value_date = "2026-02-30".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:value_date",
    );
    body(
        "a timestamp for a date",
        tx_with(|m| m.value_date = "2026-11-30T00:00:00Z".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:value_date",
    );
    body(
        "a closed period",
        tx_with(|m| m.value_date = "2026-10-15".into()),
        "dead-letter POISON_MESSAGE CLOSED_PERIOD:ACME-US:2026-10",
    );
    body(
        "the closed period, entity in lower case",
        tx_with(|m| {
            m.value_date = "2026-10-15".into();
            m.ledger_entity = "acme-us".into();
        }),
        "dead-letter POISON_MESSAGE CLOSED_PERIOD:ACME-US:2026-10",
    );
    body(
        "entity with a space",
        tx_with(|m| m.ledger_entity = "ACME US".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:ledger_entity",
    );
    body(
        "entity empty",
        tx_with(|m| m.ledger_entity = String::new()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:ledger_entity",
    );
    body(
        "zero-width space in external_ref",
        tx_with(|m| m.external_ref = "BANK\u{200B}-000001".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:external_ref",
    );
    body(
        "no-break space inside counterparty",
        tx_with(|m| m.counterparty = "Globex\u{00A0}Supplies".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:counterparty",
    );
    body(
        "right-to-left override in counterparty",
        tx_with(|m| m.counterparty = "\u{202E}xebolG".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:counterparty",
    );
    body(
        "newline in message_id",
        tx_with(|m| m.message_id = "m-1\nm-2".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:message_id",
    );
    body(
        "message_id of 129 bytes",
        tx_with(|m| m.message_id = "m".repeat(129)),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:message_id",
    );
    body(
        "match_decision unknown",
        body_with("match_decision", "MAYBE".into()),
        "dead-letter POISON_MESSAGE SCHEMA_VIOLATION:match_decision",
    );
    body(
        "behind a byte-order mark",
        format!("\u{FEFF}{}", builders::body(&tx(1))),
        "commit ACME-US USD 1.10",
    );
    body(
        "references padded with no-break spaces",
        tx_with(|m| m.external_ref = "\u{00A0}BANK-000001 ".into()),
        "commit ACME-US USD 1.10",
    );
    cases
}
