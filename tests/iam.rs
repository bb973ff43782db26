//! Least privilege, proven by use: each function runs its code paths on the local stack with its
//! own AWS clients, and the IAM actions of the requests it sent must be exactly the actions its
//! role grants for its code (`recon_aws::deployment::iam`, which the template must match: `make infra-check`).

use recon_aws::deployment::iam::{self, Caller, Grant};
use recon_aws::wiring;
use recon_aws::{AwsClients, Target};
use recon_core::config::LedgerSettings;
use recon_core::domain::{PeriodRecord, PeriodStatus, TransientKind};
use recon_core::ports::ReferenceData;
use recon_harness::stack::TestStack;
use recon_testkit::builders::tx;
use recon_testkit::faults::{Fault, FaultyLedger};
use recon_testkit::memory::MemoryMetrics;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The actions a role grants its code on a deployment of `ledger` (grants under a template
/// condition belong to the deployments it holds for).
fn declared(grants: &[Grant], ledger: &LedgerSettings) -> BTreeSet<&'static str> {
    grants
        .iter()
        .filter(|g| g.caller == Caller::Code && g.when.holds_for(ledger))
        .flat_map(|g| g.actions.iter().copied())
        .collect()
}

fn observed(clients: &AwsClients) -> BTreeSet<&'static str> {
    clients
        .requests
        .snapshot()
        .keys()
        .flat_map(|op| iam::actions_for(op).iter().copied())
        .collect()
}

/// Every request `own` sent maps to an IAM action, and those actions are exactly the role's grants
/// for its code.
fn assert_calls_exactly_its_grants(own: &AwsClients, grants: &[Grant], ledger: &LedgerSettings) {
    // Every request to the bucket names the account that must own it: S3 refuses it if a bucket
    // of that name is anyone else's (LocalStack does not check; the header is what AWS checks).
    assert!(own.requests.total("s3") > 0, "the function made no S3 request to check");
    assert!(
        own.requests.s3_without_expected_owner().is_empty(),
        "S3 requests without ExpectedBucketOwner: {:?}",
        own.requests.s3_without_expected_owner()
    );
    assert!(
        unmapped(own).is_empty(),
        "operations without an IAM mapping: {:?}",
        unmapped(own)
    );
    assert_eq!(
        observed(own),
        declared(grants, ledger),
        "requests seen: {:?}",
        own.requests.snapshot()
    );
}

fn unmapped(clients: &AwsClients) -> Vec<String> {
    clients
        .requests
        .snapshot()
        .keys()
        .filter(|op| iam::actions_for(op).is_empty())
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_consumer_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-cons").await;
    let own = AwsClients::connect(Target::local_from_env()).await;
    let m = tx(1);
    let flaky = tx(2);
    let ledger = FaultyLedger::new(wiring::consumer_ledger(&own, &s.settings), TransientKind::Throttled);
    ledger.inject(&flaky.compute_hash().unwrap(), Fault::Times(1));
    // A general ledger that fails a post: the reservation protocol releases its claim.
    if let Some(gl) = s.gl() {
        gl.inject(&[recon_harness::http_ledger::GlFault::Unavailable]);
    }
    // Every appended record seals (the append path), so the seals are exercised too.
    let mut settings = s.settings.clone();
    settings.seal.every_records = 1;
    let consumer = Arc::new(wiring::consumer(&own, &settings, ledger, "iam-test"));
    // What the function does at start-up: record its configuration.
    wiring::record_configuration(&own, &settings.audit_table, "consumer", &settings.audited())
        .await
        .unwrap();
    let mut poison = tx(3);
    poison.currency = "XAU".into();
    // Commit, duplicate, poison, transient: every path of the consumer's code.
    s.send(&[
        m.to_body().unwrap(),
        m.to_body().unwrap(),
        poison.to_body().unwrap(),
        flaky.to_body().unwrap(),
    ])
    .await;
    s.pump(&consumer).await;
    assert_calls_exactly_its_grants(&own, iam::CONSUMER, &s.settings.ledger);
    s.cleanup().await;
}

