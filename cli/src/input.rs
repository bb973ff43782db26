//! Files and standard input an operator hands `dlqctl`, read with a bound: a message body is at
//! most what SQS takes, so a line (a manifest's, a `send` file's) or an edited body larger than
//! that is refused with its line number, never read whole into memory first.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, Read};
use std::path::Path;

/// The longest body, or line holding one, `dlqctl` reads: SQS's largest message.
pub const MAX_BODY_BYTES: usize = recon_core::resources::MAX_MESSAGE_BYTES as usize;

/// The non-empty lines of `reader`, each at most `max` bytes (its line break aside); `what`
/// names the input in errors.
pub fn bounded_lines(mut reader: impl BufRead, max: usize, what: &str) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for n in 1.. {
        let mut buf = Vec::new();
        let read = (&mut reader)
            .take(max as u64 + 2)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("reading {what}, line {n}"))?;
        if read == 0 {
            break;
        }
        let ended = buf.ends_with(b"\n");
        if ended {
            buf.pop();
            if buf.ends_with(b"\r") {
                buf.pop();
            }
        }
        if buf.len() > max || (!ended && read > max) {
            bail!("{what}, line {n}: longer than {max} bytes (the largest message SQS takes)");
        }
        let line = String::from_utf8(buf).with_context(|| format!("{what}, line {n}: not UTF-8"))?;
        if !line.trim().is_empty() {
            lines.push(line);
        }
    }
    Ok(lines)
}

/// A whole file of at most `max` bytes, as text.
pub fn bounded_file(path: &Path, max: usize) -> Result<String> {
    let bytes = bounded_bytes(path, max, "the largest message SQS takes")?;
    String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8", path.display()))
}

/// A whole file of at most `max` bytes (`limit` says what the bound is), refused before it is
/// read when the file says it is larger, and never read past the bound.
pub fn bounded_bytes(path: &Path, max: usize, limit: &str) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let too_long = || anyhow::anyhow!("{}: longer than {max} bytes ({limit})", path.display());
    if file.metadata().is_ok_and(|m| m.len() > max as u64) {
        return Err(too_long());
    }
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() > max {
        return Err(too_long());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_longer_than_the_bound_is_refused_with_its_number() {
        let text = format!("first\n\n{}\n{}\n", "a".repeat(8), "b".repeat(9));
        let e = bounded_lines(text.as_bytes(), 8, "the manifest").unwrap_err();
        assert!(e.to_string().contains("line 4"), "{e}");
        let ok = bounded_lines(format!("first\r\n\n{}", "a".repeat(8)).as_bytes(), 8, "m").unwrap();
        assert_eq!(ok, ["first", "aaaaaaaa"]);
        // No line break at all: still bounded.
        assert!(bounded_lines("c".repeat(100).as_bytes(), 8, "m").is_err());
    }

    #[test]
    fn a_file_longer_than_the_bound_is_refused() {
        let dir = std::env::temp_dir().join(format!("dlqctl-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("body.json");
        std::fs::write(&path, "x".repeat(9)).unwrap();
        assert!(bounded_file(&path, 8).is_err());
        assert_eq!(bounded_file(&path, 9).unwrap().len(), 9);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
