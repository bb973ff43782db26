//! Harness for integration tests against the local AWS stack. Each test provisions its own
//! deployment under a unique prefix (queues, tables, WORM bucket), so tests run in parallel
//! without seeing each other, and removes its queues and tables at the end.

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::Message;
use recon_dlq::adapters::aws::dynamodb::DynamoEnvelopeStore;
use recon_dlq::adapters::aws::dynamodb::{DynamoAuditLog, DynamoLedger, DynamoReferenceData};
use recon_dlq::adapters::aws::provision::{Stack, StackSettings, delete_stack, ensure_stack};
use recon_dlq::adapters::aws::sqs::{OutgoingMessage, SqsQueue};
use recon_dlq::adapters::aws::{AwsClients, Target};
use recon_dlq::adapters::memory::MemoryMetrics;
use recon_dlq::config::{ConsumerSettings, EnricherSettings, ReplaySettings};
use recon_dlq::consume::{BatchReport, Consumer, ConsumerConfig};
use recon_dlq::decisions::RetryPolicy;
use recon_dlq::domain::{AuditRecord, CurrencyMapping, DlqEnvelope, MatchDecision, NewMessage, Posting};
use recon_dlq::enrich::AwsEnricher;
use recon_dlq::local::{PumpOptions, PumpStats, pump_handler, to_event_record};
use recon_dlq::ports::{AuditLog, DeadLetterQueue, Ledger, Metrics, ReferenceData, SystemClock, WorkQueue};
use recon_dlq::replay::AwsReplayer;
use recon_dlq::resources::ResourceNames;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The retry budget the test stacks use (redrive maxReceiveCount and the consumer's budget).
pub const MAX_ATTEMPTS: u32 = 3;

pub struct TestStack {
    pub clients: AwsClients,
    pub stack: Stack,
    pub settings: ConsumerSettings,
}

/// A valid transaction, numbered.
pub fn tx(n: u32) -> NewMessage {
    NewMessage {
        message_id: format!("m-{n}"),
        ledger_entity: "ACME-US".into(),
        currency: "USD".into(),
        amount: format!("{n}.10"),
        match_decision: MatchDecision::Matched,
        trace_id: format!("trace-{n}"),
        value_date: "2026-11-30".into(),
        external_ref: format!("BANK-{n:06}"),
        counterparty: "Globex".into(),
    }
}

impl TestStack {
    /// Provision a fresh deployment named after the test.
    pub async fn new(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let prefix = format!(
            "it-{test}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let clients = AwsClients::connect(Target::local_from_env()).await;
        let names = ResourceNames::with_prefix(&prefix);
        let settings = StackSettings {
            max_receive_count: MAX_ATTEMPTS,
            ..StackSettings::default()
        };
        let stack = match ensure_stack(&clients, &names, &settings).await {
            Ok(s) => s,
            Err(e) => {
                panic!("the local AWS stack is not reachable; start it with `make local-up` ({e})")
            }
        };
        let settings = ConsumerSettings {
            main_queue_url: stack.main_queue_url.clone(),
            dead_letter_queue_url: stack.dlq_url.clone(),
            ledger_table: names.ledger_table.clone(),
            reference_table: names.reference_table.clone(),
            audit_table: names.audit_table.clone(),
            retry: RetryPolicy {
                max_attempts: MAX_ATTEMPTS,
                backoff_base_secs: 1,
                backoff_cap_secs: 4,
            },
            deadline_margin: Duration::from_secs(3),
            concurrency: 8,
            reference_cache: Duration::from_secs(30),
        };
        TestStack {
            clients,
            stack,
            settings,
        }
    }

    pub fn ledger(&self) -> DynamoLedger {
        DynamoLedger::new(self.clients.dynamodb.clone(), &self.settings.ledger_table)
    }
    pub fn main_queue(&self) -> SqsQueue {
        SqsQueue::new(self.clients.sqs.clone(), &self.stack.main_queue_url)
    }
    pub fn dlq(&self) -> SqsQueue {
        SqsQueue::new(self.clients.sqs.clone(), &self.stack.dlq_url)
    }
    pub fn reference(&self) -> Arc<DynamoReferenceData> {
        Arc::new(DynamoReferenceData::new(
            self.clients.dynamodb.clone(),
            &self.settings.reference_table,
            self.settings.reference_cache,
        ))
    }
    pub fn audit_log(&self) -> DynamoAuditLog {
        DynamoAuditLog::new(self.clients.dynamodb.clone(), &self.settings.audit_table)
    }

    /// A consumer on this stack with the given ledger and work queue.
    pub fn consumer_with<L: Ledger, Q: WorkQueue>(
        &self,
        ledger: L,
        queue: Q,
    ) -> Arc<Consumer<L, Q, SqsQueue, Arc<DynamoReferenceData>, DynamoAuditLog>> {
        Arc::new(Consumer {
            ledger,
            queue,
            dlq: self.dlq(),
            reference: self.reference(),
            audit: self.audit_log(),
            clock: Arc::new(SystemClock),
            config: ConsumerConfig {
                retry: self.settings.retry,
                actor: "integration-test".into(),
                ..ConsumerConfig::default()
            },
        })
    }

    pub async fn send(&self, bodies: &[String]) -> Vec<String> {
        let mut ids = Vec::new();
        for chunk in bodies.chunks(10) {
            let batch: Vec<_> = chunk
                .iter()
                .map(|b| OutgoingMessage {
                    body: b.clone(),
                    ..Default::default()
                })
                .collect();
            for r in self.main_queue().send_batch(&batch).await.expect("send batch") {
                ids.push(r.expect("message accepted"));
            }
        }
        ids
    }

    /// Pump the main queue through `consumer` until idle.
    pub async fn pump<L, Q, D, R, A>(&self, consumer: &Arc<Consumer<L, Q, D, R, A>>) -> PumpStats
    where
        L: Ledger,
        Q: WorkQueue,
        D: DeadLetterQueue,
        R: ReferenceData,
        A: AuditLog,
    {
        let opts = PumpOptions {
            max_duration: Duration::from_secs(120),
            ..PumpOptions::default()
        };
        pump_handler(
            &self.main_queue(),
            &self.stack.main_queue_arn,
            "us-east-1",
            &opts,
            consumer.as_ref(),
        )
        .await
        .expect("pump")
    }

    /// An enricher on this stack (metrics kept in memory) with the given high-water mark.
    pub fn enricher(&self, high_water: i64) -> Arc<AwsEnricher<MemoryMetrics>> {
        let settings = self.enricher_settings(high_water);
        Arc::new(AwsEnricher::with_metrics(
            &self.clients,
            &settings,
            "integration-test",
            MemoryMetrics::default(),
        ))
    }

    /// The enricher's settings for this stack.
    pub fn enricher_settings(&self, high_water: i64) -> EnricherSettings {
        EnricherSettings {
            envelope_table: self.stack.names.envelope_table.clone(),
            audit_table: self.settings.audit_table.clone(),
            quarantine_bucket: self.stack.names.quarantine_bucket.clone(),
            overflow_high_water: high_water,
            metrics_namespace: "ReconDlqTest".into(),
            concurrency: 8,
            deadline_margin: Duration::from_secs(3),
        }
    }

    /// Pump the DLQ through `enricher` until idle.
    pub async fn pump_dlq<M: Metrics>(&self, enricher: &Arc<AwsEnricher<M>>) -> PumpStats {
        let opts = PumpOptions {
            max_duration: Duration::from_secs(120),
            ..PumpOptions::default()
        };
        pump_handler(&self.dlq(), &self.stack.dlq_arn, "us-east-1", &opts, enricher.as_ref())
            .await
            .expect("pump DLQ")
    }

    /// A replay on this stack: no rate limit, metrics in memory.
    pub fn replayer(&self) -> AwsReplayer<MemoryMetrics> {
        AwsReplayer::with_metrics(
            &self.clients,
            &self.replay_settings(),
            "integration-test",
            MemoryMetrics::default(),
        )
    }

    /// The replay's settings for this stack (no rate limit).
    pub fn replay_settings(&self) -> ReplaySettings {
        ReplaySettings {
            main_queue_url: self.stack.main_queue_url.clone(),
            envelope_table: self.stack.names.envelope_table.clone(),
            ledger_table: self.settings.ledger_table.clone(),
            reference_table: self.settings.reference_table.clone(),
            audit_table: self.settings.audit_table.clone(),
            quarantine_bucket: self.stack.names.quarantine_bucket.clone(),
            lease_secs: 300,
            max_replays: 3,
            window_days: 90,
            rate_per_sec: 0,
            main_queue_high_water: 100_000,
            page_size: 100,
            overflow_high_water: 1000,
            metrics_namespace: "ReconDlqTest".into(),
            deadline_margin: Duration::from_secs(5),
        }
    }

    /// Map a currency in this stack's reference table.
    pub async fn map_currency(&self, code: &str, minor_units: u32) {
        self.reference()
            .put_currency(&CurrencyMapping {
                code: code.into(),
                minor_units,
                description: String::new(),
            })
            .await
            .expect("map currency");
    }

    /// Every envelope of this stack.
    pub async fn envelopes(&self) -> Vec<DlqEnvelope> {
        let store = DynamoEnvelopeStore::new(self.clients.dynamodb.clone(), &self.stack.names.envelope_table);
        recon_dlq::ports::all_envelopes(&store, None)
            .await
            .expect("list envelopes")
    }

    /// Receive messages from `queue` until `n` are gathered (or `timeout`), hidden for
    /// `visibility` seconds, and build one Lambda event from them.
    pub async fn receive_event(&self, queue: &SqsQueue, n: usize, visibility: i32) -> (SqsEvent, Vec<Message>) {
        let mut got: Vec<Message> = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while got.len() < n && std::time::Instant::now() < deadline {
            let want = i32::try_from(n - got.len()).unwrap_or(10).min(10);
            got.extend(queue.receive(want, 1, Some(visibility)).await.expect("receive"));
        }
        let arn = if queue.url() == self.stack.dlq_url {
            &self.stack.dlq_arn
        } else {
            &self.stack.main_queue_arn
        };
        let mut event = SqsEvent::default();
        event.records = got.iter().map(|m| to_event_record(m, arn, "us-east-1")).collect();
        (event, got)
    }

    /// Every message now in the DLQ (they stay there: received with a long visibility timeout).
    pub async fn dlq_messages(&self) -> Vec<Message> {
        let dlq = self.dlq();
        let mut all = Vec::new();
        loop {
            let batch = dlq.receive(10, 1, Some(300)).await.expect("receive DLQ");
            if batch.is_empty() {
                return all;
            }
            all.extend(batch);
        }
    }

    pub async fn postings(&self) -> Vec<Posting> {
        self.ledger().scan().await.expect("scan ledger")
    }
    pub async fn audit(&self) -> Vec<AuditRecord> {
        self.audit_log().scan().await.expect("scan audit")
    }

    pub async fn cleanup(self) {
        let _ = delete_stack(&self.clients, &self.stack).await;
    }
}

/// A scheduled sweep, as the EventBridge schedule triggers it.
pub fn sweep_request() -> recon_dlq::replay::ReplayRequest {
    recon_dlq::replay::ReplayRequest {
        selector: recon_dlq::replay::Selector::default(),
        dry_run: false,
        reason: "scheduled sweep".into(),
        triggered_by: "schedule:test".into(),
        scheduled: true,
        quarantine: false,
    }
}

/// A string message attribute of a received SQS message.
pub fn attribute<'m>(m: &'m Message, name: &str) -> Option<&'m str> {
    m.message_attributes()
        .and_then(|a| a.get(name))
        .and_then(|v| v.string_value())
}

/// What the handler reported: (response, outcome names).
pub fn outcomes(report: &BatchReport) -> Vec<&'static str> {
    report.items.iter().map(|(_, d)| d.name()).collect()
}
