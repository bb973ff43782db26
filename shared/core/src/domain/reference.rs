//! Reference data the validation reads: currencies with their minor units, and accounting
//! periods per ledger entity.
//!
//! ISO 4217 is built in. The reference table adds mappings ISO does not have (a precious metal,
//! a stablecoin, an internal unit) and may override a built-in entry. A period is open unless the
//! reference table says it is closed: closing a period is the explicit act of the controller.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Largest scale a `rust_decimal::Decimal` can carry; no currency may claim more minor units.
pub const MAX_MINOR_UNITS: u32 = 28;

/// Active ISO 4217 currencies by their minor units (the "E" column), each list sorted. Codes
/// without a minor unit (precious metals, SDR, testing and "no currency" codes) are left out on
/// purpose: they must be mapped explicitly in the reference table before anything posts in them.
const ISO_4217: [(u32, &str); 4] = [
    (0, "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"),
    (
        2,
        "AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV BRL BSD BTN BWP BYN BZD CAD \
         CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP \
         GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL MAD \
         MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP \
         PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT \
         TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED VES WST XCD XCG YER ZAR ZMW ZWG",
    ),
    (3, "BHD IQD JOD KWD LYD OMR TND"),
    (4, "CLF UYW"),
];

/// Minor units of a built-in ISO 4217 currency (`code` upper-case).
pub fn iso_minor_units(code: &str) -> Option<u32> {
    ISO_4217
        .iter()
        .find(|(_, codes)| codes.split_whitespace().any(|c| c == code))
        .map(|(units, _)| *units)
}

named! {
    /// Status of an accounting period for one ledger entity.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum PeriodStatus {
        Open = "OPEN",
        Closed = "CLOSED",
    }
}

/// A currency mapping kept in the reference table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrencyMapping {
    pub code: String,
    pub minor_units: u32,
    #[serde(default)]
    pub description: String,
}

/// An accounting period status kept in the reference table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeriodRecord {
    pub entity: String,
    /// `YYYY-MM`.
    pub period: String,
    pub status: PeriodStatus,
    /// When an open period is planned to close (at the start of that day, UTC): every PENDING
    /// dead letter of it must be decided before (`crate::replay::escalate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closes_on: Option<NaiveDate>,
}

/// An immutable view of the reference data, cheap to consult on the hot path.
#[derive(Clone, Debug, Default)]
pub struct ReferenceSnapshot {
    currencies: HashMap<String, u32>,
    /// entity -> period -> status
    periods: HashMap<String, HashMap<String, PeriodStatus>>,
    /// (entity, period) -> planned close, of open periods.
    closes: BTreeMap<(String, String), NaiveDate>,
    /// Which remediation needs a second person (kept in the reference table too).
    approval: super::policy::ApprovalPolicy,
}

impl ReferenceSnapshot {
    pub fn new(
        currencies: impl IntoIterator<Item = CurrencyMapping>,
        periods: impl IntoIterator<Item = PeriodRecord>,
    ) -> Self {
        let mut snap = ReferenceSnapshot::default();
        for c in currencies {
            snap.currencies
                .insert(c.code.to_ascii_uppercase(), c.minor_units.min(MAX_MINOR_UNITS));
        }
        // Entities in canonical form (upper-case), as messages are: a record written as
        // `acme-us` governs `ACME-US`, and where two spellings disagree a close wins.
        for p in periods {
            let entity = p.entity.to_ascii_uppercase();
            if let Some(on) = p.closes_on {
                let close = snap.closes.entry((entity.clone(), p.period.clone())).or_insert(on);
                *close = (*close).min(on);
            }
            let status = snap
                .periods
                .entry(entity)
                .or_default()
                .entry(p.period)
                .or_insert(p.status);
            if p.status == PeriodStatus::Closed {
                *status = PeriodStatus::Closed;
            }
        }
        // A planned close of a period already closed is none (both keyed by the canonical entity).
        let periods = &snap.periods;
        snap.closes
            .retain(|(e, p), _| periods.get(e).and_then(|ps| ps.get(p)) != Some(&PeriodStatus::Closed));
        snap
    }

