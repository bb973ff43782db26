//! Triage's groups from the totals the envelope store keeps (`domain::totals`): what triage shows
//! without reading the envelopes.

use chrono::{NaiveDate, TimeZone, Utc};
use std::collections::{BTreeMap, BTreeSet};

use super::triage::TriageGroup;
pub use crate::domain::totals::*;
use crate::domain::{FailureCode, ReferenceSnapshot, Tally, Total};

/// Triage's groups from a store's totals (any number of days each), largest first as
/// [`super::triage::triage`] orders them, each with the earliest planned close among its
/// entities' periods (`snapshot`'s schedule). A group's `oldest` and `newest` are the hours they
/// fall in; it names no sample envelopes.
pub fn groups(
    totals: &BTreeMap<TotalsKey, Totals>,
    snapshot: &ReferenceSnapshot,
) -> Result<Vec<(TriageGroup, Option<NaiveDate>)>, String> {
    let mut merged: BTreeMap<(FailureCode, &str), Totals> = BTreeMap::new();
    for (k, t) in totals {
        merged
            .entry((k.failure_code, k.root_cause.as_str()))
            .or_default()
            .merge(t)?;
    }
    let mut out = Vec::new();
    for ((failure_code, root_cause), t) in merged {
        let t = t.normalized();
        if t.count == 0 {
            continue;
        }
        let negative = t.count < 0
            || t.without_amount < 0
            || t.entity_periods.values().any(|n| *n < 0)
            || t.hours.values().any(|n| *n < 0);
        if negative {
            return Err(format!("the totals of {failure_code} {root_cause} are below zero"));
        }
        let hour = |h: i64| Utc.timestamp_opt(h.saturating_mul(3600), 0).single();
        let (Some(oldest), Some(newest)) = (
            t.hours.keys().next().copied().and_then(hour),
            t.hours.keys().next_back().copied().and_then(hour),
        ) else {
            return Err(format!(
                "the totals of {failure_code} {root_cause} count envelopes in no hour"
            ));
        };
        let tally = Tally {
            count: u64::try_from(t.count).unwrap_or(0),
            amounts: t.amounts.iter().map(|(c, a)| (c.clone(), Total::from(*a))).collect(),
            without_amount: u64::try_from(t.without_amount).unwrap_or(0),
            overflowed: BTreeSet::new(),
        };
        let entities: BTreeSet<String> = t.entity_periods.keys().map(|(e, _)| e.clone()).collect();
        let decide_before = t
            .entity_periods
            .keys()
            .filter(|(_, p)| p != NO_PERIOD)
            .filter_map(|(e, p)| snapshot.closes_on(e, p))
            .min();
        let group = TriageGroup {
            failure_code,
            root_cause: root_cause.to_owned(),
            oldest,
            newest,
            tally,
            entities,
            sample_ids: Vec::new(),
        };
        out.push((group, decide_before));
    }
    out.sort_by_key(|(g, _)| std::cmp::Reverse(g.tally.count));
    Ok(out)
}

#[cfg(test)]
mod tests;
