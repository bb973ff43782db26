//! Completeness reconciliation: every transaction that entered the pipeline is committed,
//! suppressed as a duplicate, pending remediation, quarantined, or in flight — by count and by
//! amount per currency, overall and per entity and period. With a producer manifest (what was
//! sent) every missing or extra record is named; without one, the stores are cross-checked against
//! each other and the audit trail (a dead letter without its envelope, a duplicate whose posting
//! is gone, a replayed posting without its envelope...).
//!
//! Records are matched by the producer's `message_id` (`msg:<id>`), or by the SHA-256 of the body
//! for payloads without one (`raw:<hex>`); a key may legitimately occur several times (the same
//! message sent twice), so matching is by multiset.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use crate::domain::envelope::sha256_hex;
use crate::domain::message::{parse_amount, parse_date, period_of};
use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, Posting, Tally, labels};

/// Where a transaction ended up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    Committed,
    Duplicate,
    Pending,
    Quarantined,
    InFlight,
}

/// One record of the population: a sent message (manifest) or a terminal state (stores).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    pub currency: Option<String>,
    pub amount: Option<Decimal>,
    pub entity: Option<String>,
    pub period: Option<String>,
    /// The store record it comes from (posting hash, envelope id, audit id).
    #[serde(default)]
    pub reference: String,
}

fn key_of(message_id: Option<&str>, body_sha256: &str) -> String {
    match message_id {
        Some(id) if !id.is_empty() => format!("msg:{id}"),
        _ => format!("raw:{body_sha256}"),
    }
}

/// A manifest line (a message body as sent) as an entry.
pub fn manifest_entry(body: &str) -> Entry {
    let l = labels(body);
    Entry {
        key: key_of(l.message_id.as_deref(), &sha256_hex(body.as_bytes())),
        currency: l.currency.clone(),
        amount: l.amount.as_deref().and_then(|a| parse_amount(a).ok()),
        entity: l.ledger_entity.clone(),
        period: l.value_date.as_deref().and_then(parse_date).map(period_of),
        reference: String::new(),
    }
}

/// The terminal (or in-flight) states recorded in the stores, and cross-store problems.
pub fn outcomes(
    postings: &[Posting],
    envelopes: &[DlqEnvelope],
    audit: &[AuditRecord],
    dlq_empty: bool,
) -> (Vec<(State, Entry)>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let committed: BTreeSet<&str> = postings.iter().map(|p| p.source_hash.as_str()).collect();
    let envelope_ids: BTreeSet<&str> = envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
    let replayed_into: BTreeSet<&str> = postings.iter().filter_map(|p| p.replay_of.as_deref()).collect();
    let dead_lettered: BTreeSet<&str> = envelopes
        .iter()
        .map(|e| e.original.source_message_id.as_str())
        .collect();

    for p in postings {
        out.push((
            State::Committed,
            Entry {
                key: key_of(Some(&p.message_id), ""),
                currency: Some(p.currency.clone()),
                amount: Some(p.amount),
                entity: Some(p.ledger_entity.clone()),
                period: Some(p.period.clone()),
                reference: format!("posting {}", p.source_hash),
            },
        ));
        if let Some(e) = &p.replay_of {
            if !envelope_ids.contains(e.as_str()) {
                problems.push(format!(
                    "posting {} was replayed from envelope {e}, which is missing",
                    p.source_hash
                ));
            }
        }
    }
    for r in audit {
        match r.kind {
            AuditKind::DuplicateSuppressed => {
                out.push((
                    State::Duplicate,
                    Entry {
                        key: key_of(r.message_id.as_deref(), ""),
                        currency: r.currency.clone(),
                        amount: r.amount.as_deref().and_then(|a| parse_amount(a).ok()),
                        entity: r.ledger_entity.clone(),
                        period: None,
                        reference: r.audit_id.clone(),
                    },
                ));
                if let Some(h) = &r.source_hash {
                    if !committed.contains(h.as_str()) {
                        problems.push(format!(
                            "{} suppressed a duplicate of {h}, whose posting is missing",
                            r.audit_id
                        ));
                    }
                }
            }
            AuditKind::DeadLettered if dlq_empty && !dead_lettered.contains(r.sqs_message_id.as_str()) => {
                problems.push(format!(
                    "{}: dead-lettered, but no envelope holds SQS message {}",
                    r.audit_id, r.sqs_message_id
                ));
            }
            AuditKind::Enriched | AuditKind::Quarantined => {
                let id = r
                    .audit_id
                    .split_once('#')
                    .map_or("", |(_, rest)| rest.split('#').next().unwrap_or(""));
                if !envelope_ids.contains(id) {
                    problems.push(format!("{}: envelope {id} is missing", r.audit_id));
                }
            }
            _ => {}
        }
    }
    for e in envelopes {
        let state = match e.status {
            EnvelopeStatus::Pending => State::Pending,
            EnvelopeStatus::Quarantined => State::Quarantined,
            EnvelopeStatus::SuppressedDuplicate => State::Duplicate,
            EnvelopeStatus::Replaying => State::InFlight,
            // Its transaction is counted where it ended (a posting, a duplicate, a new envelope);
            // until the re-injected copy is consumed, it is in flight.
            EnvelopeStatus::Replayed if replayed_into.contains(e.envelope_id.as_str()) => continue,
            EnvelopeStatus::Replayed => State::InFlight,
        };
        out.push((
            state,
            Entry {
                key: key_of(e.message_id.as_deref(), &e.original.body_sha256),
                currency: e.currency.clone(),
                amount: e.amount.as_deref().and_then(|a| parse_amount(a).ok()),
                entity: e.ledger_entity.clone(),
                period: e.accounting_period.clone(),
                reference: format!("envelope {}", e.envelope_id),
            },
        ));
    }
    (out, problems)
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// What was sent (from the manifest), when one was given.
    pub sent: Option<Tally>,
    pub by_state: BTreeMap<State, Tally>,
    /// `entity period` -> state -> count
    pub by_entity_period: BTreeMap<String, BTreeMap<State, u64>>,
    /// Messages still in the queues (in flight, not yet attributable).
    pub queued: u64,
    /// Manifest keys with fewer outcomes than sends, and outcomes without a send.
    pub missing: Vec<String>,
    pub extra: Vec<String>,
    pub problems: Vec<String>,
    pub holds: bool,
}

