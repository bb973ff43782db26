//! Triage's totals, kept by the envelope store: per failure code, root cause and day of
//! dead-lettering, what its PENDING envelopes add up to (how many, amount per currency, how many
//! per ledger entity and accounting period, how many per hour dead-lettered). The store moves them
//! in the same write as every change into or out of PENDING, as it moves the PENDING counter, so
//! triage reads a few items instead of every envelope.
//!
//! What an envelope adds ([`Contribution::of`]) is made from fields that never change after it is
//! created, so taking it away again needs only the envelope. The day in the key keeps one item
//! of the store small (24 hours, that day's entities and periods), as each change rewrites it; the amounts counted are bounded so that a sum of
//! up to 10^12 of them keeps to DynamoDB's 38 digits, and only a currency of three letters counts
//! its amount. Outside those bounds an envelope counts `without_amount`, and an entity outside the
//! schema's form is not listed: `decisions::totals::groups` then differs from
//! `decisions::triage::triage` of the same envelopes in that only.

use rust_decimal::Decimal;
use std::collections::BTreeMap;

use super::message::MAX_ENTITY_LEN;
use super::{DlqEnvelope, EnvelopeStatus, FailureCode, canonical};

/// The decimal places an amount counted in the totals may have at most.
pub const MAX_SCALE: u32 = 8;
/// An amount counted in the totals is below this in magnitude (10^18).
const MAX_MAGNITUDE: i64 = 1_000_000_000_000_000_000;

/// The totals one item holds: a group (failure code, root cause) and the day (`YYYY-MM-DD`, UTC)
/// its envelopes were dead-lettered on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TotalsKey {
    pub failure_code: FailureCode,
    pub root_cause: String,
    pub day: String,
}

/// What one PENDING envelope adds to the totals of its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contribution {
    pub key: TotalsKey,
    /// Its currency (upper-case, three letters) and amount, when both count.
    pub amount: Option<(String, Decimal)>,
    /// Its ledger entity (canonical) and accounting period (`-` for none), when the entity has
    /// the schema's form.
    pub entity_period: Option<(String, String)>,
    /// The hour it was dead-lettered in, as hours since the epoch.
    pub hour: i64,
}

impl Contribution {
    pub fn of(e: &DlqEnvelope) -> Contribution {
        let amount = match (e.currency.as_deref(), e.amount.as_deref()) {
            (Some(c), Some(a)) => counted_amount(c, a),
            _ => None,
        };
        let entity_period = e
            .ledger_entity
            .as_deref()
            .filter(|entity| canonical::entity_problem(entity, MAX_ENTITY_LEN).is_none())
            .map(|entity| {
                let entity = canonical::entity(std::borrow::Cow::Borrowed(entity)).into_owned();
                let period = e
                    .accounting_period
                    .clone()
                    .filter(|p| is_period(p))
                    .unwrap_or_else(|| NO_PERIOD.into());
                (entity, period)
            });
        Contribution {
            key: TotalsKey {
                failure_code: e.failure_code,
                root_cause: e.root_cause.clone(),
                day: e.dead_lettered_at.format("%Y-%m-%d").to_string(),
            },
            amount,
            entity_period,
            hour: e.dead_lettered_at.timestamp().div_euclid(3600),
        }
    }
}

/// The period of an entity's envelopes that have none (or one not of the form `YYYY-MM`).
pub const NO_PERIOD: &str = "-";

fn is_period(p: &str) -> bool {
    p.len() == 7 && p.as_bytes()[4] == b'-' && p.bytes().enumerate().all(|(i, b)| i == 4 || b.is_ascii_digit())
}

/// The currency and amount an envelope counts, if it counts one.
fn counted_amount(currency: &str, amount: &str) -> Option<(String, Decimal)> {
    let currency = currency.to_ascii_uppercase();
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let a = super::money::parse_amount(amount).ok()?;
    (a.scale() <= MAX_SCALE && a.abs() < Decimal::from(MAX_MAGNITUDE)).then_some((currency, a))
}

/// The sums of the contributions of one key's PENDING envelopes (kept as signed sums of
/// changes: a negative count is a store's bug, which `decisions::totals::groups` refuses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: i64,
    pub without_amount: i64,
    pub amounts: BTreeMap<String, Decimal>,
    pub entity_periods: BTreeMap<(String, String), i64>,
    pub hours: BTreeMap<i64, i64>,
}

impl Totals {
    /// Add `c` (`sign` 1) or take it away (-1).
    pub fn apply(&mut self, c: &Contribution, sign: i64) -> Result<(), String> {
        let add = |n: &mut i64| n.checked_add(sign).map(|v| *n = v).ok_or("a count overflowed");
        add(&mut self.count)?;
        match &c.amount {
            Some((currency, a)) => {
                let sum = self.amounts.entry(currency.clone()).or_default();
                let delta = if sign < 0 { -*a } else { *a };
                *sum = sum.checked_add(delta).ok_or("an amount overflowed")?;
            }
            None => add(&mut self.without_amount)?,
        }
        if let Some(ep) = &c.entity_period {
            add(self.entity_periods.entry(ep.clone()).or_default())?;
        }
        add(self.hours.entry(c.hour).or_default())?;
        Ok(())
    }

    /// Add `other`'s sums.
    pub fn merge(&mut self, other: &Totals) -> Result<(), String> {
        let sum = |a: i64, b: i64| a.checked_add(b).ok_or("a count overflowed");
        self.count = sum(self.count, other.count)?;
        self.without_amount = sum(self.without_amount, other.without_amount)?;
        for (c, a) in &other.amounts {
            let s = self.amounts.entry(c.clone()).or_default();
            *s = s.checked_add(*a).ok_or("an amount overflowed")?;
        }
        for (k, n) in &other.entity_periods {
            let s = self.entity_periods.entry(k.clone()).or_default();
            *s = sum(*s, *n)?;
        }
        for (k, n) in &other.hours {
            let s = self.hours.entry(*k).or_default();
            *s = sum(*s, *n)?;
        }
        Ok(())
    }

    /// The same sums without those that are zero (a store keeps an attribute once written).
    pub fn normalized(mut self) -> Totals {
        self.amounts.retain(|_, a| !a.is_zero());
        self.entity_periods.retain(|_, n| *n != 0);
        self.hours.retain(|_, n| *n != 0);
        for a in self.amounts.values_mut() {
            *a = a.normalize();
        }
        self
    }
}

/// The totals of `envelopes`' PENDING ones, by key, counted afresh: what a store's totals must
/// equal (zero sums left out).
pub fn recount<'a>(
    envelopes: impl IntoIterator<Item = &'a DlqEnvelope>,
) -> Result<BTreeMap<TotalsKey, Totals>, String> {
    let mut out: BTreeMap<TotalsKey, Totals> = BTreeMap::new();
    for e in envelopes.into_iter().filter(|e| e.status == EnvelopeStatus::Pending) {
        let c = Contribution::of(e);
        out.entry(c.key.clone()).or_default().apply(&c, 1)?;
    }
    Ok(normalized(out))
}

/// `totals` without zero sums, and without keys whose totals are all zero.
pub fn normalized(totals: BTreeMap<TotalsKey, Totals>) -> BTreeMap<TotalsKey, Totals> {
    totals
        .into_iter()
        .map(|(k, t)| (k, t.normalized()))
        .filter(|(_, t)| *t != Totals::default())
        .collect()
}
