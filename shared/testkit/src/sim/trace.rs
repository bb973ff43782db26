//! What happened in a run, in virtual time: the last lines are printed with a failing seed.

use recon_core::ports::Clock;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::clock::SimClock;

#[derive(Clone)]
pub struct Trace {
    lines: Arc<Mutex<VecDeque<String>>>,
    keep: usize,
}

impl Trace {
    /// A trace that keeps its last `keep` lines.
    pub fn keeping(keep: usize) -> Self {
        Self {
            lines: Arc::default(),
            keep: keep.max(1),
        }
    }

    pub fn log(&self, clock: &SimClock, line: impl Into<String>) {
        let at = clock.elapsed();
        let wall = clock.now().format("%H:%M:%S");
        let mut t = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == self.keep {
            t.pop_front();
        }
        t.push_back(format!("{:>9.3}s {wall} {}", at.as_secs_f64(), line.into()));
    }

    /// Every line kept.
    pub fn lines(&self) -> Vec<String> {
        let t = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        t.iter().cloned().collect()
    }
}
