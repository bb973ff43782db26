//! Money as the messages carry it: a plain decimal string, parsed exactly into a `Decimal`, never
//! a float.

use rust_decimal::Decimal;

use super::failure::{ProcessError, RootCause, bounded_detail};

/// 28 significant digits is what a `Decimal` holds exactly.
pub const MAX_AMOUNT_DIGITS: usize = 28;

/// Parse a plain decimal: `-?digits(.digits)?`, at most 28 significant digits. No `+`, no
/// exponent, no spaces, no thousands separators: anything else is `INVALID_DECIMAL`.
pub fn parse_amount(s: &str) -> Result<Decimal, ProcessError> {
    let invalid = |why: &str| {
        ProcessError::poison(
            RootCause::InvalidDecimal,
            format!("amount `{}` {why}", bounded_detail(s)),
        )
    };
    let digits = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = digits.split_once('.').map_or((digits, None), |(i, f)| (i, Some(f)));
    let plain = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !plain(int) || !frac.is_none_or(plain) {
        return Err(invalid("is not a plain decimal number"));
    }
    let significant = int.trim_start_matches('0').len() + frac.map_or(0, str::len);
    if significant > MAX_AMOUNT_DIGITS {
        return Err(invalid("has more than 28 significant digits"));
    }
    Decimal::from_str_exact(s).map_err(|e| invalid(&format!("does not parse: {e}")))
}
