//! What the commands share: settings read by the functions' own parsers (the environment's
//! `DLQ_*` variables over the resolved stack's names), the flows wired as `dlqctl` runs them
//! (metrics as debug events).

use anyhow::Result;
use recon_aws::AwsClients;
use recon_aws::dynamodb::{DynamoAuditLog, DynamoReferenceData};
use recon_aws::ledger::AnyLedger;
use recon_aws::s3::S3Worm;
use recon_aws::stack::Stack;
use recon_aws::telemetry::TracingMetrics;
use recon_aws::wiring::{self, AwsEnricher, AwsReplayer};
use recon_core::config::{ConsumerSettings, EnricherSettings, ReplaySettings};
use recon_core::domain::approval::Identity;
use recon_core::resources::ResourceNames;
use std::time::Duration;

pub fn region(clients: &AwsClients) -> String {
    recon_aws::identity::region(clients)
}

/// The names of the deployment this command addresses: read from the CloudFormation stack's
/// outputs when `--stack` names one (the source of truth of a deployed stack), else derived from
/// the prefix, the caller's account and the region (the rule the local setup and the template
/// share).
pub async fn names(clients: &AwsClients, stack: Option<&str>, prefix: &str) -> Result<ResourceNames> {
    if let Some(stack) = stack {
        let deployed = recon_aws::deployment::read_stack(clients, stack)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        // The ledger too is the stack's: gate 2, reconcile and the rest ask the ledger its
        // functions commit to, whatever the shell says.
        for (var, value) in &deployed.ledger {
            if *var == recon_core::config::vars::LEDGER
                && let Some(said) = given(var).filter(|k| k != value)
            {
                anyhow::bail!("stack {stack} commits to the {value} ledger; --ledger (or DLQ_LEDGER) says {said}");
            }
            set(var, value);
        }
        return Ok(deployed.names);
    }
    recon_aws::identity::derived_names(clients, prefix)
        .await
        .map_err(|e| anyhow::anyhow!("cannot establish the account (sts:GetCallerIdentity): {e}"))
}

/// Who runs this command, as AWS knows them (`sts:GetCallerIdentity`): the actor of every change
/// `dlqctl` makes, never a name the local machine supplies; the name they gave is recorded beside
/// it only as their own statement. An approval compares the ARN, not the name.
pub async fn identity(clients: &AwsClients, claimed: Option<&str>) -> Result<Identity> {
    let caller = recon_aws::identity::caller(clients)
        .await
        .map_err(|e| anyhow::anyhow!("cannot establish who you are (sts:GetCallerIdentity): {e}"))?;
    Ok(Identity {
        arn: caller.arn,
        name: claimed
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| crate::text::printable(c).into_owned()),
    })
}

/// The caller's identity and a replayer acting as them (`dlqctl:IDENTITY`), on the resolved stack.
pub async fn replay_session(
    clients: &AwsClients,
    names: &ResourceNames,
    claimed: Option<&str>,
) -> Result<(Identity, AwsReplayer<TracingMetrics>)> {
    let stack = recon_aws::stack::resolve_stack(clients, names).await?;
    let me = identity(clients, claimed).await?;
    let r = replayer(clients, &stack, &format!("dlqctl:{me}"))?;
    Ok((me, r))
}

/// The reference data as written now (no cache: a command reads what it just changed).
pub fn reference(clients: &AwsClients, names: &ResourceNames) -> DynamoReferenceData {
    DynamoReferenceData::new(clients.dynamodb.clone(), &names.reference_table, Duration::ZERO)
}

pub fn audit_log(clients: &AwsClients, names: &ResourceNames) -> DynamoAuditLog {
    DynamoAuditLog::new(clients.dynamodb.clone(), &names.audit_table)
}

pub fn worm(clients: &AwsClients, names: &ResourceNames) -> S3Worm {
    S3Worm::new(clients.s3.clone(), &names.bucket())
}

/// Settings this run gives in place of the environment's (`--ledger`, the demo's own database).
static GIVEN: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

pub fn set(var: &'static str, value: &str) {
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    given.retain(|(k, _)| *k != var);
    given.push((var, value.to_owned()));
}

/// The value this run reads for `k`: given by the run, else from the environment.
pub fn given(k: &str) -> Option<String> {
    let given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    given
        .iter()
        .find(|(n, _)| *n == k)
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var(k).ok())
}

/// The ledger this deployment commits to (`DLQ_LEDGER`, `--ledger`), as the consumer and the
/// replay's gate 2 use it: every command that reads postings reads them here.
pub fn ledger(clients: &AwsClients, stack: &Stack) -> Result<AnyLedger> {
    Ok(wiring::consumer_ledger(clients, &consumer_settings(stack)?))
}

pub fn consumer_settings(stack: &Stack) -> Result<ConsumerSettings> {
    Ok(ConsumerSettings::from_lookup(stack.lookup(given))?)
}

pub fn replay_settings(stack: &Stack) -> Result<ReplaySettings> {
    Ok(ReplaySettings::from_lookup(stack.lookup(given))?)
}

pub fn enricher(clients: &AwsClients, stack: &Stack, actor: &str) -> Result<AwsEnricher<TracingMetrics>> {
    Ok(wiring::enricher(
        clients,
        &EnricherSettings::from_lookup(stack.lookup(given))?,
        actor,
        TracingMetrics,
    ))
}

pub fn replayer(clients: &AwsClients, stack: &Stack, actor: &str) -> Result<AwsReplayer<TracingMetrics>> {
    Ok(wiring::replayer(
        clients,
        &replay_settings(stack)?,
        actor,
        TracingMetrics,
    ))
}

/// The deadline of a replay run in this process: the replay function's own timeout. A run stops
/// starting new work near it (and says so: run it again to go on), so a command left running on
/// a machine that was suspended stops soon after it wakes; its claims' leases fence what it had
/// begun (a hand-off's intent is written under its claim, which a replay taking over finishes).
pub fn in_process_deadline() -> Option<chrono::DateTime<chrono::Utc>> {
    Some(chrono::Utc::now() + recon_core::resources::REPLAY_TIMEOUT)
}
