//! Your general ledger behind an HTTP posting API (`recon-http`), through the claim → post →
//! commit protocol on the dedup table, against a local GL that honours `Idempotency-Key` as a
//! strict ERP does (a key reused with another body is refused) and fails on purpose — after
//! applying a posting too, so the client never learns it was applied. The GL applies a key at
//! most once by construction; what these tests prove is the client's side: that a post whose
//! answer was lost is asked about (or sent again with the same key and the same body), that it
//! then commits under the delivery the GL names, that a request the GL applies after its client
//! gave up is never taken as "not posted", and that nothing is handed to a manual journal beside
//! it.

use recon_aws::dynamodb::DynamoDedupTable;
use recon_core::domain::{CommitOutcome, HandOff, TransientKind, TxKey};
use recon_core::ports::{ExternalLedger, Ledger, Rotating, SystemClock};
use recon_core::reservation::{ReservationSettings, ReservingLedger};
use recon_harness::http_ledger::{GlFault, LocalGl};
use recon_harness::stack::TestStack;
use recon_http::{HttpLedger, HttpSettings};
use recon_testkit::builders::tx;
use recon_testkit::conformance::{ledger_keeps_each_transaction_once, ledger_reads_by_period, posting};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn the_http_ledger_keeps_each_transaction_once_and_reads_by_period() {
    let s = TestStack::new_http("http-conf").await;
    ledger_keeps_each_transaction_once(&s.ledger(), "http").await;
    ledger_reads_by_period(&s.ledger(), "http").await;
    let gl = s.gl().unwrap();
    assert!(gl.applied_twice().is_empty(), "{:?}", gl.applied_twice());
    s.cleanup().await;
}

/// Failures before and after the GL applied a posting (an error, a dropped connection): every
/// message is retried within its budget, and every transaction is applied exactly once — the
/// retry asks the GL first (its posting found, nothing sent again), or posts under the same key.
#[tokio::test]
async fn a_gl_failing_after_applying_never_posts_twice() {
    let s = TestStack::new_http("http-fault").await;
    let gl = s.gl().unwrap();
    gl.inject(&[
        GlFault::DropAfterApply,
        GlFault::ErrorAfterApply,
        GlFault::Unavailable,
        GlFault::DropAfterApply,
        GlFault::ErrorAfterApply,
        GlFault::DropAfterApply,
        GlFault::Unavailable,
        GlFault::ErrorAfterApply,
    ]);
    let valid: Vec<String> = (1..=20).map(|n| tx(n).to_body().unwrap()).collect();
    // The same transactions again, as other messages: duplicates.
    let mut bodies = valid.clone();
    bodies.extend(valid.iter().take(5).cloned());
    s.send(&bodies).await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let stats = s.pump(&consumer).await;
    // A post whose answer was lost is asked about before it is sent again: the GL's posting
    // names this very message, whose retry is then a redelivery acknowledged.
    let outcome = |name: &str| stats.outcomes.get(name).copied().unwrap_or(0);
    assert_eq!(
        outcome("COMMITTED") + outcome("REDELIVERY_ACKNOWLEDGED"),
        20,
        "{stats:?}"
    );
    assert!(outcome("REDELIVERY_ACKNOWLEDGED") >= 1, "{stats:?}");
    assert_eq!(outcome("DUPLICATE_SUPPRESSED"), 5, "{stats:?}");
    assert!(
        stats.outcomes.get("RETRY_SCHEDULED").copied().unwrap_or(0) >= 8,
        "every fault made a retry: {stats:?}"
    );
    assert!(s.dlq_messages().await.is_empty(), "nothing dead-lettered");
    assert!(gl.applied_twice().is_empty(), "{:?}", gl.applied_twice());
    assert_eq!(gl.len(), 20);
    for n in 1..=20 {
        assert_eq!(gl.applied(&tx(n).compute_hash().unwrap()), 1, "tx {n}");
    }
    assert_eq!(s.postings().await.len(), 20, "read back from the GL");
    s.cleanup().await;
}

/// A posting the GL refuses by a rule of its own (`422`) is poison, `LEDGER_REFUSED:HTTP422:<rule>`,
/// dead-lettered at its first receive; its claim is released, nothing applied.
#[tokio::test]
async fn a_posting_the_gl_refuses_is_poison_with_its_rule() {
    let s = TestStack::new_http("http-refuse").await;
    let gl = s.gl().unwrap();
    gl.refuse_counterparty("Blocked Corp");
    let mut blocked = tx(3);
    blocked.counterparty = "Blocked Corp".into();
    s.send(&[tx(1).to_body().unwrap(), blocked.to_body().unwrap()]).await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.received, 2, "no retries: {stats:?}");
    s.pump_dlq(&s.enricher(10_000)).await;
    let envelopes = s.envelopes().await;
    assert_eq!(envelopes.len(), 1);
    assert_eq!(envelopes[0].root_cause, "LEDGER_REFUSED:HTTP422:blocked_counterparty");
    assert_eq!(gl.len(), 1);
    assert_eq!(
        s.ledger()
            .lookup(&TxKey::hash_only(blocked.compute_hash().unwrap()))
            .await
            .unwrap(),
        None,
        "the claim was released"
    );
    s.cleanup().await;
}

