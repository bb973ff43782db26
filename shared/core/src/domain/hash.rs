//! The canonical `source_hash`: SHA-256 over the normalised business content of a transaction.
//!
//! The same economic transaction always yields the same hash, whatever the field order in the
//! JSON, the formatting of the amount (`10.50` = `10.5` = `010.50`) or the case of the currency
//! (`usd` = `USD`). The canonical form is specified in docs/contract.md ("The canonical source_hash")
//! precisely enough for a producer in another language to compute it; this module is the
//! reference implementation and its tests pin a known vector.
//!
//! ```text
//! recon-source-hash/v1;ledger_entity=<len>:<value>;external_ref=<len>:<value>;
//! counterparty=<len>:<value>;value_date=<len>:<value>;currency=<len>:<value>;amount=<len>:<value>;
//! ```
//! (one line, no spaces; `<len>` is the value's length in UTF-8 bytes, in decimal).

use rust_decimal::Decimal;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// Domain-separation prefix: a new canonical form gets a new version, never a silent change.
pub const CANONICAL_PREFIX: &str = "recon-source-hash/v1;";

/// The business fields that identify a transaction, already normalised (see [`canonical_amount`]
/// and docs/contract.md). Metadata (`message_id`, `trace_id`, `match_decision`, `schema_version`) is
/// deliberately not part of it: a re-sent transaction under a new message id is the same
/// transaction.
#[derive(Clone, Copy, Debug)]
pub struct HashInput<'a> {
    pub ledger_entity: &'a str,
    pub external_ref: &'a str,
    pub counterparty: &'a str,
    /// `YYYY-MM-DD`.
    pub value_date: &'a str,
    /// Upper-case.
    pub currency: &'a str,
    pub amount: Decimal,
}

/// A fixed-capacity string on the stack, so that hashing allocates nothing.
pub(crate) struct StackStr<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackStr<N> {
    pub(crate) fn new() -> Self {
        Self { buf: [0; N], len: 0 }
    }
    pub(crate) fn as_str(&self) -> &str {
        // Only ever filled through `write_str` with whole `&str`s.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl<const N: usize> std::fmt::Write for StackStr<N> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > N {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The canonical text of an amount: no sign for zero, no `+`, no leading zeros, no trailing
/// fractional zeros, no trailing point, no exponent. `-0.00` -> `0`, `010.50` -> `10.5`.
pub fn canonical_amount(amount: Decimal) -> String {
    amount.normalize().to_string()
}

/// The hashed fields, in the canonical form's order; `amount` is the canonical amount's text.
fn fields<'a>(input: &HashInput<'a>, amount: &'a str) -> [(&'static str, &'a str); 6] {
    [
        ("ledger_entity", input.ledger_entity),
        ("external_ref", input.external_ref),
        ("counterparty", input.counterparty),
        ("value_date", input.value_date),
        ("currency", input.currency),
        ("amount", amount),
    ]
}

/// The SHA-256 digest of the canonical form.
pub fn source_hash_bytes(input: &HashInput<'_>) -> [u8; 32] {
    let mut amount = StackStr::<64>::new();
    // A Decimal prints in at most 28 digits + sign + point: always fits.
    let _ = write!(amount, "{}", input.amount.normalize());
    let mut h = Sha256::new();
    h.update(CANONICAL_PREFIX.as_bytes());
    for (name, value) in fields(input, amount.as_str()) {
        let mut len = StackStr::<24>::new();
        let _ = write!(len, "{}", value.len());
        for part in [name, "=", len.as_str(), ":", value, ";"] {
            h.update(part.as_bytes());
        }
    }
    h.finalize().into()
}

/// The `source_hash` as 64 lowercase hex digits.
pub fn source_hash(input: &HashInput<'_>) -> String {
    hex::encode(source_hash_bytes(input))
}

/// The canonical text that is hashed (for documentation, debugging and other-language ports).
pub fn canonical_text(input: &HashInput<'_>) -> String {
    let mut s = String::from(CANONICAL_PREFIX);
    let amount = canonical_amount(input.amount);
    for (name, value) in fields(input, &amount) {
        let _ = write!(s, "{name}={}:{value};", value.len());
    }
    s
}

/// Is `s` 64 hex digits, the shape of a `source_hash`? (Either case is accepted; it is stored
/// lower-case.) A raw digest (`raw:…`) is not: it names no transaction.
pub fn is_hash_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The SHA-256 of `bytes`, lower-case hex: bodies' digests, content addresses, record hashes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn input(amount: &str) -> HashInput<'static> {
        HashInput {
            ledger_entity: "ACME-US",
            external_ref: "BANK-2026-0001",
            counterparty: "Globex Supplies",
            value_date: "2026-11-30",
            currency: "USD",
            amount: Decimal::from_str(amount).unwrap(),
        }
    }

    #[test]
    fn canonical_text_is_length_prefixed_and_ordered() {
        assert_eq!(
            canonical_text(&input("10.50")),
            "recon-source-hash/v1;ledger_entity=7:ACME-US;external_ref=14:BANK-2026-0001;\
             counterparty=15:Globex Supplies;value_date=10:2026-11-30;currency=3:USD;amount=4:10.5;"
        );
    }

    #[test]
    fn known_vector() {
        // Pinned so that a change to the canonical form can never go unnoticed: docs/contract.md
        // quotes this vector for producers in other languages (sha256 of the text above).
        let text = canonical_text(&input("10.50"));
        let expected = hex::encode(Sha256::digest(text.as_bytes()));
        assert_eq!(source_hash(&input("10.50")), expected);
        assert_eq!(
            source_hash(&input("10.50")),
            "178528a37b60124c2397dd57099b5fa5f323de8f4205037da59a2e94f146db44"
        );
    }

    #[test]
    fn amount_formatting_does_not_change_the_hash() {
        let h = source_hash(&input("10.5"));
        for same in ["10.50", "010.5", "10.500000", "10.5"] {
            assert_eq!(source_hash(&input(same)), h, "{same}");
        }
        assert_ne!(source_hash(&input("10.05")), h);
        assert_eq!(canonical_amount(Decimal::from_str("-0.00").unwrap()), "0");
        assert_eq!(canonical_amount(Decimal::from_str("100").unwrap()), "100");
    }

    #[test]
    fn length_prefix_makes_field_boundaries_unambiguous() {
        let a = HashInput {
            external_ref: "AB",
            counterparty: "C",
            ..input("1")
        };
        let b = HashInput {
            external_ref: "A",
            counterparty: "BC",
            ..input("1")
        };
        assert_ne!(source_hash(&a), source_hash(&b));
    }
}
