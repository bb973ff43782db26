//! The write-once (Object Lock) bucket.

use std::future::Future;
use std::sync::Arc;

use super::StoreResult;

pub trait Worm: Send + Sync {
    fn bucket(&self) -> &str;
    /// Write `bytes` under `key` unless an object is already there (content-addressed keys make
    /// that the same content). The store verifies the SHA-256 checksum.
    fn put(&self, key: &str, bytes: &[u8]) -> impl Future<Output = StoreResult<()>> + Send;
    fn get(&self, key: &str) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send;
    /// Keys under `prefix`, sorted.
    fn list(&self, prefix: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
}

impl<T: Worm> Worm for Arc<T> {
    fn bucket(&self) -> &str {
        (**self).bucket()
    }
    fn put(&self, key: &str, bytes: &[u8]) -> impl Future<Output = StoreResult<()>> + Send {
        (**self).put(key, bytes)
    }
    fn get(&self, key: &str) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send {
        (**self).get(key)
    }
    fn list(&self, prefix: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send {
        (**self).list(prefix)
    }
}
