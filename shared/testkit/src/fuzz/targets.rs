//! The decoders that read bytes from outside, each with its corpus (files of the repo) and the
//! calls a mutant goes through: everything that reads such input must answer, never panic.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use chrono::{TimeZone, Utc};
use recon_core::control::Command;
use recon_core::decisions::triage;
use recon_core::domain::{
    CurrencyMapping, PeriodRecord, PeriodStatus, ReferenceSnapshot, decode, envelope_from_dlq_message, labels, validate,
};
use recon_core::evidence::{Bundle, verify_bundle};
use recon_core::reconcile::manifest_entry;
use recon_core::replay::parse_invocation;
use serde_json::Value;
use std::path::Path;

use crate::sim::exec::ready;

use crate::builders::attribute;
use crate::memory::limits::check_envelope_item;

/// One decoder under fuzzing.
pub struct Target {
    pub name: &'static str,
    pub corpus: Vec<String>,
    /// Feed one input; `true` when it got past the outer parse into the decoder's own logic
    /// (such inputs may seed later mutants).
    pub run: fn(&str) -> bool,
}

fn read(root: &Path, file: &str) -> String {
    std::fs::read_to_string(root.join(file)).unwrap_or_default()
}

/// Non-empty lines of a corpus file.
fn lines(root: &Path, file: &str) -> Vec<String> {
    read(root, file)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

fn event(root: &Path, file: &str) -> Vec<SqsMessage> {
    serde_json::from_str::<SqsEvent>(&read(root, file))
        .map(|e| e.records)
        .unwrap_or_default()
}

/// A dead letter as the fuzzer mutates it: one JSON object of its body, system attributes and
/// string message attributes.
fn dead_letter_text(m: &SqsMessage) -> String {
    let attrs: serde_json::Map<String, Value> = m
        .message_attributes
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), Value::String(v.string_value.clone()?))))
        .collect();
    serde_json::json!({
        "body": m.body,
        "attributes": m.attributes,
        "message_attributes": attrs,
    })
    .to_string()
}

/// Back from the mutated text to a delivered DLQ message, leniently (what is not a string
/// becomes its JSON text), so a mutant reaches the decoder instead of failing here.
fn dead_letter(input: &str) -> SqsMessage {
    let v: Value = serde_json::from_str(input).unwrap_or(Value::String(input.to_owned()));
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut m = SqsMessage::default();
    m.message_id = Some("fuzz-1".into());
    m.body = v.get("body").map(text).or_else(|| Some(input.to_owned()));
    if let Some(Value::Object(a)) = v.get("attributes") {
        for (k, val) in a {
            m.attributes.insert(k.clone(), text(val));
        }
    }
    if let Some(Value::Object(a)) = v.get("message_attributes") {
        for (k, val) in a {
            let data_type = if k.starts_with("sig") { "Binary" } else { "String" };
            m.message_attributes.insert(k.clone(), attribute(data_type, &text(val)));
        }
    }
    m
}

fn snapshot() -> ReferenceSnapshot {
    ReferenceSnapshot::new(
        vec![CurrencyMapping {
            code: "XAU".into(),
            minor_units: 4,
            description: String::new(),
        }],
        vec![PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        }],
    )
}

fn body(input: &str) -> bool {
    let decoded = decode(input).is_ok();
    let _ = validate(input, &snapshot());
    let _ = labels(input);
    decoded || serde_json::from_str::<Value>(input).is_ok_and(|v| v.is_object())
}

fn dead_letter_target(input: &str) -> bool {
    let m = dead_letter(input);
    let now = Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).single().unwrap_or_default();
    let e = envelope_from_dlq_message(&m, now, "fuzz");
    let _ = e.worm_document(m.body.as_deref().unwrap_or(""));
    let _ = e.age_key();
    let _ = check_envelope_item(&e);
    let _ = triage(std::slice::from_ref(&e));
    serde_json::from_str::<Value>(input).is_ok()
}

/// A payload of the replay function, or a body of the control plane (a command, and for a replay
/// or a quarantine the request it builds).
fn replay_payload(input: &str) -> bool {
    match serde_json::from_str::<Value>(input) {
        Ok(v) => {
            let _ = parse_invocation(&v, "recon-dlq-replay-sweep", "recon-dlq-audit-seal");
            if let Ok(Command::Replay(r) | Command::Quarantine(r)) = serde_json::from_value::<Command>(v) {
                let _ = r.request(
                    "arn:aws:sts::123456789012:assumed-role/recon-dlq-maker/alice",
                    "fuzz",
                    false,
                );
            }
            true
        }
        Err(_) => false,
    }
}

fn manifest_line(input: &str) -> bool {
    let e = manifest_entry(input);
    e.key.starts_with("msg:")
}

