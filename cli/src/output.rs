//! How `dlqctl` talks back: text for a person or JSON for a program (`--json`, every command),
//! exit codes (0 ok, 1 a check failed, 2 an operational error, 3 a check undecided yet), colour and progress only on a
//! terminal (never with `NO_COLOR`), and columns that hold long values.

use std::io::IsTerminal;
use std::sync::OnceLock;

use anyhow::Result;

static JSON: OnceLock<bool> = OnceLock::new();

pub fn set_json(on: bool) {
    let _ = JSON.set(on);
}

pub fn json() -> bool {
    JSON.get().copied().unwrap_or(false)
}

/// Print `value` as JSON, every character a terminal would act on escaped (`text::json_safe`).
pub fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", crate::text::json_safe(serde_json::to_string_pretty(value)?));
    Ok(())
}

pub fn emit(value: &impl serde::Serialize, text: impl FnOnce() -> String) -> Result<()> {
    if json() {
        print_json(value)?;
    } else {
        println!("{}", text());
    }
    Ok(())
}

/// A check that ran and did not pass: its exit status (1 failed; 3 undecided yet, so a script
/// waits and asks again rather than reading it as a pass or a failure) and what to say. Every
/// other error is operational: exit status 2.
#[derive(Debug)]
pub struct Exit(pub i32, pub String);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for Exit {}

pub fn exit_code(e: &anyhow::Error) -> i32 {
    e.downcast_ref::<Exit>().map_or(2, |x| x.0)
}

/// Colour on standard error: only on a terminal, and never when `NO_COLOR` is set (non-empty).
pub fn colour(no_color: Option<&str>, terminal: bool) -> bool {
    terminal && no_color.is_none_or(str::is_empty)
}

/// Human-readable events on stderr, `default_level` and above unless `RUST_LOG` says otherwise
/// (env-filter's full syntax: dlqctl links it, the functions do not).
pub fn init_logs(default_level: &str, ansi: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
}

pub fn colour_on_stderr() -> bool {
    colour(
        std::env::var("NO_COLOR").ok().as_deref(),
        std::io::stderr().is_terminal(),
    )
}

/// Progress lines go to standard error, and only when it is a terminal (a log or a pipe gets the
/// result, not the ticking).
pub fn progress() -> bool {
    std::io::stderr().is_terminal() && !json()
}

/// `s` in at most `width` characters: a longer value is cut with `…`, so a table keeps its columns.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour(None, true));
        assert!(colour(Some(""), true));
        assert!(!colour(Some("1"), true));
        assert!(!colour(None, false));
    }

    #[test]
    fn long_values_are_cut_to_their_column() {
        assert_eq!(fit("UNMAPPED_CURRENCY:XAU", 40), "UNMAPPED_CURRENCY:XAU");
        let cut = fit(&"X".repeat(100), 10);
        assert_eq!(cut.chars().count(), 10);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn a_failed_check_exits_1_and_anything_else_2() {
        assert_eq!(exit_code(&anyhow::Error::new(Exit(1, "does not hold".into()))), 1);
        assert_eq!(exit_code(&anyhow::Error::new(Exit(3, "undecided".into()))), 3);
        assert_eq!(exit_code(&anyhow::anyhow!("the stack is unreachable")), 2);
    }
}