/// Without its bearer token the GL answers 401: a transient failure blamed on the deployment
/// (infrastructure), never on the message; a GL that is not there is a network failure.
/// The conformance check of a ledger that cannot be reached: a GL that is not there (the dedup
/// table answering), and a dedup table that is not there.
#[tokio::test]
async fn an_unreachable_http_ledger_fails_transiently() {
    use recon_core::config::{HttpLocation, LedgerSettings};
    use recon_testkit::conformance::ledger_fails_transiently_when_unreachable;
    let s = TestStack::new("http-gone").await;
    let gone_gl = recon_aws::ledger::open(
        &s.clients,
        &LedgerSettings::Http(HttpLocation {
            url: "http://127.0.0.1:1".into(),
            dedup_table: s.stack.names.dedup_table.clone(),
            secret_arn: None,
        }),
        "unused-table",
        2,
    );
    ledger_fails_transiently_when_unreachable(&gone_gl, "http-gone").await;
    let gone_table = recon_aws::ledger::open(
        &s.clients,
        &LedgerSettings::Http(HttpLocation {
            url: "http://127.0.0.1:1".into(),
            dedup_table: "no-such-table".into(),
            secret_arn: None,
        }),
        "unused-table",
        2,
    );
    ledger_fails_transiently_when_unreachable(&gone_table, "http-no-table").await;
    s.cleanup().await;
}

#[tokio::test]
async fn credentials_refused_and_a_gl_that_is_not_there_are_transient() {
    let gl = LocalGl::start().await.unwrap();
    gl.require_token("right");
    let settings = |url: &str, token: &str| HttpSettings {
        base_url: url.to_owned(),
        token: Some(Rotating::fixed(token.to_owned())),
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(2),
    };
    let p = posting("http-auth", 1, "sqs-1");
    let wrong = HttpLedger::new(&settings(&gl.url, "wrong")).unwrap();
    assert_eq!(wrong.post(&p).await.unwrap_err().kind, TransientKind::Infrastructure);
    assert!(gl.is_empty());
    let right = HttpLedger::new(&settings(&gl.url, "right")).unwrap();
    assert_eq!(right.post(&p).await.unwrap(), recon_core::ports::Posted::Applied);
    let gone = HttpLedger::new(&settings("http://127.0.0.1:1", "right")).unwrap();
    assert_eq!(gone.post(&p).await.unwrap_err().kind, TransientKind::Network);
}