    /// Open periods with a planned close: (entity, period, closes on), in entity order.
    pub fn scheduled_closes(&self) -> impl Iterator<Item = (&str, &str, NaiveDate)> {
        self.closes.iter().map(|((e, p), d)| (e.as_str(), p.as_str(), *d))
    }

    /// The planned close of `period` for `entity` (any case), if it is open and has one.
    pub fn closes_on(&self, entity: &str, period: &str) -> Option<NaiveDate> {
        let entity = super::canonical::entity(std::borrow::Cow::Borrowed(entity));
        self.closes.get(&(entity.into_owned(), period.to_owned())).copied()
    }

    /// The same data with this approval policy.
    pub fn with_approval(mut self, policy: super::policy::ApprovalPolicy) -> Self {
        self.approval = policy;
        self
    }

    pub fn approval(&self) -> &super::policy::ApprovalPolicy {
        &self.approval
    }

    /// Minor units of `code` (already upper-case): the reference table first, then ISO 4217.
    pub fn minor_units(&self, code: &str) -> Option<u32> {
        self.currencies.get(code).copied().or_else(|| iso_minor_units(code))
    }

    /// Status of `period` (`YYYY-MM`) for `entity` (any case); open unless recorded as closed.
    pub fn period_status(&self, entity: &str, period: &str) -> PeriodStatus {
        self.periods
            .get(super::canonical::entity(std::borrow::Cow::Borrowed(entity)).as_ref())
            .and_then(|p| p.get(period))
            .copied()
            .unwrap_or(PeriodStatus::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_table_is_sorted_and_unique() {
        let codes: Vec<&str> = ISO_4217.iter().flat_map(|(_, c)| c.split_whitespace()).collect();
        assert!(
            codes
                .iter()
                .all(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()))
        );
        assert_eq!(
            codes.len(),
            codes.iter().collect::<std::collections::BTreeSet<_>>().len()
        );
        for (_, list) in ISO_4217 {
            assert!(list.split_whitespace().is_sorted(), "{list}");
        }
        assert_eq!(codes.len(), 165, "the built-in currencies");
    }

    #[test]
    fn currency_scale_rules_follow_iso_4217() {
        assert_eq!(iso_minor_units("JPY"), Some(0));
        assert_eq!(iso_minor_units("USD"), Some(2));
        assert_eq!(iso_minor_units("BHD"), Some(3));
        assert_eq!(iso_minor_units("CLF"), Some(4));
        assert_eq!(iso_minor_units("XAU"), None, "metals must be mapped explicitly");
        assert_eq!(iso_minor_units("usd"), None, "callers upper-case first");
    }

    #[test]
    fn reference_table_adds_and_overrides_currencies() {
        let snap = ReferenceSnapshot::new(
            [
                CurrencyMapping {
                    code: "XAU".into(),
                    minor_units: 4,
                    description: "gold oz".into(),
                },
                CurrencyMapping {
                    code: "ISK".into(),
                    minor_units: 2,
                    description: String::new(),
                },
            ],
            [],
        );
        assert_eq!(snap.minor_units("XAU"), Some(4));
        assert_eq!(snap.minor_units("ISK"), Some(2));
        assert_eq!(snap.minor_units("EUR"), Some(2));
        assert_eq!(snap.minor_units("XAG"), None);
    }

    #[test]
    fn periods_are_open_unless_closed() {
        let snap = ReferenceSnapshot::new(
            [],
            [PeriodRecord {
                entity: "E1".into(),
                period: "2026-10".into(),
                status: PeriodStatus::Closed,
                closes_on: None,
            }],
        );
        assert_eq!(snap.period_status("E1", "2026-10"), PeriodStatus::Closed);
        assert_eq!(snap.period_status("E1", "2026-11"), PeriodStatus::Open);
        assert_eq!(snap.period_status("E2", "2026-10"), PeriodStatus::Open);
    }
}
