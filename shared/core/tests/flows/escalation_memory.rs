//! Escalation of long-lived exceptions on in-memory adapters: the oldest PENDING envelope's age
//! per failure code against the chain, one `ESCALATED` record per stage reached, and the read
//! stopping where nothing younger could escalate; the PENDING envelopes of a period about to close.

use crate::common::*;
use recon_core::decisions::escalation::EscalationChain;
use recon_core::replay::escalate::{closing, escalate};

async fn escalated(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    for c in 0..recon_core::domain::audit::AUDIT_CHAINS {
        for r in recon_core::ports::read_chain(&w.audit, &format!("c{c}"), 0)
            .await
            .unwrap()
        {
            if r.record.kind == AuditKind::Escalated {
                out.push(r.record.audit_id.clone());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn each_failure_codes_oldest_envelope_escalates_once_per_stage_it_reached() {
    let w = world();
    // Poison 30 hours old and 5 hours old; a redrive (also POISON_MESSAGE here) 1 hour old.
    let old = w.envelope("s1", &xau(1), ChronoDuration::hours(30)).await;
    w.envelope("s2", &xau(2), ChronoDuration::hours(5)).await;
    w.envelope("s3", &xau(3), ChronoDuration::hours(1)).await;
    let chain = EscalationChain::default();
    let metrics = MemoryMetrics::default();
    let now = w.clock_now();
    let e = escalate(&*w.store, &*w.audit, &metrics, &chain, Vec::new(), now, "replay", 5000)
        .await
        .unwrap();
    assert_eq!(e.oldest_age_secs, 30 * 3600);
    assert_eq!(e.groups.len(), 1);
    assert_eq!(e.groups[0].stages, ["on-call", "finance-controller"]);
    assert_eq!(e.groups[0].oldest_envelope, old.envelope_id);
    assert_eq!(e.recorded, 2);
    assert_eq!(e.read, 3, "the 1-hour-old one is read, and the read stops there");
    let ids = escalated(&w).await;
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|i| i.ends_with(&old.envelope_id)), "{ids:?}");
    let ages: Vec<i64> = metrics
        .emitted()
        .iter()
        .filter(|m| m.name == "OldestPendingAgeSeconds")
        .map(|m| m.value)
        .collect();
    assert_eq!(ages, [30 * 3600, 30 * 3600], "overall, then per failure code");
    let stages: Vec<(String, i64)> = metrics
        .emitted()
        .iter()
        .filter(|m| m.name == "PendingEscalated")
        .map(|m| (m.dimensions[0].1.clone(), m.value))
        .collect();
    assert_eq!(
        stages,
        [("on-call".to_owned(), 1), ("finance-controller".to_owned(), 1)]
    );

    // Again: nothing new. The oldest decided: the next oldest (5 h) escalates to the on-call.
    let again = escalate(&*w.store, &*w.audit, &metrics, &chain, Vec::new(), now, "replay", 5000)
        .await
        .unwrap();
    assert_eq!(again.recorded, 0);
    let r = w.replayer(ReplayConfig::default());
    let quarantine = ReplayRequest {
        quarantine: true,
        reason: "booked by hand".into(),
        ..manual(
            Selector {
                envelope_ids: vec![old.envelope_id.clone()],
                ..Selector::default()
            },
            false,
        )
    };
    assert_eq!(r.run(&quarantine, None).await.unwrap().quarantined, 1);
    let next = escalate(&*w.store, &*w.audit, &metrics, &chain, Vec::new(), now, "replay", 5000)
        .await
        .unwrap();
    assert_eq!((next.recorded, next.oldest_age_secs), (1, 5 * 3600));
    assert_eq!(escalated(&w).await.len(), 3);
}

#[tokio::test]
async fn without_a_chain_or_a_backlog_nothing_escalates() {
    let w = world();
    let metrics = MemoryMetrics::default();
    let none = escalate(
        &*w.store,
        &*w.audit,
        &metrics,
        &EscalationChain::default(),
        Vec::new(),
        w.clock_now(),
        "r",
        10,
    )
    .await
    .unwrap();
    assert_eq!((none.read, none.oldest_age_secs, none.recorded), (0, 0, 0));
    w.envelope("s1", &xau(1), ChronoDuration::hours(100)).await;
    let empty: EscalationChain = "".parse().unwrap();
    let e = escalate(
        &*w.store,
        &*w.audit,
        &metrics,
        &empty,
        Vec::new(),
        w.clock_now(),
        "r",
        10,
    )
    .await
    .unwrap();
    assert_eq!((e.read, e.recorded), (1, 0));
    assert!(escalated(&w).await.is_empty());
}

#[tokio::test]
async fn the_pending_dead_letters_of_a_period_about_to_close_escalate_once_whatever_their_age() {
    let w = world();
    // An hour and ten minutes old: no stage of the chain applies to either.
    w.envelope("s1", &xau(1), ChronoDuration::hours(1)).await;
    w.envelope("s2", &xau(2), ChronoDuration::minutes(10)).await;
    let now = w.clock_now();
    let soon = (now + ChronoDuration::hours(20)).date_naive();
    for (entity, on) in [("acme-us", soon), ("OTHER", soon + ChronoDuration::days(30))] {
        w.reference
            .put_period(&PeriodRecord {
                entity: entity.into(),
                period: "2026-11".into(),
                status: PeriodStatus::Open,
                closes_on: Some(on),
            })
            .await
            .unwrap();
    }
    let snapshot = w.reference.snapshot().await.unwrap();
    assert_eq!(snapshot.closes_on("Acme-US", "2026-11"), Some(soon));
    let near = closing(&snapshot, now, ChronoDuration::hours(48));
    assert_eq!(near.len(), 1, "only the close within the warning window: {near:?}");
    assert!(closing(&snapshot, now, ChronoDuration::hours(0)).is_empty());

    let metrics = MemoryMetrics::default();
    let chain = EscalationChain::default();
    let e = escalate(
        &*w.store,
        &*w.audit,
        &metrics,
        &chain,
        near.clone(),
        now,
        "replay",
        5000,
    )
    .await
    .unwrap();
    assert_eq!(e.read, 2, "every PENDING envelope is read while a close is near");
    assert_eq!((e.deadlines[0].entity.as_str(), e.deadlines[0].pending), ("ACME-US", 2));
    assert!(e.groups.iter().all(|g| g.stages.is_empty()));
    assert_eq!(e.recorded, 1);
    assert_eq!(
        escalated(&w).await,
        [format!("ESCALATED#period-close#ACME-US#2026-11#{soon}")]
    );
    let counts: Vec<(Vec<(&str, String)>, i64)> = metrics
        .emitted()
        .iter()
        .filter(|m| m.name == "PendingBeforePeriodClose")
        .map(|m| (m.dimensions.clone(), m.value))
        .collect();
    assert_eq!(counts, [(vec![], 2), (vec![("Entity", "ACME-US".to_owned())], 2)]);
    // Once per planned close; the cap makes the counts lower bounds, and says so.
    let capped = escalate(&*w.store, &*w.audit, &metrics, &chain, near, now, "replay", 1)
        .await
        .unwrap();
    assert_eq!(
        (capped.recorded, capped.incomplete, capped.deadlines[0].pending),
        (0, true, 1)
    );

    // Closed, the period has no deadline left.
    w.set_november(PeriodStatus::Closed, None).await;
    let snapshot = w.reference.snapshot().await.unwrap();
    assert!(closing(&snapshot, now, ChronoDuration::hours(48)).is_empty());
}

#[tokio::test]
async fn a_period_whose_envelopes_the_capped_read_never_reached_still_breaches() {
    let w = world();
    // Older envelopes of another entity fill the read's cap; the closing period's is younger.
    for n in 1..=3 {
        let other = NewMessage {
            ledger_entity: "OTHER".into(),
            ..xau(n)
        };
        w.envelope(&format!("o{n}"), &other, ChronoDuration::hours(2)).await;
    }
    w.envelope("s9", &xau(9), ChronoDuration::minutes(5)).await;
    let now = w.clock_now();
    w.reference
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-11".into(),
            status: PeriodStatus::Open,
            closes_on: Some((now + ChronoDuration::hours(10)).date_naive()),
        })
        .await
        .unwrap();
    let near = closing(&w.reference.snapshot().await.unwrap(), now, ChronoDuration::hours(48));
    let metrics = MemoryMetrics::default();
    let e = escalate(
        &*w.store,
        &*w.audit,
        &metrics,
        &EscalationChain::default(),
        near,
        now,
        "replay",
        2,
    )
    .await
    .unwrap();
    assert!(e.incomplete);
    assert_eq!(e.deadlines[0].pending, 0, "none of the period's envelopes was read");
    let overall: Vec<i64> = metrics
        .emitted()
        .iter()
        .filter(|m| m.name == "PendingBeforePeriodClose" && m.dimensions.is_empty())
        .map(|m| m.value)
        .collect();
    assert_eq!(overall, [1], "not read is not none: the alarm breaches");
    assert_eq!(e.recorded, 1);
}
