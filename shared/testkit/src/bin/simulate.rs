//! `simulate`: run the deterministic simulator over a range of seeds (see `make simulate`).
//!
//! ```text
//! simulate [--from N] [--count N] [--budget SECS] [--seed N] [--verbose] [--until-violated]
//! ```
//! `--seed N` runs one seed and prints its whole trace; otherwise seeds `from..from+count` run until
//! done or the time budget is spent (`--until-violated`: or until the first seed that breaks an
//! invariant, how many seeds it took printed: a mutant's measure). Exit 1 when any seed breaks an
//! invariant (it is printed with the command that reproduces it), 2 on bad arguments.

use recon_testkit::sim::{RunResult, run_seed, run_seed_keeping};
use std::time::{Duration, Instant};

struct Args {
    from: u64,
    count: u64,
    budget: Option<Duration>,
    seed: Option<u64>,
    verbose: bool,
    until_violated: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        from: 0,
        count: 1000,
        budget: None,
        seed: None,
        verbose: false,
        until_violated: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            v.parse().map_err(|_| format!("{name} {v:?} is not a whole number"))
        };
        match flag.as_str() {
            "--from" => a.from = value("--from")?,
            "--count" => a.count = value("--count")?,
            "--budget" => a.budget = Some(Duration::from_secs(value("--budget")?)),
            "--seed" => a.seed = Some(value("--seed")?),
            "--verbose" => a.verbose = true,
            "--until-violated" => a.until_violated = true,
            "-h" | "--help" => {
                return Err(
                    "usage: simulate [--from N] [--count N] [--budget SECS] [--seed N] [--verbose] [--until-violated]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(a)
}

fn report(r: &RunResult, trace: bool) {
    println!(
        "seed {}: {} — {} messages, {} polls, {} s of virtual time",
        r.seed,
        if r.held() { "held" } else { "VIOLATED" },
        r.messages,
        r.polls,
        r.virtual_secs
    );
    if let Some(s) = &r.settings {
        println!("  settings: {s:?}");
    }
    for v in &r.violations {
        println!("  violation: {v}");
    }
    if trace || !r.held() {
        println!("  trace{}:", if trace { "" } else { " (last lines)" });
        for line in &r.trace {
            println!("    {line}");
        }
        if !r.held() {
            println!("  reproduce: make simulate SEED={}", r.seed);
        }
    }
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    // Panics are findings: the run reports them; keep them off the terminal.
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(seed) = args.seed {
        let r = run_seed_keeping(seed, usize::MAX);
        report(&r, true);
        std::process::exit(i32::from(!r.held()));
    }
    let started = Instant::now();
    let (mut ran, mut failed, mut virtual_secs, mut messages) = (0u64, 0u64, 0u64, 0u64);
    for seed in args.from..args.from.saturating_add(args.count) {
        if args.budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        let r = run_seed(seed);
        ran += 1;
        virtual_secs += r.virtual_secs;
        messages += r.messages as u64;
        if !r.held() {
            failed += 1;
            report(&r, false);
            if args.until_violated {
                println!("simulate: found at seed {seed}, after {ran} seeds");
                break;
            }
        } else if args.verbose {
            report(&r, false);
        }
        if ran % 100 == 0 {
            eprintln!(
                "  {ran} seeds, {failed} violated, {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "simulate: {ran} seeds ({}..{}) in {secs:.1} s ({:.1} seeds/s), {messages} messages, {:.1} days of virtual time: {failed} violated",
        args.from,
        args.from + ran,
        ran as f64 / secs.max(0.001),
        virtual_secs as f64 / 86_400.0
    );
    std::process::exit(i32::from(failed > 0));
}
