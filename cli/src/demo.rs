//! `dlqctl demo`: the local pipeline end to end on a generated workload — valid transactions,
//! duplicates, poison, unrecoverable payloads and transient ledger faults — then proof, from the
//! stores themselves, that every message sent is committed, suppressed as a duplicate, or
//! dead-lettered, and that nothing posted twice.

use anyhow::{Result, bail};
use clap::Args;
use recon_dlq::adapters::aws::AwsClients;
use recon_dlq::adapters::aws::dynamodb::{DynamoAuditLog, DynamoLedger};
use recon_dlq::adapters::aws::provision::{StackSettings, ensure_stack, reset_data};
use recon_dlq::adapters::aws::sqs::SqsQueue;
use recon_dlq::adapters::faults::{Fault, FaultyLedger};
use recon_dlq::consume::AwsConsumer;
use recon_dlq::decisions::RetryPolicy;
use recon_dlq::decisions::triage;
use recon_dlq::domain::{
    AuditKind, CurrencyMapping, EnvelopeStatus, MatchDecision, NewMessage, PeriodRecord, PeriodStatus, TransientKind,
    labels,
};
use recon_dlq::enrich::AwsEnricher;
use recon_dlq::local::PumpOptions;
use recon_dlq::ports::ReferenceData;
use recon_dlq::reconcile::Tally;
use recon_dlq::replay::{ReplayRequest, Selector};
use recon_dlq::resources::ResourceNames;
use recon_dlq::telemetry::TracingMetrics;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::ops::{consumer_settings, enricher_settings, pump_dlq, pump_with, send_bodies};

#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    /// Valid transactions in the workload.
    #[arg(long, default_value_t = 200)]
    pub valid: usize,
    /// Seed of the generated workload (same seed, same workload).
    #[arg(long, default_value_t = 20261202)]
    pub seed: u64,
}

/// What the workload expects of each message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Expect {
    Commit,
    Duplicate,
    DeadLetter(String),
}

struct Workload {
    bodies: Vec<String>,
    expect: Vec<Expect>,
    /// source_hash -> injected fault
    faults: Vec<(String, Fault)>,
}

/// SplitMix64: a small, seeded, reproducible generator (no dependency needed for a demo).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const ENTITIES: [(&str, &str, u32); 4] = [
    ("ACME-US", "USD", 2),
    ("ACME-JP", "JPY", 0),
    ("ACME-BH", "BHD", 3),
    ("ACME-EU", "EUR", 2),
];
const CLOSED: (&str, &str) = ("ACME-US", "2026-10");

fn transaction(rng: &mut Rng, n: usize) -> NewMessage {
    let (entity, currency, scale) = ENTITIES[rng.below(ENTITIES.len() as u64) as usize];
    let amount = Decimal::new(rng.below(5_000_000) as i64 + 1, scale);
    NewMessage {
        message_id: format!("demo-{n:05}"),
        ledger_entity: entity.into(),
        currency: currency.into(),
        amount: amount.to_string(),
        match_decision: [MatchDecision::Matched, MatchDecision::Partial, MatchDecision::Unmatched]
            [rng.below(3) as usize],
        trace_id: format!("trace-{:016x}", rng.next()),
        value_date: format!("2026-11-{:02}", 1 + rng.below(28)),
        external_ref: format!("BANK-{:08}", rng.below(100_000_000)),
        counterparty: ["Globex", "Initech", "Umbrella", "Hooli"][rng.below(4) as usize].into(),
    }
}

fn body(m: &NewMessage) -> Result<String> {
    Ok(m.to_body()?)
}

