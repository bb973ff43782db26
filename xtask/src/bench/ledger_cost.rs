//! What one committed message costs on each ledger, side by side in one run on the local stack:
//! `make bench-ledgers`. For the DynamoDB reference ledger (DynamoDB Local) and the PostgreSQL
//! ledger (the local PostgreSQL): N new postings committed C at a time, then the same N
//! transactions again from other SQS messages (duplicates): wall time, commits per second, and
//! requests (DynamoDB) or statements (PostgreSQL; each one round trip, as statements are prepared
//! once per pooled connection) per message. Figures, not assertions.
//!
//!     cargo xtask bench ledger-cost [--count N] [--concurrency C]      (defaults 2000, 10)

use futures::StreamExt;
use recon_core::domain::CommitOutcome;
use recon_core::ports::Ledger;
use recon_harness::postgres::ScratchDatabase;
use recon_harness::stack::TestStack;
use recon_postgres::{PostgresLedger, PostgresSettings};
use recon_testkit::conformance::posting;
use std::time::{Duration, Instant};

struct Round {
    wall: Duration,
    committed: u64,
    duplicates: u64,
}

async fn round<L: Ledger>(ledger: &L, run: &str, sqs: &str, count: u32, concurrency: usize) -> Round {
    let started = Instant::now();
    let outcomes: Vec<_> = futures::stream::iter(0..count)
        .map(|n| async move { ledger.commit(&posting(run, n, &format!("{sqs}-{n}"))).await })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = started.elapsed();
    let mut r = Round {
        wall,
        committed: 0,
        duplicates: 0,
    };
    for o in outcomes {
        match o {
            Ok(CommitOutcome::Committed) => r.committed += 1,
            Ok(CommitOutcome::AlreadyCommitted(_)) => r.duplicates += 1,
            Ok(CommitOutcome::Refused { rule, detail }) => eprintln!("  a commit was refused ({rule}): {detail}"),
            Ok(CommitOutcome::InDoubt { until }) => eprintln!("  a commit was in doubt until {until}"),
            Err(e) => eprintln!("  a commit failed: {e}"),
        }
    }
    r
}

fn line(ledger: &str, what: &str, r: &Round, count: u32, calls: u64, unit: &str) {
    let secs = r.wall.as_secs_f64().max(1e-9);
    println!(
        "{ledger:<22} {what:<11} {:>6} committed {:>6} duplicates  {:>8.0} msg/s  {:>6.2} ms/msg  {:>5.2} {unit}/msg",
        r.committed,
        r.duplicates,
        f64::from(count) / secs,
        secs * 1000.0 / f64::from(count),
        calls as f64 / f64::from(count)
    );
}

pub async fn run(args: LedgerCostArgs) {
    let count = args.count;
    let concurrency = args.concurrency.max(1);
    println!(
        "{count} messages, {concurrency} at a time (as a 10-message batch commits), then the same {count} again as duplicates"
    );

    let s = TestStack::new("bench-ledger").await;
    let dynamo = s.dynamo_ledger();
    let before = s.clients.requests.total("dynamodb");
    let first = round(&dynamo, "dynamo", "sqs", count, concurrency).await;
    let mid = s.clients.requests.total("dynamodb");
    line("DynamoDB (Local)", "new", &first, count, mid - before, "requests");
    let again = round(&dynamo, "dynamo", "dup", count, concurrency).await;
    line(
        "DynamoDB (Local)",
        "duplicates",
        &again,
        count,
        s.clients.requests.total("dynamodb") - mid,
        "requests",
    );
    s.cleanup().await;

    // Your GL's HTTP API (the local one, on loopback) behind the reservation protocol on DynamoDB
    // Local: per new posting a claim, a post and a commit.
    let s = TestStack::new_http("bench-http").await;
    let http = s.ledger();
    let calls = || s.clients.requests.total("dynamodb") + s.gl().map_or(0, |gl| gl.posts());
    let before = calls();
    let first = round(&http, "http", "sqs", count, concurrency).await;
    let mid = calls();
    let label = "HTTP GL + dedup table";
    line(label, "new", &first, count, mid - before, "requests");
    let again = round(&http, "http", "dup", count, concurrency).await;
    line(label, "duplicates", &again, count, calls() - mid, "requests");
    s.cleanup().await;

    let setup = async {
        Ok::<_, String>((
            recon_harness::postgres::admin().await?,
            ScratchDatabase::create("bench").await?.migrated().await?,
        ))
    };
    let (admin, db) = setup.await.unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let settings = PostgresSettings {
        url: db.url.clone(),
        connect_timeout: Duration::from_secs(3),
        statement_timeout: Duration::from_secs(5),
        pool_size: concurrency,
        credentials: None,
        tls: recon_harness::postgres::local_tls(),
    };
    let version: String = match admin.query_one("SHOW server_version", &[]).await {
        Ok(row) => row.try_get::<_, String>(0).unwrap_or_default(),
        Err(_) => String::new(),
    };
    let label = format!("PostgreSQL {}", version.split_whitespace().next().unwrap_or("?"));
    match PostgresLedger::connect(&settings).await {
        Ok(pg) => {
            let first = round(&pg, "pg", "sqs", count, concurrency).await;
            let mid = pg.statements();
            line(&label, "new", &first, count, mid, "statements");
            let again = round(&pg, "pg", "dup", count, concurrency).await;
            line(&label, "duplicates", &again, count, pg.statements() - mid, "statements");
        }
        Err(e) => eprintln!("PostgreSQL ledger: {e}"),
    }
    db.drop().await;
}

/// The flags of `cargo xtask bench ledger-cost`.
#[derive(clap::Args, Clone, Debug)]
pub struct LedgerCostArgs {
    /// Messages committed, then sent again as duplicates.
    #[arg(long, default_value_t = 2000)]
    pub count: u32,
    /// Commits at a time (a 10-message batch commits 10 at once).
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
}
