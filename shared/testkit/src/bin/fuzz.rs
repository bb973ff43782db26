//! `fuzz`: every decoder of outside input against seeded mutants of the repository's corpus (see
//! `make fuzz`). `fuzz [--count N] [--seed N] [--target NAME]`; exit 1 if any input panicked.

use recon_testkit::fuzz::{fuzz_with_progress, targets};
use std::path::Path;

fn number(flag: &str, v: &str) -> u64 {
    v.parse().unwrap_or_else(|_| {
        eprintln!("{flag} {v:?} is not a whole number");
        std::process::exit(2);
    })
}

fn main() {
    let mut count = 1_000_000u64;
    let mut seed = 1u64;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next();
        match (flag.as_str(), value) {
            ("--count", Some(v)) => count = number("--count", &v),
            ("--seed", Some(v)) => seed = number("--seed", &v),
            ("--target", Some(v)) => only = Some(v),
            ("--write-bundle", Some(path)) => {
                if let Err(e) = std::fs::write(&path, targets::sample_bundle()) {
                    eprintln!("cannot write {path}: {e}");
                    std::process::exit(2);
                }
                return;
            }
            _ => {
                eprintln!("usage: fuzz [--count N] [--seed N] [--target NAME] | fuzz --write-bundle PATH");
                std::process::exit(2);
            }
        }
    }
    std::panic::set_hook(Box::new(|_| {}));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut failed = false;
    let all = targets::all(&root);
    if let Some(o) = only.as_deref().filter(|o| !all.iter().any(|t| t.name.contains(o))) {
        let names: Vec<&str> = all.iter().map(|t| t.name).collect();
        eprintln!("no target matches {o:?}; the targets are {names:?}");
        std::process::exit(2);
    }
    for (i, t) in all.iter().enumerate() {
        if only.as_deref().is_some_and(|o| !t.name.contains(o)) {
            continue;
        }
        let f = fuzz_with_progress(t, count, seed.wrapping_add(i as u64), &mut |f| {
            eprintln!(
                "  {}: {} inputs, {} panics, {:.0} s",
                f.target, f.inputs, f.panic_count, f.secs
            );
        });
        println!(
            "{:<36} {:>9} inputs ({:>3.0}% past the parse) in {:>6.1} s ({:>8.0}/s), corpus {:>3}: {} panics",
            f.target,
            f.inputs,
            100.0 * f.reached as f64 / f.inputs.max(1) as f64,
            f.secs,
            f.inputs as f64 / f.secs.max(1e-9),
            t.corpus.len(),
            f.panic_count
        );
        for (input, why) in &f.panics {
            failed = true;
            let shown: String = input.chars().take(300).collect();
            println!("  PANIC: {why}\n    input: {shown:?}");
        }
    }
    std::process::exit(i32::from(failed));
}
