//! Virtual time: a wall clock that can jump, a monotonic reading, and timers that fire when the
//! executor (`exec.rs`) moves time to them.

use chrono::{DateTime, Utc};
use recon_core::ports::Clock;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

struct ClockState {
    start: DateTime<Utc>,
    /// Virtual time since the start.
    elapsed: Duration,
    /// Wall-clock jumps (the monotonic clock does not jump).
    wall_offset: chrono::Duration,
    last_monotonic: Duration,
    timers: BTreeMap<(Duration, u64), Waker>,
    next_timer: u64,
}

/// Virtual time: the wall clock (which can jump), a monotonic reading, and timers.
#[derive(Clone)]
pub struct SimClock(Arc<Mutex<ClockState>>);

impl SimClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        SimClock(Arc::new(Mutex::new(ClockState {
            start,
            elapsed: Duration::ZERO,
            wall_offset: chrono::Duration::zero(),
            last_monotonic: Duration::ZERO,
            timers: BTreeMap::new(),
            next_timer: 0,
        })))
    }

    fn state(&self) -> MutexGuard<'_, ClockState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Virtual time since the start of the run.
    pub fn elapsed(&self) -> Duration {
        self.state().elapsed
    }

    /// Move the wall clock by `by` (a clock jump; timers and the monotonic clock do not move).
    pub fn jump(&self, by: chrono::Duration) {
        self.state().wall_offset += by;
    }

    pub(super) fn next_timer(&self) -> Option<Duration> {
        self.state().timers.keys().next().map(|(at, _)| *at)
    }

    /// Advance to `at` and wake every timer due.
    pub(super) fn advance_to(&self, at: Duration) {
        let due: Vec<Waker> = {
            let mut s = self.state();
            s.elapsed = s.elapsed.max(at);
            let now = s.elapsed;
            let keys: Vec<(Duration, u64)> = s.timers.range(..=(now, u64::MAX)).map(|(k, _)| *k).collect();
            keys.iter().filter_map(|k| s.timers.remove(k)).collect()
        };
        for w in due {
            w.wake();
        }
    }
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        let s = self.state();
        s.start + s.elapsed + s.wall_offset
    }

    fn monotonic(&self) -> Duration {
        let mut s = self.state();
        let next = s.elapsed.max(s.last_monotonic + Duration::from_nanos(1));
        s.last_monotonic = next;
        next
    }

    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let until = self.elapsed() + duration;
        Box::pin(Sleep {
            clock: self.clone(),
            until,
        })
    }
}

struct Sleep {
    clock: SimClock,
    until: Duration,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.clock.state();
        if s.elapsed >= self.until {
            return Poll::Ready(());
        }
        let id = s.next_timer;
        s.next_timer += 1;
        s.timers.insert((self.until, id), cx.waker().clone());
        Poll::Pending
    }
}
