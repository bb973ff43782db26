//! The per-message decision path, on one core, with in-memory ports (see BENCHMARKS.md).
//!
//! - `validate/*`: decode -> schema -> hash check -> reference checks, pure, on a ~1 KB body;
//! - `handle_message/*`: the consumer's whole per-message path (validate, build the posting,
//!   conditional commit into the memory ledger, decision log call) on distinct transactions;
//! - `hash/*`: the canonical SHA-256 alone.

use aws_lambda_events::event::sqs::SqsMessage;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use recon_core::consume::{Consumer, ConsumerConfig, Disposition};
use recon_core::domain::{MatchDecision, NewMessage, ReferenceSnapshot, validate};
use recon_core::ports::SystemClock;
use recon_testkit::memory::{
    MemoryAuditLog, MemoryDeadLetterQueue, MemoryLedger, MemoryReferenceData, MemoryWorkQueue,
};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Poll a future that never waits (in-memory ports) to completion without an executor.
fn ready<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn transaction(n: u64) -> NewMessage {
    NewMessage {
        message_id: format!("3f2c9a7e-5d1b-4c8e-9a77-{n:012}"),
        ledger_entity: "ACME-US-OPS".into(),
        currency: "USD".into(),
        amount: format!("{}.{:02}", 1000 + n % 90_000, n % 100),
        match_decision: MatchDecision::Partial,
        trace_id: format!("1-67a2c3d4-{n:024x}"),
        value_date: "2026-11-27".into(),
        external_ref: format!("CAMT053-20261127-{n:010}"),
        counterparty: "Globex Industrial Supplies GmbH & Co. KG".into(),
    }
}

/// A realistic ~1 KB body: the message plus the narrative fields a bank feed carries (unknown
/// to the schema, ignored by validation, not part of the hash).
fn body_1kb(n: u64) -> String {
    let m = transaction(n);
    let mut v: serde_json::Value = serde_json::from_str(&m.to_body().unwrap()).unwrap();
    v["remittance_info"] =
        "INV-2026-118273 INV-2026-118274 INV-2026-118290 partial settlement per agreement ref MSA-77/2024, \
        short-paid by bank charges; see statement line 4411 for the correction entry and contact AR team"
            .into();
    v["bank_statement_line"] = serde_json::json!({
        "account": "DE89370400440532013000",
        "booking_date": "2026-11-27",
        "entry_reference": format!("E2E-{n:020}"),
        "bank_transaction_code": {"domain": "PMNT", "family": "RCDT", "sub_family": "ESCT"},
        "debtor": {"name": "Globex Industrial Supplies GmbH & Co. KG", "iban": "FR1420041010050500013M02606", "bic": "PSSTFRPPXXX"},
        "ultimate_debtor": "Globex Holding SE",
        "purpose": "SUPP",
    });
    v["matcher"] = serde_json::json!({"rule": "amount_tolerance_and_reference", "score": "0.87", "candidates": 3, "version": "2026.11.4"});
    let body = v.to_string();
    assert!((900..1200).contains(&body.len()), "body is {} bytes", body.len());
    body
}

fn sqs(n: u64, body: String) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(format!("0b5f1a6c-sqs-{n:012}"));
    m.receipt_handle = Some(format!("rh-{n}"));
    m.body = Some(body);
    m.attributes.insert("ApproximateReceiveCount".into(), "1".into());
    m
}

fn consumer() -> Consumer<MemoryLedger, MemoryWorkQueue, MemoryDeadLetterQueue, MemoryReferenceData, MemoryAuditLog> {
    Consumer {
        ledger: MemoryLedger::default(),
        queue: MemoryWorkQueue::default(),
        dlq: MemoryDeadLetterQueue::default(),
        reference: MemoryReferenceData::default(),
        audit: MemoryAuditLog::default(),
        clock: Arc::new(SystemClock),
        config: ConsumerConfig::default(),
    }
}

fn bench(c: &mut Criterion) {
    let snapshot = ReferenceSnapshot::default();
    let body = body_1kb(1);
    let mut poison = transaction(2);
    poison.currency = "XAU".into();
    let poison = poison.to_body().unwrap();

    let mut g = c.benchmark_group("validate");
    g.throughput(Throughput::Elements(1));
    g.bench_function("valid_1kb", |b| {
        b.iter(|| black_box(validate(black_box(&body), &snapshot)).is_ok())
    });
    g.bench_function("unmapped_currency", |b| {
        b.iter(|| black_box(validate(black_box(&poison), &snapshot)).is_err())
    });
    g.finish();

    let mut g = c.benchmark_group("hash");
    let m = transaction(3);
    g.bench_function("source_hash", |b| b.iter(|| black_box(m.compute_hash())));
    g.finish();

    // Distinct transactions, so every iteration takes the commit (happy) path.
    const POOL: u64 = 50_000;
    let messages: Vec<SqsMessage> = (0..POOL).map(|n| sqs(n, body_1kb(n))).collect();
    let mut g = c.benchmark_group("handle_message");
    g.throughput(Throughput::Elements(1));
    g.bench_function("commit_1kb", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let consumer = consumer();
                let n = (iters - done).min(POOL);
                let start = Instant::now();
                for m in &messages[..n as usize] {
                    let d = ready(consumer.handle_message(black_box(m)));
                    debug_assert_eq!(d, Disposition::Committed);
                    black_box(d);
                }
                total += start.elapsed();
                done += n;
            }
            total
        })
    });
    g.bench_function("duplicate_1kb", |b| {
        let consumer = consumer();
        let first = sqs(0, body_1kb(0));
        ready(consumer.handle_message(&first));
        let again = sqs(1, body_1kb(0));
        b.iter_batched(
            || (),
            |()| black_box(ready(consumer.handle_message(&again))),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
