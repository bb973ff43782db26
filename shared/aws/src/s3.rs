//! The Object Lock (WORM) bucket. Every object carries its own COMPLIANCE retain-until date, the
//! bucket's default retention from the day it is written (read once per process): the bucket
//! policy refuses a put without one, or with less than the deployment's floor, so lowering the
//! bucket's default later shortens nothing already written. Keys are content-addressed, and every
//! put is conditional (`If-None-Match: *`) and checksummed (SHA-256 verified by S3), so a retry
//! never writes a second version of the same record.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use sha2::{Digest, Sha256};

use crate::error::store_error;
use recon_core::domain::TransientKind;
use recon_core::ports::{ObjectVersion, StoreError, StoreResult, Worm, Written};
use recon_core::resources::Bucket;

#[derive(Clone, Debug)]
pub struct S3Worm {
    client: Client,
    bucket: String,
    /// The account every request expects to own the bucket (`ExpectedBucketOwner`): S3 refuses
    /// the request if a bucket of this name belongs to anyone else.
    owner: String,
    /// The bucket's default COMPLIANCE retention in days, once read.
    retention_days: std::sync::Arc<tokio::sync::OnceCell<i64>>,
}

impl S3Worm {
    pub fn new(client: Client, bucket: &Bucket) -> Self {
        S3Worm {
            client,
            bucket: bucket.name.clone(),
            owner: bucket.owner.clone(),
            retention_days: Default::default(),
        }
    }

    /// The bucket's default COMPLIANCE retention, in days. A bucket without one is refused:
    /// evidence is never written unlocked.
    async fn retention_days(&self) -> StoreResult<i64> {
        let read = || async {
            let out = self
                .client
                .get_object_lock_configuration()
                .bucket(&self.bucket)
                .expected_bucket_owner(&self.owner)
                .send()
                .await
                .map_err(|e| store_error("GetObjectLockConfiguration(worm)", e))?;
            let retention = out
                .object_lock_configuration()
                .and_then(|c| c.rule())
                .and_then(|r| r.default_retention())
                .filter(|d| d.mode() == Some(&aws_sdk_s3::types::ObjectLockRetentionMode::Compliance));
            let days = retention.and_then(|d| d.days().or_else(|| d.years().map(|y| y.saturating_mul(365))));
            days.map(i64::from).filter(|d| *d > 0).ok_or_else(|| {
                StoreError::infra(format!(
                    "bucket {} has no default COMPLIANCE retention: evidence is never written unlocked",
                    self.bucket
                ))
            })
        };
        self.retention_days.get_or_try_init(read).await.copied()
    }
}

/// The retain-until date of an object written at `now` into a bucket keeping objects `days`:
/// the start of the day after `days` whole days, so that at least `days` remain (S3 counts the
/// remaining retention in whole days).
pub fn retain_until(now: chrono::DateTime<chrono::Utc>, days: i64) -> chrono::DateTime<chrono::Utc> {
    let later = now + chrono::Duration::days(days.saturating_add(1));
    later.date_naive().and_time(chrono::NaiveTime::MIN).and_utc()
}

impl S3Worm {
    async fn read(&self, key: &str, version_id: Option<&str>) -> StoreResult<Option<Vec<u8>>> {
        let got = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(&self.owner)
            .key(key)
            .set_version_id(version_id.map(str::to_owned))
            .send()
            .await;
        match got {
            Ok(out) => {
                let bytes = out
                    .body
                    .collect()
                    .await
                    .map_err(|e| StoreError::new(TransientKind::Network, format!("GetObject(worm) body: {e}")))?;
                Ok(Some(bytes.into_bytes().to_vec()))
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
            // A delete marker (plain GET), or a version id that does not exist.
            Err(e)
                if e.raw_response()
                    .is_some_and(|r| matches!(r.status().as_u16(), 404 | 405)) =>
            {
                Ok(None)
            }
            Err(e) => Err(store_error("GetObject(worm)", e)),
        }
    }
}

impl Worm for S3Worm {
    fn bucket(&self) -> &str {
        &self.bucket
    }

