//! `dlqctl`'s command line: its commands, flags and their help (the reference the docs print,
//! and what the documented commands are checked against).

use clap::{Parser, Subcommand};
use recon_core::resources;
use std::path::PathBuf;

use crate::{approvals, audit, bundle, calibrate, edit, remediate};

#[derive(Parser)]
#[command(
    name = "dlqctl",
    version,
    about = "Dead-letter remediation for a reconciliation pipeline"
)]
pub struct Cli {
    /// Use real AWS (the standard AWS environment) instead of the local stack.
    #[arg(long, global = true, env = "DLQ_AWS")]
    pub aws: bool,
    /// Print the result as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// The deployed CloudFormation stack whose outputs name every resource (the source of truth
    /// for a deployment made from the template); without it names derive from --prefix.
    #[arg(long, global = true, env = "DLQ_STACK")]
    pub stack: Option<String>,
    /// Prefix of every resource name, when no --stack names them.
    #[arg(long, global = true, env = "DLQ_STACK_PREFIX", default_value = resources::DEFAULT_PREFIX)]
    pub prefix: String,
    /// The ledger the deployment commits to: dynamodb (ours), postgres (yours, at
    /// DLQ_POSTGRES_URL) or http (your GL's API at DLQ_HTTP_LEDGER_URL). Under --stack the stack
    /// says. The demo's postgres ledger is a database of its own on the local server.
    #[arg(long, global = true, env = "DLQ_LEDGER", value_parser = recon_core::config::LedgerSettings::KINDS)]
    pub ledger: Option<String>,
    /// On the local stack, ask the control plane as PERSON in the stack's operator role ROLE
    /// (viewer, maker, approver, auditor, admin, break-glass), e.g. `maker:alice`: the role is
    /// assumed through the local STS with PERSON as the session name. On AWS your credentials
    /// are who you are.
    #[arg(long = "as", global = true, env = "DLQ_AS", value_name = "ROLE:PERSON")]
    pub operator: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Send JSON lines (one message body per line) to the main queue, in batches of ten. Role:
    /// a producer's (ProducerPrincipalArns); no operator role may send.
    Send {
        /// File of JSON lines; `-` or nothing for standard input.
        file: Option<PathBuf>,
        /// Compute `source_hash` for lines that have none.
        #[arg(long)]
        fill_hash: bool,
    },
    /// Dead letters grouped by failure code and root cause: counts, age, amounts, entities.
    /// Role: any operator role (reads).
    Triage {
        /// Every envelope, not only PENDING ones.
        #[arg(long, conflicts_with = "status")]
        all: bool,
        /// Only envelopes in this status (PENDING, REPLAYING, REPLAYED, QUARANTINED, …).
        #[arg(long)]
        status: Option<recon_core::domain::EnvelopeStatus>,
    },
    /// One envelope in full, with its status history. Role: any operator role (reads).
    Show {
        /// The envelope's id (env_<32 hex>), as triage lists samples.
        envelope_id: String,
        /// Also print the original body (from the bucket when it is not inline).
        #[arg(long)]
        body: bool,
    },
    /// Serve the operator console on loopback against the local stack, with a local sign-in:
    /// name a person and the operator role to act in. Every action is the control plane's to
    /// allow or refuse, as on AWS. Role: any (the sign-in chooses).
    Console {
        /// The port on 127.0.0.1 (0: any free one).
        #[arg(long, default_value_t = 8750)]
        port: u16,
        /// Sign in through this OpenID Connect provider (its issuer URL) instead of the local
        /// sign-in, as the console on AWS does; its groups claim (`groups`) names operator roles.
        #[arg(long, requires = "client_id")]
        issuer: Option<String>,
        /// With --issuer: the console's client id there (its tokens' audience).
        #[arg(long, requires = "issuer")]
        client_id: Option<String>,
    },
    /// Queue depths, ledger postings and audit counts. Role: the auditor's (it counts postings).
    Stats,
    /// Give the envelopes and audit records written before their tables had period indexes
    /// their entry in them (once, after upgrading; a second run finds none). Role: the
    /// deployer's, an upgrade step (it writes the index entries).
    IndexPeriods,
    /// Copy the DynamoDB ledger of a deployment from before the ledger was keyed by period (its
    /// table `<prefix>-ledger`, one item per source_hash) into the ledger table keyed by period:
    /// each posting under its period, each hand-off under its envelope's. Conditional, so a key
    /// held already is left as it is and a second run copies nothing; fails naming what it could
    /// not place and keys the new table holds otherwise. Once, after upgrading, with the
    /// consumer's trigger disabled and the replay and control functions held until it has run
    /// (docs/deploying.md). Role: the deployer's, an upgrade step (it writes postings).
    LedgerRekey {
        /// The old ledger table.
        #[arg(long)]
        from: String,
    },
    /// Apply the PostgreSQL ledger's schema migrations, then grant the functions' database users
    /// what posting and reading need (SELECT and INSERT; nothing to update, delete or create).
    /// The functions never change the schema: run this from the deploy step, before deploying a
    /// release that carries a new migration. Role: the deployer's, as the database's migration
    /// role.
    LedgerMigrate {
        /// The database, postgres://<user>@<host>[:<port>]/<database> without a password
        /// (default: DLQ_POSTGRES_URL).
        #[arg(long)]
        url: Option<String>,
        /// A Secrets Manager secret holding the migration role's `username` and `password`
        /// (RDS's master user secret, say); without it, the URL's user with no password.
        #[arg(long)]
        secret_arn: Option<String>,
        /// A database user the functions connect as (the `username` of the ledger's secret), to
        /// grant; repeat it for the two users of an alternating-users rotation.
        #[arg(long = "grant-to", value_name = "USER")]
        grant_to: Vec<String>,
    },
    /// Re-inject fixed envelopes through the three gates (integrity, idempotency, temporal).
    /// Role: maker (asked of the control plane; above the approval policy, a request).
    Replay(remediate::SelectorArgs),
    /// Quarantine envelopes whose root cause cannot be fixed (flagged for a manual journal).
    /// Role: maker.
    Quarantine(remediate::SelectorArgs),
    /// Propose an edited body for a PENDING dead letter (`--set FIELD=VALUE` or `--body-file`):
    /// an approval request; once another identity approves it, the edit is posted as a new
    /// message and the original becomes SUPERSEDED. Role: maker.
    Edit(edit::EditArgs),
    /// Approve a pending approval request (as a person other than its requester), then run
    /// exactly its envelopes. Role: approver.
    Approve(approvals::DecisionArgs),
    /// Reject a pending approval request. Role: approver (or its maker, to withdraw it).
    Reject(approvals::DecisionArgs),
    /// Approval requests: remediations above the approval policy, waiting for a second person.
    /// Role: list and show, any operator role; execute, maker or approver.
    Requests {
        #[command(subcommand)]
        command: approvals::RequestsCommand,
    },
    /// The approval policy: which replays and quarantines need a second person. Role: show,
    /// any operator role; set, admin.
    Policy {
        #[command(subcommand)]
        command: approvals::PolicyCommand,
    },
    /// Reference data: currency mappings. Role: list, any operator role; add, admin.
    Ref {
        #[command(subcommand)]
        what: RefWhat,
    },
    /// Accounting periods per entity. Role: list, any operator role; close, open and schedule,
    /// admin.
    Period {
        #[command(subcommand)]
        command: remediate::PeriodCommand,
    },
    /// The hash-chained audit trail: verify, seal, show one transaction's life. Role: verify and
    /// show, auditor; seal, auditor or admin (asked of the control plane).
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// The retry budget against history: recoveries per attempt, the knee, what became of each
    /// transient kind's exhausted messages, and a recommended budget and backoff. Role:
    /// auditor.
    Calibrate(calibrate::CalibrateArgs),
    /// Prove ingested = committed + duplicates + pending + quarantined + in flight (exit 1 if not,
    /// 3 if undecided: messages still queued). Role: auditor.
    Reconcile(bundle::ReconcileArgs),
    /// Evidence for auditors. Role: auditor.
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
}

