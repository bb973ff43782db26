//! A period's reconciliation read as a fan-out (`dlqctl reconcile --fan-out`) on the local stack,
//! on the ledger `DLQ_TEST_LEDGER` names: each segment read as the control plane reads it for a
//! `reconcile-segment` operation (request and answer through JSON), the reads merged, tell
//! exactly what the read in one process tells. (The requests themselves, through the control
//! function, are exercised by `infra/smoke.sh` and the control-plane tests.)

use recon_aws::dynamodb::{DynamoAuditLog, DynamoEnvelopeStore};
use recon_core::domain::Segment;
use recon_core::ports::LedgerScope;
use recon_core::reconcile::{
    LedgerRead, Links, SegmentRead, exceptions_of_period, look_up_unmet, read_ledger, read_period_segment,
};
use recon_harness::stack::TestStack;
use recon_testkit::builders::tx;

/// Transactions of two periods, a duplicate of each, and dead letters replayed into postings.
async fn workload(s: &TestStack) {
    let mut bodies = Vec::new();
    for n in 1..=12 {
        let mut m = tx(n);
        if n % 2 == 0 {
            m.value_date = "2026-10-15".into();
        }
        if n % 4 == 0 {
            m.currency = "XAU".into();
        }
        bodies.push(m.to_body().unwrap());
    }
    // A duplicate of each period's first.
    bodies.push(bodies[0].clone());
    bodies.push(bodies[1].clone());
    s.remediated(&bodies, 1000).await;
}

/// What a read tells a reconciliation, in an order that does not depend on how it was split.
fn told(mut read: LedgerRead) -> LedgerRead {
    read.linked.sort_by(|a, b| a.source_hash.cmp(&b.source_hash));
    read.pages = 0;
    read
}

#[tokio::test]
async fn a_periods_fan_out_tells_what_the_read_in_one_process_tells() {
    let s = TestStack::new("fan-out").await;
    workload(&s).await;
    let names = &s.stack.names;
    let envelopes = DynamoEnvelopeStore::new(s.clients.dynamodb.clone(), &names.envelope_table);
    let audit = DynamoAuditLog::new(s.clients.dynamodb.clone(), &names.audit_table);
    let ledger = s.ledger();
    for period in ["2026-10", "2026-11"] {
        let scope = LedgerScope::period(period);
        let ex = exceptions_of_period(&envelopes, &audit, period).await.unwrap();
        let links = Links::of(&ex.envelopes, &ex.audit);
        let here = read_ledger(&ledger, &scope, 4, &links).await.unwrap();
        assert_eq!(here.postings, 6, "{period}: six transactions posted");
        assert!(
            !here.linked.is_empty(),
            "{period}: a duplicate's or a replay's postings kept"
        );

        let mut fanned = LedgerRead::default();
        for segment in Segment::all_of(3) {
            let request = SegmentRead {
                period: period.into(),
                segment: format!("{}/{}", segment.index, segment.of),
                links: links.clone(),
            };
            // As dlqctl sends it and the control plane reads it.
            let request: SegmentRead = serde_json::from_value(serde_json::to_value(&request).unwrap()).unwrap();
            let read = read_period_segment(&ledger, &request).await.unwrap();
            // As the control plane answers and dlqctl reads it.
            let answer = serde_json::to_value(&read).unwrap();
            fanned.merge(serde_json::from_value(answer).unwrap());
        }
        look_up_unmet(&ledger, &scope, &links, &mut fanned).await.unwrap();
        assert_eq!(told(fanned), told(here), "{period}");
    }
    s.cleanup().await;
}

#[test]
fn a_segment_request_is_checked() {
    let bad = |period: &str, segment: &str| {
        SegmentRead {
            period: period.into(),
            segment: segment.into(),
            links: Links::default(),
        }
        .parts()
        .unwrap_err()
    };
    assert!(bad("2026-13", "0/2").contains("YYYY-MM"));
    assert!(bad("2026-1", "0/2").contains("YYYY-MM"));
    assert!(bad("2026-11", "2/2").contains("segment"));
    assert!(bad("2026-11", "0/65").contains("segment"));
}
