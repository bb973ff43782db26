//! The Object Lock (WORM) bucket. Objects inherit the bucket's default COMPLIANCE retention; keys
//! are content-addressed, and every put is conditional (`If-None-Match: *`) and checksummed
//! (SHA-256 verified by S3), so a retry never writes a second version of the same record.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use sha2::{Digest, Sha256};

use crate::error::store_error;
use recon_core::domain::TransientKind;
use recon_core::ports::{StoreError, StoreResult, Worm};

#[derive(Clone, Debug)]
pub struct S3Worm {
    client: Client,
    bucket: String,
}

impl S3Worm {
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        S3Worm {
            client,
            bucket: bucket.into(),
        }
    }
}

impl Worm for S3Worm {
    fn bucket(&self) -> &str {
        &self.bucket
    }

    async fn put(&self, key: &str, bytes: &[u8]) -> StoreResult<()> {
        let checksum = aws_smithy_types::base64::encode(Sha256::digest(bytes));
        let result = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(bytes.to_vec()))
            .checksum_sha256(checksum)
            .if_none_match("*")
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Already written (the key is content-addressed: same content).
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 412) => Ok(()),
            Err(e) => Err(store_error("PutObject(worm)", e)),
        }
    }

    async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        match self.client.get_object().bucket(&self.bucket).key(key).send().await {
            Ok(out) => {
                let bytes = out
                    .body
                    .collect()
                    .await
                    .map_err(|e| StoreError::new(TransientKind::Network, format!("GetObject(worm) body: {e}")))?;
                Ok(Some(bytes.into_bytes().to_vec()))
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
            Err(e) => Err(store_error("GetObject(worm)", e)),
        }
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
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
}
