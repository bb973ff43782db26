//! `cargo xtask reference`: the `dlqctl` reference (docs/dlqctl-reference.md) generated from its
//! command line, every command with its usage, what it does and each argument's help and
//! default; a test keeps the page equal to what this writes.

use clap::{Arg, Command};
use std::fmt::Write as _;

/// Where the page lives, from the workspace's root.
pub const PAGE: &str = "docs/dlqctl-reference.md";

/// The page for `cli` (dlqctl's command line).
pub fn render(mut cli: Command) -> String {
    cli.build();
    let mut out = String::from(
        "# dlqctl reference\n\nGenerated from `dlqctl`'s command line by `cargo xtask reference` (a test keeps it\nequal): every command, its usage, and each argument. How and when to use them:\n[dlqctl](dlqctl.md) and the [runbook](RUNBOOK.md).\n",
    );
    command(&cli, "dlqctl", &mut out);
    out
}

fn command(cmd: &Command, path: &str, out: &mut String) {
    let level = "#".repeat((path.split(' ').count() + 1).min(4));
    let _ = writeln!(out, "\n{level} `{path}`\n");
    if let Some(about) = cmd.get_long_about().or_else(|| cmd.get_about()) {
        let _ = writeln!(out, "{}\n", escape(&about.to_string()));
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    let _ = writeln!(out, "```text\n{usage}\n```");
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .filter(|a| path == "dlqctl" || !a.is_global_set())
        .collect();
    if !args.is_empty() {
        out.push('\n');
        for a in args {
            let _ = writeln!(out, "- {}", argument(a));
        }
    }
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        command(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

fn argument(a: &Arg) -> String {
    let names: Vec<String> = a
        .get_value_names()
        .into_iter()
        .flatten()
        .map(|n| n.to_string())
        .collect();
    let value = if names.is_empty() {
        a.get_id().as_str().to_uppercase()
    } else {
        names.join(" ")
    };
    let mut s = match (a.get_long(), a.get_short()) {
        _ if a.is_positional() => format!("`{value}`"),
        (Some(long), Some(short)) => format!("`-{short}`, `--{long}`"),
        (Some(long), None) => format!("`--{long}`"),
        (None, Some(short)) => format!("`-{short}`"),
        (None, None) => format!("`{value}`"),
    };
    if let Some(help) = a.get_long_help().or_else(|| a.get_help()) {
        let _ = write!(s, ": {}", escape(&help.to_string().replace('\n', " ")));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        // A flag's default (`false`) and an empty one say nothing.
        .filter(|v| !v.is_empty() && v != "false")
        .collect();
    if !defaults.is_empty() {
        let _ = write!(s, " (default `{}`)", defaults.join(","));
    }
    if let Some(env) = a.get_env() {
        let _ = write!(s, " (env `{}`)", env.to_string_lossy());
    }
    s
}

/// `<` and `>` as text, not HTML.
fn escape(s: &str) -> String {
    s.replace('<', "&lt;").replace('>', "&gt;")
}
