//! `make bench-e2e`: the same messages through our consumer and through the consumer a team would
//! write with AWS Lambda Powertools for Python (bench/powertools_consumer.py), on the local stack,
//! in one run. Both are pumped the same way: receive up to 10, build Lambda's SQS event, call the
//! handler in-process, delete what it did not report as failed. Figures, not assertions.
//!
//! The workload: N bodies of about 1 KB (a bank feed's narrative fields beside the schema's),
//! one in ten a duplicate of an earlier transaction (the same body sent again), one in twenty
//! poison (a currency the reference data does not map). Our consumer runs as deployed (the
//! production wiring and settings parsers), on the DynamoDB ledger, its batch commits at once
//! (concurrency 1) and concurrently (the configured `DLQ_BATCH_CONCURRENCY`).
//!
//! Then again with a delay line in front of DynamoDB Local (`--latency-ms`, 0 for none): the
//! emulator answers in about a millisecond and serves few requests at once on two cores, AWS
//! in several milliseconds and many at once, which is where committing a batch concurrently pays.
//!
//!     cargo xtask bench e2e [--count N] [--python PATH] [--visibility SECS] [--latency-ms MS]
//!                           [--duplicate-every K] [--poison-every K]     (defaults 2000, python3, 2, 5, 10, 20)

use recon_aws::{Target, wiring};
use recon_core::domain::NewMessage;
use recon_harness::capacity::{WriteUnits, metered};
use recon_harness::latency::delay_line;
use recon_harness::pump::{PumpOptions, PumpStats, pump};
use recon_harness::stack::{MAX_ATTEMPTS, TestStack};
use recon_testkit::builders::{body, tx, tx_in};
use std::io::Write;
use std::net::ToSocketAddrs;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// One side's figures, as the table prints them.
struct Side {
    name: String,
    messages: u64,
    committed: u64,
    dead_lettered: u64,
    /// Until the last batch (ours) or until every message was handled once (the peer's poison
    /// comes back after the visibility timeout).
    first_pass: f64,
    drain: f64,
    handler_ms_per_full_batch: f64,
    queue_share: f64,
    requests: u64,
    write_units: f64,
}

impl Side {
    fn print(&self) {
        let per = |x: f64| x / self.committed.max(1) as f64;
        println!(
            "{:<34} {:>6.0} msg/s  first pass {:>6.2} s  drained {:>6.2} s  {:>6.2} ms/10-batch  queue calls {:>3.0} %  {:>5.2} req/commit  {:>5.2} WCU/commit  ({} committed, {} dead-lettered)",
            self.name,
            self.messages as f64 / self.first_pass.max(1e-9),
            self.first_pass,
            self.drain,
            self.handler_ms_per_full_batch,
            self.queue_share * 100.0,
            per(self.requests as f64),
            per(self.write_units),
            self.committed,
            self.dead_lettered,
        );
    }
}

/// The workload: valid, a duplicate every `dup_every`th (of the transaction `dup_every` - 1
/// earlier), poison every `poison_every`th (before duplicates); 0 for none.
fn workload(count: u32, dup_every: u32, poison_every: u32) -> Vec<String> {
    (0..count)
        .map(|n| {
            let m: NewMessage = if poison_every > 0 && n % poison_every == poison_every - 1 {
                tx_in(n, "XTS", "5.00")
            } else if dup_every > 0 && n % dup_every == dup_every - 1 && n >= dup_every {
                tx(n + 1 - dup_every)
            } else {
                tx(n)
            };
            padded(&body(&m), 1024)
        })
        .collect()
}

/// `body` with a narrative field (neither in the schema nor hashed) to about `bytes`.
fn padded(body: &str, bytes: usize) -> String {
    let mut v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["remittance_info"] = "INV-2026-118273 partial settlement per agreement MSA-77/2024 "
        .repeat(bytes.saturating_sub(body.len()) / 60)
        .into();
    v.to_string()
}

/// What both sides are given: the bodies, the queue's visibility timeout, and where DynamoDB
/// is (DynamoDB Local, or a delay line in front of it, named in `label`).
struct Run<'a> {
    bodies: &'a [String],
    visibility: i32,
    dynamodb: String,
    label: String,
}