fn generate(args: &DemoArgs) -> Result<(Workload, Workload)> {
    let mut rng = Rng(args.seed);
    let mut n = 0;
    let mut next = |rng: &mut Rng| {
        n += 1;
        transaction(rng, n)
    };

    // Phase 1: the happy path only, to measure what a committed message costs.
    let valid: Vec<NewMessage> = (0..args.valid).map(|_| next(&mut rng)).collect();
    let happy = Workload {
        bodies: valid.iter().map(body).collect::<Result<_>>()?,
        expect: vec![Expect::Commit; valid.len()],
        faults: Vec::new(),
    };

    let mut w = Workload {
        bodies: Vec::new(),
        expect: Vec::new(),
        faults: Vec::new(),
    };
    let push = |w: &mut Workload, b: String, e: Expect| {
        w.bodies.push(b);
        w.expect.push(e);
    };
    // Duplicates: exact re-sends, and the same economic content under a new message id with
    // other formatting (trailing zeros, lower-case currency).
    for m in valid.iter().take(10) {
        push(&mut w, body(m)?, Expect::Duplicate);
    }
    for m in valid.iter().skip(10).take(10) {
        let mut again = m.clone();
        again.message_id = format!("{}-resent", m.message_id);
        again.amount = format!("{}{}", m.amount, if m.amount.contains('.') { "00" } else { ".000" });
        again.currency = m.currency.to_lowercase();
        push(&mut w, body(&again)?, Expect::Duplicate);
    }
    // Poison: deterministic failures, dead-lettered on the first receive.
    for _ in 0..8 {
        let mut m = next(&mut rng);
        m.currency = "XAU".into();
        m.amount = "1.2500".into();
        push(&mut w, body(&m)?, Expect::DeadLetter("UNMAPPED_CURRENCY:XAU".into()));
    }
    for _ in 0..4 {
        let mut m = next(&mut rng);
        m.ledger_entity = "ACME-JP".into();
        m.currency = "JPY".into();
        m.amount = "1500.5".into();
        push(
            &mut w,
            body(&m)?,
            Expect::DeadLetter("SCALE_EXCEEDS_CURRENCY:JPY".into()),
        );
    }
    for _ in 0..4 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        v["amount"] = "1,250.00".into();
        push(&mut w, v.to_string(), Expect::DeadLetter("INVALID_DECIMAL".into()));
    }
    for _ in 0..4 {
        let mut m = next(&mut rng);
        m.ledger_entity = CLOSED.0.into();
        m.currency = "USD".into();
        m.amount = "99.95".into();
        m.value_date = format!("{}-15", CLOSED.1);
        push(
            &mut w,
            body(&m)?,
            Expect::DeadLetter(format!("CLOSED_PERIOD:{}:{}", CLOSED.0, CLOSED.1)),
        );
    }
    for _ in 0..4 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("match_decision");
        }
        push(
            &mut w,
            v.to_string(),
            Expect::DeadLetter("SCHEMA_VIOLATION:match_decision".into()),
        );
    }
    // Unrecoverable: cannot even be identified.
    for i in 0..3 {
        push(
            &mut w,
            format!("<ISO20022 truncated frame {i}"),
            Expect::DeadLetter("NOT_JSON".into()),
        );
    }
    for _ in 0..3 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("source_hash");
        }
        push(&mut w, v.to_string(), Expect::DeadLetter("MISSING_SOURCE_HASH".into()));
    }
    for _ in 0..3 {
        let m = next(&mut rng);
        let mut v: serde_json::Value = serde_json::from_str(&body(&m)?)?;
        v["amount"] = "0.01".into();
        push(&mut w, v.to_string(), Expect::DeadLetter("HASH_MISMATCH".into()));
    }
    // Transient: the ledger fails twice then recovers; or never recovers.
    for _ in 0..6 {
        let m = next(&mut rng);
        w.faults.push((m.compute_hash()?, Fault::Times(2)));
        push(&mut w, body(&m)?, Expect::Commit);
    }
    for _ in 0..3 {
        let m = next(&mut rng);
        w.faults.push((m.compute_hash()?, Fault::Always));
        push(
            &mut w,
            body(&m)?,
            Expect::DeadLetter("TRANSIENT_EXHAUSTED:THROTTLED".into()),
        );
    }
    Ok((happy, w))
}

