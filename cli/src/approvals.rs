//! Maker-checker: the approval policy (`policy show|set`), the requests it makes of large
//! remediations (`requests list|show|execute`), and the decisions on them (`approve`, `reject`),
//! made by the identity AWS vouches for.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use recon_aws::AwsClients;
use recon_core::control::Command;
use recon_core::domain::approval::{ApprovalPolicy, ApprovalRequest};
use recon_core::domain::{Total, input};
use recon_core::ports::ApprovalRequests;
use recon_core::replay::ReplayReport;
use recon_core::resources::ResourceNames;
use std::collections::BTreeMap;

use crate::context::replay_session;
use crate::output::fit;
use crate::remediate::{confirm, print_report};
use crate::text::printable;

#[derive(Subcommand, Clone, Debug)]
pub enum PolicyCommand {
    /// The approval policy in force.
    Show,
    /// Replace the approval policy with the rules given (none: nothing needs approval). Audited.
    Set(PolicyArgs),
}

#[derive(Args, Clone, Debug)]
pub struct PolicyArgs {
    /// A replay or quarantine that would change more envelopes than this needs approval.
    #[arg(long)]
    pub max_count: Option<u64>,
    /// … or that moves more than AMOUNT in CURRENCY (absolute values added), CURRENCY=AMOUNT
    /// (repeatable).
    #[arg(long = "max-amount", value_name = "CURRENCY=AMOUNT")]
    pub max_amount: Vec<String>,
    /// … or that touches an envelope of a closed accounting period.
    #[arg(long)]
    pub closed_period: bool,
    /// Hours a request waits for a decision (and an approved one for its execution).
    #[arg(long, default_value_t = recon_core::domain::approval::DEFAULT_EXPIRE_HOURS)]
    pub expire_hours: u32,
    /// The approver must act in another role than the requester, whatever the session names
    /// (where callers choose their own; with IAM Identity Center the session is the person).
    #[arg(long)]
    pub distinct_roles: bool,
}

