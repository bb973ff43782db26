//! `make bench-audit`: the audit trail's ceiling (issue 34). Every dead letter, envelope,
//! suppression and replay appends a record to a hash chain: one conditional transaction that
//! writes the record and moves its chain's head, so appends to one chain are serial. A writer
//! takes a chain no other writer of its process is on, keeps the head it wrote, and leaves a chain
//! whose head another process moved (`DynamoAuditLog`'s placement). W writers append single
//! records (as each decision does) for S seconds, first sharing one log (the concurrent tasks of
//! one function instance), then each with a log of its own (W instances, which only meet in the
//! table); for each, the appends per second, the chains they used, the transactions and head reads
//! per append (1.00 and 0.00: no conflict, no read), how many appends gave up (the conflict error
//! a function would spend a retry on) and the latency. Then the same with a delay line in front of
//! DynamoDB Local (`--latency-ms`), as DynamoDB is a network away. Figures, not assertions; the run
//! fails only when an append fails otherwise or a chain does not verify afterwards.
//!
//!     cargo xtask bench audit-ceiling [--seconds S] [--writers 1,4,16,64] [--latency-ms MS]   (defaults 10, 1,4,16,64, 5)

use recon_aws::dynamodb::DynamoAuditLog;
use recon_core::domain::{AuditKind, AuditRecord, TransientKind};
use recon_core::ports::AuditLog;
use recon_harness::stack::TestStack;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct AuditCeilingArgs {
    /// How long each configuration appends.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// The numbers of concurrent writers to try, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16, 64])]
    pub writers: Vec<usize>,
    /// A second round with every DynamoDB request delayed this long (0: none).
    #[arg(long, default_value_t = 5)]
    pub latency_ms: u64,
}

/// A new record (`round` keeps ids of different rounds apart: none is already recorded).
fn record(round: i64, writer: usize, n: u64) -> AuditRecord {
    AuditRecord::system(
        AuditKind::DuplicateSuppressed,
        &format!("ceiling-{round}-{writer}-{n}"),
        chrono::Utc::now(),
        "bench",
        String::new(),
    )
}

struct Round {
    appends: u64,
    gave_up: u64,
    transactions: u64,
    reads: u64,
    chains: usize,
    latencies: Vec<Duration>,
    wall: Duration,
}

/// `writers` tasks appending for `seconds`, each its own records, on one log (`shared`) or each
/// on a log of its own.
async fn round(s: &TestStack, writers: usize, shared: bool, seconds: u64) -> Result<Round, String> {
    let log = |_| Arc::new(DynamoAuditLog::new(s.clients.dynamodb.clone(), &s.settings.audit_table));
    let one = log(0);
    let logs: Vec<Arc<DynamoAuditLog>> = (0..writers)
        .map(|w| if shared { one.clone() } else { log(w) })
        .collect();
    let heads_before = s.audit_log().heads().await.map_err(|e| e.to_string())?;
    let before = s.clients.requests.snapshot();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let counter = Arc::new(AtomicU64::new(0));
    let tag = chrono::Utc::now().timestamp_micros();
    let started = Instant::now();
    let tasks: Vec<_> = logs
        .into_iter()
        .enumerate()
        .map(|(w, log)| {
            let counter = counter.clone();
            tokio::spawn(async move {
                let (mut latencies, mut gave_up) = (Vec::new(), 0u64);
                while Instant::now() < deadline {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    match log.append(&record(tag, w, n)).await {
                        Ok(_) => latencies.push(t.elapsed()),
                        Err(e) if e.kind == TransientKind::Conflict => gave_up += 1,
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok::<_, String>((latencies, gave_up))
            })
        })
        .collect();
    let (mut latencies, mut gave_up) = (Vec::new(), 0);
    for t in tasks {
        let (l, g) = t.await.map_err(|e| e.to_string())??;
        latencies.extend(l);
        gave_up += g;
    }
    let wall = started.elapsed();
    let after = s.clients.requests.snapshot();
    let heads_after = s.audit_log().heads().await.map_err(|e| e.to_string())?;
    let chains = heads_after.iter().filter(|h| !heads_before.contains(h)).count();
    let delta = |op: &str| after.get(op).copied().unwrap_or(0) - before.get(op).copied().unwrap_or(0);
    latencies.sort();
    Ok(Round {
        appends: latencies.len() as u64,
        gave_up,
        transactions: delta("DynamoDB:TransactWriteItems"),
        reads: delta("DynamoDB:GetItem"),
        chains,
        latencies,
        wall,
    })
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

async fn rounds(s: &TestStack, args: &AuditCeilingArgs, label: &str) -> Result<(), String> {
    println!(
        "\n{label}\n{:<12} {:>7} {:>7} {:>8} {:>10} {:>8} {:>11} {:>8} {:>8} {:>8}",
        "writers on", "writers", "chains", "appends", "appends/s", "tx/app", "reads/app", "gave up", "p50 ms", "p99 ms"
    );
    for (shared, on) in [(true, "one log"), (false, "a log each")] {
        for &w in &args.writers {
            let r = round(s, w.max(1), shared, args.seconds).await?;
            let per = |n: u64| n as f64 / (r.appends.max(1)) as f64;
            println!(
                "{on:<12} {w:>7} {:>7} {:>8} {:>10.0} {:>8.2} {:>11.2} {:>8} {:>8.1} {:>8.1}",
                r.chains,
                r.appends,
                r.appends as f64 / r.wall.as_secs_f64().max(1e-9),
                per(r.transactions),
                per(r.reads),
                r.gave_up,
                percentile(&r.latencies, 0.5),
                percentile(&r.latencies, 0.99)
            );
        }
    }
    Ok(())
}

pub async fn run(args: AuditCeilingArgs) {
    let result = async {
        let mut s = TestStack::new("bench-audit").await;
        println!(
            "audit appends for {} s per configuration, writers {:?} (each append: one conditional transaction, a head read when its writer does not know the head)",
            args.seconds, args.writers
        );
        rounds(&s, &args, "DynamoDB Local, no added latency").await?;
        if args.latency_ms > 0 {
            let direct = s.clients.dynamodb.clone();
            s.clients.dynamodb = super::replay_drain::delayed(&direct, args.latency_ms).await?;
            let label = format!("every DynamoDB request {} ms later (a network away)", args.latency_ms);
            rounds(&s, &args, &label).await?;
            s.clients.dynamodb = direct;
        }
        let report = recon_core::evidence::verify_trail(
            &s.audit_log(),
            &recon_aws::s3::S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket()),
            &recon_core::evidence::VerifyOptions::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let chains_ok = report.breaks.iter().all(|b| b.contains("unsealed") || b.contains("no trail"));
        println!(
            "\nafterwards: {} records in {} chains, every link intact: {}",
            report.records,
            report.chains.len(),
            chains_ok
        );
        s.cleanup().await;
        if chains_ok { Ok(()) } else { Err(format!("the chains do not verify: {:?}", report.breaks)) }
    }
    .await;
    if let Err(e) = result {
        eprintln!("bench audit-ceiling: {e}");
        std::process::exit(1);
    }
}
