//! Calibration of the retry budget from history — the source document's "calibration is
//! empirical": how many transactions recovered at each attempt (the postings' attempt counts),
//! where extra attempts stop recovering (the knee), and, per transient kind, what became of the
//! messages that spent the whole budget (`TRANSIENT_EXHAUSTED:<kind>`) once replayed: committed
//! (genuinely transient: the budget or its backoff was too short) or failing again (true poison:
//! the budget spent proving it). Reads only; postings are counted page by page.
//!
//! What it cannot see: which transient kind a message that recovered had met (SQS carries no
//! history of a message's failures, and nothing records each retry), so the recovery curve is
//! over every kind together; per kind there are the exhaustions and their later fates.

use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use crate::decisions::RetryPolicy;
use crate::decisions::retry::MAX_VISIBILITY_SECS;
use crate::domain::envelope::envelope_id;
use crate::domain::{DlqEnvelope, RootCause};
use crate::ports::{Ledger, LedgerReader, LedgerScope, StoreResult, each_page};

/// An attempt still recovers when at least this many per mille of the messages that failed once
/// commit on it.
pub const KNEE_PERMILLE: u64 = 10;

/// Recommended budgets stay within this range.
const MIN_ATTEMPTS: u32 = 2;
const MAX_ATTEMPTS: u32 = 10;

/// One attempt of the recovery curve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttemptShare {
    pub attempt: u32,
    pub recovered: u64,
    /// Of every message that failed its first attempt, per mille.
    pub permille: u64,
}

/// What became of one transient kind's exhausted messages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindReport {
    pub kind: String,
    /// Dead-lettered `TRANSIENT_EXHAUSTED:<kind>`.
    pub exhausted: u64,
    /// … whose transaction is in the ledger by now (a replay, or another copy).
    pub recovered_later: u64,
    /// … re-injected and dead-lettered again: true poison.
    pub failed_again: u64,
    /// … not yet decided.
    pub undecided: u64,
    /// Receives spent on the ones that failed again (the budget spent proving poison).
    pub receives_on_poison: u64,
    pub advice: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Calibration {
    pub since: Option<DateTime<Utc>>,
    pub current: RetryPolicy,
    /// Seconds the current budget's backoff spans from the first receive to the last.
    pub current_window_secs: u64,
    /// Postings committed on their first receive.
    pub first_try: u64,
    pub curve: Vec<AttemptShare>,
    /// Messages dead-lettered after the whole budget, every kind.
    pub exhausted: u64,
    /// The last attempt that still recovers at least [`KNEE_PERMILLE`] of the failing messages.
    pub knee: Option<u32>,
    pub recommended: RetryPolicy,
    pub recommended_window_secs: u64,
    pub kinds: Vec<KindReport>,
    /// Redriven by SQS after crash or timeout loops, and the receives they spent.
    pub redriven: u64,
    pub receives_on_redrive: u64,
    pub notes: Vec<String>,
}

/// Seconds `p`'s backoff spans over its whole budget (each delay without its jitter).
pub fn window_secs(p: &RetryPolicy) -> u64 {
    (1..p.max_attempts)
        .map(|n| {
            let exp = (n - 1).min(31);
            u64::from(p.backoff_base_secs)
                .saturating_mul(1u64 << exp)
                .min(u64::from(p.backoff_cap_secs))
        })
        .sum()
}

/// The last attempt (from the second) whose recoveries are at least [`KNEE_PERMILLE`] of `failing`.
fn knee(recovered: &BTreeMap<u32, u64>, failing: u64) -> Option<u32> {
    recovered
        .iter()
        .filter(|(n, r)| **n >= 2 && **r * 1000 >= KNEE_PERMILLE * failing)
        .map(|(n, _)| *n)
        .max()
}

/// Postings of `scope` committed since `since`, by the receive they committed on (a replayed
/// copy's count starts again, so copies are left out).
pub async fn count_attempts<R: LedgerReader + ?Sized>(
    reader: &R,
    scope: &LedgerScope,
    since: Option<DateTime<Utc>>,
) -> StoreResult<BTreeMap<u32, u64>> {
    let mut by_attempt = BTreeMap::new();
    each_page(reader, scope, |page| {
        for p in page {
            if p.replay_of.is_none() && since.is_none_or(|s| p.committed_at >= s) {
                *by_attempt.entry(p.attempt_count.max(1)).or_insert(0u64) += 1;
            }
        }
    })
    .await?;
    Ok(by_attempt)
}

