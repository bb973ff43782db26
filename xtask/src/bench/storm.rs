//! `make bench-storm`: the bad day (issue 34). A steady producer sends N transactions to the main
//! queue at R per second while pollers feed them to the consumer, the enricher and the replay as
//! Lambda would (in-process, on the local stack); between two marks of the production the ledger
//! goes down (every connection to its DynamoDB endpoint closed, as a service that went away), and
//! comes back. Failing commits back off and dead-letter when their budget is spent, dead letters
//! are enveloped, and after the recovery the backlog is drained by the scheduled sweep
//! (`--drain sweep`, every `--sweep-every` seconds from the start, as the schedule runs whatever
//! the weather) or by an operator's manual replay of everything PENDING once the ledger is back
//! and the DLQ enveloped, asked again for dead letters that arrived since (`--drain manual`).
//!
//! Printed per phase (calm, outage, recovery, drain): messages per second in and out,
//! dead letters and envelopes per second, audit write units per second, the DLQ's and the backlog's
//! largest depth; then the time from recovery to an empty backlog, requests and write units per
//! message, what the incident cost at list prices, and the same per-message figures projected on
//! AWS's published limits. Figures, not assertions; the run fails when a transaction is not
//! committed exactly once or the reconciliation does not hold.
//!
//!     cargo xtask bench storm [--messages N] [--rate R] [--outage FROM,TO] [--pollers P]
//!                             [--drain sweep|manual] [--sweep-every S]
//!                             (defaults 100000, 400, 0.3,0.6, 4, sweep, 30)

use recon_aws::Target;
use recon_aws::sqs::OutgoingMessage;
use recon_aws::wiring;
use recon_core::ports::Backlog;
use recon_harness::capacity::{WriteUnits, metered};
use recon_harness::latency::{Outage, outage_line};
use recon_harness::pump::{PumpOptions, PumpStats, pump};
use recon_harness::stack::TestStack;
use recon_testkit::builders::{body, manual_request, sweep_request, tx};
use std::collections::BTreeMap;
use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod report;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Drain {
    Sweep,
    Manual,
}

#[derive(clap::Args, Clone, Debug)]
pub struct StormArgs {
    /// Transactions produced.
    #[arg(long, default_value_t = 100_000)]
    pub messages: u64,
    /// Produced per second.
    #[arg(long, default_value_t = 400)]
    pub rate: u64,
    /// The ledger is down from the first to the second share of the production.
    #[arg(long, value_delimiter = ',', default_values_t = [0.3, 0.6])]
    pub outage: Vec<f64>,
    /// Concurrent pollers of the main queue (consumer invocations at once); the DLQ gets half.
    #[arg(long, default_value_t = 4)]
    pub pollers: usize,
    /// How the backlog is drained after the recovery.
    #[arg(long, value_enum, default_value_t = Drain::Sweep)]
    pub drain: Drain,
    /// The sweep schedule's interval, seconds.
    #[arg(long, default_value_t = 30)]
    pub sweep_every: u64,
}

/// What happened at one instant (sampled every second).
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    pub(crate) at: f64,
    pub(crate) produced: u64,
    pub(crate) outcomes: BTreeMap<String, u64>,
    pub(crate) enveloped: u64,
    pub(crate) reinjected: u64,
    pub(crate) dlq_depth: u64,
    pub(crate) main_depth: u64,
    pub(crate) pending: i64,
    pub(crate) requests: BTreeMap<String, u64>,
    pub(crate) write_units: BTreeMap<String, f64>,
    /// The messages the consumer's invocations were given so far, and their handler time.
    pub(crate) consumer_received: u64,
    pub(crate) consumer_seconds: f64,
}

/// Counters the tasks add to.
#[derive(Default)]
struct Tally {
    produced: AtomicU64,
    consumer: Mutex<PumpStats>,
    enricher: Mutex<PumpStats>,
    reinjected: AtomicU64,
    replays: AtomicU64,
    replay_micros: AtomicU64,
    stop: AtomicBool,
}

