//! What an operator types for reference data — a currency code and its minor units, a ledger
//! entity, an accounting period — checked and put in the canonical form messages use, so that
//! `dlqctl period close acme-us 2026-10` closes the period messages for `ACME-US` fall into.

use super::canonical;
use super::message::{MAX_ENTITY_LEN, parse_date};
use super::reference::MAX_MINOR_UNITS;

/// A currency code: 3 to 12 letters or digits, upper-cased (as messages' codes are).
pub fn currency_code(code: &str) -> Result<String, String> {
    let code = code.trim().to_ascii_uppercase();
    if code.len() < 3 || code.len() > 12 || !code.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("currency code `{code}` must be 3 to 12 letters or digits"));
    }
    Ok(code)
}

/// Minor units of a currency mapping (decimal places).
pub fn minor_units(units: u32) -> Result<u32, String> {
    if units > MAX_MINOR_UNITS {
        return Err(format!("minor units must be at most {MAX_MINOR_UNITS}"));
    }
    Ok(units)
}

/// A ledger entity, upper-cased.
pub fn entity(entity: &str) -> Result<String, String> {
    match canonical::entity_problem(entity, MAX_ENTITY_LEN) {
        Some(problem) => Err(format!("{problem} (the entity as messages name it)")),
        None => Ok(canonical::entity(entity.into()).into_owned()),
    }
}

/// An accounting period, `YYYY-MM`.
pub fn period(period: &str) -> Result<String, String> {
    if period.len() != 7 || parse_date(&format!("{period}-01")).is_none() {
        return Err(format!("period `{period}` must be YYYY-MM"));
    }
    Ok(period.to_owned())
}
