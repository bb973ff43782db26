//! Time, as the flows read it: the wall clock (what records carry, what Lambda's deadline is given
//! in), a monotonic reading (budgets and rates, immune to wall-clock jumps) and sleeping. Nothing
//! in this crate reads `SystemTime`, `Instant` or `Utc::now` elsewhere (a test checks it), so a
//! test or the simulator controls all of it through one [`Clock`].

use chrono::{DateTime, Utc};
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    /// Wall-clock time.
    fn now(&self) -> DateTime<Utc>;
    /// Time since an arbitrary origin; never goes backwards, and no two readings are equal (a
    /// reading can name a run).
    fn monotonic(&self) -> Duration;
    /// Wait `duration` (a rate limit). A simulated clock advances instead of waiting.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The machine's clocks and tokio's timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
    fn monotonic(&self) -> Duration {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        static LAST: AtomicU64 = AtomicU64::new(0);
        let origin = *ORIGIN.get_or_init(Instant::now);
        let now = u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Strictly increasing even when the OS clock reads the same nanosecond twice.
        let mut last = LAST.load(Ordering::Relaxed);
        loop {
            let next = now.max(last.saturating_add(1));
            match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Duration::from_nanos(next),
                Err(seen) => last = seen,
            }
        }
    }
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// The end of a time budget, on the monotonic scale of the clock that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    at: Duration,
}

impl Deadline {
    /// A wall-clock deadline (Lambda's), read once: a later jump of the wall clock does not move
    /// it. A deadline already past leaves nothing.
    pub fn at(clock: &dyn Clock, at: DateTime<Utc>) -> Self {
        let budget = (at - clock.now()).to_std().unwrap_or_default();
        Deadline {
            at: clock.monotonic() + budget,
        }
    }

    pub fn remaining(&self, clock: &dyn Clock) -> Duration {
        self.at.saturating_sub(clock.monotonic())
    }

    /// Is less than `margin` left?
    pub fn within(&self, clock: &dyn Clock, margin: Duration) -> bool {
        self.remaining(clock) < margin
    }
}

/// The invocation deadline from the Lambda context's epoch milliseconds. `None` when the value is
/// not a wall-clock instant (before 2001): local emulators send 0 or the timeout itself (3000),
/// and taking that for a deadline would defer every message. Real Lambda always sends an instant.
pub fn lambda_deadline(deadline_ms: u64) -> Option<DateTime<Utc>> {
    const YEAR_2001_MS: u64 = 978_307_200_000;
    if deadline_ms < YEAR_2001_MS {
        return None;
    }
    DateTime::from_timestamp_millis(i64::try_from(deadline_ms).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wall_clock_deadlines_count() {
        assert_eq!(lambda_deadline(0), None);
        assert_eq!(lambda_deadline(3000), None, "an emulator's relative timeout");
        let real = 1_796_000_000_000;
        assert_eq!(
            lambda_deadline(real),
            DateTime::from_timestamp_millis(1_796_000_000_000)
        );
    }

    #[test]
    fn a_deadline_counts_down_and_a_past_one_leaves_nothing() {
        let clock = SystemClock;
        let d = Deadline::at(&clock, clock.now() + chrono::Duration::seconds(60));
        assert!(d.remaining(&clock) <= Duration::from_secs(60));
        assert!(d.remaining(&clock) > Duration::from_secs(50));
        assert!(!d.within(&clock, Duration::from_secs(3)));
        let past = Deadline::at(&clock, clock.now() - chrono::Duration::seconds(5));
        assert_eq!(past.remaining(&clock), Duration::ZERO);
        assert!(past.within(&clock, Duration::from_millis(1)));
    }
}
