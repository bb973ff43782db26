//! `dlqctl edit`: propose an edited body for one PENDING dead letter (a field diff, or a whole
//! body), checked against gate 1 now; it becomes an approval request that another identity
//! approves (`dlqctl approve`), which posts it as a new message linked to the original. Asked
//! of the control plane, as the caller.

use anyhow::{Result, bail};
use clap::Args;
use recon_aws::AwsClients;
use recon_core::domain::edit::{EDITABLE, Proposal};
use recon_core::resources::ResourceNames;

#[derive(Args, Clone, Debug)]
pub struct EditArgs {
    /// The envelope to edit (PENDING), as `dlqctl triage` / `dlqctl show` name it.
    pub envelope_id: String,
    /// FIELD=VALUE to change (repeatable): ledger_entity, currency, amount, value_date,
    /// external_ref, counterparty, match_decision, trace_id. The source_hash is computed.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// Instead of --set: a file holding the whole edited body (its source_hash is computed;
    /// its message_id must be the original's).
    #[arg(long, conflicts_with = "set")]
    pub body_file: Option<std::path::PathBuf>,
    /// Why (recorded with the request and in the audit trail).
    #[arg(long)]
    pub reason: String,
}

fn proposal(a: &EditArgs) -> Result<Proposal> {
    if let Some(path) = &a.body_file {
        let body = crate::input::bounded_file(path, crate::input::MAX_BODY_BYTES)?;
        return Ok(Proposal::Body(body));
    }
    let mut pairs = Vec::new();
    for s in &a.set {
        let Some((field, value)) = s.split_once('=') else {
            bail!("--set {s}: give FIELD=VALUE (fields: {})", EDITABLE.join(", "));
        };
        pairs.push((field.trim().to_owned(), value.to_owned()));
    }
    Ok(Proposal::Set(pairs))
}

pub async fn run(clients: &AwsClients, names: &ResourceNames, a: &EditArgs) -> Result<()> {
    if a.reason.trim().is_empty() {
        bail!("an edit must say why: --reason");
    }
    let edit = recon_core::control::Command::Edit {
        envelope_id: a.envelope_id.clone(),
        proposal: proposal(a)?,
        reason: a.reason.clone(),
    };
    let asked = crate::control::connect_as_cli(clients, names).await?.ask(&edit).await?;
    let q: recon_core::domain::approval::ApprovalRequest = serde_json::from_value(asked)?;
    crate::output::emit(&q, || {
        format!(
            "{}\n\nedit request {} made: it runs once another person approves it (`dlqctl approve {}`) before {}",
            crate::approvals::describe(&q),
            q.request_id,
            q.request_id,
            q.expires_at
        )
    })
}