fn add(into: &Mutex<PumpStats>, s: &PumpStats) {
    let mut t = into.lock().unwrap_or_else(|p| p.into_inner());
    t.batches += s.batches;
    t.received += s.received;
    t.deleted += s.deleted;
    t.handler_time += s.handler_time;
    for (k, v) in &s.outcomes {
        *t.outcomes.entry(k.clone()).or_default() += v;
    }
}

/// DynamoDB Local's address, for the ledger's switch.
fn dynamodb_local() -> Result<std::net::SocketAddr, String> {
    let Target::Local { dynamodb_url: url, .. } = Target::local_from_env() else {
        return Err("the local stack has no DynamoDB Local address".into());
    };
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("DynamoDB Local's address {url} is not host:port"))
}

/// Poll `queue` with `handler` one batch at a time until told to stop.
async fn poller<H: recon_core::batch::BatchHandler>(
    s: &TestStack,
    dlq: bool,
    handler: &H,
    tally: &Tally,
) -> Result<(), String> {
    let opts = PumpOptions {
        until_idle: false,
        wait_secs: 1,
        ..PumpOptions::default()
    };
    let (queue, arn) = if dlq {
        (s.dlq(), s.stack.dlq_arn.clone())
    } else {
        (s.main_queue(), s.stack.main_queue_arn.clone())
    };
    while !tally.stop.load(Ordering::Relaxed) {
        let stats = pump(&queue, &arn, "us-east-1", &opts, handler)
            .await
            .map_err(|e| format!("polling: {e}"))?;
        add(if dlq { &tally.enricher } else { &tally.consumer }, &stats);
    }
    Ok(())
}

/// Send `count` transactions at `rate` per second, the ledger down between the two marks.
async fn produce(
    s: &TestStack,
    args: &StormArgs,
    outage: &Outage,
    tally: &Tally,
    marks: &Mutex<Vec<f64>>,
    t0: Instant,
) {
    let queue = s.main_queue();
    let down_at = (args.outage[0] * args.messages as f64) as u64;
    let up_at = (args.outage[1] * args.messages as f64) as u64;
    let tick = Duration::from_millis(100);
    let per_tick = (args.rate / 10).max(10);
    let mut next = Instant::now();
    let mut n = 0u64;
    while n < args.messages {
        if n >= down_at && n < up_at && !outage.is_down() {
            outage.set(true);
            marks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(t0.elapsed().as_secs_f64());
        } else if n >= up_at && outage.is_down() {
            outage.set(false);
            marks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(t0.elapsed().as_secs_f64());
        }
        let upto = (n + per_tick).min(args.messages);
        let batches: Vec<Vec<OutgoingMessage>> = (n..upto)
            .map(|k| OutgoingMessage {
                body: body(&tx(u32::try_from(k).unwrap_or(u32::MAX))),
                ..Default::default()
            })
            .collect::<Vec<_>>()
            .chunks(10)
            .map(<[OutgoingMessage]>::to_vec)
            .collect();
        let sent = futures::future::join_all(batches.iter().map(|b| queue.send_batch(b))).await;
        for r in sent {
            match r {
                Ok(ids) => {
                    let ok = ids.iter().filter(|i| i.is_ok()).count() as u64;
                    tally.produced.fetch_add(ok, Ordering::Relaxed);
                }
                Err(e) => eprintln!("  a send failed: {e}"),
            }
        }
        n = upto;
        next += tick;
        tokio::time::sleep_until(next.into()).await;
    }
    if outage.is_down() {
        outage.set(false);
        marks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(t0.elapsed().as_secs_f64());
    }
    marks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(t0.elapsed().as_secs_f64());
}

pub async fn run(args: StormArgs) {
    if let Err(e) = storm(args).await {
        eprintln!("bench storm: {e}");
        std::process::exit(1);
    }
}

