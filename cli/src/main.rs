//! `dlqctl`: operator and developer commands.
//!
//! Configuration: the standard AWS environment plus `DLQ_STACK_PREFIX` (resource name prefix).
//! By default every command talks to the local stack (`make local-up`); `--aws` uses real AWS.

mod approvals;
mod audit;
mod bundle;
mod calibrate;
mod context;
mod demo;
mod edit;
mod fanout;
mod ops;
mod output;
mod remediate;
mod text;
mod triage;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use recon_aws::provision::{StackSettings, ensure_stack};
use recon_aws::{AwsClients, Target};
use recon_core::resources;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "dlqctl",
    version,
    about = "Dead-letter remediation for a reconciliation pipeline"
)]
struct Cli {
    /// Use real AWS (the standard AWS environment) instead of the local stack.
    #[arg(long, global = true, env = "DLQ_AWS")]
    aws: bool,
    /// Print the result as JSON (every command but demo, whose story is text).
    #[arg(long, global = true)]
    json: bool,
    /// The deployed CloudFormation stack whose outputs name every resource (the source of truth
    /// for a deployment made from the template); without it names derive from --prefix.
    #[arg(long, global = true, env = "DLQ_STACK")]
    stack: Option<String>,
    /// Prefix of every resource name, when no --stack names them.
    #[arg(long, global = true, env = "DLQ_STACK_PREFIX", default_value = resources::DEFAULT_PREFIX)]
    prefix: String,
    /// The ledger the deployment commits to: dynamodb (ours), postgres (yours, at
    /// DLQ_POSTGRES_URL) or http (your GL's API at DLQ_HTTP_LEDGER_URL). Under --stack the stack
    /// says. The demo's postgres ledger is a database of its own on the local server.
    #[arg(long, global = true, env = "DLQ_LEDGER", value_parser = recon_core::config::LedgerSettings::KINDS)]
    ledger: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create (or update) the queues, tables and WORM bucket. Idempotent.
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
    /// Send JSON lines (one message body per line) to the main queue, in batches of ten.
    Send {
        /// File of JSON lines; `-` or nothing for standard input.
        file: Option<PathBuf>,
        /// Compute `source_hash` for lines that have none.
        #[arg(long)]
        fill_hash: bool,
    },
    /// Poll the queues and run the consumer (main queue) and the enricher (DLQ) in-process, as
    /// Lambda's SQS triggers would.
    Pump(ops::PumpArgs),
    /// Dead letters grouped by failure code and root cause: counts, age, amounts, entities.
    Triage {
        /// Every envelope, not only PENDING ones.
        #[arg(long, conflicts_with = "status")]
        all: bool,
        /// Only envelopes in this status (PENDING, REPLAYING, REPLAYED, QUARANTINED, …).
        #[arg(long)]
        status: Option<recon_core::domain::EnvelopeStatus>,
    },
    /// One envelope in full, with its status history.
    Show {
        /// The envelope's id (env_<32 hex>), as triage lists samples.
        envelope_id: String,
        /// Also print the original body (from the bucket when it is not inline).
        #[arg(long)]
        body: bool,
    },
    /// Queue depths, ledger postings and audit counts.
    Stats,
    /// Give the postings committed before the DynamoDB ledger had its period index their entry
    /// in it (once, after upgrading; a second run finds none). Other ledgers index by period
    /// themselves.
    IndexPeriods,
    /// Re-inject fixed envelopes through the three gates (integrity, idempotency, temporal).
    Replay(remediate::SelectorArgs),
    /// Quarantine envelopes whose root cause cannot be fixed (flagged for a manual journal).
    Quarantine(remediate::SelectorArgs),
    /// Propose an edited body for a PENDING dead letter (`--set FIELD=VALUE` or `--body-file`):
    /// an approval request; once another identity approves it, the edit is posted as a new
    /// message and the original becomes SUPERSEDED.
    Edit(edit::EditArgs),
    /// Approve a pending approval request (as an identity other than its requester's), then
    /// run exactly its envelopes.
    Approve(approvals::DecisionArgs),
    /// Reject a pending approval request (its requester may, to withdraw it).
    Reject(approvals::DecisionArgs),
    /// Approval requests: remediations above the approval policy, waiting for a second person.
    Requests {
        #[command(subcommand)]
        command: approvals::RequestsCommand,
    },
    /// The approval policy: which replays and quarantines need a second person.
    Policy {
        #[command(subcommand)]
        command: approvals::PolicyCommand,
    },
    /// Reference data: currency mappings.
    Ref {
        #[command(subcommand)]
        what: RefWhat,
    },
    /// Accounting periods per entity.
    Period {
        #[command(subcommand)]
        command: remediate::PeriodCommand,
    },
    /// The hash-chained audit trail: verify, seal, show one transaction's life.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// The retry budget against history: recoveries per attempt, the knee, what became of each
    /// transient kind's exhausted messages, and a recommended budget and backoff.
    Calibrate(calibrate::CalibrateArgs),
    /// Prove ingested = committed + duplicates + pending + quarantined + in flight (exit 1 if not,
    /// 3 if undecided: messages still queued).
    Reconcile(bundle::ReconcileArgs),
    /// Evidence for auditors.
    Evidence {
        #[command(subcommand)]
        command: EvidenceCommand,
    },
    /// Print the functions' environment for this deployment as KEY=VALUE lines: every name the
    /// template would set (and, for the local stack, its endpoints), for `cargo lambda watch
    /// --env-file` (see `make watch`).
    Env,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to standard output.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the resource settings the infrastructure template must agree with (JSON).
    #[command(hide = true)]
    InfraSpec,
    /// Run the whole pipeline on a generated workload and prove nothing was lost or doubled.
    Demo(demo::DemoArgs),
}

