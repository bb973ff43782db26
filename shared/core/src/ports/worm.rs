//! The write-once (Object Lock) bucket.
//!
//! Object Lock protects versions, not keys: anyone allowed to write can put a newer version at a
//! key, or a delete marker that hides it from a plain GET or LIST. So the evidence reads by
//! version: [`Worm::versions`] shows every version and delete marker, and [`Worm::get_version`]
//! reads the one first written.

use std::future::Future;

use super::StoreResult;

/// What a conditional put found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// A new object, with the version id the store gave it.
    New { version_id: String },
    /// An object was already there (nothing written).
    Exists,
}

/// One version of one key, as the store lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    pub key: String,
    pub version_id: String,
    pub delete_marker: bool,
}

port! {
    pub trait Worm {
        fn bucket(&self) -> &str;
        /// Write `bytes` under `key` unless an object is already there (`If-None-Match: *`). The store
        /// verifies the SHA-256 checksum.
        fn put(&self, key: &str, bytes: &[u8]) -> impl Future<Output = StoreResult<Written>> + Send;
        /// The current version of `key` (what a plain GET returns).
        fn get(&self, key: &str) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send;
        fn get_version(&self, key: &str, version_id: &str) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send;
        /// Current keys under `prefix`, sorted (delete markers hide keys here).
        fn list(&self, prefix: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
        /// Every version and delete marker under `prefix`: keys sorted, and for each key its object
        /// versions oldest first (delete markers after them).
        fn versions(&self, prefix: &str) -> impl Future<Output = StoreResult<Vec<ObjectVersion>>> + Send;
        /// [`Worm::versions`] of the keys under `prefix` that sort after `start_after` only (S3's key
        /// marker): the tail of a long run of keys, without listing the rest.
        fn versions_after(
            &self,
            prefix: &str,
            start_after: &str,
        ) -> impl Future<Output = StoreResult<Vec<ObjectVersion>>> + Send;
        /// An address from which whoever holds it may download version `version_id` of `key`
        /// until `valid_for` has passed, without credentials of their own (S3's presigned GET):
        /// none where the store has no such address (memory).
        fn download_url(
            &self,
            _key: &str,
            _version_id: &str,
            _valid_for: std::time::Duration,
        ) -> impl Future<Output = StoreResult<Option<String>>> + Send {
            std::future::ready(Ok(None))
        }
    }
}