    async fn put(&self, key: &str, bytes: &[u8]) -> StoreResult<Written> {
        let checksum = aws_smithy_types::base64::encode(Sha256::digest(bytes));
        let until = retain_until(chrono::Utc::now(), self.retention_days().await?);
        let result = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(&self.owner)
            .key(key)
            .body(ByteStream::from(bytes.to_vec()))
            .checksum_sha256(checksum)
            .object_lock_mode(aws_sdk_s3::types::ObjectLockMode::Compliance)
            .object_lock_retain_until_date(aws_smithy_types::DateTime::from_secs(until.timestamp()))
            .if_none_match("*")
            .send()
            .await;
        match result {
            Ok(out) => Ok(Written::New {
                version_id: out.version_id().unwrap_or_default().to_owned(),
            }),
            // Already written (content-addressed keys: the same content; seals: another sealer won).
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 412) => Ok(Written::Exists),
            // A conditional put racing another one (409 ConditionalRequestConflict): which wins is
            // not known yet; the caller retries (a sealer reads the latest seal again).
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 409) => Err(StoreError::new(
                TransientKind::Conflict,
                format!("PutObject(worm) {key}: a concurrent conditional write (409)"),
            )),
            Err(e) => Err(store_error("PutObject(worm)", e)),
        }
    }

    async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read(key, None).await
    }

    async fn get_version(&self, key: &str, version_id: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read(key, Some(version_id)).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .expected_bucket_owner(&self.owner)
            .prefix(prefix)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| store_error("ListObjectsV2(worm)", e))?;
        let mut keys: Vec<String> = pages
            .iter()
            .flat_map(|p| p.contents())
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        keys.sort();
        Ok(keys)
    }

    async fn versions(&self, prefix: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.list_versions(prefix, None).await
    }

    async fn versions_after(&self, prefix: &str, start_after: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.list_versions(prefix, Some(start_after)).await
    }

    /// A presigned GET of the version, signed with this process's credentials (the holder reads
    /// it as this role may, and only it), saved as the key's last part. Without
    /// `ExpectedBucketOwner`: a browser following the address cannot send the header, and the
    /// caller has just written the version there with it.
    async fn download_url(
        &self,
        key: &str,
        version_id: &str,
        valid_for: std::time::Duration,
    ) -> StoreResult<Option<String>> {
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(valid_for)
            .map_err(|e| StoreError::infra(format!("presigning {key}: {e}")))?;
        let file = key.rsplit('/').next().unwrap_or(key);
        let presigned = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .version_id(version_id)
            .response_content_disposition(format!("attachment; filename=\"{file}\""))
            .presigned(config)
            .await
            .map_err(|e| store_error("GetObject(worm, presigned)", e))?;
        Ok(Some(presigned.uri().to_owned()))
    }
}

impl S3Worm {
    /// Every version under `prefix` of the keys after `start_after` (S3's key marker, alone: the
    /// listing starts after that key), or of all.
    async fn list_versions(&self, prefix: &str, start_after: Option<&str>) -> StoreResult<Vec<ObjectVersion>> {
        // S3 lists each key's versions newest first; markers come in their own list.
        let mut by_key: std::collections::BTreeMap<String, (Vec<String>, Vec<String>)> = Default::default();
        let (mut key_marker, mut version_marker) = (start_after.map(str::to_owned), None);
        loop {
            let out = self
                .client
                .list_object_versions()
                .bucket(&self.bucket)
                .expected_bucket_owner(&self.owner)
                .prefix(prefix)
                .set_key_marker(key_marker)
                .set_version_id_marker(version_marker)
                .send()
                .await
                .map_err(|e| store_error("ListObjectVersions(worm)", e))?;
            for v in out.versions() {
                if let (Some(k), Some(id)) = (v.key(), v.version_id()) {
                    by_key.entry(k.to_owned()).or_default().0.push(id.to_owned());
                }
            }
            for m in out.delete_markers() {
                if let (Some(k), Some(id)) = (m.key(), m.version_id()) {
                    by_key.entry(k.to_owned()).or_default().1.push(id.to_owned());
                }
            }
            if out.is_truncated() != Some(true) {
                break;
            }
            key_marker = out.next_key_marker().map(str::to_owned);
            version_marker = out.next_version_id_marker().map(str::to_owned);
            if key_marker.is_none() {
                break;
            }
        }
        if let Some(after) = start_after {
            by_key.retain(|k, _| k.as_str() > after);
        }
        let mut list = Vec::new();
        for (key, (versions, markers)) in by_key {
            for (id, delete_marker) in versions
                .into_iter()
                .rev()
                .map(|v| (v, false))
                .chain(markers.into_iter().rev().map(|m| (m, true)))
            {
                list.push(ObjectVersion {
                    key: key.clone(),
                    version_id: id,
                    delete_marker,
                });
            }
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::retain_until;
    use chrono::{TimeZone, Utc};

    #[test]
    fn an_object_is_retained_at_least_its_days_whatever_the_hour_it_is_written() {
        for (h, m) in [(0, 0), (0, 1), (12, 30), (23, 59)] {
            let now = Utc.with_ymd_and_hms(2026, 12, 31, h, m, 0).unwrap();
            let until = retain_until(now, 2922);
            assert!(until - now >= chrono::Duration::days(2922), "{now}: {until}");
            assert!(until - now < chrono::Duration::days(2924), "{now}: {until}");
            assert_eq!(until.time(), chrono::NaiveTime::MIN);
        }
    }
}
