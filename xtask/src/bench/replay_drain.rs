//! `make bench-replay`: how fast a DLQ backlog drains once its cause is fixed. N messages in a
//! currency the reference data does not map are dead-lettered by the consumer and enveloped by
//! the enricher; the currency is then mapped and the replay sweeps the backlog with every gate on
//! (integrity, idempotency asked again under the claim, open period) and no rate limit, first as
//! one invocation, then as K concurrent invocations, one per segment (`--segment i/K`), over a
//! backlog of the same size. Figures,
//! not assertions; the run fails only when an envelope was not re-injected exactly once.
//!
//! For comparison: SQS's own redrive (StartMessageMoveTask) moves at most 500 messages per second,
//! with no gate and no deduplication.
//!
//! Then the same again with a delay line in front of DynamoDB Local for the sweep
//! (`--latency-ms`, 0 for none): every request reaches it that much later, as DynamoDB is a
//! network away, where what a sweep waits for is its round trips rather than the emulator.
//!
//!     cargo xtask bench replay-drain [--count N] [--invocations K] [--latency-ms MS]      (defaults 2000, 4, 5)

use recon_aws::client::Target;
use recon_core::domain::EnvelopeStatus;
use recon_core::replay::Segment;
use recon_core::resources::keys;
use recon_harness::latency::delay_line;
use recon_harness::stack::TestStack;
use recon_testkit::builders::{body, manual_request, tx_in};
use std::net::ToSocketAddrs;
use std::time::{Duration, Instant};

/// A stack whose DLQ backlog holds `count` envelopes of the unmapped currency XAU, now mapped.
async fn backlog(count: u32) -> TestStack {
    let s = TestStack::new("bench-drain").await;
    s.map_currency("USD", 2).await;
    let bodies: Vec<String> = (0..count).map(|n| body(&tx_in(n, "XAU", &format!("{n}.25")))).collect();
    let started = Instant::now();
    s.send(&bodies).await;
    let consumer = s.consumer_with(s.ledger(), s.main_queue());
    let consumed = s.pump(&*consumer).await;
    let enricher = s.enricher(1_000_000_000);
    let enriched = s.pump_dlq(&*enricher).await;
    eprintln!(
        "  backlog of {count}: {} dead-lettered, {} enveloped in {:.1} s",
        consumed.outcomes.get("DEAD_LETTERED").copied().unwrap_or(0),
        enriched.deleted,
        started.elapsed().as_secs_f64()
    );
    s.map_currency("XAU", 2).await;
    s
}

/// Sweep the backlog with `invocations` replays at once; print the rate. Each envelope must be
/// re-injected exactly once: every envelope REPLAYED and as many messages on the main queue.
async fn drain(count: u32, invocations: usize, latency_ms: u64) -> Result<(), String> {
    let mut s = backlog(count).await;
    let direct = s.clients.dynamodb.clone();
    if latency_ms > 0 {
        s.clients.dynamodb = delayed(&direct, latency_ms).await?;
    }
    let replayers: Vec<_> = (0..invocations).map(|_| s.replayer()).collect();
    // One segment of the backlog each (one invocation: all of it).
    let requests: Vec<_> = (0..invocations)
        .map(|i| {
            let mut r = manual_request(Default::default(), false);
            if invocations > 1 {
                r.selector.segment = Some(Segment {
                    index: u32::try_from(i).unwrap_or(0),
                    of: u32::try_from(invocations).unwrap_or(1),
                });
            }
            r
        })
        .collect();
    let dynamodb = s.clients.requests.total("dynamodb");
    let sqs = s.clients.requests.total("sqs");
    let s3 = s.clients.requests.total("s3");
    let started = Instant::now();
    let reports = futures::future::join_all(replayers.iter().zip(&requests).map(|(r, q)| r.run(q, None))).await;
    let wall = started.elapsed().as_secs_f64();
    let mut reinjected = 0;
    let mut skipped = 0;
    for report in reports {
        let report = report.map_err(|e| format!("a replay failed: {e}"))?;
        reinjected += report.reinjected;
        skipped += report.skipped;
        if let Some(why) = report.stopped {
            eprintln!("  an invocation stopped early: {why}");
        }
    }
    s.clients.dynamodb = direct;
    let per = |n: u64| n as f64 / reinjected.max(1) as f64;
    let label = if latency_ms > 0 {
        format!(", DynamoDB +{latency_ms} ms")
    } else {
        String::new()
    };
    println!(
        "{invocations} invocation(s){label}  {reinjected:>6} re-injected in {wall:>6.2} s  {:>6.0} envelopes/s   per envelope: {:.2} DynamoDB, {:.2} SQS, {:.2} S3 requests",
        reinjected as f64 / wall.max(1e-9),
        per(s.clients.requests.total("dynamodb") - dynamodb),
        per(s.clients.requests.total("sqs") - sqs),
        per(s.clients.requests.total("s3") - s3),
    );
    if skipped > 0 {
        eprintln!("  {skipped} envelopes skipped");
    }
    let envelopes = s.envelopes().await;
    let replayed = envelopes
        .iter()
        .filter(|e| e.status == EnvelopeStatus::Replayed)
        .count();
    if invocations == 1 && latency_ms == 0 {
        let ids: Vec<&str> = envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
        emulator_bound(&s, &ids).await?;
    }
    let queued = s.main_queue().depth().await.map_err(|e| e.to_string())?.total();
    s.cleanup().await;
    if reinjected != u64::from(count) || replayed != count as usize || queued != u64::from(count) {
        return Err(format!(
            "expected each of {count} envelopes re-injected once: {reinjected} re-injections, {replayed} REPLAYED, {queued} messages on the main queue"
        ));
    }
    Ok(())
}

