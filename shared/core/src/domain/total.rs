//! Exact totals of amounts. Adding two `Decimal`s rounds when the exact sum needs more than 28
//! significant digits, and panics beyond about 7.9·10^28: a total of the largest valid amounts
//! (28 digits each) could silently lose a cent or crash reconcile. A `Total` counts in units of
//! the finest scale it has seen, in an `i128` (every 38-digit number fits), with checked
//! arithmetic: it is exact, or it says it overflowed — never rounded.

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use super::money::parse_amount;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the total exceeds what 128 bits hold (about 1.7·10^38 units of its finest scale)")]
pub struct TotalOverflow;

/// An exact sum: `units` × 10^-`scale`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Total {
    units: i128,
    scale: u32,
}

fn rescale(units: i128, by: u32) -> Result<i128, TotalOverflow> {
    10i128
        .checked_pow(by)
        .and_then(|f| units.checked_mul(f))
        .ok_or(TotalOverflow)
}

impl Total {
    /// The sum of `self` and `other`, exactly, or `TotalOverflow`.
    pub fn checked_add(self, other: Total) -> Result<Total, TotalOverflow> {
        let scale = self.scale.max(other.scale);
        let a = rescale(self.units, scale - self.scale)?;
        let b = rescale(other.units, scale - other.scale)?;
        Ok(Total {
            units: a.checked_add(b).ok_or(TotalOverflow)?,
            scale,
        })
    }

    /// Add `amount` exactly (unchanged on overflow).
    pub fn add(&mut self, amount: Decimal) -> Result<(), TotalOverflow> {
        *self = self.checked_add(Total::from(amount))?;
        Ok(())
    }

    pub fn is_negative(&self) -> bool {
        self.units < 0
    }

    /// `self` is greater than `other`, compared exactly.
    pub fn exceeds(&self, other: &Total) -> bool {
        let scale = self.scale.max(other.scale);
        match (
            rescale(self.units, scale - self.scale),
            rescale(other.units, scale - other.scale),
        ) {
            (Ok(a), Ok(b)) => a > b,
            // Only a number too large to rescale overflows: its sign decides.
            (Err(_), _) => self.units > 0,
            (Ok(_), Err(_)) => other.units < 0,
        }
    }

    /// The same value with no trailing zeros after the point.
    fn normalized(self) -> Total {
        let mut t = self;
        while t.scale > 0 && t.units % 10 == 0 {
            t.units /= 10;
            t.scale -= 1;
        }
        t
    }
}

impl From<Decimal> for Total {
    fn from(d: Decimal) -> Self {
        Total {
            units: d.mantissa(),
            scale: d.scale(),
        }
    }
}

impl PartialEq for Total {
    fn eq(&self, other: &Total) -> bool {
        let (a, b) = (self.normalized(), other.normalized());
        a.units == b.units && a.scale == b.scale
    }
}

impl Eq for Total {}

impl PartialEq<Decimal> for Total {
    fn eq(&self, other: &Decimal) -> bool {
        *self == Total::from(*other)
    }
}

impl fmt::Display for Total {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.normalized();
        let digits = t.units.unsigned_abs().to_string();
        let sign = if t.units < 0 { "-" } else { "" };
        let scale = t.scale as usize;
        let text = if scale == 0 {
            format!("{sign}{digits}")
        } else {
            let padded = format!("{digits:0>width$}", width = scale + 1);
            let (int, frac) = padded.split_at(padded.len() - scale);
            format!("{sign}{int}.{frac}")
        };
        f.pad(&text)
    }
}

impl FromStr for Total {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (negative, body) = (s.starts_with('-'), s.strip_prefix('-').unwrap_or(s));
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        let ok = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || !ok(int) || !ok(frac) {
            return Err(format!("`{s}` is not a decimal total"));
        }
        let units: i128 = format!("{int}{frac}")
            .parse()
            .map_err(|_| format!("`{s}` exceeds 38 digits"))?;
        Ok(Total {
            units: if negative { -units } else { units },
            scale: u32::try_from(frac.len()).map_err(|_| format!("`{s}` has too many decimals"))?,
        })
    }
}

