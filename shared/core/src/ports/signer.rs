//! What only the control plane may vouch for: an approval decision, sealed with a key only its
//! role may use to sign (a KMS HMAC key on AWS), and checked before an approved request runs. A
//! decision written into the table by anyone else (a role with write rights, break-glass) carries
//! no valid seal and runs nothing.

use std::future::Future;

use super::StoreResult;

port! {
    pub trait Signer {
        /// The MAC of `message` (base64).
        fn sign(&self, message: &[u8]) -> impl Future<Output = StoreResult<String>> + Send;
        /// Whether `mac` is `message`'s MAC under the key (`false`: made with another key, or
        /// for another message).
        fn verify(&self, message: &[u8], mac: &str) -> impl Future<Output = StoreResult<bool>> + Send;
    }
}

/// No key: what a decision made outside the control plane is sealed with (nothing).
pub struct NoSigner;

impl Signer for NoSigner {
    async fn sign(&self, _: &[u8]) -> StoreResult<String> {
        Err(super::StoreError::infra("no signing key here"))
    }

    async fn verify(&self, _: &[u8], _: &str) -> StoreResult<bool> {
        Ok(false)
    }
}