fn count<'a>(it: impl Iterator<Item = &'a Expect>, f: impl Fn(&Expect) -> bool) -> u64 {
    it.filter(|e| f(e)).count() as u64
}

pub async fn run(clients: &AwsClients, names: &ResourceNames, args: &DemoArgs) -> Result<()> {
    if !clients.target.is_local() {
        bail!("the demo resets its queues and tables: it runs against the local stack only (drop --aws)");
    }
    let started = Instant::now();
    let settings = StackSettings::default();
    println!(
        "== setting up {} on the local stack (queues, tables, Object Lock bucket)",
        names.main_queue.trim_end_matches("-main")
    );
    let stack = ensure_stack(clients, names, &settings).await?;
    reset_data(clients, &stack).await?;

    let (happy, mess) = generate(args)?;
    let mut consumer_cfg = consumer_settings(&stack)?;
    // Short backoff so the demo's transient faults play out in seconds, not minutes.
    consumer_cfg.retry = RetryPolicy {
        max_attempts: settings.max_receive_count,
        backoff_base_secs: 1,
        backoff_cap_secs: 4,
    };
    let ledger = FaultyLedger::new(
        DynamoLedger::new(clients.dynamodb.clone(), &consumer_cfg.ledger_table),
        TransientKind::Throttled,
    );
    for (hash, fault) in &mess.faults {
        ledger.inject(hash, *fault);
    }
    let consumer = Arc::new(AwsConsumer::from_settings(
        clients,
        &consumer_cfg,
        ledger,
        "dlqctl-demo",
    ));
    consumer
        .reference
        .put_period(&PeriodRecord {
            entity: CLOSED.0.into(),
            period: CLOSED.1.into(),
            status: PeriodStatus::Closed,
        })
        .await?;
    let main = SqsQueue::new(clients.sqs.clone(), &stack.main_queue_url);
    let opts = PumpOptions {
        progress_every: 10,
        ..PumpOptions::default()
    };

    println!("== phase 1: {} valid transactions", happy.bodies.len());
    send_bodies(&main, &happy.bodies, true).await?;
    let before = clients.requests.total("dynamodb");
    let p1 = pump_with(clients, &stack, consumer.clone(), &opts).await?;
    let ddb_requests = clients.requests.total("dynamodb") - before;
    let committed1 = p1.outcomes.get("COMMITTED").copied().unwrap_or(0);
    let wcu = consumer.ledger.inner().write_units();
    println!(
        "   {committed1} committed; DynamoDB: {ddb_requests} requests ({:.3} per committed message, reference-data loads included), {wcu:.1} write units ({:.3} per committed message)",
        ddb_requests as f64 / committed1.max(1) as f64,
        wcu / committed1.max(1) as f64
    );

    println!(
        "== phase 2: {} more messages: duplicates, poison, unrecoverable, transient ledger faults (backoff 1-4 s)",
        mess.bodies.len()
    );
    send_bodies(&main, &mess.bodies, true).await?;
    let p2 = pump_with(clients, &stack, consumer.clone(), &opts).await?;
    let retries = p2.outcomes.get("RETRY_SCHEDULED").copied().unwrap_or(0);
    println!(
        "   pumped {} deliveries ({retries} transient retries with growing visibility timeouts)",
        p2.received
    );

    let settings_e = enricher_settings(&stack)?;
    let enricher = Arc::new(AwsEnricher::with_metrics(
        clients,
        &settings_e,
        "dlqctl-demo",
        TracingMetrics,
    ));
    let p3 = pump_dlq(clients, &stack, &enricher, &opts).await?;
    println!(
        "== enrichment: {} dead letters wrapped in envelopes (WORM copies in {}), {} quarantined at once",
        p3.outcomes.get("ENRICHED").copied().unwrap_or(0) + p3.outcomes.get("QUARANTINED").copied().unwrap_or(0),
        stack.names.quarantine_bucket,
        p3.outcomes.get("QUARANTINED").copied().unwrap_or(0),
    );

    // Checkpoint: what the consumer and the enricher did, read back from the stores.
    let audit = DynamoAuditLog::new(clients.dynamodb.clone(), &stack.names.audit_table)
        .scan()
        .await?;
    let envelopes = crate::triage::envelopes(&enricher.store, None).await?;
    let duplicates = audit
        .iter()
        .filter(|r| r.kind == AuditKind::DuplicateSuppressed)
        .count() as u64;
    let dead_lettered_audit = audit.iter().filter(|r| r.kind == AuditKind::DeadLettered).count() as u64;
    let mut by_cause: BTreeMap<String, u64> = BTreeMap::new();
    for e in &envelopes {
        *by_cause.entry(e.root_cause.clone()).or_default() += 1;
    }
    let all: Vec<&Expect> = happy.expect.iter().chain(mess.expect.iter()).collect();
    let sent = all.len() as u64;
    let exp_commit = count(all.iter().copied(), |e| *e == Expect::Commit);
    let exp_dup = count(all.iter().copied(), |e| *e == Expect::Duplicate);
    let mut exp_dead: BTreeMap<String, u64> = BTreeMap::new();
    for e in &all {
        if let Expect::DeadLetter(c) = e {
            *exp_dead.entry(c.clone()).or_default() += 1;
        }
    }
    let committed_before = DynamoLedger::new(clients.dynamodb.clone(), &stack.names.ledger_table)
        .scan()
        .await?
        .len() as u64;
    let dead_lettered = envelopes.len() as u64;
    println!(
        "   so far: {committed_before} committed (expected {exp_commit}), {duplicates} duplicates suppressed (expected {exp_dup}), \
         {dead_lettered} dead-lettered (expected {}; the consumer's audit says {dead_lettered_audit})",
        exp_dead.values().sum::<u64>()
    );
    let stage_ok = committed_before == exp_commit
        && duplicates == exp_dup
        && by_cause == exp_dead
        && dead_lettered_audit == dead_lettered
        && sent == committed_before + duplicates + dead_lettered;
    if !stage_ok {
        for (cause, n) in &by_cause {
            println!(
                "     {cause:<36} {n:>4}   (expected {})",
                exp_dead.get(cause).copied().unwrap_or(0)
            );
        }
        bail!("the dead-letter stage does not match the workload (see above)");
    }

    println!("\n== triage (PENDING envelopes)");
    let pending_envelopes: Vec<_> = envelopes
        .iter()
        .filter(|e| e.status == EnvelopeStatus::Pending)
        .cloned()
        .collect();
    crate::triage::print_table(&triage(&pending_envelopes));

    println!("\n== remediation");
    enricher_remediate(clients, &stack, consumer.clone()).await?;
    pump_with(clients, &stack, consumer.clone(), &opts).await?;
    pump_dlq(clients, &stack, &enricher, &opts).await?;

    // The proof, read back from the stores themselves.
    let postings = DynamoLedger::new(clients.dynamodb.clone(), &stack.names.ledger_table)
        .scan()
        .await?;
    let audit = DynamoAuditLog::new(clients.dynamodb.clone(), &stack.names.audit_table)
        .scan()
        .await?;
    let envelopes = crate::triage::envelopes(&enricher.store, None).await?;
    let status_count = |s: EnvelopeStatus| envelopes.iter().filter(|e| e.status == s).count() as u64;
    let (pending, quarantined, replayed) = (
        status_count(EnvelopeStatus::Pending),
        status_count(EnvelopeStatus::Quarantined),
        status_count(EnvelopeStatus::Replayed),
    );
    let replay_suppressed = status_count(EnvelopeStatus::SuppressedDuplicate);
    let committed = postings.len() as u64;
    let via_replay = postings.iter().filter(|p| p.replay_of.is_some()).count() as u64;
    let distinct_hashes = postings
        .iter()
        .map(|p| &p.source_hash)
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    let main_depth = main.depth().await?;
    let dlq_depth = SqsQueue::new(clients.sqs.clone(), &stack.dlq_url).depth().await?;

    // By amount per currency: every message sent, and every terminal state it reached.
    let mut sent_amounts = Tally::default();
    for body in happy.bodies.iter().chain(mess.bodies.iter()) {
        let l = labels(body);
        sent_amounts.add_text(l.currency.as_deref(), l.amount.as_deref());
    }
    let mut committed_amounts = Tally::default();
    for p in &postings {
        committed_amounts.add_parts(Some(&p.currency), Some(p.amount));
    }
    let mut duplicate_amounts = Tally::default();
    for r in audit.iter().filter(|r| r.kind == AuditKind::DuplicateSuppressed) {
        duplicate_amounts.add_text(r.currency.as_deref(), r.amount.as_deref());
    }
    let mut quarantined_amounts = Tally::default();
    for e in envelopes.iter().filter(|e| {
        matches!(
            e.status,
            EnvelopeStatus::Quarantined | EnvelopeStatus::SuppressedDuplicate
        )
    }) {
        quarantined_amounts.add_text(e.currency.as_deref(), e.amount.as_deref());
    }

    println!("\n== result ({:.1} s)", started.elapsed().as_secs_f64());
    println!("   sent                   {sent:>6}");
    println!(
        "   committed              {committed:>6}   ({via_replay} of them through a replay; {distinct_hashes} distinct source hashes)"
    );
    println!(
        "   duplicates suppressed  {:>6}   ({duplicates} by the consumer, {replay_suppressed} by replays)",
        duplicates + replay_suppressed
    );
    println!(
        "   quarantined            {quarantined:>6}   (WORM; flagged for a manual journal where they cannot post)"
    );
    println!("   awaiting remediation   {pending:>6}");
    println!(
        "   queues                 main {}, DLQ {}",
        main_depth.total(),
        dlq_depth.total()
    );
    println!(
        "\n   {:<8} {:>22} {:>22} {:>22} {:>22}",
        "CURRENCY", "SENT", "COMMITTED", "DUPLICATES", "QUARANTINED"
    );
    let mut amounts_hold = true;
    for c in sent_amounts.amounts.keys() {
        let (sa, ca, da, qa) = (
            sent_amounts.get(c),
            committed_amounts.get(c),
            duplicate_amounts.get(c),
            quarantined_amounts.get(c),
        );
        let ok = sa == ca + da + qa;
        amounts_hold &= ok;
        println!(
            "   {c:<8} {sa:>22} {ca:>22} {da:>22} {qa:>22}  {}",
            if ok { "=" } else { "≠" }
        );
    }
    amounts_hold &= sent_amounts.without_amount == quarantined_amounts.without_amount
        && committed_amounts
            .amounts
            .keys()
            .chain(duplicate_amounts.amounts.keys())
            .all(|c| sent_amounts.amounts.contains_key(c));
    println!(
        "   ({} sent messages carry no usable amount; {} quarantined envelopes hold them)",
        sent_amounts.without_amount, quarantined_amounts.without_amount
    );

    let holds = sent == committed - via_replay + duplicates + envelopes.len() as u64
        && sent == committed + duplicates + replay_suppressed + quarantined + pending
        && via_replay == replayed
        && committed == distinct_hashes
        && pending == 0
        && amounts_hold
        && dlq_depth.total() == 0
        && main_depth.total() == 0;
    println!(
        "\n   sent {sent} = committed {committed} + duplicates suppressed {} + quarantined {quarantined}, by count and by amount per currency: {}",
        duplicates + replay_suppressed,
        if holds { "HOLDS" } else { "DOES NOT HOLD" }
    );
    if !holds {
        bail!("the completeness identity does not hold (see above)");
    }

    // The same proof as an auditor gets it: the producer's manifest reconciled against the
    // stores, and the hash-chained audit trail sealed and verified.
    println!("\n== evidence");
    let manifest_path = std::path::Path::new(".local-aws").join("demo-manifest.jsonl");
    let lines: Vec<&str> = happy
        .bodies
        .iter()
        .chain(mess.bodies.iter())
        .map(String::as_str)
        .collect();
    std::fs::write(&manifest_path, lines.join("\n") + "\n")?;
    let manifest = crate::bundle::read_manifest(&manifest_path)?;
    let evidence = crate::bundle::gather(clients, &stack.names, Some(&manifest)).await?;
    let r = &evidence.reconciliation;
    println!(
        "   dlqctl reconcile --manifest {}: {} sent, {} missing, {} extra, {} cross-store problems: {}",
        manifest_path.display(),
        r.sent.as_ref().map_or(0, |s| s.count),
        r.missing.len(),
        r.extra.len(),
        r.problems.len(),
        if r.holds { "HOLDS" } else { "DOES NOT HOLD" }
    );
    let audit_log = DynamoAuditLog::new(clients.dynamodb.clone(), &stack.names.audit_table);
    let worm = recon_dlq::adapters::aws::s3::S3Worm::new(clients.s3.clone(), &stack.names.quarantine_bucket);
    let (key, seal) = recon_dlq::evidence::seal(&audit_log, &worm, chrono::Utc::now()).await?;
    let verified = recon_dlq::evidence::verify_trail(&audit_log, &worm).await?;
    println!(
        "   dlqctl audit verify: {} records in {} chains, {} seals (latest {key}, root {}…): {}",
        verified.records,
        verified.chains.len(),
        verified.seals,
        &seal.root[..16],
        if verified.intact() { "INTACT" } else { "BROKEN" }
    );
    if !r.holds || !verified.intact() {
        crate::bundle::print(r);
        for b in &verified.breaks {
            println!("   BROKEN: {b}");
        }
        bail!("the evidence does not hold (see above)");
    }
    Ok(())
}

