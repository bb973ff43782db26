//! Canary replays: re-inject a first slice, wait for what became of its copies (committed, or
//! dead-lettered again), and go on with the rest only while the failure share stays within a
//! threshold. The sizes, the threshold and the verdict; pure.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How large the first slice is: a number of re-injections, or a share of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CanarySlice {
    Count(u32),
    Percent(u8),
}

impl CanarySlice {
    /// The slice of `n` re-injections (at least one when there is any, never more than `n`).
    pub fn of(self, n: usize) -> usize {
        let size = match self {
            CanarySlice::Count(c) => usize::try_from(c).unwrap_or(usize::MAX),
            CanarySlice::Percent(p) => (n * usize::from(p)).div_ceil(100),
        };
        size.clamp(usize::from(n > 0), n)
    }
}

impl FromStr for CanarySlice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: a canary is a count (10) or a share (5%), at least 1, a share at most 99%");
        let s = s.trim();
        match s.strip_suffix('%') {
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if (1..=99).contains(&p) => Ok(CanarySlice::Percent(p)),
                _ => Err(bad()),
            },
            None => match s.parse::<u32>() {
                Ok(c) if c >= 1 => Ok(CanarySlice::Count(c)),
                _ => Err(bad()),
            },
        }
    }
}

impl fmt::Display for CanarySlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanarySlice::Count(c) => write!(f, "{c}"),
            CanarySlice::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A canary: its slice, the failure share it tolerates, and how long it waits for its copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canary {
    pub slice: CanarySlice,
    /// The rest goes on only while dead-lettered (or still unknown) copies are at most this
    /// percentage of the slice.
    pub max_failure_percent: u8,
    /// Seconds to wait for the slice's copies to be committed or dead-lettered.
    pub wait_secs: u32,
}

impl Canary {
    pub fn check(&self) -> Result<(), String> {
        if self.max_failure_percent > 100 {
            return Err(format!(
                "a failure share of {}% is above 100%",
                self.max_failure_percent
            ));
        }
        if !(1..=600).contains(&self.wait_secs) {
            return Err(format!("a canary waits 1-600 s for its copies, not {}", self.wait_secs));
        }
        Ok(())
    }
}

impl fmt::Display for Canary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "canary {} (at most {}% failing, waiting up to {} s)",
            self.slice, self.max_failure_percent, self.wait_secs
        )
    }
}

/// What became of one re-injected copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Fate {
    /// Its transaction is in the ledger (committed by it, or by another copy it duplicates).
    Committed,
    /// It reached the DLQ again (its own envelope exists).
    DeadLettered,
    /// Neither yet.
    Unknown,
}

/// What the canary's slice came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryReport {
    pub size: u64,
    pub committed: u64,
    pub dead_lettered: u64,
    /// Re-injections with no outcome when the wait ended, or never sent (counted as failing:
    /// nothing shows they post).
    pub unknown: u64,
    pub waited_ms: u64,
    pub passed: bool,
}

impl CanaryReport {
    /// Count `fates` — of the copies found among `intended` re-injections; a re-injection with
    /// no copy (not sent: the rate limit, time, a store) counts as failing, and a canary of
    /// nothing fails — and decide against `canary`.
    pub fn of(fates: &[Fate], intended: u64, canary: &Canary, waited_ms: u64) -> Self {
        let count = |f: Fate| fates.iter().filter(|x| **x == f).count() as u64;
        let (committed, dead_lettered) = (count(Fate::Committed), count(Fate::DeadLettered));
        let size = intended.max(fates.len() as u64);
        let unknown = size - committed - dead_lettered;
        let failing = size - committed;
        CanaryReport {
            size,
            committed,
            dead_lettered,
            unknown,
            waited_ms,
            passed: size > 0 && failing * 100 <= u64::from(canary.max_failure_percent) * size,
        }
    }
}

impl fmt::Display for CanaryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "canary of {}: {} committed, {} dead-lettered again, {} without an outcome, after {:.1} s: {}",
            self.size,
            self.committed,
            self.dead_lettered,
            self.unknown,
            self.waited_ms as f64 / 1000.0,
            if self.passed { "passed" } else { "FAILED" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_counts_or_shares_never_empty_never_more_than_there_is() {
        assert_eq!("10".parse::<CanarySlice>(), Ok(CanarySlice::Count(10)));
        assert_eq!("5%".parse::<CanarySlice>(), Ok(CanarySlice::Percent(5)));
        for bad in ["0", "0%", "100%", "-1", "x", "5 %%", ""] {
            assert!(bad.parse::<CanarySlice>().is_err(), "{bad}");
        }
        assert_eq!(CanarySlice::Percent(5).of(1000), 50);
        assert_eq!(CanarySlice::Percent(5).of(3), 1, "at least one");
        assert_eq!(CanarySlice::Count(10).of(4), 4, "never more than there is");
        assert_eq!(CanarySlice::Count(10).of(0), 0);
    }

    #[test]
    fn the_rest_goes_on_only_within_the_failure_share_and_silence_counts_as_failing() {
        let canary = Canary {
            slice: CanarySlice::Count(10),
            max_failure_percent: 10,
            wait_secs: 60,
        };
        let mut fates = vec![Fate::Committed; 9];
        fates.push(Fate::DeadLettered);
        assert!(CanaryReport::of(&fates, 10, &canary, 3).passed, "1 of 10 is 10 %");
        fates[0] = Fate::Unknown;
        let r = CanaryReport::of(&fates, 10, &canary, 60);
        assert!(!r.passed && r.unknown == 1 && r.dead_lettered == 1, "{r}");
        let strict = Canary {
            max_failure_percent: 0,
            ..canary
        };
        assert!(CanaryReport::of(&[Fate::Committed; 3], 3, &strict, 1).passed);
        assert!(!CanaryReport::of(&[Fate::Committed, Fate::DeadLettered], 2, &strict, 1).passed);
        // Re-injections that left no copy fail the canary; a canary of nothing fails.
        let r = CanaryReport::of(&[Fate::Committed], 3, &canary, 1);
        assert!(!r.passed && r.unknown == 2 && r.size == 3, "{r}");
        assert!(!CanaryReport::of(&[], 0, &canary, 1).passed);
        assert!(strict.check().is_ok());
        assert!(Canary { wait_secs: 0, ..canary }.check().is_err());
        assert!(
            Canary {
                max_failure_percent: 101,
                ..canary
            }
            .check()
            .is_err()
        );
    }
}
