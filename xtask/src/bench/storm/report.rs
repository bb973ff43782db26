//! The storm's figures: per phase, the drain, per message, the incident's cost at list prices, the
//! projection on AWS's published limits; and its proof (nothing lost or doubled, the
//! reconciliation holds).

use super::{Sample, StormArgs};
use recon_aws::AwsClients;
use recon_core::reconcile::State;
use recon_harness::pump::PumpStats;
use recon_harness::stack::TestStack;

/// List prices, us-east-1, as AWS's pricing pages state them (not fetched by this driver: check
/// them before quoting a figure). Dollars per unit.
mod price {
    use rust_decimal::Decimal;
    /// SQS standard queue, per request (64 KB chunk): $0.40 a million.
    pub const SQS_REQUEST: Decimal = Decimal::from_parts(4, 0, 0, false, 7);
    /// DynamoDB on-demand, per write request unit and per read request unit: $0.625 and $0.125
    /// a million.
    pub const DYNAMODB_WRU: Decimal = Decimal::from_parts(625, 0, 0, false, 9);
    pub const DYNAMODB_RRU: Decimal = Decimal::from_parts(125, 0, 0, false, 9);
    /// S3 Standard, per PUT/COPY/POST/LIST request and per GET/HEAD request: $0.005 and $0.0004
    /// a thousand.
    pub const S3_PUT: Decimal = Decimal::from_parts(5, 0, 0, false, 6);
    pub const S3_GET: Decimal = Decimal::from_parts(4, 0, 0, false, 7);
    /// Lambda on arm64, per request ($0.20 a million) and per GB-second.
    pub const LAMBDA_REQUEST: Decimal = Decimal::from_parts(2, 0, 0, false, 7);
    pub const LAMBDA_GB_SECOND: Decimal = Decimal::from_parts(133_334, 0, 0, false, 10);
}

/// AWS's published limits (quotas and service properties), for the projection.
mod limit {
    /// Messages in flight (received, not deleted: backing off) on one standard queue.
    pub const SQS_IN_FLIGHT: f64 = 120_000.0;
    /// Write units per second one DynamoDB partition (and so one item) serves.
    pub const PARTITION_WCU: f64 = 1_000.0;
    /// A new on-demand table's write throughput before it adapts (it doubles on a sustained peak,
    /// over about half an hour).
    pub const NEW_ON_DEMAND_WRU: f64 = 4_000.0;
    /// An on-demand table's default maximum (the per-table quota).
    pub const TABLE_WRU: f64 = 40_000.0;
    /// Concurrent invocations an SQS event source scales to, and how fast (per minute).
    pub const SQS_ESM_CONCURRENCY: f64 = 1_250.0;
    pub const SQS_ESM_SCALE_PER_MINUTE: f64 = 300.0;
    /// Chains of the audit trail; a transaction's round trip on DynamoDB assumed 10 ms.
    pub const AUDIT_CHAINS: f64 = 64.0;
    pub const TRANSACTION_SECONDS: f64 = 0.010;
    /// Production's retry schedule: 5 receives, backoff 2, 4, 8, 16 s (jitter below 2 s each).
    pub const PRODUCTION_BACKOFF_SECONDS: f64 = 2.0 + 4.0 + 8.0 + 16.0 + 4.0;
}

pub(super) struct Run<'a> {
    pub(super) args: &'a StormArgs,
    pub(super) samples: &'a [Sample],
    /// The ledger down, back, the production's end (seconds from the start).
    pub(super) marks: &'a [f64],
    pub(super) drained: Option<f64>,
    pub(super) consumer: &'a PumpStats,
    pub(super) enricher: &'a PumpStats,
    pub(super) replays: u64,
    pub(super) audit_table: &'a str,
    pub(super) ledger_table: &'a str,
    /// Audit records in the trail at the end, and whether every chain verified.
    pub(super) audit_records: u64,
    pub(super) replay_seconds: f64,
}

fn outcome(s: &Sample, name: &str) -> u64 {
    s.outcomes.get(name).copied().unwrap_or(0)
}

fn requests(s: &Sample, service: &str) -> u64 {
    s.requests
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{service}:")))
        .map(|(_, v)| v)
        .sum()
}

fn ops(s: &Sample, names: &[&str]) -> u64 {
    names.iter().map(|n| s.requests.get(*n).copied().unwrap_or(0)).sum()
}

fn units(s: &Sample, table: Option<&str>) -> f64 {
    s.write_units
        .iter()
        .filter(|(k, _)| table.is_none_or(|t| k.ends_with(&format!(" {t}"))))
        .map(|(_, v)| v)
        .sum()
}