#[derive(Subcommand)]
pub enum EvidenceCommand {
    /// Write a bundle (reconciliation of one period, audit chains with heads and seals) that
    /// `dlqctl audit verify --bundle` checks offline. The trail is sealed first, asked of the
    /// control plane (the auditor's role may ask it; it may not write the bucket itself); with
    /// --from-bucket, the trail as the bucket alone holds it.
    Export {
        /// The accounting period, YYYY-MM.
        #[arg(long, required_unless_present = "from_bucket")]
        period: Option<String>,
        /// The audit trail alone, read from the WORM bucket alone (its seals and the records
        /// beside each; no table, no ledger, no new seal): for when the audit table is lost. The
        /// bundle holds no period.
        #[arg(long, conflicts_with = "period")]
        from_bucket: bool,
        /// With --from-bucket: the trail to export (the bucket's only live trail by default).
        #[arg(long, requires = "from_bucket", value_name = "TRAIL")]
        trail: Option<String>,
        /// Where to write the bundle.
        #[arg(long, default_value = "evidence.json")]
        out: PathBuf,
    },
}

#[derive(Subcommand)]
pub enum RefWhat {
    /// Currency mappings (ISO 4217 is built in; add metals, stablecoins, internal units).
    Currency {
        #[command(subcommand)]
        command: remediate::RefCommand,
    },
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::Parser;

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
}