/// The operator's remediation, step by step: fix root causes, replay, sweep, quarantine the rest.
async fn enricher_remediate<L: recon_dlq::ports::Ledger>(
    clients: &AwsClients,
    stack: &recon_dlq::adapters::aws::provision::Stack,
    consumer: Arc<AwsConsumer<FaultyLedger<L>>>,
) -> Result<()> {
    consumer
        .reference
        .put_currency(&CurrencyMapping {
            code: "XAU".into(),
            minor_units: 4,
            description: "gold, troy ounce".into(),
        })
        .await?;
    consumer.ledger.heal();
    println!("   fixed: XAU mapped in the reference table (4 minor units); the ledger's outage is over");
    let r = crate::remediate::replayer(clients, stack, "dlqctl-demo")?;
    let req = |selector: Selector, reason: &str, quarantine: bool| ReplayRequest {
        selector,
        dry_run: false,
        reason: reason.into(),
        triggered_by: "demo-operator".into(),
        scheduled: false,
        quarantine,
    };
    let xau = r
        .run(
            &req(
                Selector {
                    root_cause: Some("UNMAPPED_CURRENCY:*".into()),
                    ..Selector::default()
                },
                "XAU mapped",
                false,
            ),
            None,
        )
        .await?;
    println!(
        "   replay UNMAPPED_CURRENCY:*       -> {} re-injected, {} still failing",
        xau.reinjected, xau.still_failing
    );
    let sweep = crate::remediate::sweep(clients, stack).await?;
    println!(
        "   scheduled sweep                  -> {} re-injected, {} quarantined (closed period: manual journal), {} still failing",
        sweep.reinjected, sweep.quarantined, sweep.still_failing
    );
    let rest = r
        .run(
            &req(
                Selector::default(),
                "cannot be fixed by reference data: returned to the bank-feed owner, book by hand",
                true,
            ),
            None,
        )
        .await?;
    println!(
        "   operator quarantines the rest    -> {} quarantined for a manual journal",
        rest.quarantined
    );
    Ok(())
}