impl Run<'_> {
    /// The last sample at or before `t` (the first one for 0).
    fn at(&self, t: f64) -> Sample {
        self.samples
            .iter()
            .rev()
            .find(|s| s.at <= t)
            .or_else(|| self.samples.first())
            .cloned()
            .unwrap_or_default()
    }

    fn last(&self) -> Sample {
        self.samples.last().cloned().unwrap_or_default()
    }

    pub(super) fn print(&self) {
        let end = self.drained.unwrap_or_else(|| self.last().at);
        let (down, up, produced) = (
            self.marks.first().copied().unwrap_or(0.0),
            self.marks.get(1).copied().unwrap_or(0.0),
            self.marks.get(2).copied().unwrap_or(end),
        );
        println!(
            "\n{:<9} {:>6} {:>7} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8}",
            "phase",
            "s",
            "in/s",
            "commit/s",
            "retry/s",
            "dead/s",
            "envel./s",
            "replay/s",
            "audit WCU/s",
            "max main",
            "max DLQ",
            "max bklg"
        );
        for (name, from, to) in [
            ("calm", 0.0, down),
            ("outage", down, up),
            ("recovery", up, produced),
            ("drain", produced, end),
        ] {
            let (a, b) = (self.at(from), self.at(to));
            let secs = (b.at - a.at).max(1e-9);
            let rate = |f: &dyn Fn(&Sample) -> f64| (f(&b) - f(&a)) / secs;
            let within = self.samples.iter().filter(|s| s.at >= from && s.at <= to);
            let (mut main, mut dlq, mut backlog) = (0, 0, 0);
            for s in within {
                main = main.max(s.main_depth);
                dlq = dlq.max(s.dlq_depth);
                backlog = backlog.max(s.pending);
            }
            println!(
                "{name:<9} {:>6.0} {:>7.0} {:>9.0} {:>8.0} {:>8.0} {:>9.0} {:>9.0} {:>9.0} {:>8} {:>7} {:>8}",
                secs,
                rate(&|s| s.produced as f64),
                rate(&|s| outcome(s, "COMMITTED") as f64),
                rate(&|s| outcome(s, "RETRY_SCHEDULED") as f64),
                rate(&|s| outcome(s, "DEAD_LETTERED") as f64),
                rate(&|s| s.enveloped as f64),
                rate(&|s| s.reinjected as f64),
                rate(&|s| units(s, Some(self.audit_table))),
                main,
                dlq,
                backlog
            );
        }
        let last = self.last();
        let first_dead = self
            .samples
            .iter()
            .find(|s| s.dlq_depth > 0 || s.pending > 0)
            .map_or(down, |s| s.at);
        // The remediation is done at the first sample after the last one with a dead letter in
        // the DLQ or the backlog; the catch-up when the main queue is empty too.
        let remediated = self
            .samples
            .iter()
            .rposition(|s| s.dlq_depth > 0 || s.pending > 0)
            .and_then(|i| self.samples.get(i + 1))
            .map(|s| s.at);
        match (remediated, self.drained) {
            (Some(r), Some(t)) => println!(
                "\nrecovery to an empty DLQ and backlog (every dead letter re-injected): {:.0} s ({:?}, {} replay invocations); dead letters waited at most {:.0} s; to an empty main queue too (the first deliveries held up): {:.0} s",
                r - up,
                self.args.drain,
                self.replays,
                r - first_dead,
                t - up
            ),
            _ => println!("\nthe backlog was NOT drained within the run's time budget"),
        }
        let n = self.args.messages as f64;
        let failed = outcome(&last, "FAILED");
        println!(
            "outcomes: {:?}; appends that failed a message for the audit trail's sake (FAILED): {failed}",
            last.outcomes
        );
        let (sqs, dynamodb, s3) = (
            requests(&last, "SQS") as f64,
            requests(&last, "DynamoDB") as f64,
            requests(&last, "S3") as f64,
        );
        let wcu = units(&last, None);
        println!(
            "per message: {:.2} SQS, {:.2} DynamoDB, {:.3} S3 requests; {:.2} write units as DynamoDB Local reports them (it over-reports transactions on tables with indexes), by operation and table: {}",
            sqs / n,
            dynamodb / n,
            s3 / n,
            wcu / n,
            last.write_units
                .iter()
                .map(|(k, v)| format!("{k} {:.2}", v / n))
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.cost(&last, wcu);
        self.projection(&last, down, up);
    }

    /// The run's cost: quantities (counts, and the meters' units and seconds) times list prices,
    /// in `Decimal` with checked sums.
    fn cost(&self, last: &Sample, wcu: f64) {
        use rust_decimal::Decimal;
        let count = |n: u64| Decimal::from(n);
        // A metered quantity (write units in thousandths, seconds in microseconds) as a decimal.
        let metered = |x: f64, scale: u32| Decimal::new((x * 10f64.powi(scale as i32)).round() as i64, scale);
        let reads = ops(
            last,
            &[
                "DynamoDB:GetItem",
                "DynamoDB:Query",
                "DynamoDB:BatchGetItem",
                "DynamoDB:Scan",
            ],
        );
        let s3_put = ops(
            last,
            &[
                "S3:PutObject",
                "S3:ListObjectVersions",
                "S3:ListObjectsV2",
                "S3:CopyObject",
            ],
        );
        let s3_get = ops(last, &["S3:GetObject", "S3:HeadObject"]);
        let invocations = self.consumer.batches + self.enricher.batches + self.replays;
        // The sizes BENCHMARKS.md chose: consumer 768 MB, enricher 512, replay 1024.
        let gb_seconds = [
            (self.consumer.handler_time.as_secs_f64(), Decimal::new(768, 3)),
            (self.enricher.handler_time.as_secs_f64(), Decimal::new(512, 3)),
            (self.replay_seconds, Decimal::new(1024, 3)),
        ]
        .into_iter()
        .try_fold(Decimal::ZERO, |sum, (secs, gb)| {
            metered(secs, 6).checked_mul(gb).and_then(|g| sum.checked_add(g))
        });
        let lines = [
            (
                "SQS requests",
                count(requests(last, "SQS")).checked_mul(price::SQS_REQUEST),
            ),
            ("DynamoDB write units", metered(wcu, 3).checked_mul(price::DYNAMODB_WRU)),
            (
                "DynamoDB reads (one unit each, a lower bound)",
                count(reads).checked_mul(price::DYNAMODB_RRU),
            ),
            (
                "S3 requests",
                count(s3_put)
                    .checked_mul(price::S3_PUT)
                    .zip(count(s3_get).checked_mul(price::S3_GET))
                    .and_then(|(p, g)| p.checked_add(g)),
            ),
            ("Lambda requests", count(invocations).checked_mul(price::LAMBDA_REQUEST)),
            (
                "Lambda GB-seconds (handler time here)",
                gb_seconds.and_then(|g| g.checked_mul(price::LAMBDA_GB_SECOND)),
            ),
        ];
        let total = lines
            .iter()
            .try_fold(Decimal::ZERO, |sum, (_, c)| c.and_then(|c| sum.checked_add(c)));
        let per_thousand = total
            .and_then(|t| t.checked_mul(Decimal::from(1000)))
            .and_then(|t| t.checked_div(count(self.args.messages)));
        let shown = |c: Option<Decimal>| c.map_or_else(|| "overflow".to_owned(), |c| format!("${:.4}", c.round_dp(4)));
        println!(
            "\ncost of the run at list prices (us-east-1): {}, {} per 1,000 messages",
            shown(total),
            shown(per_thousand)
        );
        for (what, c) in lines {
            println!("  {what:<48} {}", shown(c));
        }
    }

    fn projection(&self, last: &Sample, down: f64, up: f64) {
        let (a, b) = (self.at(down), self.at(up));
        let dead = outcome(last, "DEAD_LETTERED").max(1) as f64;
        let committed = outcome(last, "COMMITTED").max(1) as f64;
        // Per dead letter: the audit records the run appended (a dead letter's: dead-lettered,
        // enveloped, replayed), counted in the trail.
        let audit_per_dead = self.audit_records as f64 / dead;
        let ledger_per_commit = units(last, Some(self.ledger_table)) / committed;
        // Handler seconds per message received in the outage: an invocation is busy that long
        // for each message it is given (its batch's time over its batch's size).
        let receive_seconds =
            (b.consumer_seconds - a.consumer_seconds) / (b.consumer_received - a.consumer_received).max(1) as f64;
        let outage_in = (b.produced - a.produced) as f64 / (b.at - a.at).max(1e-9);
        let rows = [
            (
                "main queue: messages in flight while backing off (outage)",
                format!("{:.0} in flight", limit::SQS_IN_FLIGHT),
                format!(
                    "{:.0} s in flight each at production's schedule",
                    limit::PRODUCTION_BACKOFF_SECONDS
                ),
                limit::SQS_IN_FLIGHT / limit::PRODUCTION_BACKOFF_SECONDS,
            ),
            (
                "audit trail: 64 chains, one transaction per round trip (outage)",
                format!("{:.0} appends/s", limit::AUDIT_CHAINS / limit::TRANSACTION_SECONDS),
                format!("{audit_per_dead:.2} records per dead letter"),
                limit::AUDIT_CHAINS / limit::TRANSACTION_SECONDS / audit_per_dead.max(1e-9),
            ),
            (
                "audit trail: one chain's head item (outage)",
                format!("{:.0} WCU/s per item", limit::PARTITION_WCU),
                "2 WCU per append".to_owned(),
                limit::AUDIT_CHAINS * limit::PARTITION_WCU / 2.0 / audit_per_dead.max(1e-9),
            ),
            (
                "ledger table, new on-demand (calm)",
                format!("{:.0} WRU/s", limit::NEW_ON_DEMAND_WRU),
                format!("{ledger_per_commit:.2} WCU per commit"),
                limit::NEW_ON_DEMAND_WRU / ledger_per_commit.max(1e-9),
            ),
            (
                "ledger table, on-demand quota (calm)",
                format!("{:.0} WRU/s", limit::TABLE_WRU),
                format!("{ledger_per_commit:.2} WCU per commit"),
                limit::TABLE_WRU / ledger_per_commit.max(1e-9),
            ),
            (
                "consumer: Lambda's SQS trigger at its most (outage)",
                format!("{:.0} at once", limit::SQS_ESM_CONCURRENCY),
                format!("{receive_seconds:.3} s a failing receive, 5 receives"),
                limit::SQS_ESM_CONCURRENCY / receive_seconds.max(1e-9) / 5.0,
            ),
        ];
        println!(
            "\nprojected on AWS (published limits; per-message use measured here; the outage took {outage_in:.0} msg/s in):"
        );
        println!(
            "  {:<62} {:>18} {:>44} {:>12}",
            "component", "limit", "use", "saturates at"
        );
        let mut first: Option<(&str, f64)> = None;
        let measured = outcome(last, "DEAD_LETTERED") > 0;
        for (what, lim, used, at) in &rows {
            // Without a dead letter, what a dead letter costs was not measured.
            if !measured && what.starts_with("audit trail") {
                println!(
                    "  {what:<62} {lim:>18} {:>44} {:>15}",
                    "no dead letter in this run", "-"
                );
                continue;
            }
            println!("  {what:<62} {lim:>18} {used:>44} {at:>9.0} msg/s");
            if first.is_none_or(|(_, r)| *at < r) {
                first = Some((what, *at));
            }
        }
        if let Some((what, at)) = first {
            println!("  first to saturate: {what}, at {at:.0} messages per second in");
        }
        println!(
            "  Lambda's SQS trigger adds {:.0} concurrent invocations a minute, to {:.0}: a storm's backlog grows until it has scaled",
            limit::SQS_ESM_SCALE_PER_MINUTE,
            limit::SQS_ESM_CONCURRENCY
        );
    }
}

