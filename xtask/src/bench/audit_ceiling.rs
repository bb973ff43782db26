//! `make bench-audit`: the audit trail's ceiling (issue 34). Every dead letter, envelope,
//! suppression and replay appends a record to one of the eight hash chains; an append reads its
//! chain's head and moves it in one conditional transaction, so appends to one chain are serial
//! and collide. W writers append single records (as each decision does) for S seconds, all to one
//! chain and then spread over the eight as the records' ids spread them; for each, the appends per
//! second, the transactions per append (1.00: no conflict; each conflict costs a head read and a
//! transaction more) and the latency of an append. Then the same with a delay line in front of
//! DynamoDB Local (`--latency-ms`), as DynamoDB is a network away: what bounds a chain there is
//! its round trips, not the emulator. Figures, not assertions; the run fails only when an append
//! fails or a chain does not verify afterwards.
//!
//!     cargo xtask bench audit-ceiling [--seconds S] [--writers 1,4,16] [--latency-ms MS]   (defaults 10, 1,4,16, 5)

use recon_aws::dynamodb::DynamoAuditLog;
use recon_core::domain::audit::chain_of;
use recon_core::domain::{AuditKind, AuditRecord};
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
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
    pub writers: Vec<usize>,
    /// A second round with every DynamoDB request delayed this long (0: none).
    #[arg(long, default_value_t = 5)]
    pub latency_ms: u64,
}

/// A record whose id falls on chain `c0` (`one`), or on whichever chain its id gives.
fn record(writer: usize, n: u64, one: bool) -> AuditRecord {
    let mut k = 0u64;
    loop {
        let subject = format!("ceiling-{writer}-{n}-{k}");
        let r = AuditRecord::system(
            AuditKind::DuplicateSuppressed,
            &subject,
            chrono::Utc::now(),
            "bench",
            String::new(),
        );
        if !one || chain_of(&r.audit_id) == "c0" {
            return r;
        }
        k += 1;
    }
}

struct Round {
    appends: u64,
    transactions: u64,
    latencies: Vec<Duration>,
    wall: Duration,
}

/// `writers` tasks appending for `seconds`, each its own records.
async fn round(
    s: &TestStack,
    log: &Arc<DynamoAuditLog>,
    writers: usize,
    one: bool,
    seconds: u64,
) -> Result<Round, String> {
    let before = s.clients.requests.snapshot();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (log, counter) = (log.clone(), counter.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let r = record(w, n, one);
                    let t = Instant::now();
                    log.append(&r).await.map_err(|e| e.to_string())?;
                    latencies.push(t.elapsed());
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.map_err(|e| e.to_string())??);
    }
    let wall = started.elapsed();
    let after = s.clients.requests.snapshot();
    let op = "DynamoDB:TransactWriteItems";
    let transactions = after.get(op).copied().unwrap_or(0) - before.get(op).copied().unwrap_or(0);
    latencies.sort();
    Ok(Round {
        appends: latencies.len() as u64,
        transactions,
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

async fn rounds(s: &TestStack, log: Arc<DynamoAuditLog>, args: &AuditCeilingArgs, label: &str) -> Result<(), String> {
    println!(
        "\n{label}\n{:<14} {:>8} {:>9} {:>11} {:>13} {:>9} {:>9}",
        "chains", "writers", "appends", "appends/s", "tx per append", "p50 ms", "p99 ms"
    );
    for (one, chains) in [(true, "one (c0)"), (false, "eight")] {
        for &w in &args.writers {
            let r = round(s, &log, w.max(1), one, args.seconds).await?;
            println!(
                "{chains:<14} {w:>8} {:>9} {:>11.0} {:>13.2} {:>9.1} {:>9.1}",
                r.appends,
                r.appends as f64 / r.wall.as_secs_f64().max(1e-9),
                r.transactions as f64 / (r.appends.max(1)) as f64,
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
            "audit appends for {} s per configuration, writers {:?} (each append: a head read and one conditional transaction)",
            args.seconds, args.writers
        );
        let log = Arc::new(DynamoAuditLog::new(s.clients.dynamodb.clone(), &s.settings.audit_table));
        rounds(&s, log, &args, "DynamoDB Local, no added latency").await?;
        if args.latency_ms > 0 {
            let direct = s.clients.dynamodb.clone();
            s.clients.dynamodb = super::replay_drain::delayed(&direct, args.latency_ms).await?;
            let log = Arc::new(DynamoAuditLog::new(s.clients.dynamodb.clone(), &s.settings.audit_table));
            let label = format!("every DynamoDB request {} ms later (a network away)", args.latency_ms);
            rounds(&s, log, &args, &label).await?;
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
