//! The PostgreSQL ledger on a real PostgreSQL (Debian's, started on loopback by
//! `infra/local/postgres.sh` as part of the local stack): the ledger conformance suite, exact
//! NUMERIC amounts, migrations that run once, and the classification of the errors that decide
//! the retry budget. Each test gets a database of its own.

use recon_core::domain::{CommitOutcome, TransientKind};
use recon_core::ports::Ledger;
use recon_harness::postgres::ScratchDatabase;
use recon_postgres::{HISTORY_TABLE, PostgresLedger, PostgresSettings, classify};
use recon_testkit::conformance::{ledger_keeps_each_transaction_once, posting};
use std::time::Duration;

async fn database(test: &str) -> ScratchDatabase {
    ScratchDatabase::create(&format!("t_{test}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A plain connection to `url` (as its URL's user), to run SQL beside the ledger.
pub(crate) async fn sql(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A database of its own, its schema migrated by its owner (as the deploy step would).
pub(crate) async fn migrated(test: &str) -> ScratchDatabase {
    database(test).await.migrated().await.unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn settings(url: &str) -> PostgresSettings {
    PostgresSettings {
        url: url.to_owned(),
        connect_timeout: Duration::from_secs(3),
        statement_timeout: Duration::from_secs(5),
        pool_size: 16,
        credentials: None,
        tls: recon_harness::postgres::local_tls(),
    }
}

#[tokio::test]
async fn the_postgres_ledger_keeps_each_transaction_once() {
    let db = migrated("conformance").await;
    let url = db.url.clone();
    let ledger = PostgresLedger::connect(&settings(&url)).await.unwrap();
    ledger_keeps_each_transaction_once(&ledger, "postgres").await;
    recon_testkit::conformance::ledger_reads_by_period(&ledger, "postgres").await;
    db.drop().await;
}

#[tokio::test]
async fn amounts_are_numeric_and_come_back_exactly() {
    let db = migrated("numeric").await;
    let url = db.url.clone();
    let ledger = PostgresLedger::connect(&settings(&url)).await.unwrap();
    let p = posting("numeric", 1, "sqs-1");
    assert_eq!(ledger.commit(&p).await.unwrap(), CommitOutcome::Committed);
    let back = ledger.posting(&p.source_hash).await.unwrap().expect("the posting");
    assert_eq!(back, p, "every field, the amount to its last digit");
    let client = sql(&url).await;
    let kind: String = client
        .query_one(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'ledger_entries' AND column_name = 'amount'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "numeric");
    db.drop().await;
}

/// The functions never change the schema: connecting to a database not yet migrated is refused
/// (transiently, naming the command) and creates nothing. The deploy step's migration runs each
/// migration once; a second run applies none and keeps the data.
#[tokio::test]
async fn the_ledger_refuses_an_unmigrated_database_and_migrations_run_once() {
    let db = database("migrate").await;
    let url = db.url.clone();
    let client = sql(&url).await;
    let e = PostgresLedger::connect(&settings(&url)).await.err().expect("refused");
    assert_eq!(e.kind, TransientKind::Infrastructure);
    assert!(
        e.detail
            .contains("V1__ledger is not applied: run `dlqctl ledger-migrate`"),
        "{e}"
    );
    let tables: i64 = client
        .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "the ledger created nothing");

    let ran = PostgresLedger::migrate(&settings(&url), &[]).await.unwrap();
    assert_eq!(ran, PostgresLedger::migrations());
    assert!(ran >= 1);
    let first = PostgresLedger::connect(&settings(&url)).await.unwrap();
    let p = posting("migrate", 1, "sqs-1");
    first.commit(&p).await.unwrap();
    assert_eq!(PostgresLedger::migrate(&settings(&url), &[]).await.unwrap(), 0);
    let second = PostgresLedger::connect(&settings(&url)).await.unwrap();
    assert!(second.lookup(&p.key()).await.unwrap().is_some(), "the data survives");
    let applied: i64 = client
        .query_one(&format!("SELECT count(*) FROM {HISTORY_TABLE}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(usize::try_from(applied).unwrap(), PostgresLedger::migrations());
    db.drop().await;
}

/// The functions' database user needs only SELECT and INSERT, which `ledger-migrate --grant-to`
/// gives it: the ledger works as that user (the conformance suite), and the user can neither
/// change nor remove a posting nor change the schema.
#[tokio::test]
async fn the_functions_user_may_post_and_read_and_nothing_else() {
    let db = database("grants").await;
    let url = db.url.clone();
    let admin = sql(&url).await;
    let user = format!(
        "runtime_{}_{}",
        std::process::id(),
        chrono::Utc::now().timestamp_subsec_nanos()
    );
    admin.batch_execute(&format!("CREATE ROLE {user} LOGIN")).await.unwrap();
    // A user who may create in the schema (as every user may in public before PostgreSQL 15) is
    // refused, naming what to revoke.
    admin
        .batch_execute(&format!("GRANT CREATE ON SCHEMA public TO {user}"))
        .await
        .unwrap();
    let e = PostgresLedger::migrate(&settings(&url), std::slice::from_ref(&user))
        .await
        .err()
        .expect("refused");
    assert!(e.detail.contains("may create objects in schema public"), "{e}");
    admin
        .batch_execute(&format!("REVOKE CREATE ON SCHEMA public FROM {user}"))
        .await
        .unwrap();
    PostgresLedger::migrate(&settings(&url), std::slice::from_ref(&user))
        .await
        .unwrap();
    let as_user = url.replacen("postgres://recon@", &format!("postgres://{user}@"), 1);
    assert_ne!(as_user, url);
    let ledger = PostgresLedger::connect(&settings(&as_user)).await.unwrap();
    ledger_keeps_each_transaction_once(&ledger, "postgres-runtime").await;
    recon_testkit::conformance::ledger_reads_by_period(&ledger, "postgres-runtime").await;

    let client = sql(&as_user).await;
    for sql in [
        "UPDATE ledger_entries SET amount = 0",
        "DELETE FROM ledger_entries",
        "TRUNCATE ledger_entries",
        "ALTER TABLE ledger_entries ADD COLUMN x int",
        "DROP TABLE ledger_entries",
        "CREATE TABLE elsewhere (id int)",
        "DELETE FROM ledger_schema_history",
    ] {
        let e = client
            .batch_execute(sql)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql}: allowed"));
        let code = e.code().map(|c| c.code().to_owned()).unwrap_or_default();
        assert!(code == "42501", "{sql}: {code} {e}");
    }
    drop(ledger);
    db.drop().await;
    let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {user}")).await;
}

/// A database the earlier migration library (refinery) set up: its history is taken over, the
/// schema is not created twice, and the data stays.
#[tokio::test]
async fn a_database_migrated_by_the_earlier_library_is_taken_over() {
    let db = database("adopt").await;
    let url = db.url.clone();
    let client = sql(&url).await;
    // What refinery 0.8 left: its history table with V1, and V1's schema.
    client
        .batch_execute(concat!(
            "CREATE TABLE refinery_schema_history (version INT4 PRIMARY KEY, name VARCHAR(255), applied_on VARCHAR(255), checksum VARCHAR(255));",
            "INSERT INTO refinery_schema_history VALUES (1, 'ledger', '2026-12-01T00:00:00Z', '123456789');",
            include_str!("../shared/postgres/migrations/V1__ledger.sql"),
        ))
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO ledger_entries (source_hash, kind, committed_at, manual_journal, replay_id) VALUES (repeat('a', 64), 'HAND_OFF', now(), 'MJ-1', 'r-1')")
        .await
        .unwrap();
    assert_eq!(
        PostgresLedger::migrate(&settings(&url), &[]).await.expect("taken over"),
        0,
        "not migrated again"
    );
    let ledger = PostgresLedger::connect(&settings(&url)).await.unwrap();
    let p = posting("adopt", 1, "sqs-1");
    assert_eq!(ledger.commit(&p).await.unwrap(), CommitOutcome::Committed);
    let rows: i64 = client
        .query_one("SELECT count(*) FROM ledger_entries", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 2, "the row written before the take-over is still there");
    let versions: Vec<i32> = client
        .query(&format!("SELECT version FROM {HISTORY_TABLE} ORDER BY version"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, vec![1]);
    db.drop().await;
}

/// The history says what was applied: a migration edited after it ran, or a version this code
/// does not carry (a newer release ran), stops the connection with the version named, and
/// nothing is applied.
#[tokio::test]
async fn an_edited_migration_or_a_newer_schema_is_refused_by_name() {
    let db = migrated("diverge").await;
    let url = db.url.clone();
    PostgresLedger::connect(&settings(&url)).await.unwrap();
    let client = sql(&url).await;
    let refused = |e: recon_core::ports::StoreError| e.to_string();

    client
        .batch_execute(&format!(
            "UPDATE {HISTORY_TABLE} SET checksum = 'edited' WHERE version = 1"
        ))
        .await
        .unwrap();
    let e = refused(PostgresLedger::connect(&settings(&url)).await.err().expect("refused"));
    assert!(e.contains("V1__ledger changed after it was applied"), "{e}");

    client
        .batch_execute(&format!(
            "DELETE FROM {HISTORY_TABLE}; \
             INSERT INTO {HISTORY_TABLE} (version, name, checksum) VALUES (999, 'from_a_newer_release', 'x')"
        ))
        .await
        .unwrap();
    let e = refused(PostgresLedger::connect(&settings(&url)).await.err().expect("refused"));
    assert!(
        e.contains("records migration V999, which this code does not carry"),
        "{e}"
    );
    db.drop().await;
}

#[tokio::test]
async fn errors_are_classified_for_the_retry_budget() {
    let db = database("classify").await;
    let url = db.url.clone();
    let client = sql(&url).await;

    // A statement past its timeout: cancelled by the server.
    let e = client
        .batch_execute("SET statement_timeout = 50; SELECT pg_sleep(2)")
        .await
        .unwrap_err();
    assert_eq!(classify("sleep", &e).kind, TransientKind::Timeout, "{e}");

    // Two serializable transactions that cannot both be right: one is refused.
    client
        .batch_execute("SET statement_timeout = 0; CREATE TABLE accounts (id int PRIMARY KEY, total int)")
        .await
        .unwrap();
    let other = sql(&url).await;
    for c in [&client, &other] {
        c.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT count(*) FROM accounts")
            .await
            .unwrap();
    }
    client
        .batch_execute("INSERT INTO accounts VALUES (1, 1)")
        .await
        .unwrap();
    other.batch_execute("INSERT INTO accounts VALUES (2, 1)").await.unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    let e = other.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(classify("commit", &e).kind, TransientKind::Conflict, "{e}");

    // Nobody listening: the connection is refused.
    let e = tokio_postgres::connect("postgres://recon@127.0.0.1:1/recon", tokio_postgres::NoTls)
        .await
        .err()
        .expect("nothing listens on port 1");
    assert_eq!(classify("connect", &e).kind, TransientKind::Network, "{e}");

    // The ledger itself, against a server that is not there: a transient failure, not a panic.
    let gone = PostgresLedger::connect(&PostgresSettings {
        url: "postgres://recon@127.0.0.1:1/recon".into(),
        connect_timeout: Duration::from_millis(500),
        ..settings(&url)
    })
    .await
    .err()
    .expect("no server");
    assert!(
        matches!(gone.kind, TransientKind::Network | TransientKind::Timeout),
        "{gone:?}"
    );
    db.drop().await;
}

/// Your ledger's own rules: a posting it refuses (a CHECK constraint of yours, a trigger's RAISE)
/// is poison, dead-lettered at its first receive with `LEDGER_REFUSED:<SQLSTATE>:<rule>` and
/// nothing written; once the rule is fixed, the replay posts it exactly once.
#[tokio::test]
async fn a_posting_your_ledger_refuses_is_poison_with_its_rule_and_replays_once_fixed() {
    use recon_testkit::builders::tx;

    let s = recon_harness::stack::TestStack::new_postgres("pg-refuse").await;
    // The schema exists once the ledger is first used.
    let ledger = s.ledger();
    assert_eq!(
        ledger
            .lookup(&recon_core::domain::TxKey::hash_only("ab".repeat(32)))
            .await
            .unwrap(),
        None
    );
    let client = sql(s.postgres_url().unwrap()).await;
    client
        .batch_execute(
            "ALTER TABLE ledger_entries ADD CONSTRAINT amount_within_limit
                 CHECK (kind <> 'POSTING' OR amount < 1000);
             CREATE FUNCTION no_blocked_counterparty() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.counterparty = 'Blocked Corp' THEN
                     RAISE EXCEPTION 'counterparty % is blocked', NEW.counterparty;
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER no_blocked_counterparty BEFORE INSERT ON ledger_entries
                 FOR EACH ROW EXECUTE FUNCTION no_blocked_counterparty();",
        )
        .await
        .unwrap();

    let fine = tx(1);
    let mut large = tx(2);
    large.amount = "5000.00".into();
    let mut blocked = tx(3);
    blocked.counterparty = "Blocked Corp".into();
    let bodies: Vec<String> = [&fine, &large, &blocked].iter().map(|m| m.to_body().unwrap()).collect();
    s.send(&bodies).await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let stats = s.pump(&consumer).await;
    assert_eq!(stats.received, 3, "no retries: {stats:?}");
    assert_eq!(s.postings().await.len(), 1);

    s.pump_dlq(&s.enricher(10_000)).await;
    let mut causes: Vec<(String, String)> = s
        .envelopes()
        .await
        .iter()
        .map(|e| (e.root_cause.clone(), e.failure_code.to_string()))
        .collect();
    causes.sort();
    assert_eq!(
        causes,
        [
            (
                "LEDGER_REFUSED:23514:amount_within_limit".to_owned(),
                "POISON_MESSAGE".to_owned()
            ),
            (
                "LEDGER_REFUSED:P0001:no_blocked_counterparty".to_owned(),
                "POISON_MESSAGE".to_owned()
            ),
        ]
    );

    // The limit is raised (the fix is in your ledger): the group replays and posts once.
    client
        .batch_execute("ALTER TABLE ledger_entries DROP CONSTRAINT amount_within_limit")
        .await
        .unwrap();
    let replay = |root_cause: &str| recon_core::replay::ReplayRequest {
        selector: recon_core::replay::Selector {
            root_cause: Some(root_cause.into()),
            ..Default::default()
        },
        dry_run: false,
        reason: "limit raised".into(),
        triggered_by: "integration-test".into(),
        invocation: None,
        scheduled: false,
        quarantine: false,
    };
    let report = s
        .replayer()
        .run(&replay("LEDGER_REFUSED:23514:amount_within_limit"), None)
        .await
        .unwrap();
    assert_eq!(report.reinjected, 1, "{report:#?}");
    s.pump(&consumer).await;
    let again = s
        .replayer()
        .run(&replay("LEDGER_REFUSED:23514:amount_within_limit"), None)
        .await
        .unwrap();
    assert_eq!(again.reinjected, 0, "{again:#?}");
    s.pump(&consumer).await;
    let postings = s.postings().await;
    assert_eq!(postings.len(), 2, "{postings:#?}");
    let replayed: Vec<_> = postings.iter().filter(|p| p.replay_of.is_some()).collect();
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].amount.to_string(), "5000.00");
    s.cleanup().await;
}