#[tokio::test]
async fn the_enricher_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-enr").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let mut poison = tx(4);
    poison.currency = "XAU".into();
    s.send(&[poison.to_body().unwrap(), "not json".into()]).await;
    s.pump(&consumer).await;
    let own = AwsClients::connect(Target::local_from_env()).await;
    let mut settings = s.enricher_settings(0);
    settings.seal.every_records = 1;
    let enricher = Arc::new(wiring::enricher(&own, &settings, "iam-test", MemoryMetrics::default()));
    wiring::record_configuration(&own, &settings.audit_table, "enricher", &settings.audited())
        .await
        .unwrap();
    // New envelopes (pending and quarantined; one PENDING is above a mark of 0: the overflow
    // record passes through the audit outbox), then the same DLQ message again.
    let (event, _) = s.receive_event(&s.dlq(), 2, 1).await;
    enricher.handle_batch(&event, None).await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    s.pump_dlq(&enricher).await;
    assert_calls_exactly_its_grants(&own, iam::ENRICHER, &LedgerSettings::DynamoDb);
    s.cleanup().await;
}

#[tokio::test]
async fn the_replay_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-rpl").await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let xau = |n: u32| {
        let mut m = tx(n);
        m.currency = "XAU".into();
        m
    };
    let mut closed = xau(6);
    closed.value_date = "2026-10-10".into();
    let mut large = serde_json::from_str::<serde_json::Value>(&xau(7).to_body().unwrap()).unwrap();
    large["narrative"] = "x".repeat(100_000).into();
    s.send(&[xau(5).to_body().unwrap(), closed.to_body().unwrap(), large.to_string()])
        .await;
    s.pump(&consumer).await;
    s.pump_dlq(&s.enricher(1000)).await;
    s.map_currency("XAU", 4).await;
    s.reference()
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        })
        .await
        .unwrap();

    let own = AwsClients::connect(Target::local_from_env()).await;
    let settings = s.replay_settings();
    wiring::record_configuration(&own, &settings.audit_table, "replay", &settings.audited())
        .await
        .unwrap();
    let mut replayer = wiring::replayer(&own, &settings, "iam-test", MemoryMetrics::default());
    replayer.config.page_size = 1;
    // A scheduled sweep: pages (cursor saved and cleared), re-injection, a large body read from
    // the bucket, a quarantine record written to it. Its first envelope's mark goes through the
    // outbox (what the store falls back to when the trail's heads keep moving: the record
    // published, then deleted from the outbox), the others' with their records linked into the
    // trail.
    let linked = replayer.store.clone();
    replayer.store = recon_aws::dynamodb::DynamoEnvelopeStore::new(own.dynamodb.clone(), &settings.envelope_table);
    let mut sweep = recon_testkit::builders::sweep_request();
    sweep.selector.max_items = Some(1);
    let first = replayer.run(&sweep, None).await.unwrap();
    replayer.store = linked;
    sweep.selector.max_items = None;
    let report = replayer.run(&sweep, None).await.unwrap();
    assert_eq!(
        (first.reinjected + report.reinjected, report.quarantined),
        (2, 1),
        "{first:#?} {report:#?}"
    );
    // A second sweep seals again: the first seal is read by its version id to chain the second.
    replayer.run(&sweep, None).await.unwrap();
    // A reconciliation's segment (`reconcile_segment`): the period's postings.
    let segment = recon_core::reconcile::SegmentRead {
        period: "2026-11".into(),
        segment: "0/2".into(),
        links: recon_core::reconcile::Links::default(),
    };
    let read = recon_core::reconcile::read_period_segment(&replayer.ledger, &segment)
        .await
        .unwrap();
    wiring::segment_response(&read).unwrap();
    assert_calls_exactly_its_grants(&own, iam::REPLAY, &settings.ledger);
    s.cleanup().await;
}

#[tokio::test]
async fn the_reference_audit_calls_exactly_what_its_role_grants() {
    let s = TestStack::new("iam-refaud").await;
    s.map_currency("XAU", 4).await;
    s.reference()
        .put_period(&PeriodRecord {
            entity: "ACME-US".into(),
            period: "2026-10".into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        })
        .await
        .unwrap();
    let own = AwsClients::connect(Target::local_from_env()).await;
    let mut settings = recon_core::config::ReferenceAuditSettings::from_lookup(s.stack.lookup(|_| None)).unwrap();
    settings.seal.every_records = 1;
    wiring::record_configuration(&own, &settings.audit_table, "reference-audit", &settings.audited())
        .await
        .unwrap();
    let auditor = wiring::reference_auditor(&own, &settings);
    // The stream is read with the harness's own client (Lambda's event-source mapping does that,
    // with the role's stream grants); the function's code makes the rest.
    let harness = AwsClients::connect(Target::local_from_env()).await;
    let n = recon_harness::streams::pump_stream(&harness, &settings.reference_table, &auditor)
        .await
        .unwrap();
    assert!(n >= 2, "{n} stream records");
    assert_calls_exactly_its_grants(&own, iam::REFERENCE_AUDIT, &LedgerSettings::DynamoDb);
    s.cleanup().await;
}
