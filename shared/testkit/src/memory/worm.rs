//! A write-once object store in memory: a second put to a key keeps the first object.

use recon_core::ports::{StoreResult, Worm};
use std::collections::HashMap;
use std::sync::Mutex;

use super::lock;

#[derive(Default)]
pub struct MemoryWorm {
    objects: Mutex<HashMap<String, Vec<u8>>>,
}

impl MemoryWorm {
    pub fn keys(&self) -> Vec<String> {
        let mut k: Vec<String> = lock(&self.objects).keys().cloned().collect();
        k.sort();
        k
    }
}

impl Worm for MemoryWorm {
    fn bucket(&self) -> &str {
        "memory"
    }
    async fn put(&self, key: &str, bytes: &[u8]) -> StoreResult<()> {
        lock(&self.objects)
            .entry(key.to_owned())
            .or_insert_with(|| bytes.to_vec());
        Ok(())
    }
    async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(lock(&self.objects).get(key).cloned())
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        Ok(self.keys().into_iter().filter(|k| k.starts_with(prefix)).collect())
    }
}
