//! Text from outside (labels read from message bodies, bodies themselves) made safe for a
//! terminal: a control character or a bidirectional override in a ledger entity could move the
//! cursor, recolour or hide what an operator reads. They are shown as `\u{..}` escapes.

use std::borrow::Cow;

/// Characters a terminal would act on rather than print.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every control character and bidirectional override escaped.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| {
                if unsafe_char(c) {
                    format!("\\u{{{:x}}}", u32::from(c))
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// Like [`printable`], keeping line breaks and tabs (a body shown whole).
pub fn printable_lines(s: &str) -> String {
    s.split('\n')
        .map(|line| {
            line.split('\t')
                .map(|part| printable(part).into_owned())
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_shown_not_obeyed() {
        assert_eq!(printable("ACME-US"), "ACME-US");
        assert_eq!(printable("ACME\u{1b}[2J"), "ACME\\u{1b}[2J");
        assert_eq!(printable("evil\u{202e}gpj.exe"), "evil\\u{202e}gpj.exe");
        assert_eq!(printable("a\rb"), "a\\u{d}b");
        assert_eq!(printable_lines("line 1\n\tline\u{7} 2"), "line 1\n\tline\\u{7} 2");
    }
}