/// A post applied by the GL whose answer was lost leaves no mark in the dedup table. Gate 2 and
/// a hand-off to a manual journal still see it: they ask the GL, and no journal is booked by hand
/// beside the posting.
#[tokio::test]
async fn a_posting_whose_answer_was_lost_is_seen_by_gate_2_and_never_handed_off() {
    let s = TestStack::new_http("http-lost").await;
    let gl = s.gl().unwrap();
    let ledger = s.ledger();
    let p = posting("http-lost", 1, "sqs-1");
    gl.inject(&[GlFault::DropAfterApply]);
    assert!(ledger.commit(&p).await.is_err(), "the answer was lost");
    assert_eq!(gl.applied(&p.source_hash), 1);
    let seen = ledger
        .lookup(&p.key())
        .await
        .unwrap()
        .expect("gate 2 sees the GL's posting");
    assert_eq!(seen.sqs_message_id, "sqs-1");
    let hand_off = HandOff {
        source_hash: p.source_hash.clone(),
        period: Some(p.period.clone()),
        envelope_id: "env_lost".into(),
        replay_id: "rp-lost".into(),
        handed_off_at: p.committed_at,
    };
    match ledger.hand_off(&hand_off).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert!(!r.handed_off_by("env_lost"), "{r:?}"),
        other => panic!("handed off beside a posting: {other:?}"),
    }
    // The dedup table now says committed: the next delivery is a duplicate, posted nowhere.
    match ledger.commit(&posting("http-lost", 1, "sqs-2")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert!(r.manual_journal.is_none(), "{r:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(gl.applied(&p.source_hash), 1);
    s.cleanup().await;
}

/// The reservation protocol over an HTTP ledger whose client gives up after a second, on the stack's
/// dedup table.
fn impatient(s: &TestStack, gl: &LocalGl) -> ReservingLedger<HttpLedger, DynamoDedupTable> {
    let http = HttpLedger::new(&HttpSettings {
        base_url: gl.url.clone(),
        token: gl.token().map(Rotating::fixed),
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
    })
    .unwrap();
    let dedup = DynamoDedupTable::new(s.clients.dynamodb.clone(), &s.stack.names.dedup_table);
    ReservingLedger::new(http, dedup, ReservationSettings::default(), Arc::new(SystemClock))
}

fn hand_off_of(p: &recon_core::domain::Posting, envelope: &str) -> HandOff {
    HandOff {
        source_hash: p.source_hash.clone(),
        period: Some(p.period.clone()),
        envelope_id: envelope.into(),
        replay_id: "rp-late".into(),
        handed_off_at: p.committed_at,
    }
}

/// Regression (issue 29, defect 1): a post the GL applies after its client gave up released
/// the claim as "not posted"; a hand-off then asked the GL (404: still being applied), marked
/// the manual journal, and the GL applied the post: booked twice. Now the hash stays in doubt;
/// a hand-off voids the key first, and the GL refuses the late request.
#[tokio::test]
async fn a_post_applied_after_its_client_gave_up_is_never_booked_beside_a_manual_journal() {
    let s = TestStack::new_http("http-late").await;
    let gl = s.gl().unwrap();
    let ledger = impatient(&s, gl);
    let p = posting("http-late", 1, "sqs-1");
    gl.inject(&[GlFault::ApplyLate(Duration::from_secs(3))]);
    assert_eq!(ledger.commit(&p).await.unwrap_err().kind, TransientKind::Timeout);
    assert_eq!(
        ledger.hand_off(&hand_off_of(&p, "env_late")).await.unwrap(),
        CommitOutcome::Committed
    );
    assert!(gl.voided(&p.source_hash));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(gl.applied(&p.source_hash), 0, "the late request was refused");
    assert!(
        ledger
            .lookup(&p.key())
            .await
            .unwrap()
            .unwrap()
            .handed_off_by("env_late")
    );

    // A GL without the void call: no hand-off while the request may still be applied; once it
    // is, the hand-off finds the posting and books nothing by hand.
    gl.without_void();
    let q = posting("http-late", 2, "sqs-2");
    gl.inject(&[GlFault::ApplyLate(Duration::from_secs(3))]);
    assert_eq!(ledger.commit(&q).await.unwrap_err().kind, TransientKind::Timeout);
    assert!(matches!(
        ledger.hand_off(&hand_off_of(&q, "env_late_2")).await.unwrap(),
        CommitOutcome::InDoubt { .. }
    ));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(gl.applied(&q.source_hash), 1);
    match ledger.hand_off(&hand_off_of(&q, "env_late_2")).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "sqs-2"),
        other => panic!("{other:?}"),
    }
    s.cleanup().await;
}

/// Regression (issue 29, defect 6): a `200` (posted before under this key) marked the delivery
/// asking as the holder, though the GL's posting names the one whose answer was lost: the trail
/// named the wrong message and reconcile missed a send forever. The posting is read back.
#[tokio::test]
async fn a_key_posted_before_is_marked_with_the_delivery_the_gl_names() {
    let s = TestStack::new_http("http-before").await;
    let gl = s.gl().unwrap();
    let ledger = impatient(&s, gl);
    let p = posting("http-before", 1, "sqs-1");
    gl.inject(&[GlFault::DropAfterApply]);
    assert!(ledger.commit(&p).await.is_err(), "the answer was lost");
    let again = recon_core::domain::Posting {
        sqs_message_id: "sqs-2".into(),
        ..p.clone()
    };
    match ledger.commit(&again).await.unwrap() {
        CommitOutcome::AlreadyCommitted(r) => assert_eq!(r.sqs_message_id, "sqs-1"),
        other => panic!("{other:?}"),
    }
    assert_eq!(ledger.lookup(&p.key()).await.unwrap().unwrap().sqs_message_id, "sqs-1");
    assert_eq!(gl.applied(&p.source_hash), 1);
    s.cleanup().await;
}

/// The GL's token rotated mid-run (a new value in the secret, the GL accepting only it) costs one
/// refused request: the commits go on, nothing is left to the retry budget and dead-lettered.
#[tokio::test]
async fn a_token_rotated_mid_run_dead_letters_nothing() {
    let s = TestStack::new_http("http-rotate").await;
    let gl = s.gl().unwrap();
    let ledger = s.ledger();
    let recon_core::config::LedgerSettings::Http(location) = &s.settings.ledger else {
        panic!("an HTTP stack");
    };
    let arn = location.secret_arn.clone().expect("the token comes from a secret");
    let first = posting("http-rotate", 1, "sqs-1");
    assert!(matches!(ledger.commit(&first).await.unwrap(), CommitOutcome::Committed));
    let rotated = format!("rotated-{}", std::process::id());
    s.clients
        .secrets_manager()
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(serde_json::json!({ "token": rotated }).to_string())
        .send()
        .await
        .unwrap();
    gl.require_token(&rotated);
    for n in 2..=4 {
        let p = posting("http-rotate", n, &format!("sqs-{n}"));
        match ledger.commit(&p).await {
            Ok(CommitOutcome::Committed) => {}
            other => panic!("commit {n} after the rotation: {other:?}"),
        }
    }
    s.cleanup().await;
}