/// Our consumer on a fresh test stack; `concurrency` overrides the configured batch concurrency.
async fn ours(run: &Run<'_>, concurrency: Option<usize>) -> Side {
    let (bodies, visibility) = (run.bodies, run.visibility);
    let s = TestStack::new("bench-e2e").await;
    s.map_currency("USD", 2).await;
    let units = Arc::new(WriteUnits::default());
    let mut clients = s.clients.clone();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        s.clients
            .dynamodb
            .config()
            .to_builder()
            .endpoint_url(&run.dynamodb)
            .build(),
    );
    clients.dynamodb = metered(&dynamodb, units.clone());
    let mut settings = s.settings.clone();
    if let Some(c) = concurrency {
        settings.concurrency = c;
    }
    let concurrency = settings.concurrency;
    let consumer = wiring::consumer(
        &clients,
        &settings,
        wiring::consumer_ledger(&clients, &settings),
        "bench-e2e",
    );
    s.send(bodies).await;
    let requests = s.clients.requests.total("dynamodb");
    let opts = PumpOptions {
        visibility_secs: Some(visibility),
        max_duration: Duration::from_secs(600),
        ..PumpOptions::default()
    };
    let stats = pump(&s.main_queue(), &s.stack.main_queue_arn, "us-east-1", &opts, &consumer)
        .await
        .unwrap_or_else(|e| panic!("pumping our consumer: {e}"));
    let requests = s.clients.requests.total("dynamodb") - requests;
    let count = |o: &str| stats.outcomes.get(o).copied().unwrap_or(0);
    let side = Side {
        name: format!("recon, concurrency {concurrency:>2}{}", run.label),
        messages: bodies.len() as u64,
        committed: count("COMMITTED"),
        dead_lettered: count("DEAD_LETTERED"),
        first_pass: stats.busy.as_secs_f64(),
        drain: stats.busy.as_secs_f64(),
        handler_ms_per_full_batch: per_batch(&stats),
        queue_share: stats.queue_time.as_secs_f64() / (stats.queue_time + stats.handler_time).as_secs_f64().max(1e-9),
        requests,
        write_units: units.total(),
    };
    let by: Vec<String> = units.breakdown().iter().map(|(k, v)| format!("{k}: {v}")).collect();
    eprintln!("  write units of {}: {}", side.name, by.join(", "));
    if stats
        .outcomes
        .keys()
        .any(|o| !matches!(o.as_str(), "COMMITTED" | "DUPLICATE_SUPPRESSED" | "DEAD_LETTERED"))
    {
        eprintln!("  outcomes: {:?}", stats.outcomes);
    }
    s.cleanup().await;
    side
}

fn per_batch(stats: &PumpStats) -> f64 {
    stats.full_batch_time.as_secs_f64() * 1000.0 / stats.full_batches.max(1) as f64
}

