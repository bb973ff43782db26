//! Structure-aware mutation, seeded: a JSON input is parsed and one of its values replaced by an
//! edge case (empty, huge, wrong type, control characters, deep nesting, duplicate keys…), a text
//! input has characters flipped, inserted, deleted, duplicated or spliced from another input.

use serde_json::{Map, Value};

use crate::sim::rng::Rng;

/// Values that break naive decoders.
fn edge_value(rng: &mut Rng) -> Value {
    let long = "9".repeat(rng.between(20, 400) as usize);
    match rng.below(18) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(500_000)),
        2 => Value::String(String::new()),
        3 => Value::String(" ".into()),
        4 => Value::String("\u{0}\u{1b}[2J\u{202e}".into()),
        5 => Value::String("x".repeat(rng.between(1, 300_000) as usize)),
        6 => Value::String(long.clone()),
        7 => Value::String(format!("-{long}.{long}")),
        8 => serde_json::json!(i64::MIN),
        9 => serde_json::json!(u64::MAX),
        10 => serde_json::from_str("1e400").unwrap_or(Value::Null),
        11 => serde_json::json!(-0.0),
        12 => Value::Array((0..rng.below(4)).map(|_| Value::Null).collect()),
        13 => Value::Object(Map::new()),
        14 => Value::String("\u{feff}\u{10ffff}é́".into()),
        15 => Value::String("0.1e-7".into()),
        16 => Value::String("2026-02-30".into()),
        _ => Value::String(format!("{:064x}", rng.next_u64())),
    }
}

/// An edge case of the same JSON type as `v`, mostly (a decoder should also meet the others).
fn edge_like(v: &Value, rng: &mut Rng) -> Value {
    if rng.chance(200_000) {
        return edge_value(rng);
    }
    match v {
        Value::String(_) => loop {
            if let e @ Value::String(_) = edge_value(rng) {
                return e;
            }
        },
        Value::Number(_) => match rng.below(5) {
            0 => serde_json::json!(i64::MIN),
            1 => serde_json::json!(u64::MAX),
            2 => serde_json::json!(0),
            3 => serde_json::json!(-1),
            _ => serde_json::json!(rng.next_u64() >> rng.below(64)),
        },
        Value::Bool(b) => Value::Bool(!b),
        _ => edge_value(rng),
    }
}

/// Change one place of the tree: mostly deep inside it and keeping the shape around, so the
/// mutant still parses into the decoder's types and reaches its logic.
fn mutate_value(v: &mut Value, rng: &mut Rng, depth: u32) {
    let roll = rng.below(100);
    match v {
        Value::Object(map) if !map.is_empty() && depth < 12 && roll < 90 => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = rng.pick(&keys).clone();
            match roll {
                0..=4 => {
                    map.remove(&key);
                }
                5..=7 => {
                    map.insert(format!("{key}_unknown"), edge_value(rng));
                }
                _ => {
                    if let Some(child) = map.get_mut(&key) {
                        mutate_value(child, rng, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) if !items.is_empty() && depth < 12 && roll < 90 => {
            let i = rng.below(items.len() as u64) as usize;
            match roll {
                0..=4 => {
                    items.remove(i);
                }
                5..=9 => {
                    let copy = items[i].clone();
                    items.insert(i, copy);
                }
                _ => mutate_value(&mut items[i], rng, depth + 1),
            }
        }
        _ => *v = edge_like(v, rng),
    }
}

/// Text-level damage: what a truncated frame, a bad encoder or a hand edit does.
pub fn mutate_text(s: &str, other: &str, rng: &mut Rng) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    let tokens = [
        '"',
        '\\',
        '{',
        '}',
        '[',
        ']',
        ',',
        ':',
        '\u{0}',
        '\u{feff}',
        '\u{202e}',
        'é',
        '\u{1F4B8}',
    ];
    for _ in 0..rng.between(1, 4) {
        let at = rng.below(chars.len() as u64 + 1) as usize;
        match rng.below(7) {
            0 if at < chars.len() => {
                chars.remove(at);
            }
            1 => chars.insert(at, *rng.pick(&tokens)),
            2 if at < chars.len() => chars[at] = *rng.pick(&tokens),
            3 => chars.truncate(at),
            4 if at < chars.len() => {
                let end = (at + rng.between(1, 40) as usize).min(chars.len());
                let slice: Vec<char> = chars[at..end].to_vec();
                chars.splice(at..at, slice);
            }
            5 => {
                let o: Vec<char> = other.chars().collect();
                let from = rng.below(o.len() as u64 + 1) as usize;
                let to = (from + rng.between(1, 200) as usize).min(o.len());
                chars.splice(at..at, o[from..to].iter().copied());
            }
            _ => chars.insert(at, char::from_u32(rng.below(0x3000) as u32).unwrap_or('?')),
        }
    }
    chars.into_iter().collect()
}

/// One mutant of `s`: mostly JSON-aware when `s` is JSON, sometimes text-level, sometimes both.
pub fn mutate(s: &str, other: &str, rng: &mut Rng) -> String {
    let structured = match serde_json::from_str::<Value>(s) {
        Ok(mut v) if rng.chance(700_000) => {
            for _ in 0..rng.between(1, 3) {
                mutate_value(&mut v, rng, 0);
            }
            let text = v.to_string();
            // A key twice: serde's maps keep one, a decoder must refuse or pick one safely.
            if rng.chance(50_000) {
                if let Some(rest) = text.strip_prefix('{') {
                    format!("{{\"message_id\":\"dup\",{rest}")
                } else {
                    text
                }
            } else {
                text
            }
        }
        _ => return mutate_text(s, other, rng),
    };
    if rng.chance(200_000) {
        mutate_text(&structured, other, rng)
    } else {
        structured
    }
}
