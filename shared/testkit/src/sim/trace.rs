//! What happened in a run, in virtual time: the last lines are printed with a failing seed.

use recon_core::ports::Clock;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::exec::SimClock;

const KEEP: usize = 400;

#[derive(Clone, Default)]
pub struct Trace(Arc<Mutex<VecDeque<String>>>);

impl Trace {
    pub fn log(&self, clock: &SimClock, line: impl Into<String>) {
        let at = clock.elapsed();
        let wall = clock.now().format("%H:%M:%S");
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == KEEP {
            t.pop_front();
        }
        t.push_back(format!("{:>9.3}s {wall} {}", at.as_secs_f64(), line.into()));
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.iter().skip(t.len().saturating_sub(n)).cloned().collect()
    }
}
