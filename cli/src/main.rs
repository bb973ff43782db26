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
    // What needs no deployment runs before anything is connected (a bundle is verified offline).
    match &cli.command {
        Command::Audit {
            command: audit::AuditCommand::Verify { bundle: Some(path), .. },
        } => return audit::print_verify(&bundle::verify_file(path)?, false),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut cmd, "dlqctl", &mut std::io::stdout());
            return Ok(());
        }
        Command::InfraSpec => return output::print_json(&recon_aws::deployment::spec_json()),
        _ => {}
    }
    if let Some(kind) = &cli.ledger {
        context::set(recon_core::config::vars::LEDGER, kind);
    }
    dlqctl::control::configure(cli.stack.clone(), cli.operator.clone());
    let target = if cli.aws { Target::Aws } else { Target::local_from_env() };
    let clients = AwsClients::connect(target).await;
    let names = context::names(&clients, cli.stack.as_deref(), &cli.prefix).await?;
    match cli.command {
        Command::Env => ops::env(&clients, &names).await,
        Command::Send { file, fill_hash } => ops::send(&clients, &names, file, fill_hash).await,
        Command::Stats => ops::stats(&clients, &names).await,
        Command::IndexPeriods => ops::index_periods(&clients, &names).await,
        Command::LedgerRekey { from } => ops::ledger_rekey(&clients, &names, &from).await,
        Command::LedgerMigrate {
            url,
            secret_arn,
            grant_to,
        } => ops::ledger_migrate(&clients, url, secret_arn.as_deref(), &grant_to).await,
        Command::Triage { all, status } => {
            let status = (!all).then(|| status.unwrap_or(recon_core::domain::EnvelopeStatus::Pending));
            triage::run(&clients, &names, status).await
        }
        Command::Console {
            port,
            issuer,
            client_id,
        } => {
            let provider = issuer.map(|issuer| recon_core::control::assets::OidcSignIn {
                issuer,
                client_id: client_id.unwrap_or_default(),
                sign_in_origin: None,
            });
            dlqctl::console::serve(&clients, &names, port, provider).await
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
            command:
                EvidenceCommand::Export {
                    period,
                    from_bucket,
                    trail,
                    out,
                },
        } => match period {
            Some(period) if !from_bucket => {
                let control = dlqctl::control::connect_as_cli(&clients, &names).await?;
                bundle::export(&clients, &names, &control, &period, &out).await
            }
            _ => bundle::export_from_bucket(&clients, &names, trail.as_deref(), &out).await,
        },
        Command::InfraSpec | Command::Completions { .. } => Ok(()),
    }
}
