//! The local stack built from the infrastructure template ([`crate::template`]): its queues,
//! tables and Object Lock bucket, with the template's names and settings, for `cargo xtask setup`, the
//! demo and the integration tests (each test run gets its own prefix). The template is the one
//! definition of a deployment; on AWS, CloudFormation builds the same resources from it.

use serde_json::json;

mod bucket;
mod key;
mod ownership;
mod queue;
mod table;

use bucket::ensure_worm_bucket;
pub use bucket::worm_retention;
use ownership::refuse_foreign_resources;
pub use table::LEFT_TO_AWS;

use crate::template::{BUCKET, Created, Deployment, QUEUE, TABLE, Template, TemplateError, ids};
use recon_aws::client::AwsClients;
use recon_aws::error::store_error;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources::{self, ResourceNames};

/// The tag the local setup puts on every resource it creates. It changes nothing that lacks it: a
/// resource of the same name made by CloudFormation (or by hand) is the deployer's, not setup's.
pub const CREATED_BY_TAG: (&str, &str) = ("recon-dlq:created-by", "cargo xtask setup");

/// Settings that differ between deployments: the template parameters a local stack sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackSettings {
    /// `MaxReceiveCount`: the redrive policy's `maxReceiveCount` = the consumer's retry budget.
    pub max_receive_count: u32,
    /// The quarantine bucket's default COMPLIANCE retention, days: the local stack's one departure
    /// from the template (whose `WormRetentionDays` is at least seven years), so that a
    /// developer's machine does not hold objects for years.
    pub worm_retention_days: i32,
}

impl Default for StackSettings {
    fn default() -> Self {
        StackSettings {
            max_receive_count: recon_core::decisions::DEFAULT_MAX_ATTEMPTS,
            worm_retention_days: resources::LOCAL_WORM_RETENTION_DAYS,
        }
    }
}

pub use recon_aws::stack::Stack;

fn template_error(detail: impl Into<String>) -> StoreError {
    StoreError::infra(TemplateError(detail.into()).to_string())
}

/// A property the local stack neither builds nor knowingly leaves to AWS is an error: a setting
/// added to the template is never silently missing from the local stack.
fn refuse_unknown_properties(
    id: &str,
    properties: &serde_json::Map<String, serde_json::Value>,
    built: &[&str],
    left_to_aws: &[&str],
    builder: &str,
) -> StoreResult<()> {
    match properties
        .keys()
        .find(|k| !built.contains(&k.as_str()) && !left_to_aws.contains(&k.as_str()))
    {
        Some(unknown) => Err(template_error(format!(
            "{id}: the local stack does not build property {unknown} (build it in provision/{builder}, or name it among those left to AWS there)"
        ))),
        None => Ok(()),
    }
}

fn from_template(e: TemplateError) -> StoreError {
    StoreError::infra(e.to_string())
}

/// What the local stack builds of a template resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Queue,
    Table,
    Bucket(resources::Bucket),
}

impl Kind {
    fn noun(&self) -> &'static str {
        match self {
            Kind::Queue => "queue",
            Kind::Table => "table",
            Kind::Bucket(_) => "bucket",
        }
    }
}

/// One resource to build: its logical id, its kind and name, and the deployment (of the ledger
/// kinds the template knows) whose properties it is built with.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    id: String,
    kind: Kind,
    name: String,
    deployment: usize,
}

/// The deployments a local stack is built from: one per ledger kind the template allows (a local
/// stack serves the tests of every ledger at once, so it has what each kind's deployment has:
/// the HTTP ledger's dedup table too). The first is the template's default kind.
fn local_deployments<'t>(
    template: &'t Template,
    names: &ResourceNames,
    region: &str,
    settings: &StackSettings,
) -> Result<Vec<Deployment<'t>>, TemplateError> {
    let kinds = recon_core::config::LedgerSettings::KINDS;
    kinds
        .iter()
        .map(|kind| {
            template.deploy(
                &names.account,
                region,
                &[
                    ("StackPrefix", json!(names.prefix)),
                    ("FifoQueues", json!(names.fifo().to_string())),
                    ("MaxReceiveCount", json!(settings.max_receive_count)),
                    ("LedgerKind", json!(kind)),
                    // LocalStack neither enforces key policies nor encrypts with the key: the
                    // stores' key (on by default on AWS) is checked offline (the template check,
                    // tests/iam_offline.rs), and the local stack uses the services' own keys.
                    ("CustomerManagedKeys", json!("false")),
                ],
            )
        })
        .collect()
}

