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

/// Active ISO 4217 currencies with their minor units (the "E" column). Codes without a minor
/// unit (precious metals, SDR, testing and "no currency" codes) are left out on purpose: they
/// must be mapped explicitly in the reference table before anything posts in them.
/// Sorted by code for binary search.
const ISO_4217: &[(&str, u8)] = &[
    ("AED", 2),
    ("AFN", 2),
    ("ALL", 2),
    ("AMD", 2),
    ("AOA", 2),
    ("ARS", 2),
    ("AUD", 2),
    ("AWG", 2),
    ("AZN", 2),
    ("BAM", 2),
    ("BBD", 2),
    ("BDT", 2),
    ("BGN", 2),
    ("BHD", 3),
    ("BIF", 0),
    ("BMD", 2),
    ("BND", 2),
    ("BOB", 2),
    ("BOV", 2),
    ("BRL", 2),
    ("BSD", 2),
    ("BTN", 2),
    ("BWP", 2),
    ("BYN", 2),
    ("BZD", 2),
    ("CAD", 2),
    ("CDF", 2),
    ("CHE", 2),
    ("CHF", 2),
    ("CHW", 2),
    ("CLF", 4),
    ("CLP", 0),
    ("CNY", 2),
    ("COP", 2),
    ("COU", 2),
    ("CRC", 2),
    ("CUP", 2),
    ("CVE", 2),
    ("CZK", 2),
    ("DJF", 0),
    ("DKK", 2),
    ("DOP", 2),
    ("DZD", 2),
    ("EGP", 2),
    ("ERN", 2),
    ("ETB", 2),
    ("EUR", 2),
    ("FJD", 2),
    ("FKP", 2),
    ("GBP", 2),
    ("GEL", 2),
    ("GHS", 2),
    ("GIP", 2),
    ("GMD", 2),
    ("GNF", 0),
    ("GTQ", 2),
    ("GYD", 2),
    ("HKD", 2),
    ("HNL", 2),
    ("HTG", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("IQD", 3),
    ("IRR", 2),
    ("ISK", 0),
    ("JMD", 2),
    ("JOD", 3),
    ("JPY", 0),
    ("KES", 2),
    ("KGS", 2),
    ("KHR", 2),
    ("KMF", 0),
    ("KPW", 2),
    ("KRW", 0),
    ("KWD", 3),
    ("KYD", 2),
    ("KZT", 2),
    ("LAK", 2),
    ("LBP", 2),
    ("LKR", 2),
    ("LRD", 2),
    ("LSL", 2),
    ("LYD", 3),
    ("MAD", 2),
    ("MDL", 2),
    ("MGA", 2),
    ("MKD", 2),
    ("MMK", 2),
    ("MNT", 2),
    ("MOP", 2),
    ("MRU", 2),
    ("MUR", 2),
    ("MVR", 2),
    ("MWK", 2),
    ("MXN", 2),
    ("MXV", 2),
    ("MYR", 2),
    ("MZN", 2),
    ("NAD", 2),
    ("NGN", 2),
    ("NIO", 2),
    ("NOK", 2),
    ("NPR", 2),
    ("NZD", 2),
    ("OMR", 3),
    ("PAB", 2),
    ("PEN", 2),
    ("PGK", 2),
    ("PHP", 2),
    ("PKR", 2),
    ("PLN", 2),
    ("PYG", 0),
    ("QAR", 2),
    ("RON", 2),
    ("RSD", 2),
    ("RUB", 2),
    ("RWF", 0),
    ("SAR", 2),
    ("SBD", 2),
    ("SCR", 2),
    ("SDG", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("SHP", 2),
    ("SLE", 2),
    ("SOS", 2),
    ("SRD", 2),
    ("SSP", 2),
    ("STN", 2),
    ("SVC", 2),
    ("SYP", 2),
    ("SZL", 2),
    ("THB", 2),
    ("TJS", 2),
    ("TMT", 2),
    ("TND", 3),
    ("TOP", 2),
    ("TRY", 2),
    ("TTD", 2),
    ("TWD", 2),
    ("TZS", 2),
    ("UAH", 2),
    ("UGX", 0),
    ("USD", 2),
    ("USN", 2),
    ("UYI", 0),
    ("UYU", 2),
    ("UYW", 4),
    ("UZS", 2),
    ("VED", 2),
    ("VES", 2),
    ("VND", 0),
    ("VUV", 0),
    ("WST", 2),
    ("XAF", 0),
    ("XCD", 2),
    ("XCG", 2),
    ("XOF", 0),
    ("XPF", 0),
    ("YER", 2),
    ("ZAR", 2),
    ("ZMW", 2),
    ("ZWG", 2),
];

/// Minor units of a built-in ISO 4217 currency (`code` upper-case).
pub fn iso_minor_units(code: &str) -> Option<u32> {
    ISO_4217
        .binary_search_by(|(c, _)| (*c).cmp(code))
        .ok()
        .map(|i| u32::from(ISO_4217[i].1))
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
        assert!(ISO_4217.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(
            ISO_4217
                .iter()
                .all(|(c, _)| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()))
        );
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
