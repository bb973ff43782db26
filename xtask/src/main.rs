//! `cargo xtask`: the developer's commands, on the local stack. The operator's are `dlqctl`'s,
//! which links no test code; this tool does (the demo's faulty ledger, the harness's pump).
//!
//! - `setup`: the local stack's queues, tables and WORM bucket, built from the template
//!   (`make local-up`; on AWS the template itself is deployed: `make deploy`);
//! - `demo`: the whole pipeline on a generated workload, and the proof that nothing was lost or
//!   posted twice (`make demo`);
//! - `pump`: the consumer and the enricher in this process, polling the local stack's queues as
//!   Lambda's SQS triggers would (and the scheduled sweep, with `--sweep-every`);
//! - `bench`: the benchmark drivers (`make bench-*`);
//! - `reference`: write docs/dlqctl-reference.md from `dlqctl`'s command line;
//! - `loc`: the lines of production Rust per crate (against another revision, side by side).

mod bench;
mod demo;
mod loc;
mod pump;
mod reference;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use dlqctl::{context, output};
use recon_aws::{AwsClients, Target};
use recon_core::resources;

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "The developer's commands on the local stack: the demo and the local pump"
)]
struct Cli {
    /// Prefix of every resource name on the local stack.
    #[arg(long, global = true, env = "DLQ_STACK_PREFIX", default_value = resources::DEFAULT_PREFIX)]
    prefix: String,
    /// The ledger the pipeline commits to: dynamodb (ours), postgres (the demo's database of its
    /// own on the local server; else DLQ_POSTGRES_URL) or http (DLQ_HTTP_LEDGER_URL).
    #[arg(long, global = true, env = "DLQ_LEDGER", value_parser = recon_core::config::LedgerSettings::KINDS)]
    ledger: Option<String>,
    /// Print the pump's rounds as JSON lines (the demo tells its story as text).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create (or update) the local stack's queues, tables and WORM bucket from the template.
    /// Idempotent.
    Setup {
        /// Retry budget: the redrive policy's maxReceiveCount.
        #[arg(long, default_value_t = recon_core::decisions::DEFAULT_MAX_ATTEMPTS)]
        max_receive_count: u32,
        /// Default COMPLIANCE retention of the quarantine bucket, days.
        #[arg(long, default_value_t = resources::LOCAL_WORM_RETENTION_DAYS)]
        worm_retention_days: i32,
        /// FIFO queues (names ending in .fifo): producers set MessageGroupId to the ledger entity.
        #[arg(long)]
        fifo: bool,
    },
    /// Run the whole pipeline on a generated workload and prove nothing was lost or doubled.
    Demo(demo::DemoArgs),
    /// Poll the queues and run the consumer (main queue) and the enricher (DLQ) in-process, as
    /// Lambda's SQS triggers would.
    Pump(pump::PumpArgs),
    /// Write docs/dlqctl-reference.md from dlqctl's command line (a test keeps it equal).
    Reference,
    /// The lines of production Rust per crate at HEAD (tests excluded), beside another revision.
    Loc {
        /// The revision to compare with (a commit, a tag).
        #[arg(long)]
        against: Option<String>,
    },
    /// A benchmark driver: figures printed side by side, never assertions.
    Bench {
        #[command(subcommand)]
        bench: bench::Bench,
    },
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    output::set_json(cli.json);
    // The demo and the benchmarks print their own story; per-message decision events would
    // drown it.
    let level = if matches!(cli.command, Command::Pump(_)) {
        "warn"
    } else {
        "error"
    };
    output::init_logs(level, output::colour_on_stderr());
    if let Err(e) = run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(output::exit_code(&e));
    }
}

