//! What the local setup (`cargo xtask setup`) may change: only what it created (tagged so), never a resource of the same
//! name that CloudFormation or someone else made.

use std::collections::HashMap;

use super::{CREATED_BY_TAG, Kind, Planned};
use recon_aws::client::AwsClients;
use recon_aws::error::store_error;
use recon_aws::stack::queue_url;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources;

/// Whether setup may change an existing resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Ownership {
    Absent,
    /// Created by setup (it carries [`CREATED_BY_TAG`]).
    Ours,
    /// The store keeps no tags (DynamoDB Local): setup created it, or nobody can tell.
    Untaggable,
    /// Someone else's: why setup will not touch it.
    Foreign(String),
}

fn ownership_of(tags: &HashMap<String, String>) -> Ownership {
    if tags.get(CREATED_BY_TAG.0).map(String::as_str) == Some(CREATED_BY_TAG.1) {
        Ownership::Ours
    } else if let Some(stack) = tags.get("aws:cloudformation:stack-name") {
        Ownership::Foreign(format!("belongs to CloudFormation stack {stack}"))
    } else {
        Ownership::Foreign(format!(
            "was not created by the local setup (no {} tag)",
            CREATED_BY_TAG.0
        ))
    }
}

async fn queue_ownership(clients: &AwsClients, name: &str) -> StoreResult<Ownership> {
    let Some(url) = queue_url(clients, name).await? else {
        return Ok(Ownership::Absent);
    };
    let out = clients
        .sqs
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .map_err(|e| store_error("ListQueueTags", e))?;
    Ok(ownership_of(&out.tags().cloned().unwrap_or_default()))
}

async fn table_ownership(clients: &AwsClients, name: &str) -> StoreResult<Ownership> {
    let arn = match clients.dynamodb.describe_table().table_name(name).send().await {
        Ok(out) => out.table().and_then(|t| t.table_arn()).unwrap_or_default().to_owned(),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            return Ok(Ownership::Absent);
        }
        Err(e) => return Err(store_error("DescribeTable", e)),
    };
    match clients.dynamodb.list_tags_of_resource().resource_arn(&arn).send().await {
        Ok(out) => Ok(ownership_of(
            &out.tags()
                .iter()
                .map(|t| (t.key().to_owned(), t.value().to_owned()))
                .collect(),
        )),
        // DynamoDB Local: "Tagging is not currently supported".
        Err(e) if e.as_service_error().and_then(|s| s.meta().code()) == Some("UnknownOperationException") => {
            Ok(Ownership::Untaggable)
        }
        Err(e) => Err(store_error("ListTagsOfResource", e)),
    }
}

pub(super) async fn bucket_ownership(clients: &AwsClients, bucket: &resources::Bucket) -> StoreResult<Ownership> {
    match clients
        .s3
        .head_bucket()
        .bucket(&bucket.name)
        .expected_bucket_owner(&bucket.owner)
        .send()
        .await
    {
        Ok(_) => {}
        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => return Ok(Ownership::Absent),
        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 403) => {
            return Ok(Ownership::Foreign(format!(
                "is not owned by account {} (bucket names are global)",
                bucket.owner
            )));
        }
        Err(e) => return Err(store_error("HeadBucket", e)),
    }
    match clients
        .s3
        .get_bucket_tagging()
        .bucket(&bucket.name)
        .expected_bucket_owner(&bucket.owner)
        .send()
        .await
    {
        Ok(out) => Ok(ownership_of(
            &out.tag_set()
                .iter()
                .map(|t| (t.key().to_owned(), t.value().to_owned()))
                .collect(),
        )),
        Err(e) if e.as_service_error().and_then(|s| s.meta().code()) == Some("NoSuchTagSet") => {
            Ok(ownership_of(&HashMap::new()))
        }
        Err(e) => Err(store_error("GetBucketTagging", e)),
    }
}

/// Refuse, before changing anything, when any resource of the deployment exists and is not
/// setup's own.
pub(super) async fn refuse_foreign_resources(clients: &AwsClients, plan: &[Planned]) -> StoreResult<()> {
    let mut foreign = Vec::new();
    for p in plan {
        let ownership = match &p.kind {
            Kind::Queue => queue_ownership(clients, &p.name).await?,
            Kind::Table => table_ownership(clients, &p.name).await?,
            Kind::Bucket(bucket) => bucket_ownership(clients, bucket).await?,
        };
        if let Ownership::Foreign(why) = ownership {
            foreign.push(format!("{} {} {why}", p.kind.noun(), p.name));
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    Err(StoreError::infra(format!(
        "setup changes only what it created, and changed nothing: {}. Update a deployed stack with \
         its template (make deploy), or give setup another --prefix",
        foreign.join("; ")
    )))
}
