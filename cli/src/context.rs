//! What the commands share: settings read by the functions' own parsers (the environment's
//! `DLQ_*` variables over the resolved stack's names), the flows wired as `dlqctl` runs them
//! (metrics as debug events).

use anyhow::Result;
use recon_aws::AwsClients;
use recon_aws::ledger::AnyLedger;
use recon_aws::stack::Stack;
use recon_aws::telemetry::TracingMetrics;
use recon_aws::wiring::{self, AwsEnricher, AwsReplayer};
use recon_core::config::{ConsumerSettings, EnricherSettings, ReplaySettings};
use recon_core::domain::approval::Identity;
use recon_core::resources::ResourceNames;

/// The region the clients use (for event records).
pub fn region(clients: &AwsClients) -> String {
    recon_aws::identity::region(clients)
}

/// Who runs this command, as AWS knows them (`sts:GetCallerIdentity`): the identity recorded as
/// the actor of every change `dlqctl` makes, never a name the local machine supplies.
pub async fn caller(clients: &AwsClients) -> Result<String> {
    recon_aws::identity::caller(clients)
        .await
        .map(|c| c.arn)
        .map_err(|e| anyhow::anyhow!("cannot establish who you are (sts:GetCallerIdentity): {e}"))
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

/// The actor of an operator's change: the caller's AWS identity, and the name they gave (only as
/// their own statement, after the identity AWS vouches for).
pub async fn operator(clients: &AwsClients, claimed: Option<&str>) -> Result<String> {
    Ok(identity(clients, claimed).await?.to_string())
}

/// [`operator`] as an identity: what an approval compares (the ARN) apart from the name given.
pub async fn identity(clients: &AwsClients, claimed: Option<&str>) -> Result<Identity> {
    Ok(Identity {
        arn: caller(clients).await?,
        name: claimed
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| crate::text::printable(c).into_owned()),
    })
}

/// Settings this run gives in place of the environment's (`--ledger`, the demo's own database).
static GIVEN: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());

/// Use `value` for `var` in every setting this run reads.
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

pub fn enricher_settings(stack: &Stack) -> Result<EnricherSettings> {
    Ok(EnricherSettings::from_lookup(stack.lookup(given))?)
}

pub fn replay_settings(stack: &Stack) -> Result<ReplaySettings> {
    Ok(ReplaySettings::from_lookup(stack.lookup(given))?)
}

pub fn enricher(clients: &AwsClients, stack: &Stack, actor: &str) -> Result<AwsEnricher<TracingMetrics>> {
    Ok(wiring::enricher(
        clients,
        &enricher_settings(stack)?,
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