/// Reconcile outcomes (and queued messages) with a manifest, if any.
pub fn reconcile(
    outcomes: Vec<(State, Entry)>,
    problems: Vec<String>,
    manifest: Option<&[Entry]>,
    queued: u64,
) -> Reconciliation {
    let mut r = Reconciliation {
        queued,
        problems,
        ..Reconciliation::default()
    };
    for (state, e) in &outcomes {
        r.by_state
            .entry(*state)
            .or_default()
            .add_parts(e.currency.as_deref(), e.amount);
        let ep = format!(
            "{} {}",
            e.entity.as_deref().unwrap_or("-"),
            e.period.as_deref().unwrap_or("-")
        );
        *r.by_entity_period.entry(ep).or_default().entry(*state).or_default() += 1;
    }
    let mut total = Tally::default();
    for t in r.by_state.values() {
        total.merge(t);
    }
    let sent = manifest.map(|m| {
        let mut t = Tally::default();
        for e in m {
            t.add_parts(e.currency.as_deref(), e.amount);
        }
        t
    });
    for c in total
        .overflowed
        .iter()
        .chain(sent.iter().flat_map(|t| t.overflowed.iter()))
    {
        r.problems.push(format!(
            "the amounts in {c} are too large to total exactly: not reconciled by amount"
        ));
    }
    if let (Some(manifest), Some(sent)) = (manifest, sent) {
        let mut want: BTreeMap<&str, i64> = BTreeMap::new();
        for e in manifest {
            *want.entry(&e.key).or_default() += 1;
        }
        let mut have: BTreeMap<&str, i64> = BTreeMap::new();
        for (_, e) in &outcomes {
            *have.entry(&e.key).or_default() += 1;
        }
        for (k, n) in &want {
            let h = have.get(k).copied().unwrap_or(0);
            for _ in h..*n {
                r.missing.push((*k).to_owned());
            }
        }
        for (k, n) in &have {
            let w = want.get(k).copied().unwrap_or(0);
            for _ in w..*n {
                let refs: Vec<&str> = outcomes
                    .iter()
                    .filter(|(_, e)| e.key == *k)
                    .map(|(_, e)| e.reference.as_str())
                    .collect();
                r.extra.push(format!("{k} ({})", refs.join(", ")));
            }
        }
        // Queued messages cannot be named; they may account for missing ones.
        let amounts_hold = total.amounts == sent.amounts && total.without_amount == sent.without_amount;
        r.holds = r.problems.is_empty()
            && r.extra.is_empty()
            && r.missing.len() as u64 <= queued
            && (queued > 0 || (r.missing.is_empty() && amounts_hold));
        r.sent = Some(sent);
    } else {
        r.holds = r.problems.is_empty();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(key: &str, amount: &str) -> Entry {
        Entry {
            key: key.into(),
            currency: Some("USD".into()),
            amount: parse_amount(amount).ok(),
            entity: Some("E".into()),
            period: Some("2026-11".into()),
            reference: format!("ref of {key}"),
        }
    }

    #[test]
    fn a_complete_population_holds_and_a_missing_one_is_named() {
        let manifest = vec![e("msg:a", "1.50"), e("msg:b", "2"), e("msg:b", "2")];
        let outcomes = vec![
            (State::Committed, e("msg:a", "1.5")),
            (State::Committed, e("msg:b", "2")),
            (State::Duplicate, e("msg:b", "2.00")),
        ];
        let r = reconcile(outcomes.clone(), vec![], Some(&manifest), 0);
        assert!(r.holds, "{r:?}");
        let r = reconcile(outcomes[..2].to_vec(), vec![], Some(&manifest), 0);
        assert!(!r.holds);
        assert_eq!(r.missing, ["msg:b"]);
        let mut more = outcomes.clone();
        more.push((State::Committed, e("msg:zz", "9")));
        let r = reconcile(more, vec![], Some(&manifest), 0);
        assert_eq!(r.extra, ["msg:zz (ref of msg:zz)"]);
        assert!(!r.holds);
    }

    #[test]
    fn the_largest_amounts_reconcile_exactly_without_panicking() {
        // Ten of the largest amounts a message may carry (28 digits) and half a unit: Decimal
        // sums overflow (a panic) or round; reconcile must do neither.
        let big = "9999999999999999999999999999";
        let mut manifest: Vec<Entry> = (0..10).map(|i| e(&format!("msg:{i}"), big)).collect();
        manifest.push(e("msg:half", "0.5"));
        let outcomes: Vec<(State, Entry)> = manifest.iter().map(|m| (State::Committed, m.clone())).collect();
        let r = reconcile(outcomes.clone(), vec![], Some(&manifest), 0);
        assert!(r.holds, "{r:?}");
        assert_eq!(
            r.by_state[&State::Committed].get("USD").to_string(),
            "99999999999999999999999999990.5"
        );
        // One cent missing is seen, however large the totals.
        let mut short = outcomes;
        short[10].1.amount = parse_amount("0.49").ok();
        assert!(!reconcile(short, vec![], Some(&manifest), 0).holds);
    }
}
