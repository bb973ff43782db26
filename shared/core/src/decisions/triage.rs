//! Triage: group envelopes by failure code and root cause, so that remediation is a batch
//! operation (one fix per group), not a per-message investigation.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use crate::domain::message::parse_amount;
use crate::domain::{DlqEnvelope, FailureCode};

/// How many envelope ids a group lists as samples.
pub const SAMPLE_IDS: usize = 3;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TriageGroup {
    pub failure_code: FailureCode,
    pub root_cause: String,
    pub count: u64,
    pub oldest: DateTime<Utc>,
    pub newest: DateTime<Utc>,
    /// Total amount per currency (upper-case), over the envelopes whose amount parses.
    pub amounts: BTreeMap<String, Decimal>,
    /// Envelopes without a usable amount or currency (their amount is often the failure).
    pub without_amount: u64,
    pub entities: BTreeSet<String>,
    pub sample_ids: Vec<String>,
}

/// Group envelopes; the largest groups first, then by code and cause.
pub fn triage<'a>(envelopes: impl IntoIterator<Item = &'a DlqEnvelope>) -> Vec<TriageGroup> {
    let mut groups: BTreeMap<(FailureCode, String), TriageGroup> = BTreeMap::new();
    for e in envelopes {
        let g = groups
            .entry((e.failure_code, e.root_cause.clone()))
            .or_insert_with(|| TriageGroup {
                failure_code: e.failure_code,
                root_cause: e.root_cause.clone(),
                count: 0,
                oldest: e.dead_lettered_at,
                newest: e.dead_lettered_at,
                amounts: BTreeMap::new(),
                without_amount: 0,
                entities: BTreeSet::new(),
                sample_ids: Vec::new(),
            });
        g.count += 1;
        g.oldest = g.oldest.min(e.dead_lettered_at);
        g.newest = g.newest.max(e.dead_lettered_at);
        let amount = e.amount.as_deref().and_then(|a| parse_amount(a).ok());
        match (amount, &e.currency) {
            (Some(a), Some(c)) => *g.amounts.entry(c.to_ascii_uppercase()).or_default() += a,
            _ => g.without_amount += 1,
        }
        if let Some(entity) = &e.ledger_entity {
            g.entities.insert(entity.clone());
        }
        if g.sample_ids.len() < SAMPLE_IDS {
            g.sample_ids.push(e.envelope_id.clone());
        }
    }
    let mut out: Vec<TriageGroup> = groups.into_values().collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.failure_code.cmp(&b.failure_code))
            .then(a.root_cause.cmp(&b.root_cause))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{EnvelopeStatus, HashKind, OriginalMessage};
    use std::str::FromStr;

    fn env(id: &str, cause: &str, amount: Option<&str>, ccy: &str, entity: &str, minute: u32) -> DlqEnvelope {
        let at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 1, 10, minute, 0).unwrap();
        DlqEnvelope {
            envelope_id: id.into(),
            status: EnvelopeStatus::Pending,
            failure_code: FailureCode::PoisonMessage,
            root_cause: cause.into(),
            attempt_count: 1,
            error_detail: String::new(),
            source_hash: "h".into(),
            source_hash_kind: HashKind::Verified,
            trace_id: None,
            message_id: None,
            ledger_entity: Some(entity.into()),
            amount: amount.map(str::to_owned),
            currency: Some(ccy.into()),
            value_date: None,
            accounting_period: None,
            match_decision: None,
            dead_lettered_at: at,
            enriched_at: at,
            dlq_message_id: id.into(),
            dead_lettered_by: "consumer".into(),
            original: OriginalMessage {
                body: None,
                body_key: None,
                body_sha256: String::new(),
                body_bytes: 0,
                attributes: Default::default(),
                source_message_id: id.into(),
                source_queue_arn: None,
                sent_at: None,
            },
            worm: None,
            status_history: vec![],
            replay_generation: 0,
            replay: None,
            replays: vec![],
        }
    }

    #[test]
    fn groups_count_sum_per_currency_and_track_age() {
        let es = [
            env("a", "UNMAPPED_CURRENCY:XAU", Some("1.25"), "XAU", "E1", 5),
            env("b", "UNMAPPED_CURRENCY:XAU", Some("2.5"), "xau", "E2", 1),
            env("c", "UNMAPPED_CURRENCY:XAU", Some("10"), "XAU", "E1", 9),
            env("d", "INVALID_DECIMAL", Some("1,00"), "USD", "E1", 3),
        ];
        let g = triage(&es);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].root_cause, "UNMAPPED_CURRENCY:XAU");
        assert_eq!(g[0].count, 3);
        assert_eq!(g[0].amounts["XAU"], Decimal::from_str("13.75").unwrap());
        assert_eq!(g[0].entities.len(), 2);
        assert_eq!(g[0].oldest.format("%M").to_string(), "01");
        assert_eq!(g[0].newest.format("%M").to_string(), "09");
        assert_eq!(g[1].without_amount, 1);
        assert!(g[1].amounts.is_empty());
    }
}
