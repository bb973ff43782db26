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
                    c.escape_unicode().to_string()
                } else {
                    c.into()
                }
            })
            .collect(),
    )
}

/// JSON text with every character a terminal would act on as a `\uXXXX` escape. serde_json
/// escapes only the C0 controls; a C1 control (U+009B starts a CSI sequence on many terminals),
/// DEL or a bidirectional override in a producer's field would reach the terminal raw. The JSON
/// means the same: the escape decodes to the same character.
pub fn json_safe(json: String) -> String {
    // A raw line break is the JSON's own layout (serde_json escapes every one inside a string).
    let unsafe_here = |c: char| unsafe_char(c) && c != '\n';
    if !json.chars().any(unsafe_here) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_here(c) {
            // Every unsafe character is in the Basic Multilingual Plane: one \u escape.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
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

    #[test]
    fn json_output_carries_no_character_a_terminal_acts_on_and_means_the_same() {
        let entity = "ACME\u{9b}2J\u{7f}evil\u{202e}gpj.exe\u{1b}[31m";
        let value = serde_json::json!({ "entity": entity, "n": 1 });
        let out = json_safe(serde_json::to_string_pretty(&value).unwrap());
        assert!(!out.chars().any(unsafe_char_but_layout), "{out:?}");
        assert!(
            out.contains("\\u009b") && out.contains("\\u007f") && out.contains("\\u202e"),
            "{out}"
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap(), value);
    }

    /// What JSON output may carry: its own line breaks and indentation, nothing else a terminal
    /// acts on.
    fn unsafe_char_but_layout(c: char) -> bool {
        unsafe_char(c) && c != '\n'
    }
}