fn bundle(input: &str) -> bool {
    match serde_json::from_str::<Bundle>(input) {
        Ok(b) => {
            let _ = verify_bundle(&b);
            true
        }
        Err(_) => false,
    }
}

/// Every target, its corpus read from the repository at `root`.
pub fn all(root: &Path) -> Vec<Target> {
    let mut bodies: Vec<String> = event(root, "events/consumer-sqs-batch.json")
        .iter()
        .chain(event(root, "events/enricher-dlq-batch.json").iter())
        .filter_map(|m| m.body.clone())
        .collect();
    bodies.extend(lines(root, "shared/testkit/fuzz/bodies.jsonl"));
    let dead_letters: Vec<String> = event(root, "events/enricher-dlq-batch.json")
        .iter()
        .map(dead_letter_text)
        .collect();
    let mut payloads: Vec<String> = ["events/replay-scheduled.json", "events/replay-seal.json"]
        .iter()
        .map(|f| read(root, f))
        .collect();
    payloads.extend(
        [
            r#"{"operation": "replay", "reason": "XAU mapped", "root_cause": "UNMAPPED_CURRENCY:*", "max_items": 500, "dry_run": true, "segment": "1/4"}"#,
            r#"{"operation": "quarantine", "reason": "no such account", "envelope_ids": ["env_1"], "canary": {"slice": {"count": 5}, "max_failure_percent": 0, "wait_secs": 60}}"#,
            r#"{"reason": "fixed", "triggered_by": "alice", "rootcause": "UNMAPPED_CURRENCY:XAU"}"#,
        ]
        .map(str::to_owned),
    );
    vec![
        Target {
            name: "message body",
            corpus: bodies.clone(),
            run: body,
        },
        Target {
            name: "dead letter (attributes, context)",
            corpus: dead_letters,
            run: dead_letter_target,
        },
        Target {
            name: "replay payload",
            corpus: payloads,
            run: replay_payload,
        },
        Target {
            name: "manifest line",
            corpus: bodies,
            run: manifest_line,
        },
        Target {
            name: "evidence bundle",
            corpus: vec![read(root, "shared/testkit/fuzz/bundle.json")],
            run: bundle,
        },
    ]
}

/// A small, genuine evidence bundle (three chains with records, a seal, a reconciliation) to seed
/// the bundle corpus: `fuzz --write-bundle` writes it to `shared/testkit/fuzz/bundle.json`.
pub fn sample_bundle() -> String {
    use crate::memory::{MemoryAuditLog, MemoryWorm};
    use recon_core::domain::{AuditKind, AuditRecord};
    use recon_core::evidence::{export_bundle, seal};
    use recon_core::ports::AuditLog;
    use recon_core::reconcile::{State, reconcile};

    let at = Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).single().unwrap_or_default();
    let audit = MemoryAuditLog::default();
    let worm = MemoryWorm::default();
    let mut records = Vec::new();
    for i in 0..12u32 {
        let mut r = AuditRecord::system(
            AuditKind::DuplicateSuppressed,
            &format!("s{i}"),
            at,
            "consumer",
            String::new(),
        );
        r.message_id = Some(format!("m-{i}"));
        r.currency = Some("USD".into());
        r.amount = Some(format!("{i}.25"));
        ready(audit.append(&r));
        records.push(r);
        if i == 7 {
            ready(seal(&audit, &worm, at));
        }
    }
    let bodies: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                r#"{{"message_id":"{}","currency":"USD","amount":"{}"}}"#,
                r.message_id.clone().unwrap_or_default(),
                r.amount.clone().unwrap_or_default()
            )
        })
        .collect();
    let outcomes: Vec<_> = bodies.iter().map(|b| (State::Duplicate, manifest_entry(b))).collect();
    let reconciliation = reconcile(outcomes.clone(), Vec::new(), None, 0);
    let Some(Ok(bundle)) = ready(export_bundle(&audit, &worm, at, "2026-12", outcomes, reconciliation)) else {
        return String::new();
    };
    serde_json::to_string_pretty(&bundle).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn every_corpus_reaches_its_decoder() {
        for t in all(&root()) {
            assert!(!t.corpus.is_empty(), "{}: empty corpus", t.name);
        }
        let b: Bundle =
            serde_json::from_str(&read(&root(), "shared/testkit/fuzz/bundle.json")).expect("the bundle corpus parses");
        let report = verify_bundle(&b);
        assert!(report.intact(), "{report:?}");
        assert!(report.records > 0 && report.seals > 0);
        assert_eq!(
            read(&root(), "shared/testkit/fuzz/bundle.json"),
            sample_bundle(),
            "regenerate with fuzz --write-bundle"
        );
    }
}