/// As a decimal string, like `Decimal` with `serde-str`.
impl Serialize for Total {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Total {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Count and amount per currency, the amounts exact ([`Total`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub count: u64,
    pub amounts: BTreeMap<String, Total>,
    pub without_amount: u64,
    /// Currencies whose total could not be kept exactly: nothing reconciles by amount in them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub overflowed: BTreeSet<String>,
}

impl Tally {
    /// Count one record; its amount counts when it has a currency and a decimal amount.
    pub fn add_parts(&mut self, currency: Option<&str>, amount: Option<Decimal>) {
        self.count += 1;
        match (currency, amount) {
            (Some(c), Some(a)) => self.add_amount(&c.to_ascii_uppercase(), Total::from(a)),
            _ => self.without_amount += 1,
        }
    }

    fn add_amount(&mut self, currency: &str, amount: Total) {
        let total = self.amounts.entry(currency.to_owned()).or_default();
        match total.checked_add(amount) {
            Ok(sum) => *total = sum,
            Err(_) => {
                self.overflowed.insert(currency.to_owned());
            }
        }
    }

    /// Like [`Tally::add_parts`], with the amount as text (it may not parse).
    pub fn add_text(&mut self, currency: Option<&str>, amount: Option<&str>) {
        self.add_parts(currency, amount.and_then(|a| parse_amount(a).ok()));
    }

    /// Add another tally (counts, amounts per currency, overflows).
    pub fn merge(&mut self, other: &Tally) {
        self.count += other.count;
        self.without_amount += other.without_amount;
        self.overflowed.extend(other.overflowed.iter().cloned());
        for (c, a) in &other.amounts {
            self.add_amount(c, *a);
        }
    }

    /// The total in `currency` (zero when none).
    pub fn get(&self, currency: &str) -> Total {
        self.amounts.get(currency).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn sums_of_the_largest_amounts_are_exact() {
        // Decimal rounds this sum (and panics a few additions later); a Total does neither.
        let big = d("9999999999999999999999999999");
        let mut t = Total::default();
        for _ in 0..10 {
            t.add(big).unwrap();
        }
        t.add(d("0.5")).unwrap();
        assert_eq!(t.to_string(), "99999999999999999999999999990.5");
        let loss = big.checked_add(d("0.5"));
        assert_ne!(
            loss.map(|x| x.to_string()),
            Some("9999999999999999999999999999.5".into())
        );
    }

    #[test]
    fn totals_compare_and_print_by_value() {
        let mut a = Total::default();
        a.add(d("1.50")).unwrap();
        a.add(d("-0.25")).unwrap();
        assert_eq!(a, d("1.25"));
        assert_eq!(a.to_string(), "1.25");
        let mut b = Total::default();
        b.add(d("0.005")).unwrap();
        assert_eq!(b.to_string(), "0.005");
        assert_eq!(Total::from_str("-12.3400").unwrap(), d("-12.34"));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, "\"1.25\"");
        assert_eq!(serde_json::from_str::<Total>(&json).unwrap(), a);
    }

    #[test]
    fn beyond_38_digits_it_refuses_instead_of_rounding() {
        let mut t = Total::from_str("99999999999999999999999999999999999999").unwrap();
        t.add(d("1")).unwrap();
        assert_eq!(
            t.to_string(),
            "100000000000000000000000000000000000000",
            "39 digits still fit"
        );
        let max = i128::MAX.to_string();
        let mut t = Total::from_str(&max).unwrap();
        assert_eq!(t.add(d("1")), Err(TotalOverflow));
        assert_eq!(t.to_string(), max, "unchanged");
        let mut fine = Total::from_str("1").unwrap();
        assert_eq!(fine.add(d("0.0000000000000000000000000001")), Ok(()));
    }
}