#[derive(Subcommand, Clone, Debug)]
pub enum RequestsCommand {
    /// Approval requests, newest first (expiring those whose time is up).
    List {
        /// Only requests in this status (PENDING_APPROVAL, APPROVED, EXECUTED, …).
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One request in full: why, the dry run, its envelopes, the decision and the execution.
    Show {
        /// The request's id (apr_…).
        request_id: String,
    },
    /// Run a request approved with `approve --later` (anyone may; the approval was the check).
    Execute {
        /// The request's id (apr_…).
        request_id: String,
    },
}

#[derive(Args, Clone, Debug)]
pub struct DecisionArgs {
    /// The request's id (apr_…), as `dlqctl requests list` shows it.
    pub request_id: String,
    /// Why (recorded in the audit trail; required to reject).
    #[arg(long, default_value = "")]
    pub reason: String,
    /// Approve only; run it later (`dlqctl requests execute`) before it expires.
    #[arg(long)]
    pub later: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
}

fn parse_amounts(given: &[String]) -> Result<BTreeMap<String, Total>> {
    let mut out = BTreeMap::new();
    for g in given {
        let Some((currency, amount)) = g.split_once('=') else {
            bail!(
                "--max-amount `{}`: expected CURRENCY=AMOUNT, e.g. USD=250000",
                printable(g)
            );
        };
        let currency = input::currency_code(currency).map_err(anyhow::Error::msg)?;
        let amount: Total = amount
            .trim()
            .parse()
            .map_err(|e| anyhow::anyhow!("--max-amount {currency}: {e}"))?;
        if out.insert(currency.clone(), amount).is_some() {
            bail!("--max-amount names {currency} twice");
        }
    }
    Ok(out)
}

pub async fn policy(clients: &AwsClients, names: &ResourceNames, cmd: &PolicyCommand) -> Result<()> {
    let store = crate::context::reference(clients, names);
    let current = store.approval_policy().await?;
    let PolicyCommand::Set(a) = cmd else {
        return crate::output::emit(&current, || current.to_string());
    };
    let policy = ApprovalPolicy {
        max_count: a.max_count,
        max_amount: parse_amounts(&a.max_amount)?,
        closed_period: a.closed_period,
        expire_hours: a.expire_hours,
        distinct_roles: a.distinct_roles,
    };
    let set = recon_core::control::Command::SetPolicy { policy };
    let value = crate::control::connect_as_cli(clients, names).await?.ask(&set).await?;
    let policy: ApprovalPolicy = serde_json::from_value(value)?;
    crate::output::emit(&policy, || format!("{policy}"))
}

fn totals(r: &ApprovalRequest) -> String {
    let mut parts: Vec<String> = r
        .exposure
        .gross
        .amounts
        .iter()
        .map(|(c, t)| format!("{c} {t}"))
        .collect();
    if r.exposure.gross.without_amount > 0 {
        parts.push(format!("{} without an amount", r.exposure.gross.without_amount));
    }
    parts.join(", ")
}

/// An edit's diff and body, for `requests show`.
fn describe_edit(e: &recon_core::domain::edit::Edit) -> String {
    let mut out = format!(
        "\nedit      of envelope {}: transaction {} -> {}{}",
        e.envelope_id,
        e.source_hash_before,
        e.source_hash,
        if e.economic() { "" } else { " (unchanged)" }
    );
    for d in &e.diff {
        out.push_str(&format!("\n  {}", printable(&d.to_string())));
    }
    out.push_str(&format!("\nbody      {}", printable(&e.body)));
    out
}

pub fn describe(r: &ApprovalRequest) -> String {
    let mut out = format!(
        "request   {}  {}\naction    {:?} of {} envelopes ({}), set {}\nrequested {} by {}\nreason    {}\nwhy       {}\ndry run   {}\nexpires   {}",
        r.request_id,
        r.status,
        r.action,
        r.exposure.count,
        totals(r),
        r.digest,
        r.created_at,
        printable(&r.requested_by.to_string()),
        printable(&r.reason),
        printable(&r.why.join("; ")),
        r.dry_run,
        r.expires_at
    );
    if let Some(c) = &r.canary {
        out.push_str(&format!("\nbehind    {c}"));
    }
    if let Some(e) = &r.edit {
        out.push_str(&describe_edit(e));
    }
    if let Some(d) = &r.decision {
        out.push_str(&format!(
            "\ndecided   {} by {}: {}",
            d.at,
            printable(&d.by.to_string()),
            printable(&d.reason)
        ));
    }
    if r.stalled(chrono::Utc::now()) {
        out.push_str(&format!(
            "\nstalled   its run stopped without finishing: resume it with `dlqctl requests execute {}`",
            r.request_id
        ));
    }
    if let Some(x) = &r.execution {
        out.push_str(&format!(
            "\nexecuted  {} by {}: {}",
            x.replay_id,
            printable(&x.by),
            x.summary
        ));
        if !x.changed_since.is_empty() {
            out.push_str(&format!(
                "\n          {} changed since the request, not touched: {}",
                x.changed_since.len(),
                x.changed_since.join(" ")
            ));
        }
    }
    for c in r.set.changes.iter().take(40) {
        out.push_str(&format!(
            "\n  {:<38} {:<18} {} {} {}",
            c.envelope_id,
            c.outcome,
            printable(c.currency.as_deref().unwrap_or("-")),
            printable(c.amount.as_deref().unwrap_or("-")),
            printable(c.period.as_deref().unwrap_or(""))
        ));
    }
    if r.set.len() > 40 {
        out.push_str("\n  … (--json for every envelope)");
    }
    out
}

pub async fn requests(clients: &AwsClients, names: &ResourceNames, cmd: &RequestsCommand) -> Result<()> {
    if let RequestsCommand::Execute { request_id } = cmd {
        return execute(clients, names, request_id).await;
    }
    let (_, r) = replay_session(clients, names, None).await?;
    match cmd {
        RequestsCommand::List { status, limit } => {
            let status = status.as_deref().map(str::to_ascii_uppercase);
            if let Err(e) = r.expire_requests().await {
                eprintln!("warning: requests past their time not expired: {e}");
            }
            let (mut listed, mut cursor) = (Vec::new(), None);
            loop {
                let (page, next) = r.store.list_requests(cursor, 100).await?;
                listed.extend(
                    page.into_iter()
                        .filter(|q| status.as_deref().is_none_or(|s| q.status.as_str() == s)),
                );
                match next {
                    Some(n) if listed.len() < *limit => cursor = Some(n),
                    _ => break,
                }
            }
            listed.truncate(*limit);
            let now = chrono::Utc::now();
            crate::output::emit(&listed, || {
                let mut out = format!(
                    "{:<25} {:<17} {:<10} {:>6}  {:<20} REQUESTED BY",
                    "REQUEST", "STATUS", "ACTION", "COUNT", "CREATED"
                );
                for q in &listed {
                    out.push_str(&format!(
                        "\n{:<25} {:<17} {:<10} {:>6}  {:<20} {}",
                        q.request_id,
                        format!("{}{}", q.status, if q.stalled(now) { "*" } else { "" }),
                        format!("{:?}", q.action),
                        q.exposure.count,
                        q.created_at.format("%Y-%m-%d %H:%M:%S"),
                        fit(&printable(&q.requested_by.to_string()), 60)
                    ));
                }
                if listed.iter().any(|q| q.stalled(now)) {
                    out.push_str("\n* its run stopped without finishing (its lease ended): resume it with `dlqctl requests execute ID`");
                }
                out
            })
        }
        RequestsCommand::Show { request_id } => {
            let q = r.request(request_id).await?;
            crate::output::emit(&q, || describe(&q))
        }
        RequestsCommand::Execute { .. } => Ok(()),
    }
}

/// Run an approved request (or resume a paused or stopped one) through the control plane.
async fn execute(clients: &AwsClients, names: &ResourceNames, request_id: &str) -> Result<()> {
    let command = Command::Execute {
        request_id: request_id.to_owned(),
    };
    let ran = crate::control::connect_as_cli(clients, names)
        .await?
        .ask(&command)
        .await?;
    let q: ApprovalRequest = serde_json::from_value(ran["request"].clone())?;
    let report: ReplayReport = serde_json::from_value(ran["report"].clone())?;
    if !crate::output::json() {
        println!("{}", describe(&q));
    }
    print_report(&report)
}

/// `approve` (then run it, unless `--later`) and `reject`, through the control plane: it decides
/// who may, and refuses an approval by the request's own maker.
pub async fn decide(clients: &AwsClients, names: &ResourceNames, a: &DecisionArgs, approve: bool) -> Result<()> {
    if !approve && a.reason.trim().is_empty() {
        bail!("a rejection must say why: --reason");
    }
    if !a.yes {
        let (_, r) = replay_session(clients, names, None).await?;
        let q = r.request(&a.request_id).await?;
        eprintln!("{}", describe(&q));
        let verb = match (approve, a.later) {
            (true, false) => "approve and run",
            (true, true) => "approve",
            (false, _) => "reject",
        };
        confirm(&format!("{verb} request {}?", q.request_id))?;
    }
    let (request_id, reason) = (a.request_id.clone(), a.reason.clone());
    let command = match approve {
        true => Command::Approve { request_id, reason },
        false => Command::Reject { request_id, reason },
    };
    let value = crate::control::connect_as_cli(clients, names)
        .await?
        .ask(&command)
        .await?;
    let decided: ApprovalRequest = serde_json::from_value(value)?;
    if !approve || a.later {
        return crate::output::emit(&decided, || {
            let by = decided.decision.as_ref().map(|d| d.by.to_string()).unwrap_or_default();
            format!(
                "{} {} by {}{}",
                decided.request_id,
                decided.status,
                printable(&by),
                if approve {
                    format!(
                        "; run it with `dlqctl requests execute {}` before {}",
                        decided.request_id, decided.expires_at
                    )
                } else {
                    String::new()
                }
            )
        });
    }
    execute(clients, names, &a.request_id).await
}
