//! The control plane's seal on its decisions: a KMS HMAC key (HMAC_SHA_256) that only the control
//! plane's role may use to make a MAC. `VerifyMac` answers a MAC made with another key, or for
//! another message, with `KMSInvalidMacException`: that is `false`, not a failure.

use aws_sdk_kms::Client;
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::MacAlgorithmSpec;
use recon_core::ports::{Signer, StoreResult};

use crate::error::store_error;

#[derive(Clone, Debug)]
pub struct KmsSigner {
    client: Client,
    /// The key's id, ARN or alias (`alias/<name>`).
    key: String,
}

impl KmsSigner {
    pub fn new(client: Client, key: impl Into<String>) -> Self {
        KmsSigner {
            client,
            key: key.into(),
        }
    }
}

impl Signer for KmsSigner {
    async fn sign(&self, message: &[u8]) -> StoreResult<String> {
        let out = self
            .client
            .generate_mac()
            .key_id(&self.key)
            .mac_algorithm(MacAlgorithmSpec::HmacSha256)
            .message(Blob::new(message))
            .send()
            .await
            .map_err(|e| store_error("GenerateMac", e))?;
        let mac = out.mac.map(Blob::into_inner).unwrap_or_default();
        Ok(aws_smithy_types::base64::encode(mac))
    }

    async fn verify(&self, message: &[u8], mac: &str) -> StoreResult<bool> {
        let Ok(mac) = aws_smithy_types::base64::decode(mac) else {
            return Ok(false);
        };
        let sent = self
            .client
            .verify_mac()
            .key_id(&self.key)
            .mac_algorithm(MacAlgorithmSpec::HmacSha256)
            .message(Blob::new(message))
            .mac(Blob::new(mac))
            .send()
            .await;
        match sent {
            Ok(out) => Ok(out.mac_valid),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_kms_invalid_mac_exception()) => Ok(false),
            Err(e) => Err(store_error("VerifyMac", e)),
        }
    }
}