/// Calibrate `current` from `by_attempt` (see [`count_attempts`]) and the envelopes (of
/// `period`, when the postings were of one), asking `ledger` whether each exhausted message's
/// transaction is in it by now.
pub async fn calibrate<L: Ledger>(
    ledger: &L,
    by_attempt: &BTreeMap<u32, u64>,
    envelopes: &[DlqEnvelope],
    current: RetryPolicy,
    since: Option<DateTime<Utc>>,
    period: Option<&str>,
) -> StoreResult<Calibration> {
    let ids: BTreeSet<&str> = envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
    let window = |e: &&DlqEnvelope| {
        since.is_none_or(|s| e.dead_lettered_at >= s)
            && period.is_none_or(|p| e.accounting_period.as_deref() == Some(p))
    };
    let mut kinds: BTreeMap<String, KindReport> = BTreeMap::new();
    let (mut redriven, mut receives_on_redrive) = (0, 0);
    for e in envelopes.iter().filter(window) {
        match e.root_cause.parse::<RootCause>() {
            Ok(RootCause::TransientExhausted(kind)) => {
                let k = kinds.entry(kind.as_str().to_owned()).or_default();
                k.exhausted += 1;
                let again = e
                    .replays
                    .iter()
                    .filter_map(|r| r.sqs_message_id.as_deref())
                    .any(|copy| ids.contains(envelope_id(copy).as_str()));
                let posted = ledger
                    .lookup(&e.decoded_key())
                    .await?
                    .is_some_and(|c| c.manual_journal.is_none());
                if posted {
                    k.recovered_later += 1;
                } else if again {
                    k.failed_again += 1;
                    k.receives_on_poison += u64::from(e.attempt_count);
                } else {
                    k.undecided += 1;
                }
            }
            Ok(RootCause::RedrivenBySqs) => {
                redriven += 1;
                receives_on_redrive += u64::from(e.attempt_count);
            }
            _ => {}
        }
    }
    let exhausted: u64 = kinds.values().map(|k| k.exhausted).sum();
    let recovered_later: u64 = kinds.values().map(|k| k.recovered_later).sum();
    let first_try = by_attempt.get(&1).copied().unwrap_or(0);
    let recovered: BTreeMap<u32, u64> = by_attempt.range(2..).map(|(n, c)| (*n, *c)).collect();
    let failing = recovered.values().sum::<u64>() + exhausted;
    let curve = recovered
        .iter()
        .map(|(n, r)| AttemptShare {
            attempt: *n,
            recovered: *r,
            permille: (r * 1000).checked_div(failing).unwrap_or(0),
        })
        .collect();
    let knee = knee(&recovered, failing);
    let mut notes = Vec::new();
    let mut recommended = current;
    if failing == 0 {
        notes.push("no message failed transiently in the window: nothing to calibrate; the budget stays".into());
    } else {
        // Attempts up to the knee still recover; one more for the tail. When most exhausted
        // messages posted once replayed, the budget ended before the trouble did: one more.
        let from_knee = knee.map_or(MIN_ATTEMPTS, |k| k + 1);
        let outlasted = recovered_later * 2 > exhausted;
        let from_exhaustion = if outlasted { current.max_attempts + 1 } else { 0 };
        // Never fewer than now when the trouble outlasted the budget.
        let most = MAX_ATTEMPTS.max(from_exhaustion);
        recommended.max_attempts = from_knee.max(from_exhaustion).clamp(MIN_ATTEMPTS, most);
        if outlasted {
            // The trouble outlasted the backoff window: span at least twice as long, with more
            // attempts while they stay within range, then with a longer cap.
            let wanted = window_secs(&current).saturating_mul(2).max(1);
            while window_secs(&recommended) < wanted && recommended.max_attempts < most {
                recommended.max_attempts += 1;
            }
            while window_secs(&recommended) < wanted && recommended.backoff_cap_secs < MAX_VISIBILITY_SECS {
                recommended.backoff_cap_secs = recommended.backoff_cap_secs.saturating_mul(2).min(MAX_VISIBILITY_SECS);
            }
            notes.push(format!(
                "{recovered_later} of {exhausted} exhausted messages posted once replayed: the trouble outlasted the {} s the budget spans",
                window_secs(&current)
            ));
        }
    }
    for k in kinds.values_mut() {
        k.advice = if k.recovered_later * 2 > k.exhausted {
            "mostly transient after all: the budget (or its backoff) ended before the trouble did".into()
        } else if k.failed_again * 2 > k.exhausted {
            "mostly true poison: extra attempts would only delay the dead letter; fix the cause".into()
        } else {
            "too few decided to say".into()
        };
    }
    Ok(Calibration {
        since,
        current,
        current_window_secs: window_secs(&current),
        first_try,
        curve,
        exhausted,
        knee,
        recommended,
        recommended_window_secs: window_secs(&recommended),
        kinds: kinds.into_iter().map(|(kind, k)| KindReport { kind, ..k }).collect(),
        redriven,
        receives_on_redrive,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knee_is_the_last_attempt_that_still_recovers_enough() {
        // 1000 failing: 700 recover on the 2nd, 200 on the 3rd, 15 on the 4th, 5 on the 5th.
        let recovered = BTreeMap::from([(2, 700), (3, 200), (4, 15), (5, 5)]);
        assert_eq!(knee(&recovered, 1000), Some(4), "15 per mille still counts, 5 does not");
        assert_eq!(knee(&BTreeMap::new(), 0), None);
        assert_eq!(knee(&BTreeMap::from([(2, 1)]), 1000), None);
    }

    #[test]
    fn the_window_is_the_backoff_a_budget_spans() {
        let p = RetryPolicy {
            max_attempts: 5,
            backoff_base_secs: 2,
            backoff_cap_secs: 10,
        };
        // Delays after receives 1-4: 2, 4, 8, 10 (capped).
        assert_eq!(window_secs(&p), 24);
        assert_eq!(window_secs(&RetryPolicy { max_attempts: 1, ..p }), 0);
    }
}
