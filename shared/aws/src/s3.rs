//! The Object Lock (WORM) bucket. Objects inherit the bucket's default COMPLIANCE retention; keys
//! are content-addressed, and every put is conditional (`If-None-Match: *`) and checksummed
//! (SHA-256 verified by S3), so a retry never writes a second version of the same record.

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
}

impl S3Worm {
    pub fn new(client: Client, bucket: &Bucket) -> Self {
        S3Worm {
            client,
            bucket: bucket.name.clone(),
            owner: bucket.owner.clone(),
        }
    }
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
        let result = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(&self.owner)
            .key(key)
            .body(ByteStream::from(bytes.to_vec()))
            .checksum_sha256(checksum)
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
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .expected_bucket_owner(&self.owner)
                .prefix(prefix)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| store_error("ListObjectsV2(worm)", e))?;
            keys.extend(out.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
            match out.next_continuation_token() {
                Some(t) => token = Some(t.to_owned()),
                None => break,
            }
        }
        keys.sort();
        Ok(keys)
    }

    async fn versions(&self, prefix: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.list_versions(prefix, None).await
    }

    async fn versions_after(&self, prefix: &str, start_after: &str) -> StoreResult<Vec<ObjectVersion>> {
        self.list_versions(prefix, Some(start_after)).await
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
