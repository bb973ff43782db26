//! A versioned write-once object store in memory, as S3 with Object Lock behaves: a conditional
//! put to a key that has a current object writes nothing; versions are never removed; a plain
//! overwrite adds a newer version and a delete without a version id adds a delete marker (the
//! test helpers [`MemoryWorm::overwrite`] and [`MemoryWorm::delete_marker`] stand for someone who
//! can write to the bucket).

use recon_core::ports::{ObjectVersion, StoreResult, Worm, Written};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

use super::lock;

/// One version of a key: its id and bytes (`None`: a delete marker).
type Version = (String, Option<Vec<u8>>);

#[derive(Default)]
pub struct MemoryWorm {
    objects: Mutex<BTreeMap<String, Vec<Version>>>,
    next_version: Mutex<u64>,
}

impl MemoryWorm {
    /// Keys that have a current object.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.objects)
            .iter()
            .filter(|(_, v)| v.last().is_some_and(|(_, b)| b.is_some()))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn add(&self, key: &str, bytes: Option<Vec<u8>>) -> String {
        let id = {
            let mut n = lock(&self.next_version);
            *n += 1;
            format!("v{:06}", *n)
        };
        lock(&self.objects)
            .entry(key.to_owned())
            .or_default()
            .push((id.clone(), bytes));
        id
    }

    /// The first version's bytes at `key` (empty when there is none).
    pub fn get_version_bytes(&self, key: &str) -> Vec<u8> {
        lock(&self.objects)
            .get(key)
            .and_then(|v| v.iter().find_map(|(_, b)| b.clone()))
            .unwrap_or_default()
    }

    /// A plain PUT (no `If-None-Match`): a newer version at the key.
    pub fn overwrite(&self, key: &str, bytes: &[u8]) -> String {
        self.add(key, Some(bytes.to_vec()))
    }

    /// A DELETE without a version id: a delete marker hides the key.
    pub fn delete_marker(&self, key: &str) -> String {
        self.add(key, None)
    }
}

impl Worm for MemoryWorm {
    fn bucket(&self) -> &str {
        "memory"
    }
    async fn put(&self, key: &str, bytes: &[u8]) -> StoreResult<Written> {
        let current = lock(&self.objects)
            .get(key)
            .and_then(|v| v.last())
            .is_some_and(|(_, b)| b.is_some());
        if current {
            return Ok(Written::Exists);
        }
        Ok(Written::New {
            version_id: self.add(key, Some(bytes.to_vec())),
        })
    }
    async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(lock(&self.objects)
            .get(key)
            .and_then(|v| v.last())
            .and_then(|(_, b)| b.clone()))
    }
    async fn get_version(&self, key: &str, version_id: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(lock(&self.objects)
            .get(key)
            .and_then(|v| v.iter().find(|(id, _)| id == version_id))
            .and_then(|(_, b)| b.clone()))
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        Ok(self.keys().into_iter().filter(|k| k.starts_with(prefix)).collect())
    }
    async fn versions(&self, prefix: &str) -> StoreResult<Vec<ObjectVersion>> {
        Ok(self.versions_from(prefix, Bound::Included(prefix.to_owned())))
    }
    async fn versions_after(&self, prefix: &str, start_after: &str) -> StoreResult<Vec<ObjectVersion>> {
        let start = if start_after < prefix {
            Bound::Included(prefix.to_owned())
        } else {
            Bound::Excluded(start_after.to_owned())
        };
        Ok(self.versions_from(prefix, start))
    }
}

impl MemoryWorm {
    /// Every version of the keys under `prefix` from `start` on, as S3 lists them.
    fn versions_from(&self, prefix: &str, start: Bound<String>) -> Vec<ObjectVersion> {
        let objects = lock(&self.objects);
        let mut out = Vec::new();
        for (key, versions) in objects
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            let (objs, markers): (Vec<&Version>, Vec<&Version>) = versions.iter().partition(|(_, b)| b.is_some());
            for (id, b) in objs.into_iter().chain(markers) {
                out.push(ObjectVersion {
                    key: key.clone(),
                    version_id: id.clone(),
                    delete_marker: b.is_none(),
                });
            }
        }
        out
    }
}
