//! A clock that stands still unless moved: wall and monotonic time together, and sleeping moves
//! it (so a rate limit costs a test no real time). Its monotonic readings still tick by a
//! nanosecond each, as the `Clock` contract asks (no two readings are equal).

use chrono::{DateTime, Utc};
use recon_core::ports::Clock;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use super::lock;

/// A clock that stands still unless moved.
pub struct FixedClock(Mutex<(DateTime<Utc>, Duration)>);

impl FixedClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        FixedClock(Mutex::new((at, Duration::ZERO)))
    }

    /// Move time forward by `by` (the wall clock by `by` even when it is negative, a clock jump;
    /// the monotonic clock never goes back).
    pub fn advance(&self, by: chrono::Duration) {
        let mut t = lock(&self.0);
        t.0 += by;
        t.1 += by.to_std().unwrap_or_default();
    }
}

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        lock(&self.0).0
    }
    fn monotonic(&self) -> Duration {
        let mut t = lock(&self.0);
        t.1 += Duration::from_nanos(1);
        t.1
    }
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.advance(chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX));
        Box::pin(std::future::ready(()))
    }
}
