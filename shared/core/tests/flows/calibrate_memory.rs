//! Calibration of the retry budget on in-memory adapters: the recovery curve from the postings'
//! attempt counts, the knee, and per transient kind what became of the exhausted messages.

use crate::common::*;
use recon_core::calibrate::{calibrate, count_attempts};
use recon_core::decisions::RetryPolicy;
use recon_core::domain::{Posting, ReplayRecord, decode};
use recon_core::ports::LedgerScope;

async fn post(w: &World, n: u32, attempt: u32) {
    let text = body(&tx(n));
    let msg = decode(&text).unwrap();
    let p = Posting::from_message(&msg, &format!("sqs-{n}"), attempt, Utc::now(), None);
    w.ledger.commit(&p).await.unwrap();
}

fn tx(n: u32) -> NewMessage {
    builders::tx(n)
}

/// A dead letter of `m` with this root cause and attempt count.
fn dead_letter(id: &str, m: &NewMessage, cause: &str, attempts: &str) -> DlqEnvelope {
    let msg = with_attribute(
        with_attribute(
            with_attribute(delivery(id, &body(m), 1), attrs::FAILURE_CODE, "POISON_MESSAGE"),
            attrs::ROOT_CAUSE,
            cause,
        ),
        attrs::ATTEMPT_COUNT,
        attempts,
    );
    envelope_from_dlq_message(&msg, Utc::now(), "test")
}

#[tokio::test]
async fn the_curve_the_knee_and_each_kinds_fate_come_from_history() {
    let w = world();
    let mut n = 0;
    for (attempt, count) in [(1, 100), (2, 30), (3, 10), (4, 1)] {
        for _ in 0..count {
            n += 1;
            post(&w, n, attempt).await;
        }
    }
    let mut envelopes = Vec::new();
    // Four throttled to exhaustion: three posted later, one re-injected and dead-lettered again.
    for k in 0..4 {
        let m = tx(1000 + k);
        let mut e = dead_letter(&format!("thr-{k}"), &m, "TRANSIENT_EXHAUSTED:THROTTLED", "5");
        if k < 3 {
            post(&w, 1000 + k, 1).await;
        } else {
            e.replays.push(ReplayRecord {
                replay_id: "rpl".into(),
                triggered_by: "t".into(),
                reason: "r".into(),
                at: Utc::now(),
                outcome: EnvelopeStatus::Replayed,
                sqs_message_id: Some("copy-thr".into()),
                copy_source_hash: None,
                copy_period: None,
                in_doubt_until: None,
            });
            envelopes.push(dead_letter("copy-thr", &m, "TRANSIENT_EXHAUSTED:THROTTLED", "5"));
        }
        envelopes.push(e);
    }
    // Two timeouts, never posted, one of them dead-lettered again after a replay.
    for k in 0..2 {
        let m = tx(2000 + k);
        let mut e = dead_letter(&format!("tmo-{k}"), &m, "TRANSIENT_EXHAUSTED:TIMEOUT", "5");
        if k == 0 {
            e.replays.push(ReplayRecord {
                replay_id: "rpl".into(),
                triggered_by: "t".into(),
                reason: "r".into(),
                at: Utc::now(),
                outcome: EnvelopeStatus::Replayed,
                sqs_message_id: Some("copy-tmo".into()),
                copy_source_hash: None,
                copy_period: None,
                in_doubt_until: None,
            });
            envelopes.push(dead_letter("copy-tmo", &m, "TRANSIENT_EXHAUSTED:TIMEOUT", "1"));
        }
        envelopes.push(e);
    }
    let current = RetryPolicy::default();
    let by_attempt = count_attempts(&*w.ledger, &LedgerScope::default(), None).await.unwrap();
    assert_eq!(
        by_attempt.get(&1),
        Some(&103),
        "the three recovered later posted on their first receive here"
    );
    let c = calibrate(&*w.ledger, &by_attempt, &envelopes, current, None, None)
        .await
        .unwrap();

    // Failing once: 41 recovered + 8 exhausted (the copies count too: they exhausted again).
    assert_eq!(c.exhausted, 8);
    let shares: Vec<(u32, u64)> = c.curve.iter().map(|a| (a.attempt, a.permille)).collect();
    assert_eq!(shares, [(2, 612), (3, 204), (4, 20)]);
    assert_eq!(c.knee, Some(4));
    assert_eq!(c.recommended.max_attempts, 5);
    let thr = c.kinds.iter().find(|k| k.kind == "THROTTLED").unwrap();
    assert_eq!(
        (thr.exhausted, thr.recovered_later, thr.failed_again),
        (5, 3, 1),
        "{thr:?}"
    );
    assert!(thr.advice.contains("transient"), "{}", thr.advice);
    let tmo = c.kinds.iter().find(|k| k.kind == "TIMEOUT").unwrap();
    assert_eq!((tmo.exhausted, tmo.failed_again, tmo.undecided), (3, 1, 2), "{tmo:?}");
    assert_eq!(tmo.receives_on_poison, 5);
}

#[tokio::test]
async fn without_transient_failures_nothing_is_recommended() {
    let w = world();
    post(&w, 1, 1).await;
    let by_attempt = count_attempts(&*w.ledger, &LedgerScope::default(), None).await.unwrap();
    let c = calibrate(&*w.ledger, &by_attempt, &[], RetryPolicy::default(), None, None)
        .await
        .unwrap();
    assert_eq!(c.recommended, RetryPolicy::default());
    assert!(c.notes[0].contains("nothing to calibrate"));
}

#[tokio::test]
async fn when_exhausted_messages_post_once_replayed_the_budget_spans_twice_as_long() {
    let w = world();
    let envelopes: Vec<DlqEnvelope> = (0..2)
        .map(|k| dead_letter(&format!("x-{k}"), &tx(k), "TRANSIENT_EXHAUSTED:NETWORK", "5"))
        .collect();
    for k in 0..2 {
        post(&w, k, 1).await;
    }
    let current = RetryPolicy::default();
    let by_attempt = count_attempts(&*w.ledger, &LedgerScope::default(), None).await.unwrap();
    let c = calibrate(&*w.ledger, &by_attempt, &envelopes, current, None, None)
        .await
        .unwrap();
    assert_eq!(c.kinds[0].recovered_later, 2);
    assert!(c.recommended.max_attempts > current.max_attempts);
    assert!(c.recommended_window_secs >= 2 * c.current_window_secs, "{c:?}");
    assert!(c.notes[0].contains("outlasted"), "{:?}", c.notes);
}
