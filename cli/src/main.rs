//! `dlqctl`: the operator's commands.
//!
//! Configuration: the standard AWS environment plus `DLQ_STACK_PREFIX` (resource name prefix).
//! By default every command talks to the local stack (`make local-up`); `--aws` uses real AWS.
//! The developer's commands (the demo, the local pump, the benchmark drivers) are `cargo xtask`'s.

use dlqctl::cli::{Cli, Command, EvidenceCommand, RefWhat};
use dlqctl::{approvals, audit, bundle, calibrate, context, edit, ops, output, remediate, triage};

use anyhow::Result;
use clap::Parser;
use recon_aws::{AwsClients, Target};

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    output::set_json(cli.json);
    output::init_logs("warn", output::colour_on_stderr());
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
        output::print_json(&recon_aws::deployment::spec_json())?;
        return Ok(());
    }
    if let Some(kind) = &cli.ledger {
        context::set(recon_core::config::vars::LEDGER, kind);
    }
    let target = if cli.aws { Target::Aws } else { Target::local_from_env() };
    let clients = AwsClients::connect(target).await;
    let names = context::names(&clients, cli.stack.as_deref(), &cli.prefix).await?;
    match cli.command {
        Command::Env => {
            let stack = recon_aws::stack::resolve_stack(&clients, &names).await?;
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
        Command::Stats => ops::stats(&clients, &names).await,
        Command::IndexPeriods => ops::index_periods(&clients, &names).await,
        Command::Triage { all, status } => {
            let status = (!all).then(|| status.unwrap_or(recon_core::domain::EnvelopeStatus::Pending));
            triage::run(&clients, &names, status).await
        }
        Command::Show { envelope_id, body } => triage::show(&clients, &names, &envelope_id, body).await,
        Command::Replay(args) => remediate::run(&clients, &names, &args, false).await,
        Command::Quarantine(args) => remediate::run(&clients, &names, &args, true).await,
        Command::Edit(args) => edit::run(&clients, &names, &args).await,
        Command::Approve(args) => approvals::decide(&clients, &names, &args, true).await,
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
        Command::InfraSpec | Command::Completions { .. } => Ok(()),
    }
}