async fn run(cli: Cli) -> Result<()> {
    if let Command::Loc { against } = &cli.command {
        return loc::run(against.as_deref());
    }
    if let Command::Reference = cli.command {
        let page = reference::render(<dlqctl::cli::Cli as clap::CommandFactory>::command());
        std::fs::write(reference::PAGE, page)?;
        println!("wrote {}", reference::PAGE);
        return Ok(());
    }
    if let Command::Bench { bench } = cli.command {
        // Each driver sets up a deployment of its own (the harness's TestStack).
        bench::run(bench).await;
        return Ok(());
    }
    if let Some(kind) = &cli.ledger {
        context::set(recon_core::config::vars::LEDGER, kind);
    }
    let clients = AwsClients::connect(Target::local_from_env()).await;
    let names = context::names(&clients, None, &cli.prefix).await?;
    match cli.command {
        Command::Demo(_) if cli.json => {
            anyhow::bail!("the demo tells its story as text; --json applies to the pump")
        }
        Command::Setup {
            max_receive_count,
            worm_retention_days,
            fifo,
        } => setup(&clients, names, max_receive_count, worm_retention_days, fifo).await,
        Command::Demo(args) => demo::run(&clients, &names, &args).await,
        Command::Pump(args) => pump::run(&clients, &names, &args).await,
        Command::Bench { .. } | Command::Reference | Command::Loc { .. } => Ok(()),
    }
}