fn powertools(run: &Run<'_>, python: &str) -> Result<Side, String> {
    let (bodies, visibility) = (run.bodies, run.visibility);
    let Target::Local { edge_url, .. } = Target::local_from_env() else {
        return Err("the local stack's endpoints".into());
    };
    let path = std::env::temp_dir().join(format!("bench-e2e-{}.jsonl", std::process::id()));
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    for b in bodies {
        writeln!(f, "{b}").map_err(|e| e.to_string())?;
    }
    drop(f);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/e2e_powertools.py");
    let out = Command::new(python)
        .args([script, "--bodies"])
        .arg(&path)
        .args(["--sqs", &edge_url, "--dynamodb", &run.dynamodb])
        .args(["--visibility", &visibility.to_string()])
        .args(["--max-receive", &MAX_ATTEMPTS.to_string()])
        .output()
        .map_err(|e| format!("{python}: {e}"));
    let _ = std::fs::remove_file(&path);
    let out = out?;
    if !out.status.success() {
        return Err(format!(
            "the Powertools side failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("its figures ({e}): {line}"))?;
    let num = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let whole = |k: &str| v[k].as_u64().unwrap_or(0);
    Ok(Side {
        name: format!("Powertools{}", run.label),
        messages: bodies.len() as u64,
        committed: whole("committed"),
        dead_lettered: whole("dead_lettered"),
        first_pass: num("first_pass_s"),
        drain: num("busy_s"),
        handler_ms_per_full_batch: num("full_batch_s") * 1000.0 / num("full_batches").max(1.0),
        queue_share: num("queue_s") / (num("queue_s") + num("handler_s")).max(1e-9),
        requests: whole("dynamodb_requests"),
        write_units: num("write_units"),
    })
}

pub async fn run(args: E2eArgs) {
    let E2eArgs {
        count,
        python,
        visibility,
        duplicate_every: dup_every,
        poison_every,
        latency_ms,
    } = args;
    let bodies = workload(count, dup_every, poison_every);
    let size = bodies.iter().map(String::len).sum::<usize>() / bodies.len().max(1);
    let one_in = |every: u32| {
        if every == 0 {
            "none".to_owned()
        } else {
            format!("1 in {every}")
        }
    };
    println!(
        "{count} messages of ~{size} bytes (duplicates {}, poison {}), one poller each, batches of 10, visibility {visibility} s, redrive after {MAX_ATTEMPTS} receives",
        one_in(dup_every),
        one_in(poison_every)
    );
    let Target::Local { dynamodb_url, .. } = Target::local_from_env() else {
        unreachable!("local_from_env names the local stack")
    };
    let mut runs = vec![Run {
        bodies: &bodies,
        visibility,
        dynamodb: dynamodb_url.clone(),
        label: String::new(),
    }];
    if latency_ms > 0 {
        let local = dynamodb_url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next());
        let Some(local) = local else {
            eprintln!("DynamoDB Local's address {dynamodb_url} is not host:port");
            std::process::exit(2);
        };
        let line = delay_line(local, Duration::from_millis(latency_ms))
            .await
            .unwrap_or_else(|e| panic!("a loopback port for the delay line: {e}"));
        runs.push(Run {
            bodies: &bodies,
            visibility,
            dynamodb: format!("http://{line}"),
            label: format!(", DynamoDB +{latency_ms} ms"),
        });
    }
    // Every side must post each transaction once and dead-letter each poison message, or its
    // figures measure something else.
    let poison = bodies.iter().filter(|b| b.contains("\"XTS\"")).count() as u64;
    let distinct = bodies.iter().collect::<std::collections::HashSet<_>>().len() as u64 - poison;
    let mut wrong = 0;
    for run in &runs {
        // One at a time, then the whole batch at once (as the default DLQ_BATCH_CONCURRENCY, 10,
        // does: the batch in one wave).
        let sides = [
            Ok(ours(run, Some(1)).await),
            Ok(ours(run, Some(10)).await),
            powertools(run, &python),
        ];
        for side in sides {
            match side {
                Ok(side) if side.committed == distinct && side.dead_lettered == poison => side.print(),
                Ok(side) => {
                    side.print();
                    eprintln!("  ^ expected {distinct} committed and {poison} dead-lettered");
                    wrong += 1;
                }
                Err(e) => {
                    eprintln!("{e}");
                    wrong += 1;
                }
            }
        }
    }
    if wrong > 0 {
        std::process::exit(1);
    }
}

/// The flags of `cargo xtask bench e2e`.
#[derive(clap::Args, Clone, Debug)]
pub struct E2eArgs {
    /// Messages in the workload.
    #[arg(long, default_value_t = 2000)]
    pub count: u32,
    /// The Python that runs the Powertools consumer (with its packages).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// The queues' visibility timeout, seconds.
    #[arg(long, default_value_t = 2)]
    pub visibility: i32,
    /// One message in this many is a duplicate (0: none).
    #[arg(long, default_value_t = 10)]
    pub duplicate_every: u32,
    /// One message in this many is poison (0: none).
    #[arg(long, default_value_t = 20)]
    pub poison_every: u32,
    /// Delay in front of DynamoDB Local for the second run, milliseconds (0: none).
    #[arg(long, default_value_t = 5)]
    pub latency_ms: u64,
}