#[derive(Subcommand)]
enum EvidenceCommand {
    /// Write a bundle (reconciliation of one period, audit chains with heads and seals) that
    /// `dlqctl audit verify --bundle` checks offline.
    Export {
        /// The accounting period, YYYY-MM.
        #[arg(long)]
        period: String,
        /// Where to write the bundle.
        #[arg(long, default_value = "evidence.json")]
        out: PathBuf,
    },
}

#[derive(Subcommand)]
enum RefWhat {
    /// Currency mappings (ISO 4217 is built in; add metals, stablecoins, internal units).
    Currency {
        #[command(subcommand)]
        command: remediate::RefCommand,
    },
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    output::set_json(cli.json);
    // The demo prints its own story; per-message decision events would drown it.
    output::init_logs(
        if matches!(cli.command, Command::Demo(_)) {
            "error"
        } else {
            "warn"
        },
        output::colour_on_stderr(),
    );
    if let Err(e) = run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(output::exit_code(&e));
    }
}

async fn run(cli: Cli) -> Result<()> {
    if let Command::Audit {
        command: audit::AuditCommand::Verify { bundle: Some(path), .. },
    } = &cli.command
    {
        return audit::print_verify(&bundle::verify_file(path)?, false);
    }
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(
            shell,
            &mut <Cli as clap::CommandFactory>::command(),
            "dlqctl",
            &mut std::io::stdout(),
        );
        return Ok(());
    }
    if let Command::InfraSpec = cli.command {
        println!("{}", serde_json::to_string_pretty(&recon_aws::deployment::spec_json())?);
        return Ok(());
    }
    if let Some(kind) = &cli.ledger {
        context::set(recon_core::config::vars::LEDGER, kind);
    }
    let target = if cli.aws { Target::Aws } else { Target::local_from_env() };
    let clients = AwsClients::connect(target).await;
    let names = context::names(&clients, cli.stack.as_deref(), &cli.prefix).await?;
    match cli.command {
        Command::Setup {
            max_receive_count,
            worm_retention_days,
            fifo,
        } => {
            let names = if fifo { names.with_fifo_queues() } else { names };
            if let Some(stack) = &cli.stack {
                anyhow::bail!(
                    "setup creates resources of its own; stack {stack} is CloudFormation's, updated with its template (make deploy)"
                );
            }
            let settings = StackSettings {
                max_receive_count,
                worm_retention_days,
            };
            let stack = ensure_stack(&clients, &names, &settings)
                .await
                .context("creating resources (is the local stack up? `make local-up`)")?;
            let value = serde_json::json!({
                "main_queue_url": stack.main_queue_url,
                "dead_letter_queue_url": stack.dlq_url,
                "max_receive_count": max_receive_count,
                "tables": [&names.ledger_table, &names.envelope_table, &names.reference_table, &names.audit_table, &names.dedup_table],
                "bucket": names.quarantine_bucket,
                "bucket_owner": names.account,
                "retention": {"mode": "COMPLIANCE", "days": worm_retention_days},
            });
            output::emit(&value, || {
                format!(
                    "main queue   {}\nDLQ          {} (maxReceiveCount {max_receive_count})\ntables       {}, {}, {}, {}, {}\nWORM bucket  {} (COMPLIANCE, at least {worm_retention_days} days)",
                    stack.main_queue_url,
                    stack.dlq_url,
                    names.ledger_table,
                    names.envelope_table,
                    names.reference_table,
                    names.audit_table,
                    names.dedup_table,
                    names.quarantine_bucket
                )
            })
        }
        Command::Env => {
            let stack = recon_aws::provision::resolve_stack(&clients, &names).await?;
            let mut env: Vec<(String, String)> = stack.env().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            if let recon_aws::Target::Local { edge_url, dynamodb_url } = &clients.target {
                env.extend(
                    [
                        ("AWS_ENDPOINT_URL", edge_url.clone()),
                        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_url.clone()),
                        ("AWS_REGION", context::region(&clients)),
                        // LocalStack and DynamoDB Local accept any keys; these are not credentials.
                        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
                        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
                        ("DLQ_S3_FORCE_PATH_STYLE", "true".to_owned()),
                    ]
                    .map(|(k, v)| (k.to_owned(), v)),
                );
            }
            let map: std::collections::BTreeMap<&str, &str> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            output::emit(&map, || {
                env.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        }
        Command::Send { file, fill_hash } => ops::send(&clients, &names, file, fill_hash).await,
        Command::Pump(args) => ops::pump_cmd(&clients, &names, &args).await,
        Command::Stats => ops::stats(&clients, &names).await,
        Command::IndexPeriods => ops::index_periods(&clients, &names).await,
        Command::Triage { all, status } => {
            let status = if all {
                None
            } else {
                Some(status.unwrap_or(recon_core::domain::EnvelopeStatus::Pending))
            };
            triage::run(&clients, &names, status).await
        }
        Command::Show { envelope_id, body } => triage::show(&clients, &names, &envelope_id, body).await,
        Command::Replay(args) => remediate::run(&clients, &names, &args, false).await,
        Command::Quarantine(args) => remediate::run(&clients, &names, &args, true).await,
        Command::Edit(args) => edit::run(&clients, &names, &args).await,
        Command::Approve(args) => approvals::decide(&clients, &names, &args, true).await,
        Command::Reject(args) if args.reason.trim().is_empty() => {
            anyhow::bail!("a rejection must say why: --reason")
        }
        Command::Reject(args) => approvals::decide(&clients, &names, &args, false).await,
        Command::Requests { command } => approvals::requests(&clients, &names, &command).await,
        Command::Policy { command } => approvals::policy(&clients, &names, &command).await,
        Command::Ref {
            what: RefWhat::Currency { command },
        } => remediate::currency(&clients, &names, &command).await,
        Command::Period { command } => remediate::period(&clients, &names, &command).await,
        Command::Audit { command } => audit::run(&clients, &names, &command).await,
        Command::Calibrate(args) => calibrate::run(&clients, &names, &args).await,
        Command::Reconcile(args) => bundle::reconcile_cmd(&clients, &names, &args).await,
        Command::Evidence {
            command: EvidenceCommand::Export { period, out },
        } => bundle::export(&clients, &names, &period, &out).await,
        Command::Demo(_) if output::json() => {
            anyhow::bail!("the demo tells its story as text; --json applies to every other command")
        }
        Command::Demo(args) => demo::run(&clients, &names, &args).await,
        Command::InfraSpec | Command::Completions { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
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

    /// Every flag and argument of every command says what it is for (`--help`), and clap finds
    /// the definition consistent (no flag defined twice, e.g. a command's own `--json` beside the
    /// global one).
    #[test]
    fn every_flag_has_help_and_the_cli_is_consistent() {
        use clap::CommandFactory;
        let cli = Cli::command();
        cli.clone().debug_assert();
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&cli, "dlqctl", &mut missing);
        assert!(missing.is_empty(), "without help: {missing:#?}");
    }

    #[test]
    fn verify_continues_from_a_numbered_seal_and_not_with_a_bundle() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["dlqctl", "--aws", "audit", "verify"], args].concat());
        assert!(parse(&["--from-seal", "41"]).is_ok());
        for bad in [
            &["--from-seal", "x"][..],
            &["--from-seal", "-1"],
            &["--from-seal", "3", "--bundle", "b.json"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    /// Every `dlqctl` command the runbook and the README tell an operator to type parses: a
    /// renamed flag cannot leave the documents wrong.
    #[test]
    fn every_documented_command_parses() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut checked = 0;
        for doc in ["docs/RUNBOOK.md", "README.md"] {
            let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap_or_default();
            assert!(!text.is_empty(), "{doc} unreadable");
            // Commands are in ```sh blocks (other blocks show output).
            let mut in_code = false;
            for line in text.lines() {
                if let Some(fence) = line.trim_start().strip_prefix("```") {
                    in_code = !in_code && fence.trim() == "sh";
                    continue;
                }
                let command = line.trim_start();
                if !in_code || !command.starts_with("dlqctl ") {
                    continue;
                }
                let mut args = words(command);
                // Placeholders (`[--flag]`, `FILE`, `a|b`) are the README's synopsis, not a command.
                if args
                    .iter()
                    .any(|a| a.starts_with('[') || a.contains("...") || a.contains('|'))
                {
                    continue;
                }
                args.insert(1, "--aws".into());
                if let Err(e) = Cli::try_parse_from(&args)
                    && !matches!(e.kind(), clap::error::ErrorKind::DisplayHelp)
                {
                    panic!("{doc}: `{command}` does not parse: {e}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 20, "only {checked} commands found");
    }
}
