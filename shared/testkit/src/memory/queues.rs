//! Queues in memory: a DLQ that keeps what it is sent, a work queue that records visibility
//! changes, and the main queue as the replay sees it.

use recon_core::domain::{DeadLetter, TransientKind};
use recon_core::ports::{DeadLetterQueue, OutgoingMessage, ReplayQueue, StoreError, StoreResult, WorkQueue};
use recon_core::resources::MAX_MESSAGE_BYTES;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::lock;

/// A DLQ that keeps what it is sent; `fail_sends` makes every send fail (to prove that a
/// message is never acknowledged unrecorded).
#[derive(Default)]
pub struct MemoryDeadLetterQueue {
    letters: Mutex<Vec<DeadLetter>>,
    fail_sends: AtomicBool,
}

impl MemoryDeadLetterQueue {
    pub fn letters(&self) -> Vec<DeadLetter> {
        lock(&self.letters).clone()
    }
    pub fn set_failing(&self, failing: bool) {
        self.fail_sends.store(failing, Ordering::SeqCst);
    }
}

impl DeadLetterQueue for MemoryDeadLetterQueue {
    async fn send(&self, letter: &DeadLetter) -> StoreResult<()> {
        if self.fail_sends.load(Ordering::SeqCst) {
            return Err(StoreError::new(
                TransientKind::ServiceUnavailable,
                "DLQ unavailable (injected)",
            ));
        }
        lock(&self.letters).push(letter.clone());
        Ok(())
    }
}

/// Records visibility changes by receipt handle.
#[derive(Default)]
pub struct MemoryWorkQueue {
    visibility: Mutex<Vec<(String, u32)>>,
}

impl MemoryWorkQueue {
    pub fn visibility_changes(&self) -> Vec<(String, u32)> {
        lock(&self.visibility).clone()
    }
}

impl WorkQueue for MemoryWorkQueue {
    async fn change_visibility(&self, receipt_handle: &str, secs: u32) -> StoreResult<()> {
        lock(&self.visibility).push((receipt_handle.to_owned(), secs));
        Ok(())
    }
}

/// The main queue as the replay sees it: keeps what is re-injected, refuses what SQS refuses (a
/// batch over ten entries or 1 MiB in all, a message over its limits); its depth can be set to
/// exercise back-pressure.
#[derive(Default)]
pub struct MemoryReplayQueue {
    sent: Mutex<Vec<OutgoingMessage>>,
    depth: AtomicU64,
    calls: AtomicU64,
    /// Every send refused (an SQS outage).
    refuse: AtomicBool,
}

impl MemoryReplayQueue {
    pub fn sent(&self) -> Vec<OutgoingMessage> {
        lock(&self.sent).clone()
    }
    pub fn set_depth(&self, depth: u64) {
        self.depth.store(depth, Ordering::SeqCst);
    }
    /// How many batch calls were made.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
    /// Refuse every message sent from now on (each entry fails; nothing is kept).
    pub fn set_refusing(&self, refusing: bool) {
        self.refuse.store(refusing, Ordering::SeqCst);
    }
}

impl ReplayQueue for MemoryReplayQueue {
    async fn send_batch(&self, messages: &[OutgoingMessage]) -> StoreResult<Vec<Result<String, String>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let total: usize = messages.iter().map(OutgoingMessage::bytes).sum();
        if messages.len() > 10 || total > MAX_MESSAGE_BYTES as usize {
            return Err(StoreError::new(
                TransientKind::Infrastructure,
                format!(
                    "AWS.SimpleQueueService.BatchRequestTooLong: {} entries, {total} bytes",
                    messages.len()
                ),
            ));
        }
        if self.refuse.load(Ordering::SeqCst) {
            return Ok(vec![Err("ServiceUnavailable: refused".to_owned()); messages.len()]);
        }
        let mut sent = lock(&self.sent);
        let mut ids = Vec::with_capacity(messages.len());
        for m in messages {
            match m.refusal() {
                Some(why) => ids.push(Err(format!("InvalidParameterValue: {why}"))),
                None => {
                    sent.push(m.clone());
                    ids.push(Ok(format!("replayed-{}", sent.len())));
                }
            }
        }
        Ok(ids)
    }
    async fn visible_depth(&self) -> StoreResult<u64> {
        Ok(self.depth.load(Ordering::SeqCst))
    }
}
