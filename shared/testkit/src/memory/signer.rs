//! The control plane's key in memory: HMAC-SHA-256 (RFC 2104) under a key of the test's choosing,
//! as the KMS HMAC key computes it on AWS.

use base64::Engine as _;
use recon_core::ports::{Signer, StoreResult};
use sha2::{Digest, Sha256};

#[derive(Clone, Debug)]
pub struct MemorySigner {
    key: [u8; 32],
}

impl MemorySigner {
    /// A key derived from `seed` (two signers of one seed share a key).
    pub fn new(seed: &str) -> Self {
        MemorySigner {
            key: Sha256::digest(seed.as_bytes()).into(),
        }
    }

    fn mac(&self, message: &[u8]) -> [u8; 32] {
        let pad = |byte: u8| self.key.map(|k| k ^ byte);
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&pad(0x36));
        block[32..].fill(0x36);
        let inner = Sha256::new().chain_update(block).chain_update(message).finalize();
        block[..32].copy_from_slice(&pad(0x5c));
        block[32..].fill(0x5c);
        Sha256::new().chain_update(block).chain_update(inner).finalize().into()
    }
}

impl Signer for MemorySigner {
    async fn sign(&self, message: &[u8]) -> StoreResult<String> {
        Ok(base64::engine::general_purpose::STANDARD.encode(self.mac(message)))
    }

    async fn verify(&self, message: &[u8], mac: &str) -> StoreResult<bool> {
        Ok(base64::engine::general_purpose::STANDARD
            .decode(mac)
            .is_ok_and(|m| m == self.mac(message)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a MAC computed independently (Python: `hmac.new(sha256(b"k").digest(), b"m",
    /// sha256)`).
    #[test]
    fn it_is_hmac_sha256() {
        use futures::FutureExt;
        // Nothing to wait for: each future is ready when first polled.
        let s = MemorySigner::new("k");
        let mac = s.sign(b"m").now_or_never().expect("ready").unwrap();
        let bytes = base64::engine::general_purpose::STANDARD.decode(&mac).unwrap();
        assert_eq!(hex(&bytes), EXPECTED);
        assert_eq!(s.verify(b"m", &mac).now_or_never().expect("ready"), Ok(true));
        assert_eq!(s.verify(b"n", &mac).now_or_never().expect("ready"), Ok(false));
        let other = MemorySigner::new("other");
        assert_eq!(other.verify(b"m", &mac).now_or_never().expect("ready"), Ok(false));
    }

    const EXPECTED: &str = "4fa3591b7870806e8df12ab2351aae097cc58c04bb00ebb6e33fb254d2732e38";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
