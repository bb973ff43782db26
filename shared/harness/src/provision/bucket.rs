//! The Object Lock bucket as the template declares it: created tagged (in the clients' region),
//! its default COMPLIANCE retention raised but never lowered, its public access block applied;
//! every request names its owner.

use aws_sdk_s3::types::{
    DefaultRetention, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockRetentionMode, ObjectLockRule,
    PublicAccessBlockConfiguration,
};

use serde_json::{Map, Value};

use super::CREATED_BY_TAG;
use super::ownership::{Ownership, bucket_ownership};
use super::{refuse_unknown_properties, template_error};
use recon_aws::client::AwsClients;
use recon_aws::error::store_error;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources;

/// Bucket properties the local stack does not build: versioning (Object Lock turns it on),
/// default encryption and object ownership (LocalStack's S3 does not enforce them). AWS builds
/// them from the template.
const LEFT_TO_AWS: [&str; 4] = [
    "VersioningConfiguration",
    "BucketEncryption",
    "OwnershipControls",
    "Tags",
];
const BUILT: [&str; 4] = [
    "BucketName",
    "ObjectLockEnabled",
    "ObjectLockConfiguration",
    "PublicAccessBlockConfiguration",
];

/// The declaration's public access block (its default retention must be COMPLIANCE, in days).
fn declaration(id: &str, p: &Map<String, Value>) -> StoreResult<PublicAccessBlockConfiguration> {
    refuse_unknown_properties(id, p, &BUILT, &LEFT_TO_AWS, "bucket.rs")?;
    if p.get("ObjectLockEnabled") != Some(&Value::Bool(true)) {
        return Err(template_error(format!(
            "{id}: the quarantine bucket must have ObjectLockEnabled: true"
        )));
    }
    let retention = p
        .get("ObjectLockConfiguration")
        .and_then(|c| c.pointer("/Rule/DefaultRetention"));
    let mode = retention.and_then(|r| r.get("Mode")).and_then(Value::as_str);
    let days = retention.and_then(|r| r.get("Days"));
    let (Some("COMPLIANCE"), Some(_)) = (mode, days) else {
        return Err(template_error(format!(
            "{id}: the quarantine bucket's default retention must be COMPLIANCE, in Days (has {mode:?}, {days:?})"
        )));
    };
    let block = p.get("PublicAccessBlockConfiguration");
    let flag = |key: &str| block.and_then(|b| b.get(key)).and_then(Value::as_bool).unwrap_or(false);
    let public_access = PublicAccessBlockConfiguration::builder()
        .block_public_acls(flag("BlockPublicAcls"))
        .block_public_policy(flag("BlockPublicPolicy"))
        .ignore_public_acls(flag("IgnorePublicAcls"))
        .restrict_public_buckets(flag("RestrictPublicBuckets"))
        .build();
    Ok(public_access)
}

pub(super) async fn ensure_worm_bucket(
    clients: &AwsClients,
    id: &str,
    bucket: &resources::Bucket,
    properties: &Map<String, Value>,
    retention_days: i32,
) -> StoreResult<()> {
    let public_access = declaration(id, properties)?;
    let name = bucket.name.as_str();
    let exists = bucket_ownership(clients, bucket).await? != Ownership::Absent;
    if !exists {
        // Outside us-east-1 S3 wants the bucket's region stated.
        let region = clients.s3.config().region().map(|r| r.to_string());
        let location = region.filter(|r| r != "us-east-1").map(|r| {
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(r.as_str()))
                .build()
        });
        clients
            .s3
            .create_bucket()
            .bucket(name)
            .set_create_bucket_configuration(location)
            .object_lock_enabled_for_bucket(true)
            .send()
            .await
            .map_err(|e| store_error("CreateBucket", e))?;
        let tag = aws_sdk_s3::types::Tag::builder()
            .key(CREATED_BY_TAG.0)
            .value(CREATED_BY_TAG.1)
            .build()
            .map_err(|e| StoreError::infra(e.to_string()))?;
        let tagged = clients
            .s3
            .put_bucket_tagging()
            .bucket(name)
            .expected_bucket_owner(&bucket.owner)
            .tagging(
                aws_sdk_s3::types::Tagging::builder()
                    .tag_set(tag)
                    .build()
                    .map_err(|e| StoreError::infra(e.to_string()))?,
            )
            .send()
            .await;
        if let Err(e) = tagged {
            // An untagged bucket would read as someone else's to every later setup: remove the
            // empty bucket just created, so the next run starts over.
            let _ = clients
                .s3
                .delete_bucket()
                .bucket(name)
                .expected_bucket_owner(&bucket.owner)
                .send()
                .await;
            return Err(store_error("PutBucketTagging", e));
        }
    }
    // Never lower a retention, nor weaken its mode: a bucket that already keeps objects at least
    // as long in COMPLIANCE mode is left as it is (a local default of one day must never reach a
    // deployed bucket's seven years).
    if exists {
        let current = worm_retention(clients, bucket).await?;
        if let Some((mode, days)) = &current {
            if *mode == ObjectLockRetentionMode::Compliance && *days >= retention_days {
                return block_public_access(clients, bucket, public_access).await;
            }
            if *mode == ObjectLockRetentionMode::Compliance && *days < retention_days {
                tracing::info!(
                    bucket = name,
                    from = days,
                    to = retention_days,
                    "raising the default COMPLIANCE retention"
                );
            }
        }
    }
    let rule = ObjectLockRule::builder()
        .default_retention(
            DefaultRetention::builder()
                .mode(ObjectLockRetentionMode::Compliance)
                .days(retention_days)
                .build(),
        )
        .build();
    clients
        .s3
        .put_object_lock_configuration()
        .bucket(name)
        .expected_bucket_owner(&bucket.owner)
        .object_lock_configuration(
            ObjectLockConfiguration::builder()
                .object_lock_enabled(ObjectLockEnabled::Enabled)
                .rule(rule)
                .build(),
        )
        .send()
        .await
        .map_err(|e| store_error("PutObjectLockConfiguration", e))?;
    block_public_access(clients, bucket, public_access).await
}

/// The bucket's default retention: its mode and its length in days (years counted as 365 days).
pub async fn worm_retention(
    clients: &AwsClients,
    bucket: &resources::Bucket,
) -> StoreResult<Option<(ObjectLockRetentionMode, i32)>> {
    let out = match clients
        .s3
        .get_object_lock_configuration()
        .bucket(&bucket.name)
        .expected_bucket_owner(&bucket.owner)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => return Ok(None),
        Err(e) => return Err(store_error("GetObjectLockConfiguration", e)),
    };
    let retention = out
        .object_lock_configuration()
        .and_then(|c| c.rule())
        .and_then(|r| r.default_retention());
    Ok(retention.and_then(|d| {
        let days = d.days().or_else(|| d.years().map(|y| y.saturating_mul(365)))?;
        Some((d.mode()?.clone(), days))
    }))
}

async fn block_public_access(
    clients: &AwsClients,
    bucket: &resources::Bucket,
    configuration: PublicAccessBlockConfiguration,
) -> StoreResult<()> {
    clients
        .s3
        .put_public_access_block()
        .bucket(&bucket.name)
        .expected_bucket_owner(&bucket.owner)
        .public_access_block_configuration(configuration)
        .send()
        .await
        .map_err(|e| store_error("PutPublicAccessBlock", e))?;
    Ok(())
}
