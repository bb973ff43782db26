//! `make bench-console`: what the console's reads cost at a large backlog. N PENDING envelopes
//! (20 root causes, 5 entities, 3 currencies, dead-lettered over ten days) are written to the
//! envelope table of a stack of the run's own; then each read the console's pages make is asked
//! of the control plane in this process, as a viewer, several times: triage, the first page of
//! envelopes, a page of a rare group (as triage links it) and of its cause alone, one envelope, a
//! page of requests. Figures, not assertions: the milliseconds per answer (median and slowest),
//! the items each read (triage: its totals items), and the answer's size.
//!
//!     cargo xtask bench console [--envelopes N] [--rounds R]      (defaults 100000, 5)

use futures::StreamExt;
use recon_core::control::{Asked, Command, EnvelopeQuery};
use recon_core::domain::operator::Caller;
use recon_core::domain::{DlqEnvelope, RootCause};
use recon_core::ports::{Backlog, EnvelopeStore};
use recon_harness::stack::TestStack;
use recon_testkit::builders::{envelope, now};
use recon_testkit::memory::MemoryMetrics;
use std::time::Instant;

/// The flags of `cargo xtask bench console`.
#[derive(clap::Args, Clone, Debug)]
pub struct ConsoleArgs {
    /// PENDING envelopes in the backlog.
    #[arg(long, default_value_t = 100_000)]
    pub envelopes: u32,
    /// Times each read is asked.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
}

/// Envelopes written at once.
const WRITERS: usize = 32;

/// Envelope `n` of the backlog: root cause one of 20 unmapped currencies (the twentieth rare: one
/// in 1,000), entity one of 5, dead-lettered up to ten days before now.
fn nth(n: u32) -> DlqEnvelope {
    let mut e = envelope(&format!("env_{n:032x}"));
    let group = if n % 1000 == 999 { 19 } else { n % 19 };
    let currency = format!("X{:02}", group);
    e.root_cause = RootCause::UnmappedCurrency(currency.clone()).to_string();
    e.currency = Some(currency);
    e.amount = Some(format!("{}.{:02}", n % 9973, n % 100));
    e.ledger_entity = Some(format!("ENT-{}", n % 5));
    e.dead_lettered_at = now() - chrono::Duration::minutes(i64::from(n % 14_400));
    e
}

pub async fn run(args: ConsoleArgs) {
    if let Err(e) = measure(&args).await {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

async fn measure(args: &ConsoleArgs) -> Result<(), String> {
    let s = TestStack::new("bench-console").await;
    let store =
        recon_aws::dynamodb::DynamoEnvelopeStore::new(s.clients.dynamodb.clone(), &s.stack.names.envelope_table);
    let started = Instant::now();
    let mut written = 0u32;
    let mut writes = futures::stream::iter(0..args.envelopes)
        .map(|n| {
            let store = &store;
            async move { store.create(&nth(n)).await }
        })
        .buffer_unordered(WRITERS);
    while let Some(created) = writes.next().await {
        created.map_err(|e| format!("writing the backlog: {e}"))?;
        written += 1;
        if written.is_multiple_of(10_000) {
            eprintln!(
                "  {written} envelopes written ({:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "a backlog of {} PENDING envelopes written in {:.0} s; each read asked {} times of the control plane, in this process, as a viewer",
        args.envelopes,
        started.elapsed().as_secs_f64(),
        args.rounds
    );

    let settings = s.control_settings();
    let plane = recon_aws::wiring::control_plane(&s.clients, &settings, "bench", MemoryMetrics::default());
    let prefix = &s.stack.names.prefix;
    let viewer = Caller::verified(
        &format!("arn:aws:sts::000000000000:assumed-role/{prefix}-viewer/vera"),
        &settings.roles,
    );
    let rare = EnvelopeQuery {
        root_cause: Some(RootCause::UnmappedCurrency("X19".into()).to_string()),
        ..EnvelopeQuery::default()
    };
    // As triage links to a group: its code and cause (the cause index).
    let rare_group = EnvelopeQuery {
        failure_code: Some(recon_core::domain::FailureCode::PoisonMessage),
        ..rare.clone()
    };
    let reads: [(&str, Command); 6] = [
        ("triage", Command::Triage),
        (
            "envelopes, first page (50)",
            Command::Envelopes(EnvelopeQuery::default()),
        ),
        (
            "envelopes, a rare group (1 in 1,000), as triage links it",
            Command::Envelopes(rare_group),
        ),
        ("envelopes, a rare cause without its code", Command::Envelopes(rare)),
        (
            "one envelope",
            Command::Envelope {
                envelope_id: nth(7).envelope_id,
            },
        ),
        (
            "requests, first page",
            Command::Requests {
                cursor: None,
                limit: None,
            },
        ),
    ];
    println!("\n| read | median ms | slowest ms | envelopes read | answer bytes |\n|---|---:|---:|---:|---:|");
    for (name, command) in reads {
        let mut ms = Vec::new();
        let mut answer = serde_json::Value::Null;
        for round in 0..args.rounds.max(1) {
            let id = format!("bench-{round}");
            let asked = Asked {
                caller: &viewer,
                request_id: &id,
                deadline: None,
            };
            let t = Instant::now();
            answer = Box::pin(plane.handle(&asked, command.clone()))
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let read = answer["scanned"]
            .as_u64()
            .or_else(|| answer["read"].as_u64())
            .map_or_else(|| "-".to_owned(), |n| n.to_string());
        println!("{}", row(name, ms, &read, &answer.to_string().len().to_string()));
    }
    // Side by side: triage as it is made where a table has no totals (and was made before them),
    // from every PENDING envelope, read whole through the status index.
    let mut ms = Vec::new();
    let mut read = 0;
    for _ in 0..args.rounds.max(1) {
        let t = Instant::now();
        let all = recon_core::ports::all_envelopes(&store, Some(recon_core::domain::EnvelopeStatus::Pending))
            .await
            .map_err(|e| e.to_string())?;
        let groups = recon_core::decisions::triage(&all);
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        read = all.len();
        std::hint::black_box(groups);
    }
    println!(
        "{}",
        row(
            "triage counting every PENDING envelope (no totals)",
            ms,
            &read.to_string(),
            "-"
        )
    );
    let pending = store.pending_count().await.map_err(|e| e.to_string())?;
    println!("\n(the PENDING count says {pending}; DynamoDB Local, debug or release as built)");
    s.cleanup().await;
    Ok(())
}

/// A row of the table: `name`, the median and slowest of `ms` (timings in milliseconds), what it
/// read, the answer's size.
fn row(name: &str, mut ms: Vec<f64>, read: &str, bytes: &str) -> String {
    ms.sort_by(f64::total_cmp);
    let (median, slowest) = (ms[ms.len() / 2], ms[ms.len() - 1]);
    format!("| {name} | {median:.1} | {slowest:.1} | {read} | {bytes} |")
}