/// The audit records in the trail, and whether every chain links and verifies (its tail is not
/// sealed yet: that is no break).
pub(super) async fn trail(s: &TestStack) -> Result<(u64, bool), String> {
    let worm = recon_aws::s3::S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket());
    let report = recon_core::evidence::verify_trail(&s.audit_log(), &worm, &Default::default())
        .await
        .map_err(|e| format!("audit verify: {e}"))?;
    let links = report
        .breaks
        .iter()
        .all(|b| b.contains("unsealed") || b.contains("no trail"));
    Ok((report.records, links))
}

/// Nothing lost or doubled, and the reconciliation holds: every transaction produced committed
/// exactly once (distinct source hashes = committed postings = transactions), nothing awaiting
/// remediation, the completeness identity HOLDS against the producer's manifest.
pub(super) async fn prove(s: &TestStack, clients: &AwsClients, messages: u64) -> Result<(), String> {
    let bodies: Vec<String> = (0..messages)
        .map(|k| recon_testkit::builders::body(&recon_testkit::builders::tx(u32::try_from(k).unwrap_or(u32::MAX))))
        .collect();
    let path = std::env::temp_dir().join(format!("bench-storm-{}.jsonl", std::process::id()));
    std::fs::write(&path, bodies.join("\n") + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    let manifest = dlqctl::bundle::read_manifest(&path).map_err(|e| e.to_string());
    let _ = std::fs::remove_file(&path);
    let manifest = manifest?;
    let evidence = dlqctl::bundle::gather(
        clients,
        &s.stack.names,
        Some(&manifest),
        None,
        dlqctl::bundle::Keep::Every,
        dlqctl::bundle::DEFAULT_SEGMENTS,
        None,
    )
    .await
    .map_err(|e| format!("reconcile: {e}"))?;
    let r = &evidence.reconciliation;
    let count = |state: State| r.by_state.get(&state).map_or(0, |t| t.count);
    let committed = count(State::Committed);
    let distinct = evidence.committed_source_hashes();
    let waiting = count(State::Pending) + count(State::InFlight);
    let holds = r.holds && r.queued == 0 && waiting == 0 && distinct == committed && committed == messages;
    println!(
        "\nproof: {messages} produced; {committed} committed ({distinct} distinct source hashes), {} duplicates suppressed, {} quarantined, {waiting} awaiting remediation; reconcile against the manifest: {}",
        count(State::Duplicate),
        count(State::Quarantined),
        if holds { "HOLDS" } else { "DOES NOT HOLD" }
    );
    if holds {
        Ok(())
    } else {
        Err(format!("the storm lost or doubled transactions: {:?}", r.problems))
    }
}
