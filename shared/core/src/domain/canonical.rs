//! The canonical form of the hashed text fields, decided once for every producer
//! (docs/contract.md, "The canonical `source_hash`", has the rules and test vectors for another
//! language):
//!
//! - `ledger_entity` is an identifier of ASCII letters, digits, `-`, `_`, `.`, compared without
//!   regard to case: it is upper-cased (`acme-us` is `ACME-US`, so it cannot escape a period
//!   closed for `ACME-US`, and its postings group with `ACME-US`'s);
//! - `external_ref` and `counterparty` lose their surrounding white space — exactly the Unicode
//!   `White_Space` characters, [`is_trimmed`] (the control ones among them are refused before) —
//!   and are then put in Unicode Normalization Form C, so `Café` typed as `e` + U+0301 is the same
//!   counterparty as `Café` with U+00E9; white space inside is kept as sent, and must be plain
//!   spaces (U+0020): any other `White_Space` character inside ([`look_alike_space`]: U+00A0,
//!   U+2007, U+3000, …) is refused, because `Globex\u{a0}Supplies` looks like `Globex Supplies`
//!   and would hash apart (one transaction posted twice) — refused, not mapped to U+0020, so no
//!   hash a producer computed by the rules so far changes;
//! - invisible format characters ([`INVISIBLE`]: zero-width spaces and joiners, bidirectional
//!   controls, the soft hyphen, the byte-order mark) are refused in them: they would make two
//!   look-alike references, i.e. one transaction posted twice.

use std::borrow::Cow;
use unicode_normalization::{UnicodeNormalization, is_nfc};

/// Is `c` trimmed from the ends of a hashed text field? The Unicode `White_Space` property:
/// U+0009–U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F,
/// U+3000 (the controls among them never reach here: control characters are refused).
pub fn is_trimmed(c: char) -> bool {
    c.is_whitespace()
}

/// Characters refused in `external_ref` and `counterparty`: invisible, they make two references
/// that look the same and hash differently.
pub const INVISIBLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'), // soft hyphen
    ('\u{061C}', '\u{061C}'), // Arabic letter mark
    ('\u{180E}', '\u{180E}'), // Mongolian vowel separator
    ('\u{200B}', '\u{200F}'), // zero-width space, non-joiner, joiner; LRM, RLM
    ('\u{202A}', '\u{202E}'), // bidirectional embeddings and overrides
    ('\u{2060}', '\u{2064}'), // word joiner, invisible operators
    ('\u{2066}', '\u{206F}'), // bidirectional isolates, deprecated format characters
    ('\u{FEFF}', '\u{FEFF}'), // zero-width no-break space (byte-order mark)
    ('\u{FFF9}', '\u{FFFB}'), // interlinear annotation
];

pub fn invisible(s: &str) -> Option<char> {
    if s.is_ascii() {
        return None;
    }
    s.chars()
        .find(|c| INVISIBLE.iter().any(|(lo, hi)| (*lo..=*hi).contains(c)))
}

/// The first white-space character other than a plain space inside `s` (after trimming), if any:
/// it would make a reference that looks like one with a plain space and hashes apart.
pub fn look_alike_space(s: &str) -> Option<char> {
    if s.is_ascii() {
        return None;
    }
    s.trim_matches(is_trimmed).chars().find(|c| *c != ' ' && is_trimmed(*c))
}

/// A hashed text field in canonical form: trimmed, then NFC. Borrows when nothing changes (always
/// for ASCII without surrounding spaces).
pub fn text(s: &str) -> Cow<'_, str> {
    let t = s.trim_matches(is_trimmed);
    if t.is_ascii() || is_nfc(t) {
        Cow::Borrowed(t)
    } else {
        Cow::Owned(t.nfc().collect())
    }
}

/// [`text`] for a value the caller already owns or borrows.
pub fn text_cow(s: Cow<'_, str>) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(b) => text(b),
        Cow::Owned(o) => match text(&o) {
            Cow::Borrowed(t) if t.len() == o.len() => Cow::Owned(o),
            t => Cow::Owned(t.into_owned()),
        },
    }
}

/// Why `s` is not a valid `ledger_entity` (before case folding), if it is not.
pub fn entity_problem(s: &str, max_len: usize) -> Option<String> {
    if s.is_empty() {
        return Some("`ledger_entity` is empty".into());
    }
    if s.len() > max_len {
        return Some(format!("`ledger_entity` is longer than {max_len} bytes"));
    }
    if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        return Some("`ledger_entity` may hold only letters, digits, `-`, `_` and `.`".into());
    }
    None
}

/// A `ledger_entity` in canonical form: upper-cased. Borrows when already upper-case.
pub fn entity(s: Cow<'_, str>) -> Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_lowercase()) {
        Cow::Owned(s.to_ascii_uppercase())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_trimmed_of_unicode_white_space_then_nfc() {
        assert_eq!(text("  BANK-1 "), "BANK-1");
        assert!(matches!(text("BANK-1"), Cow::Borrowed(_)));
        assert_eq!(text("\u{00A0}Globex\u{3000}"), "Globex");
        assert_eq!(text("Globex  Supplies"), "Globex  Supplies", "inside kept");
        assert_eq!(text("Cafe\u{0301}"), "Caf\u{00E9}");
        assert_eq!(text("\u{2003}Cafe\u{0301} "), "Caf\u{00E9}");
        assert_eq!(text_cow(Cow::Owned(" x ".into())), "x");
    }

    #[test]
    fn look_alike_spaces_inside_are_found_and_at_the_ends_trimmed() {
        assert_eq!(look_alike_space("Globex Supplies"), None);
        assert_eq!(look_alike_space("Globex\u{00A0}Supplies"), Some('\u{00A0}'));
        assert_eq!(look_alike_space("BANK\u{2007}1"), Some('\u{2007}'));
        assert_eq!(look_alike_space("\u{3000}Globex\u{00A0}"), None, "at the ends: trimmed");
    }

    #[test]
    fn invisible_characters_are_found() {
        assert_eq!(invisible("BANK-1"), None);
        assert_eq!(invisible("BANK\u{200B}-1"), Some('\u{200B}'));
        assert_eq!(invisible("\u{202E}1-KNAB"), Some('\u{202E}'));
        assert_eq!(invisible("Caf\u{00E9}"), None);
    }

    #[test]
    fn entities_fold_to_upper_case() {
        assert_eq!(entity(Cow::Borrowed("acme-us")), "ACME-US");
        assert!(matches!(entity(Cow::Borrowed("ACME-US")), Cow::Borrowed(_)));
        assert!(entity_problem("acme us", 64).is_some());
        assert!(entity_problem("", 64).is_some());
        assert!(entity_problem("ACME.US_2", 64).is_none());
    }
}