/// What bounds a sweep on the emulator: how many conditional updates of envelope items DynamoDB
/// Local applies per second in transactions of 99 (the largest group a sweep sends, and the
/// cheapest per item), one transaction after another (it does not apply two at once faster).
async fn emulator_bound(s: &TestStack, ids: &[&str]) -> Result<(), String> {
    use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
    let table = &s.stack.names.envelope_table;
    let started = Instant::now();
    for group in ids.chunks(99) {
        let items = group
            .iter()
            .map(|id| {
                let update = Update::builder()
                    .table_name(table)
                    .key(keys::ENVELOPE_PK, AttributeValue::S((*id).to_owned()))
                    .update_expression("SET calibration = :n")
                    .condition_expression("#status = :replayed")
                    .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
                    .expression_attribute_values(":n", AttributeValue::N("1".into()))
                    .expression_attribute_values(":replayed", AttributeValue::S("REPLAYED".into()))
                    .build()
                    .map_err(|e| e.to_string())?;
                Ok(TransactWriteItem::builder().update(update).build())
            })
            .collect::<Result<Vec<_>, String>>()?;
        s.clients
            .dynamodb
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(|e| format!("calibration: {e:?}"))?;
    }
    let rate = ids.len() as f64 / started.elapsed().as_secs_f64().max(1e-9);
    println!("  DynamoDB Local: {rate:.0} conditional updates of envelopes per second, in transactions of 99");
    Ok(())
}

/// `client` again, its requests through a delay line of `latency_ms` in front of its endpoint.
pub(super) async fn delayed(
    client: &aws_sdk_dynamodb::Client,
    latency_ms: u64,
) -> Result<aws_sdk_dynamodb::Client, String> {
    let Target::Local { dynamodb_url: url, .. } = Target::local_from_env() else {
        return Err("the local stack has no DynamoDB Local address".into());
    };
    let local = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("DynamoDB Local's address {url} is not host:port"))?;
    let line = delay_line(local, Duration::from_millis(latency_ms))
        .await
        .map_err(|e| format!("a loopback port for the delay line: {e}"))?;
    let config = client
        .config()
        .to_builder()
        .endpoint_url(format!("http://{line}"))
        .build();
    Ok(aws_sdk_dynamodb::Client::from_conf(config))
}

pub async fn run(args: ReplayDrainArgs) {
    let count = args.count;
    let invocations = args.invocations.max(1);
    let latency_ms = args.latency_ms;
    println!("a backlog of {count} envelopes, every gate on, no rate limit, on the local stack");
    let latencies = if latency_ms > 0 { vec![0, latency_ms] } else { vec![0] };
    for latency in latencies {
        for k in [1, invocations] {
            if let Err(e) = drain(count, k, latency).await {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }
}

/// The flags of `cargo xtask bench replay-drain`.
#[derive(clap::Args, Clone, Debug)]
pub struct ReplayDrainArgs {
    /// Envelopes in the backlog.
    #[arg(long, default_value_t = 2000)]
    pub count: u32,
    /// Concurrent replay invocations in the second run.
    #[arg(long, default_value_t = 4)]
    pub invocations: usize,
    /// Delay in front of DynamoDB Local for the second round, milliseconds (0: none).
    #[arg(long, default_value_t = 5)]
    pub latency_ms: u64,
}
