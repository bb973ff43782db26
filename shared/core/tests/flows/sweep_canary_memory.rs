//! The scheduled sweep's canary on in-memory adapters: a large group's slice goes first, the rest
//! only once the slice's copies posted; a copy dead-lettered again holds the group (an operator's
//! replay is not held), and after the hold the group is canaried again.

use crate::common::*;
use recon_core::consume::Disposition;
use recon_core::replay::ReplayOutcome;

fn with_canary(slice: u32) -> ReplayConfig {
    ReplayConfig {
        sweep_canary: slice,
        ..ReplayConfig::default()
    }
}

async fn backlog(w: &World, n: u32) -> Vec<DlqEnvelope> {
    add_xau(w).await;
    let mut out = Vec::new();
    for i in 1..=n {
        out.push(w.envelope(&format!("s{i}"), &xau(i), ChronoDuration::hours(1)).await);
    }
    out
}

#[tokio::test]
async fn a_large_group_goes_out_only_once_its_canary_posted() {
    let w = world();
    backlog(&w, 5).await;
    let r = w.replayer(with_canary(2));
    let first = r.run(&sweep(), None).await.unwrap();
    assert_eq!((first.reinjected, first.skipped), (2, 3), "{}", first.summary());
    assert_eq!(w.store.pending_count().await.unwrap(), 3, "the rest untouched");
    // Before the slice's copies posted, nothing more goes out.
    assert_eq!(r.run(&sweep(), None).await.unwrap().reinjected, 0);
    let consumer = w.consumer();
    for (i, m) in w.queue.sent().iter().enumerate() {
        let copy = builders::delivered(&format!("copy-{i}"), m);
        assert_eq!(consumer.handle_message(&copy).await, Disposition::Committed);
    }
    let third = r.run(&sweep(), None).await.unwrap();
    assert_eq!(third.reinjected, 3, "{}", third.summary());
    assert_eq!(w.store.pending_count().await.unwrap(), 0);
}

#[tokio::test]
async fn a_group_no_larger_than_the_slice_is_never_held_back() {
    let w = world();
    backlog(&w, 2).await;
    let r = w.replayer(with_canary(2));
    assert_eq!(r.run(&sweep(), None).await.unwrap().reinjected, 2);
}

#[tokio::test]
async fn a_canary_copy_dead_lettered_again_holds_the_group_but_not_an_operators_replay() {
    let w = world();
    let envelopes = backlog(&w, 4).await;
    let r = w.replayer(with_canary(2));
    assert_eq!(r.run(&sweep(), None).await.unwrap().reinjected, 2);
    // One copy posts, the other is dead-lettered again (its own envelope, keyed by the SQS id the
    // queue gave the copy).
    let sent = w.queue.sent();
    let consumer = w.consumer();
    assert_eq!(
        consumer
            .handle_message(&builders::delivered("replayed-1", &sent[0]))
            .await,
        Disposition::Committed
    );
    let again = envelope_from_dlq_message(&builders::delivered("replayed-2", &sent[1]), w.clock_now(), "enricher");
    w.store.create(&again).await.unwrap();

    let held = r.run(&sweep(), None).await.unwrap();
    assert_eq!(held.reinjected, 0, "{}", held.summary());
    assert!(
        held.items
            .iter()
            .any(|i| i.outcome == ReplayOutcome::Skipped && i.detail.contains("held until")),
        "{:#?}",
        held.items
    );
    let records: Vec<_> = w
        .audit
        .records()
        .into_iter()
        .filter(|a| a.kind == AuditKind::SweepCanaryHeld)
        .collect();
    assert_eq!(records.len(), 1);
    assert!(records[0].detail.contains("1 dead-lettered"), "{}", records[0].detail);
    // Held: still nothing the next time.
    assert_eq!(r.run(&sweep(), None).await.unwrap().reinjected, 0);

    // An operator's replay of the group is not held.
    let mut pending = Vec::new();
    for e in &envelopes {
        if w.status(&e.envelope_id).await == EnvelopeStatus::Pending {
            pending.push(e.envelope_id.clone());
        }
    }
    assert_eq!(pending.len(), 2, "the two the slice left");
    let by_hand = manual(
        Selector {
            envelope_ids: pending[..1].to_vec(),
            ..Selector::default()
        },
        false,
    );
    assert_eq!(r.run(&by_hand, None).await.unwrap().reinjected, 1);

    // A day later the group is canaried again: a new slice.
    w.clock.advance(ChronoDuration::hours(25));
    let later = r.run(&sweep(), None).await.unwrap();
    assert_eq!(later.reinjected, 2, "{}", later.summary());
}

#[tokio::test]
async fn a_crashed_replays_claims_taken_over_are_not_held_behind_the_canary() {
    let w = world();
    for e in backlog(&w, 3).await {
        w.claimed_by_a_replay_that_died(&e, "rpl_dead").await;
    }
    w.clock.advance(ChronoDuration::minutes(6));
    let r = w.replayer(with_canary(1));
    let report = r.run(&sweep(), None).await.unwrap();
    assert_eq!(report.reinjected, 3, "{}", report.summary());
}

/// The heartbeats the template's alarms watch: a completed scheduled sweep and each seal beat
/// once; a dry run, which changes and seals nothing, does not.
#[tokio::test]
async fn a_completed_sweep_and_a_seal_beat_their_heartbeats() {
    use recon_core::replay::{SEAL_WRITTEN, SWEEP_COMPLETED};
    let w = world();
    backlog(&w, 1).await;
    let beats = |r: &TestReplayer, name: &str| r.metrics.emitted().iter().filter(|m| m.name == name).count();
    let r = w.replayer(ReplayConfig::default());
    let dry = ReplayRequest {
        dry_run: true,
        ..sweep()
    };
    r.run(&dry, None).await.unwrap();
    assert_eq!((beats(&r, SWEEP_COMPLETED), beats(&r, SEAL_WRITTEN)), (0, 0));
    r.run(&sweep(), None).await.unwrap();
    assert_eq!((beats(&r, SWEEP_COMPLETED), beats(&r, SEAL_WRITTEN)), (1, 1));
    r.seal().await.unwrap();
    assert_eq!((beats(&r, SWEEP_COMPLETED), beats(&r, SEAL_WRITTEN)), (1, 2));
}
