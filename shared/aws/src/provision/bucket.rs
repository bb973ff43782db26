//! The Object Lock bucket: created tagged (in the clients' region), its default COMPLIANCE
//! retention raised but never lowered, public access blocked; every request names its owner.

use aws_sdk_s3::types::{
    DefaultRetention, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockRetentionMode, ObjectLockRule,
    PublicAccessBlockConfiguration,
};

use super::infra;
use super::ownership::{CREATED_BY_TAG, Ownership, bucket_ownership};
use crate::client::AwsClients;
use crate::error::store_error;
use recon_core::ports::StoreResult;
use recon_core::resources;

pub(super) async fn ensure_worm_bucket(
    clients: &AwsClients,
    bucket: &resources::Bucket,
    retention_days: i32,
) -> StoreResult<()> {
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
            .map_err(|e| infra(e.to_string()))?;
        let tagged = clients
            .s3
            .put_bucket_tagging()
            .bucket(name)
            .expected_bucket_owner(&bucket.owner)
            .tagging(
                aws_sdk_s3::types::Tagging::builder()
                    .tag_set(tag)
                    .build()
                    .map_err(|e| infra(e.to_string()))?,
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
                return block_public_access(clients, bucket).await;
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
    block_public_access(clients, bucket).await
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

async fn block_public_access(clients: &AwsClients, bucket: &resources::Bucket) -> StoreResult<()> {
    clients
        .s3
        .put_public_access_block()
        .bucket(&bucket.name)
        .expected_bucket_owner(&bucket.owner)
        .public_access_block_configuration(
            PublicAccessBlockConfiguration::builder()
                .block_public_acls(true)
                .block_public_policy(true)
                .ignore_public_acls(true)
                .restrict_public_buckets(true)
                .build(),
        )
        .send()
        .await
        .map_err(|e| store_error("PutPublicAccessBlock", e))?;
    Ok(())
}
