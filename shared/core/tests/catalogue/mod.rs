//! The bad-input catalogue's helpers: what each part of the system does with an input, and how
//! docs/contract.md shows it.
#![allow(unused_imports)]

mod bodies;
mod others;

pub use aws_lambda_events::event::sqs::SqsMessage;
pub use recon_core::config::{ConsumerSettings, EnricherSettings, ReferenceAuditSettings, ReplaySettings};
pub use recon_core::control::Command;
pub use recon_core::decisions::{FailureDecision, RetryPolicy, decide_failure};
pub use recon_core::domain::{
    CurrencyMapping, NewMessage, PeriodRecord, PeriodStatus, ReferenceSnapshot, attrs, envelope_from_dlq_message,
    input, validate,
};
pub use recon_core::replay::{Invocation, parse_invocation};
pub use recon_testkit::builders::{self, delivery, tx, with_attribute};
pub use std::collections::HashMap;

/// One named bad input and what must happen to it.
pub struct Case {
    pub kind: &'static str,
    pub name: &'static str,
    /// How the input is shown in docs/contract.md.
    pub shown: String,
    /// The text the outcome must contain.
    pub expect: &'static str,
    pub got: String,
}

impl Case {
    pub fn new(kind: &'static str, name: &'static str, shown: String, expect: &'static str, got: String) -> Self {
        Case {
            kind,
            name,
            shown,
            expect,
            got,
        }
    }
}

pub fn reference() -> ReferenceSnapshot {
    ReferenceSnapshot::new(
        [CurrencyMapping {
            code: "XAG".into(),
            minor_units: 4,
            description: "silver".into(),
        }],
        [PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        }],
    )
}

/// What the consumer does with a body (on its first receive).
pub fn consume(body: &str) -> String {
    match validate(body, &reference()) {
        Ok(m) => format!("commit {} {} {}", m.ledger_entity, m.currency, m.amount),
        Err(e) => match decide_failure(e, 1, &RetryPolicy::default(), "m") {
            FailureDecision::DeadLetter { code, cause, .. } => format!("dead-letter {code} {cause}"),
            FailureDecision::Retry { kind, .. } => format!("retry {kind}"),
        },
    }
}

pub fn valid() -> serde_json::Value {
    serde_json::from_str(&builders::body(&tx(1))).unwrap_or_default()
}

/// The valid body with one field replaced (`null` removes it); its `source_hash` recomputed when
/// the content still hashes, so the case is about the field, not the hash.
pub fn body_with(field: &str, value: serde_json::Value) -> String {
    let mut v = valid();
    if value.is_null() {
        v.as_object_mut().map(|o| o.remove(field));
    } else {
        v[field] = value;
    }
    if let Ok(m) = serde_json::from_value::<NewMessage>(v.clone())
        && let Ok(h) = m.compute_hash()
    {
        v["source_hash"] = h.into();
    }
    v.to_string()
}

/// The valid body with one field replaced, hash recomputed by the canonical rules.
pub fn tx_with(f: impl FnOnce(&mut NewMessage)) -> String {
    let mut m = tx(1);
    f(&mut m);
    let hash = m.compute_hash().unwrap_or_else(|_| "0".repeat(64));
    m.to_body_with_hash(&hash)
}

/// What the enricher makes of a dead letter: status, failure code, root cause, and the labels
/// that feed the triage indexes.
pub fn enrich(m: &SqsMessage) -> String {
    let e = envelope_from_dlq_message(m, builders::now(), "catalogue");
    format!(
        "{} {} {} attempts={} entity={} currency={} detail={}",
        e.status,
        e.failure_code,
        e.root_cause,
        e.attempt_count,
        e.ledger_entity.as_deref().unwrap_or("-"),
        e.currency.as_deref().unwrap_or("-"),
        e.error_detail,
    )
}

pub fn dead_letter(body: &str, attributes: &[(&str, &str)]) -> SqsMessage {
    attributes
        .iter()
        .fold(delivery("d-1", body, 1), |m, (k, v)| with_attribute(m, k, v))
}

/// What the replay function does with an invocation's payload.
pub fn replay(payload: serde_json::Value) -> String {
    match parse_invocation(&payload, "recon-dlq-replay-sweep", "recon-dlq-audit-seal") {
        Ok(Invocation::Sweep(r)) => format!("accepted: sweep triggered_by={}", r.triggered_by),
        Ok(Invocation::Seal) => "accepted: seal".into(),
        Err(e) => format!("refused: {e}"),
    }
}

