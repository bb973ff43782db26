//! Triage: group envelopes by failure code and root cause, so that remediation is a batch
//! operation (one fix per group), not a per-message investigation.

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use crate::domain::{DlqEnvelope, FailureCode, ReferenceSnapshot, Tally};

/// How many envelope ids a group lists as samples.
pub const SAMPLE_IDS: usize = 3;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TriageGroup {
    pub failure_code: FailureCode,
    pub root_cause: String,
    pub oldest: DateTime<Utc>,
    pub newest: DateTime<Utc>,
    /// How many envelopes, and their amounts per currency (upper-case) over those whose amount
    /// parses; the others (their amount is often the failure) as `without_amount`.
    #[serde(flatten)]
    pub tally: Tally,
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
                oldest: e.dead_lettered_at,
                newest: e.dead_lettered_at,
                tally: Tally::default(),
                entities: BTreeSet::new(),
                sample_ids: Vec::new(),
            });
        g.oldest = g.oldest.min(e.dead_lettered_at);
        g.newest = g.newest.max(e.dead_lettered_at);
        g.tally.add_text(e.currency.as_deref(), e.amount.as_deref());
        if let Some(entity) = &e.ledger_entity {
            g.entities.insert(entity.clone());
        }
        if g.sample_ids.len() < SAMPLE_IDS {
            g.sample_ids.push(e.envelope_id.clone());
        }
    }
    // In code and cause order from the map; a stable sort keeps it among groups of one size.
    let mut out: Vec<TriageGroup> = groups.into_values().collect();
    out.sort_by_key(|g| std::cmp::Reverse(g.tally.count));
    out
}

/// Per group, the earliest planned close among its envelopes' periods (`snapshot`'s schedule):
/// the group must be decided before.
pub fn deadlines<'a>(
    envelopes: impl IntoIterator<Item = &'a DlqEnvelope>,
    snapshot: &ReferenceSnapshot,
) -> BTreeMap<(FailureCode, String), NaiveDate> {
    let mut by_group: BTreeMap<(FailureCode, String), NaiveDate> = BTreeMap::new();
    for e in envelopes {
        let (Some(entity), Some(period)) = (&e.ledger_entity, &e.accounting_period) else {
            continue;
        };
        if let Some(on) = snapshot.closes_on(entity, period) {
            let d = by_group.entry((e.failure_code, e.root_cause.clone())).or_insert(on);
            *d = (*d).min(on);
        }
    }
    by_group
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::{EnvelopeStatus, HashKind, OriginalMessage};
    use std::str::FromStr;

    pub(crate) fn env(
        id: &str,
        cause: &str,
        amount: Option<&str>,
        ccy: &str,
        entity: &str,
        minute: u32,
    ) -> DlqEnvelope {
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
                message_group_id: None,
                aws_trace_header: None,
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
        assert_eq!(g[0].tally.count, 3);
        assert_eq!(
            g[0].tally.amounts["XAU"],
            rust_decimal::Decimal::from_str("13.75").unwrap()
        );
        assert_eq!(g[0].entities.len(), 2);
        assert_eq!(g[0].oldest.format("%M").to_string(), "01");
        assert_eq!(g[0].newest.format("%M").to_string(), "09");
        assert_eq!(g[1].tally.without_amount, 1);
        assert!(g[1].tally.amounts.is_empty());
    }

    #[test]
    fn a_group_of_the_largest_amounts_totals_exactly() {
        let big = "9999999999999999999999999999";
        let envelopes: Vec<DlqEnvelope> = (0..10)
            .map(|i| env(&format!("e{i}"), "UNMAPPED_CURRENCY:XAU", Some(big), "XAU", "ACME", 1))
            .collect();
        let g = triage(&envelopes);
        assert_eq!(g[0].tally.amounts["XAU"].to_string(), "99999999999999999999999999990");
    }
}