/// `setup`: the local stack's resources, and where they are.
async fn setup(
    clients: &AwsClients,
    names: resources::ResourceNames,
    max_receive_count: u32,
    worm_retention_days: i32,
    fifo: bool,
) -> Result<()> {
    let names = if fifo { names.with_fifo_queues() } else { names };
    let settings = recon_harness::provision::StackSettings {
        max_receive_count,
        worm_retention_days,
    };
    let stack = recon_harness::provision::ensure_stack(clients, &names, &settings)
        .await
        .context("creating resources (is the local stack up? `make local-stack`)")?;
    let tables = [
        &names.ledger_table,
        &names.envelope_table,
        &names.reference_table,
        &names.audit_table,
        &names.dedup_table,
    ];
    let value = serde_json::json!({
        "main_queue_url": stack.main_queue_url,
        "dead_letter_queue_url": stack.dlq_url,
        "max_receive_count": max_receive_count,
        "tables": tables,
        "bucket": names.quarantine_bucket,
        "bucket_owner": names.account,
        "retention": {"mode": "COMPLIANCE", "days": worm_retention_days},
    });
    output::emit(&value, || {
        let tables: Vec<&str> = tables.iter().map(|t| t.as_str()).collect();
        format!(
            "main queue   {}\nDLQ          {} (maxReceiveCount {max_receive_count})\ntables       {}\nWORM bucket  {} (COMPLIANCE, at least {worm_retention_days} days)",
            stack.main_queue_url,
            stack.dlq_url,
            tables.join(", "),
            names.quarantine_bucket
        )
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// Words of a shell command line: quotes group; after a space, `#` starts a comment and `|` or
    /// `>` ends the command.
    fn words(line: &str) -> Vec<String> {
        let (mut out, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
        let mut previous = ' ';
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    started = true;
                }
                (None, '#' | '>' | '|') if previous == ' ' => break,
                (None, ' ') => {
                    if started {
                        out.push(std::mem::take(&mut word));
                        started = false;
                    }
                }
                (None, c) => {
                    word.push(c);
                    started = true;
                }
            }
            previous = c;
        }
        if started {
            out.push(word);
        }
        out
    }

    const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

    /// The README, ARCHITECTURE.md, BENCHMARKS.md and every page of docs/ (and docs/benchmarks/):
    /// (path, text).
    fn documents() -> Vec<(String, String)> {
        let mut paths: Vec<String> = ["docs", "docs/benchmarks"]
            .iter()
            .flat_map(|dir| {
                std::fs::read_dir(format!("{ROOT}/{dir}"))
                    .unwrap_or_else(|e| panic!("{dir}/ unreadable: {e}"))
                    .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                    .filter(|name| name.ends_with(".md"))
                    .map(move |name| format!("{dir}/{name}"))
            })
            .collect();
        paths.sort();
        paths.splice(
            0..0,
            ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"].map(String::from),
        );
        paths
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(format!("{ROOT}/{p}")).unwrap_or_default();
                assert!(!text.is_empty(), "{p} unreadable");
                (p, text)
            })
            .collect()
    }

    /// A heading's anchor as GitHub and mdBook make it: lower case, spaces to `-`, punctuation
    /// other than `-` and `_` dropped.
    fn anchor(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Every relative link of the documents leads to a file that exists, and an anchor to one of
    /// its headings; every page the book's summary lists exists and every page of docs/ is
    /// listed: moving a section cannot leave a link behind.
    #[test]
    fn every_link_between_the_documents_resolves() {
        let docs = documents();
        let anchors = |path: &std::path::Path| -> Vec<String> {
            std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|h| anchor(h.trim_start_matches('#')))
                .collect()
        };
        let mut broken = Vec::new();
        let mut checked = 0;
        for (doc, text) in &docs {
            let dir = std::path::Path::new(ROOT)
                .join(doc)
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            let mut in_code = false;
            for line in text.lines() {
                if line.trim_start().starts_with("```") {
                    in_code = !in_code;
                    continue;
                }
                if in_code {
                    continue;
                }
                for target in line.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
                    if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                        continue;
                    }
                    let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                    let path = if file.is_empty() {
                        std::path::Path::new(ROOT).join(doc)
                    } else {
                        dir.join(file)
                    };
                    checked += 1;
                    if !path.exists() {
                        broken.push(format!("{doc}: {target} (no such file)"));
                    } else if !fragment.is_empty()
                        && path.extension().is_some_and(|e| e == "md")
                        && !anchors(&path).contains(&fragment.to_owned())
                    {
                        broken.push(format!("{doc}: {target} (no such heading)"));
                    }
                }
            }
        }
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
        assert!(checked >= 20, "only {checked} links found");
        let summary = std::fs::read_to_string(format!("{ROOT}/docs/SUMMARY.md")).expect("docs/SUMMARY.md");
        for (doc, _) in docs
            .iter()
            .filter(|(d, _)| d.starts_with("docs/") && !d.ends_with("SUMMARY.md"))
        {
            let page = doc.trim_start_matches("docs/");
            assert!(
                summary.contains(&format!("]({page})")),
                "docs/SUMMARY.md does not list {page}"
            );
        }
    }

    /// The dlqctl reference page is what `cargo xtask reference` writes from the command line.
    #[test]
    fn the_dlqctl_reference_is_generated_from_its_command_line() {
        let page = super::reference::render(<dlqctl::cli::Cli as clap::CommandFactory>::command());
        let stored = std::fs::read_to_string(format!("{ROOT}/{}", super::reference::PAGE)).unwrap_or_default();
        assert!(
            page.contains("### `dlqctl replay`") && page.contains("`--dry-run`"),
            "{page}"
        );
        assert!(
            stored == page,
            "{} is stale: run `cargo xtask reference`",
            super::reference::PAGE
        );
    }

    /// Every flag says what it is for, and clap finds the definition consistent.
    #[test]
    fn the_cli_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// Every `dlqctl` and `cargo xtask` command the README and the pages of docs/ (the runbook
    /// among them) tell someone to type parses: a renamed flag cannot leave the documents wrong.
    #[test]
    fn every_documented_command_parses() {
        let (mut operators, mut developers) = (0, 0);
        let docs = documents();
        assert!(
            docs.iter().any(|(d, _)| d == "docs/RUNBOOK.md"),
            "docs/RUNBOOK.md missing"
        );
        for (doc, text) in &docs {
            // Commands are in ```sh blocks (other blocks show output).
            let mut in_code = false;
            for line in text.lines() {
                if let Some(fence) = line.trim_start().strip_prefix("```") {
                    in_code = !in_code && fence.trim() == "sh";
                    continue;
                }
                let command = line.trim_start();
                let developer = command.starts_with("cargo xtask ");
                if !in_code || !(developer || command.starts_with("dlqctl ")) {
                    continue;
                }
                let mut args = words(command);
                // Placeholders (`[--flag]`, `FILE`, `a|b`) are the docs' synopsis, not a command.
                if args
                    .iter()
                    .any(|a| a.starts_with('[') || a.contains("...") || a.contains('|'))
                {
                    continue;
                }
                let parsed = if developer {
                    developers += 1;
                    super::Cli::try_parse_from(&args[1..]).map(|_| ())
                } else {
                    operators += 1;
                    if !args.iter().any(|a| a == "--aws") {
                        args.insert(1, "--aws".into());
                    }
                    dlqctl::cli::Cli::try_parse_from(&args).map(|_| ())
                };
                if let Err(e) = parsed
                    && !matches!(e.kind(), clap::error::ErrorKind::DisplayHelp)
                {
                    panic!("{doc}: `{command}` does not parse: {e}");
                }
            }
        }
        assert!(operators >= 20, "only {operators} dlqctl commands found");
        assert!(developers >= 1, "only {developers} cargo xtask commands found");
    }
}
