//! `cargo xtask loc [--against REV]`: the lines of production Rust — what ships in the functions
//! and `dlqctl` (recon-core, recon-aws, the PostgreSQL and HTTP ledgers, the four functions, the
//! operator's tool) without their tests (a `tests.rs` file, the `#[cfg(test)]` tail of a file,
//! a crate's `tests/` and `benches/`) — per crate, read from git at HEAD (the committed tree) and,
//! with `--against`, at another revision beside it.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::process::Command;

/// The production crates' source directories.
const PRODUCTION: [&str; 6] = [
    "shared/core/src",
    "shared/aws/src",
    "shared/postgres/src",
    "shared/http-ledger/src",
    "functions",
    "cli/src",
];

fn git(args: &[&str]) -> Result<String> {
    let out = Command::new("git").args(args).output().context("running git")?;
    if !out.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Lines of a file's code before its `#[cfg(test)]` tail.
pub fn production_lines(text: &str) -> usize {
    text.split("#[cfg(test)]").next().unwrap_or("").lines().count()
}

/// Production lines per crate directory at `rev`.
fn count(rev: &str) -> Result<BTreeMap<&'static str, usize>> {
    let mut out = BTreeMap::new();
    for dir in PRODUCTION {
        let files = git(&["ls-tree", "-r", "--name-only", rev, "--", dir])?;
        let mut lines = 0;
        for path in files.lines().filter(|p| {
            p.ends_with(".rs") && !p.ends_with("/tests.rs") && !p.contains("/tests/") && !p.contains("/benches/")
        }) {
            lines += production_lines(&git(&["show", &format!("{rev}:{path}")])?);
        }
        out.insert(dir, lines);
    }
    Ok(out)
}

pub fn run(against: Option<&str>) -> Result<()> {
    let now = count("HEAD")?;
    let before = against.map(count).transpose()?;
    let total = |m: &BTreeMap<&str, usize>| m.values().sum::<usize>();
    match &before {
        Some(_) => println!(
            "{:<24} {:>8} {:>8} {:>8}",
            "production Rust",
            against.unwrap_or(""),
            "HEAD",
            "change"
        ),
        None => println!("{:<24} {:>8}", "production Rust", "HEAD"),
    }
    let row = |name: &str, n: usize, b: Option<usize>| match b {
        Some(b) => {
            let change = if b == 0 {
                0.0
            } else {
                (n as f64 - b as f64) * 100.0 / b as f64
            };
            println!("{name:<24} {b:>8} {n:>8} {change:>+7.1}%");
        }
        None => println!("{name:<24} {n:>8}"),
    };
    for (dir, n) in &now {
        row(dir, *n, before.as_ref().map(|b| b[dir]));
    }
    row("total", total(&now), before.as_ref().map(total));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_files_test_tail_is_not_production() {
        let text = "fn a() {}\nfn b() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
        assert_eq!(super::production_lines(text), 2);
        assert_eq!(super::production_lines("fn a() {}\n"), 1);
    }
}