async fn storm(args: StormArgs) -> Result<(), String> {
    if args.outage.len() != 2
        || !(0.0..1.0).contains(&args.outage[0])
        || !(args.outage[0] < args.outage[1] && args.outage[1] <= 1.0)
    {
        return Err("--outage takes two shares of the production, FROM,TO, 0 <= FROM < TO <= 1".into());
    }
    if args.messages == 0 || args.rate == 0 || args.pollers == 0 {
        return Err("--messages, --rate and --pollers take a positive number".into());
    }
    let s = TestStack::new("bench-storm").await;
    s.map_currency("USD", 2).await;
    let units = Arc::new(WriteUnits::default());
    let mut clients = s.clients.clone();
    clients.dynamodb = metered(&s.clients.dynamodb, units.clone());
    // The ledger's own client, through the switch.
    let (line, outage) = outage_line(dynamodb_local()?)
        .await
        .map_err(|e| format!("a loopback port for the ledger's switch: {e}"))?;
    let mut ledger_clients = clients.clone();
    ledger_clients.dynamodb = metered(
        &aws_sdk_dynamodb::Client::from_conf(
            s.clients
                .dynamodb
                .config()
                .to_builder()
                .endpoint_url(format!("http://{line}"))
                .build(),
        ),
        units.clone(),
    );
    let settings = s.settings.clone();
    let consumer = wiring::consumer(
        &clients,
        &settings,
        wiring::consumer_ledger(&ledger_clients, &settings),
        "bench-storm",
    );
    let enricher = wiring::enricher(
        &clients,
        &s.enricher_settings(1_000_000_000),
        "bench-storm",
        recon_testkit::memory::MemoryMetrics::default(),
    );
    let mut replayer = wiring::replayer(
        &clients,
        &s.replay_settings(),
        "bench-storm",
        recon_testkit::memory::MemoryMetrics::default(),
    );
    replayer.ledger = wiring::consumer_ledger(&ledger_clients, &settings);
    println!(
        "storm: {} transactions at {}/s, the ledger down from {:.0} % to {:.0} % of them; {} consumer and {} enricher pollers; drained by {:?}; retry budget {} receives, backoff {}-{} s",
        args.messages,
        args.rate,
        args.outage[0] * 100.0,
        args.outage[1] * 100.0,
        args.pollers,
        args.pollers.div_ceil(2),
        args.drain,
        settings.retry.max_attempts,
        settings.retry.backoff_base_secs,
        settings.retry.backoff_cap_secs
    );

    let tally = Tally::default();
    let marks = Mutex::new(Vec::new());
    let samples = Mutex::new(Vec::<Sample>::new());
    let store = s.envelope_store();
    let t0 = Instant::now();
    let budget = Duration::from_secs(args.messages / args.rate.max(1) * 4 + 900);
    let sample = || async {
        let (c, received, seconds) = {
            let t = tally.consumer.lock().unwrap_or_else(|p| p.into_inner());
            (t.outcomes.clone(), t.received, t.handler_time.as_secs_f64())
        };
        let e = tally.enricher.lock().unwrap_or_else(|p| p.into_inner()).deleted;
        Sample {
            at: t0.elapsed().as_secs_f64(),
            produced: tally.produced.load(Ordering::Relaxed),
            outcomes: c,
            enveloped: e,
            reinjected: tally.reinjected.load(Ordering::Relaxed),
            dlq_depth: s.dlq().depth().await.map(|d| d.total()).unwrap_or(0),
            main_depth: s.main_queue().depth().await.map(|d| d.total()).unwrap_or(0),
            pending: store.pending_count().await.unwrap_or(-1),
            requests: s.clients.requests.snapshot(),
            write_units: units.breakdown(),
            consumer_received: received,
            consumer_seconds: seconds,
        }
    };
    let producer = produce(&s, &args, &outage, &tally, &marks, t0);
    let pollers = futures::future::try_join(
        futures::future::try_join_all((0..args.pollers).map(|_| poller(&s, false, &consumer, &tally))),
        futures::future::try_join_all((0..args.pollers.div_ceil(2)).map(|_| poller(&s, true, &enricher, &tally))),
    );
    let drained = Mutex::new(None::<f64>);
    let drain = async {
        let mut last_sweep = Instant::now();
        let mut printed = 0.0;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = sample().await;
            let produced_all = marks.lock().unwrap_or_else(|p| p.into_inner()).len() >= 3;
            let recovered = marks.lock().unwrap_or_else(|p| p.into_inner()).len() >= 2;
            if now.at - printed >= 10.0 {
                printed = now.at;
                eprintln!(
                    "  {:>5.0} s: produced {}, committed {}, dead-lettered {}, enveloped {}, re-injected {}, main queue {}, DLQ {}, backlog {}",
                    now.at,
                    now.produced,
                    now.outcomes.get("COMMITTED").copied().unwrap_or(0),
                    now.outcomes.get("DEAD_LETTERED").copied().unwrap_or(0),
                    now.enveloped,
                    now.reinjected,
                    now.main_depth,
                    now.dlq_depth,
                    now.pending
                );
            }
            let empty = produced_all && now.main_depth == 0 && now.dlq_depth == 0 && now.pending == 0;
            samples.lock().unwrap_or_else(|p| p.into_inner()).push(now.clone());
            if empty {
                *drained.lock().unwrap_or_else(|p| p.into_inner()) = Some(now.at);
                break;
            }
            if t0.elapsed() > budget {
                break;
            }
            let due = match args.drain {
                Drain::Sweep => last_sweep.elapsed() >= Duration::from_secs(args.sweep_every),
                // An operator, once the ledger is back and the DLQ enveloped: all that is PENDING,
                // by hand (again, 10 s later, for dead letters that arrived meanwhile).
                Drain::Manual => {
                    recovered
                        && now.dlq_depth == 0
                        && now.pending > 0
                        && (tally.replays.load(Ordering::Relaxed) == 0
                            || last_sweep.elapsed() >= Duration::from_secs(10))
                }
            };
            if due {
                last_sweep = Instant::now();
                let request = match args.drain {
                    Drain::Sweep => sweep_request(),
                    Drain::Manual => manual_request(Default::default(), false),
                };
                let started = Instant::now();
                let ran = replayer.run(&request, None).await;
                let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                tally.replay_micros.fetch_add(micros, Ordering::Relaxed);
                match ran {
                    Ok(r) => {
                        tally.reinjected.fetch_add(r.reinjected, Ordering::Relaxed);
                        tally.replays.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => eprintln!("  a replay failed: {e}"),
                }
            }
        }
        tally.stop.store(true, Ordering::Relaxed);
    };
    let (_, polled, ()) = tokio::join!(producer, pollers, drain);
    polled?;
    let samples = samples.into_inner().unwrap_or_else(|p| p.into_inner());
    let marks = marks.into_inner().unwrap_or_else(|p| p.into_inner());
    let drained = drained.into_inner().unwrap_or_else(|p| p.into_inner());
    let consumer_stats = tally.consumer.into_inner().unwrap_or_else(|p| p.into_inner());
    let enricher_stats = tally.enricher.into_inner().unwrap_or_else(|p| p.into_inner());
    let (audit_records, intact) = report::trail(&s).await?;
    let run = report::Run {
        args: &args,
        samples: &samples,
        marks: &marks,
        drained,
        consumer: &consumer_stats,
        enricher: &enricher_stats,
        replays: tally.replays.load(Ordering::Relaxed),
        audit_table: &s.settings.audit_table,
        ledger_table: &s.settings.ledger_table,
        audit_records,
        replay_seconds: tally.replay_micros.load(Ordering::Relaxed) as f64 / 1e6,
    };
    run.print();
    println!("audit trail: {audit_records} records, every chain links and verifies: {intact}");
    let proof = report::prove(&s, &clients, args.messages).await;
    s.cleanup().await;
    proof?;
    if !intact {
        return Err("the audit trail does not verify".into());
    }
    if drained.is_none() {
        return Err(format!("the backlog was not empty after {} s", budget.as_secs()));
    }
    Ok(())
}