/// What the control plane does with a body asking for a replay (as a maker it knows).
pub fn remediation(body: serde_json::Value) -> String {
    let command = match serde_json::from_value::<Command>(body) {
        Ok(c) => c,
        Err(e) => return format!("refused (400): not a command: {e}"),
    };
    let Command::Replay(r) = command else {
        return "not a replay".into();
    };
    match r.request(
        "arn:aws:sts::123456789012:assumed-role/recon-dlq-maker/alice",
        "req-1",
        false,
    ) {
        Ok(r) => format!(
            "accepted: dry_run={} max_items={:?} triggered_by={}",
            r.dry_run, r.selector.max_items, r.triggered_by
        ),
        Err(e) => format!("refused (400): {e}"),
    }
}

pub fn operator(r: Result<impl std::fmt::Display, String>) -> String {
    match r {
        Ok(v) => format!("accepted: {v}"),
        Err(e) => format!("refused: {e}"),
    }
}

/// Each function's settings from `vars` over a deployment's names (as the template sets them).
pub fn config(vars: &[(&str, &str)]) -> String {
    let names = recon_core::resources::ResourceNames::derive("acme", "123456789012", "eu-west-1");
    let url = |q: &str| format!("https://sqs.eu-west-1.amazonaws.com/123456789012/{q}");
    let mut env: HashMap<String, String> = recon_core::config::environment(
        &names,
        &url(&names.main_queue),
        &url(&names.dead_letter_queue),
        &url(&names.parking_queue),
    )
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in vars {
        if v.is_empty() {
            env.remove(*k);
        } else {
            env.insert(k.to_string(), v.to_string());
        }
    }
    let get = |k: &str| env.get(k).cloned();
    let errors: Vec<String> = [
        ConsumerSettings::from_lookup(get).err(),
        EnricherSettings::from_lookup(get).err(),
        ReplaySettings::from_lookup(get).err(),
        ReferenceAuditSettings::from_lookup(get).err(),
    ]
    .into_iter()
    .flatten()
    .map(|e| e.to_string())
    .collect();
    match errors.first() {
        Some(e) => format!("refused: {e}"),
        None => "accepted".into(),
    }
}

/// `s` on one line for the table: control, white-space and invisible characters other than the
/// plain space escaped, at most 60 characters.
pub fn short(s: &str) -> String {
    let one_line: String = s
        .chars()
        .map(|c| {
            let hidden = c.is_control()
                || (c.is_whitespace() && c != ' ')
                || recon_core::domain::canonical::invisible(c.encode_utf8(&mut [0; 4])).is_some();
            if hidden {
                format!("\\u{{{:04X}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect();
    if one_line.chars().count() > 60 {
        format!("{}…", one_line.chars().take(60).collect::<String>())
    } else {
        one_line
    }
}

/// How a body differs from the valid one: its changed fields, or the body itself.
pub fn shown_body(b: &str) -> String {
    let (bom, text) = match b.strip_prefix('\u{FEFF}') {
        Some(rest) => ("\u{FEFF} + ", rest),
        None => ("", b),
    };
    let (Ok(serde_json::Value::Object(sent)), serde_json::Value::Object(base)) =
        (serde_json::from_str::<serde_json::Value>(text), valid())
    else {
        return short(if b.is_empty() { "(empty)" } else { b });
    };
    let mut diffs: Vec<String> = base
        .iter()
        .filter(|(k, v)| k.as_str() != "source_hash" && sent.get(k.as_str()) != Some(v))
        .map(|(k, _)| match sent.get(k.as_str()) {
            Some(v) => format!("\"{k}\": {v}"),
            None => format!("no \"{k}\""),
        })
        .collect();
    if diffs.is_empty() {
        diffs.push(match sent.get("source_hash") {
            Some(h) if Some(h) != base.get("source_hash") => format!("\"source_hash\": {h}"),
            Some(_) => "the valid body".into(),
            None => "no \"source_hash\"".into(),
        });
    }
    short(&format!("{bom}{}", diffs.join(", ")))
}

/// The bad-input table of docs/contract.md; `<` and `>` outside the code spans escaped, so a
/// placeholder such as `<region>` is text, not an HTML tag.
pub fn table(cases: &[Case]) -> String {
    let text = |s: &str| s.replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;");
    let mut t = String::from("| kind | bad input | example | what happens |\n|---|---|---|---|\n");
    for c in cases {
        t.push_str(&format!(
            "| {} | {} | `{}` | {} |\n",
            c.kind,
            text(c.name),
            c.shown.replace('|', "\\|").replace('`', "'"),
            text(c.expect)
        ));
    }
    t
}

/// Every case, in the order of docs/contract.md.
pub fn catalogue() -> Vec<Case> {
    let mut cases = bodies::cases();
    cases.extend(others::dead_letters());
    cases.extend(others::operator_input());
    cases.extend(others::configuration());
    cases
}