/// Every queue, table and bucket of the deployments, each after what it refers to.
fn plan(deployments: &[Deployment<'_>]) -> Result<Vec<Planned>, TemplateError> {
    let mut planned: Vec<Planned> = Vec::new();
    for (n, d) in deployments.iter().enumerate() {
        let names = d.names()?;
        for id in d.resources_of(&[QUEUE, TABLE, BUCKET])? {
            if planned.iter().any(|p| p.id == id) {
                continue;
            }
            let (kind, name) = match d.template().resource_type(&id)? {
                QUEUE => (Kind::Queue, d.text(&id, "QueueName")?),
                TABLE => (Kind::Table, d.text(&id, "TableName")?),
                _ => {
                    let name = d.text(&id, "BucketName")?;
                    let bucket = resources::Bucket {
                        name: name.clone(),
                        owner: names.account.clone(),
                    };
                    (Kind::Bucket(bucket), name)
                }
            };
            planned.push(Planned {
                id,
                kind,
                name,
                deployment: n,
            });
        }
    }
    Ok(planned)
}

/// Build one planned resource from its resolved properties; what it gives the ones after it.
async fn build(
    clients: &AwsClients,
    p: &Planned,
    d: &Deployment<'_>,
    retention_days: i32,
) -> StoreResult<(Created, bool)> {
    let properties = d.properties(&p.id).map_err(from_template)?;
    match &p.kind {
        Kind::Queue => Ok((queue::ensure_queue(clients, &p.id, &properties).await?, false)),
        Kind::Table => {
            let (name, created) = table::ensure_table(clients, &p.id, &properties).await?;
            let reference = Created {
                reference: name,
                attributes: Default::default(),
            };
            Ok((reference, created))
        }
        Kind::Bucket(bucket) => {
            ensure_worm_bucket(clients, &p.id, bucket, &properties, retention_days).await?;
            let reference = Created {
                reference: bucket.name.clone(),
                attributes: [("Arn".to_owned(), format!("arn:aws:s3:::{}", bucket.name))].into(),
            };
            Ok((reference, false))
        }
    }
}

/// Every table of `names` created here (a new deployment): nothing was written before the period
/// indexes or triage's totals, so say so once the envelope table is ACTIVE.
async fn mark_new_tables_indexed(clients: &AwsClients, names: &ResourceNames) -> StoreResult<()> {
    table::wait_active(clients, &names.envelope_table).await?;
    let store = recon_aws::dynamodb::DynamoEnvelopeStore::new(clients.dynamodb.clone(), &names.envelope_table);
    store
        .mark_periods_indexed("setup created the tables with their period indexes", chrono::Utc::now())
        .await?;
    // A new table: triage's totals cover every envelope it will hold.
    store
        .mark_totals_kept("setup created the tables", chrono::Utc::now())
        .await
        .map(|_| ())
}

/// Create (or bring up to date) every queue, table and bucket the template declares, and the
/// decision key under its alias, for a
/// deployment named `names` (its prefix, account and queue kind). Safe to run again. The
/// stack's names are the template's.
pub async fn ensure_stack(clients: &AwsClients, names: &ResourceNames, settings: &StackSettings) -> StoreResult<Stack> {
    let template = Template::ours().map_err(from_template)?;
    let region = recon_aws::identity::region(clients);
    let mut deployments = local_deployments(template, names, &region, settings).map_err(from_template)?;
    let planned = plan(&deployments).map_err(from_template)?;
    refuse_foreign_resources(clients, &planned).await?;
    let mut tables_created = true;
    for p in &planned {
        let (created, new_table) = build(clients, p, &deployments[p.deployment], settings.worm_retention_days).await?;
        if p.kind == Kind::Table {
            tables_created &= new_table;
        }
        for d in &mut deployments {
            d.created(&p.id, created.clone());
        }
    }
    let built = &deployments[0];
    key::ensure_decision_key(clients, built).await?;
    let names = built.names().map_err(from_template)?;
    if tables_created {
        mark_new_tables_indexed(clients, &names).await?;
    }
    // The queues' addresses as they were built (no second round of lookups).
    let queue = |id: &str| -> StoreResult<(String, String)> {
        match (built.reference_of(id), built.attribute_of(id, "Arn")) {
            (Some(url), Some(arn)) => Ok((url.to_owned(), arn.to_owned())),
            _ => Err(template_error(format!("{id} was not built"))),
        }
    };
    let (main_queue_url, main_queue_arn) = queue(ids::MAIN_QUEUE)?;
    let (dlq_url, dlq_arn) = queue(ids::DEAD_LETTER_QUEUE)?;
    let (parked_url, _) = queue(ids::PARKING_QUEUE)?;
    Ok(Stack {
        parked_url,
        names,
        main_queue_url,
        main_queue_arn,
        dlq_url,
        dlq_arn,
    })
}

/// The tables the template declares for the deployment named `names`, by name.
fn planned_tables(clients: &AwsClients, names: &ResourceNames) -> StoreResult<Vec<(Planned, Deployment<'static>)>> {
    let template = Template::ours().map_err(from_template)?;
    let region = recon_aws::identity::region(clients);
    let deployments = local_deployments(template, names, &region, &StackSettings::default()).map_err(from_template)?;
    let planned = plan(&deployments).map_err(from_template)?;
    Ok(planned
        .into_iter()
        .filter(|p| p.kind == Kind::Table)
        .map(|p| {
            let d = deployments[p.deployment].clone();
            (p, d)
        })
        .collect())
}

/// Who retires a trail when the local demo resets its tables.
pub const DEMO_RETIRER: &str = "dlqctl demo (local reset)";

/// Empty the queues and tables of a deployment (local demo and tests only; the WORM bucket
/// cannot be emptied, by design). The audit trail the table held is retired first, in the bucket:
/// verification lists it as retired instead of calling the new trail a replacement.
pub async fn reset_data(clients: &AwsClients, stack: &Stack) -> StoreResult<()> {
    let audit = recon_aws::dynamodb::DynamoAuditLog::new(clients.dynamodb.clone(), &stack.names.audit_table);
    let worm = recon_aws::s3::S3Worm::new(clients.s3.clone(), &stack.names.bucket());
    // A first run has no table, so no trail, yet.
    let audit_table = clients
        .dynamodb
        .describe_table()
        .table_name(&stack.names.audit_table)
        .send()
        .await;
    if audit_table.is_ok() {
        let why = "the local demo resets its tables";
        recon_core::evidence::retire_trail(&audit, &worm, chrono::Utc::now(), DEMO_RETIRER, why).await?;
    }
    for url in [&stack.main_queue_url, &stack.dlq_url] {
        clients
            .sqs
            .purge_queue()
            .queue_url(url)
            .send()
            .await
            .map_err(|e| store_error("PurgeQueue", e))?;
    }
    for (p, d) in planned_tables(clients, &stack.names)? {
        table::delete_table(clients, &p.name).await?;
        build(clients, &p, &d, resources::LOCAL_WORM_RETENTION_DAYS).await?;
    }
    mark_new_tables_indexed(clients, &stack.names).await
}

/// Delete the queues and tables of a deployment (test clean-up).
pub async fn delete_stack(clients: &AwsClients, stack: &Stack) -> StoreResult<()> {
    for url in [&stack.main_queue_url, &stack.dlq_url] {
        let _ = clients.sqs.delete_queue().queue_url(url).send().await;
    }
    let tables = planned_tables(clients, &stack.names)?;
    if let Some((_, d)) = tables.first() {
        key::delete_decision_key(clients, d).await;
    }
    for (p, _) in tables {
        let _ = table::delete_table(clients, &p.name).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::config::vars;

    #[test]
    fn a_template_property_the_local_stack_does_not_know_is_an_error_naming_it() {
        let properties = serde_json::json!({"TableName": "t", "ContributorInsightsSpecification": {}});
        let properties = properties.as_object().unwrap();
        let e = refuse_unknown_properties("LedgerTable", properties, &["TableName"], &[], "table.rs").unwrap_err();
        assert!(e.detail.contains("ContributorInsightsSpecification"), "{e}");
        assert!(
            refuse_unknown_properties(
                "LedgerTable",
                properties,
                &["TableName"],
                &["ContributorInsightsSpecification"],
                "table.rs"
            )
            .is_ok()
        );
    }

    #[test]
    fn a_stale_shell_variable_never_redirects_a_stacks_names() {
        let names = ResourceNames::derive("prod", "123456789012", "eu-west-1");
        let stack = Stack {
            main_queue_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/prod-main".into(),
            main_queue_arn: "arn:aws:sqs:eu-west-1:123456789012:prod-main".into(),
            dlq_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/prod-dead-letter".into(),
            dlq_arn: "arn:aws:sqs:eu-west-1:123456789012:prod-dead-letter".into(),
            parked_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/prod-parked".into(),
            names,
        };
        let shell = |k: &str| match k {
            vars::ENVELOPE_TABLE => Some("local-envelopes".to_owned()),
            vars::MAIN_QUEUE_URL => Some("http://127.0.0.1:4566/000000000000/local-main".to_owned()),
            vars::MAX_ATTEMPTS => Some("9".to_owned()),
            _ => None,
        };
        let get = stack.lookup(shell);
        assert_eq!(get(vars::ENVELOPE_TABLE).as_deref(), Some("prod-envelopes"));
        assert_eq!(get(vars::MAIN_QUEUE_URL), Some(stack.main_queue_url.clone()));
        // Settings that are not names still come from the environment.
        assert_eq!(get(vars::MAX_ATTEMPTS).as_deref(), Some("9"));
    }
}
