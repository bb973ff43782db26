//! A deployment of its own on the local stack for each integration test: provisioned under a
//! unique prefix (queues, tables, WORM bucket), so tests run in parallel without seeing each other,
//! with settings read by the production parsers, and removed again when the test ends — also
//! when it fails (the guard's `Drop`).

use crate::provision::{Stack, StackSettings, delete_stack, ensure_stack};
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::Message;
use recon_aws::dynamodb::{DynamoAuditLog, DynamoEnvelopeStore, DynamoLedger, DynamoReferenceData};
use recon_aws::ledger::AnyLedger;
use recon_aws::sqs::SqsQueue;
use recon_aws::wiring::{self, AwsEnricher, AwsReplayer};
use recon_aws::{AwsClients, Target};
use recon_core::batch::BatchHandler;
use recon_core::config::{ConsumerSettings, ControlSettings, EnricherSettings, ReplaySettings, vars};
use recon_core::consume::{Consumer, ConsumerConfig};
use recon_core::domain::{AuditRecord, CurrencyMapping, DlqEnvelope, Posting};
use recon_core::ports::{
    LedgerScope, OutgoingMessage, ReferenceData, SystemClock, WorkQueue, all_envelopes, read_postings,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

/// A DynamoDB item as the SDK holds it.
pub type RawItem = std::collections::HashMap<String, AttributeValue>;

use crate::http_ledger::LocalGl;
use crate::ledgers::TestLedger;
pub use crate::ledgers::test_ledger_kind;
use crate::pump::{Poll, PumpOptions, PumpStats, pump, to_event_record};
use recon_testkit::builders::parsed;
use recon_testkit::memory::MemoryMetrics;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The retry budget the test stacks use (redrive maxReceiveCount and the consumer's budget).
pub const MAX_ATTEMPTS: u32 = 3;

/// What the test stacks configure differently from production (the rest is the parsers'
/// defaults): a small retry budget with short backoffs, no replay rate limit, their own metrics
/// namespace.
const TEST_ENV: [(&str, &str); 7] = [
    (vars::MAX_ATTEMPTS, "3"),
    (vars::BACKOFF_BASE_SECS, "1"),
    (vars::BACKOFF_CAP_SECS, "4"),
    (vars::REPLAY_RATE_PER_SEC, "0"),
    (vars::REPLAY_QUEUE_HIGH_WATER, "100000"),
    (vars::METRICS_NAMESPACE, "ReconDlqTest"),
    (vars::OVERFLOW_HIGH_WATER, "1000"),
];

pub struct TestStack {
    pub clients: AwsClients,
    pub stack: Stack,
    pub settings: ConsumerSettings,
    /// The ledger the consumer and the replay use: DynamoDB, or with `DLQ_TEST_LEDGER=postgres` a
    /// PostgreSQL database of this stack's own on the local server.
    ledger: AnyLedger,
    /// The ledger's variables as this stack's functions are given them.
    ledger_env: Vec<(&'static str, String)>,
    /// What the ledger is made of (`None` once removed).
    test_ledger: Option<TestLedger>,
    cleaned: bool,
}

impl TestStack {
    /// Provision a fresh deployment named after the test, on the ledger `DLQ_TEST_LEDGER` names.
    pub async fn new(test: &str) -> Self {
        Self::provision(test, false, &test_ledger_kind()).await
    }

    /// The same with FIFO queues.
    pub async fn new_fifo(test: &str) -> Self {
        Self::provision(test, true, &test_ledger_kind()).await
    }

    /// The same on the PostgreSQL ledger, whatever `DLQ_TEST_LEDGER` says.
    pub async fn new_postgres(test: &str) -> Self {
        Self::provision(test, false, "postgres").await
    }

    /// The URL of this stack's PostgreSQL ledger database, if it has one.
    pub fn postgres_url(&self) -> Option<&str> {
        self.test_ledger.as_ref().and_then(TestLedger::postgres_url)
    }

    /// This stack's local HTTP general ledger, if it has one.
    pub fn gl(&self) -> Option<&LocalGl> {
        self.test_ledger.as_ref().and_then(TestLedger::gl)
    }

    /// The same on the HTTP ledger, whatever `DLQ_TEST_LEDGER` says.
    pub async fn new_http(test: &str) -> Self {
        Self::provision(test, false, "http").await
    }

    async fn provision(test: &str, fifo: bool, ledger: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        // Short enough for every name the template's rule derives (the bucket's carries the
        // account and region): a few letters of the test's name and a unique tag.
        let tag: String = test
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(6)
            .collect::<String>()
            .to_ascii_lowercase();
        let unique = (u64::from(std::process::id()) << 40)
            ^ (u64::from(COUNTER.fetch_add(1, Ordering::Relaxed)) << 30)
            ^ u64::from(nanos);
        let prefix = format!("it-{tag}-{:010x}", unique & 0xff_ffff_ffff);
        let clients = AwsClients::connect(Target::local_from_env()).await;
        let mut names = match recon_aws::identity::derived_names(&clients, &prefix).await {
            Ok(names) => names,
            Err(e) => panic!("the local AWS stack is not reachable; start it with `make local-up` ({e})"),
        };
        if fifo {
            names = names.with_fifo_queues();
        }
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
        let (test_ledger, ledger_env) = TestLedger::provision(ledger, &clients, &stack.names, &tag).await;
        let settings = parsed(ConsumerSettings::from_lookup(
            stack.lookup(|k| test_env(k, &borrowed(&ledger_env))),
        ));
        TestStack {
            ledger: wiring::consumer_ledger(&clients, &settings),
            clients,
            stack,
            settings,
            ledger_env,
            test_ledger: Some(test_ledger),
            cleaned: false,
        }
    }

    /// The ledger the consumer commits to and the replay's gate 2 asks (one pool, shared by
    /// every clone).
    pub fn ledger(&self) -> AnyLedger {
        self.ledger.clone()
    }

    /// The DynamoDB reference ledger of this stack, whichever ledger the stack's functions use.
    pub fn dynamo_ledger(&self) -> DynamoLedger {
        DynamoLedger::new(self.clients.dynamodb.clone(), &self.settings.ledger_table)
    }

    /// Delete a transaction's posting, as someone with write access to the ledger could.
    pub async fn delete_posting(&self, posting: &Posting) {
        if let Some(l) = &self.test_ledger {
            l.delete_posting(&self.clients, posting).await;
        }
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
    pub fn envelope_store(&self) -> DynamoEnvelopeStore {
        DynamoEnvelopeStore::new(self.clients.dynamodb.clone(), &self.stack.names.envelope_table)
    }

    /// A consumer on this stack with the given ledger and work queue.
    pub fn consumer_with<L: recon_core::ports::Ledger, Q: WorkQueue>(
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

    /// Pump the main queue through `handler` (a consumer) until idle.
    pub async fn pump<H: BatchHandler>(&self, handler: &H) -> PumpStats {
        pump(
            &self.main_queue(),
            &self.stack.main_queue_arn,
            "us-east-1",
            &pump_options(),
            handler,
        )
        .await
        .expect("pump")
    }

    /// Pump the DLQ through `handler` (an enricher) until idle.
    pub async fn pump_dlq<H: BatchHandler>(&self, handler: &H) -> PumpStats {
        pump(&self.dlq(), &self.stack.dlq_arn, "us-east-1", &pump_options(), handler)
            .await
            .expect("pump DLQ")
    }

    /// An enricher on this stack (metrics kept in memory) with the given high-water mark.
    pub fn enricher(&self, high_water: i64) -> Arc<AwsEnricher<MemoryMetrics>> {
        Arc::new(wiring::enricher(
            &self.clients,
            &self.enricher_settings(high_water),
            "integration-test",
            MemoryMetrics::default(),
        ))
    }

    /// The enricher's settings for this stack.
    pub fn enricher_settings(&self, high_water: i64) -> EnricherSettings {
        let mark = high_water.to_string();
        parsed(EnricherSettings::from_lookup(
            self.stack
                .lookup(|k| test_env(k, &[(vars::OVERFLOW_HIGH_WATER, &mark)])),
        ))
    }

    /// A replay on this stack: no rate limit, metrics in memory.
    pub fn replayer(&self) -> AwsReplayer<MemoryMetrics> {
        wiring::replayer(
            &self.clients,
            &self.replay_settings(),
            "integration-test",
            MemoryMetrics::default(),
        )
    }

    /// The replay's settings for this stack (no rate limit).
    pub fn replay_settings(&self) -> ReplaySettings {
        parsed(ReplaySettings::from_lookup(
            self.stack.lookup(|k| test_env(k, &borrowed(&self.ledger_env))),
        ))
    }

    /// The control plane's settings for this stack, as its function parses them (the decision
    /// key they name is not created with the stack: a test that seals decisions creates it).
    pub fn control_settings(&self) -> ControlSettings {
        parsed(ControlSettings::from_lookup(
            self.stack.lookup(|k| test_env(k, &borrowed(&self.ledger_env))),
        ))
    }

    /// `bodies` sent, consumed, and their dead letters enveloped (high-water `high_water`): the
    /// consumer, to consume what follows.
    pub async fn enveloped(
        &self,
        bodies: &[String],
        high_water: i64,
    ) -> Arc<Consumer<AnyLedger, SqsQueue, SqsQueue, Arc<DynamoReferenceData>, DynamoAuditLog>> {
        let consumer = self.consumer_with(self.ledger(), self.main_queue());
        self.send(bodies).await;
        self.pump(&consumer).await;
        self.pump_dlq(&self.enricher(high_water)).await;
        consumer
    }

    /// `bodies` through a day of remediation: consumed, the dead letters enveloped (high-water
    /// `high_water`), XAU mapped (4 minor units), the sweep's replay, and consumed again.
    pub async fn remediated(&self, bodies: &[String], high_water: i64) {
        let consumer = self.enveloped(bodies, high_water).await;
        self.map_currency("XAU", 4).await;
        self.replayer()
            .run(&recon_testkit::builders::sweep_request(), None)
            .await
            .expect("the sweep");
        self.pump(&consumer).await;
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
        all_envelopes(&self.envelope_store(), None)
            .await
            .expect("list envelopes")
    }

    /// Receive messages from `queue` until `n` are gathered (or 20 s), hidden for `visibility`
    /// seconds, and build one Lambda event from them.
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

    /// Every posting of the ledger, read as reconcile reads them.
    pub async fn postings(&self) -> Vec<Posting> {
        read_postings(&self.ledger, &LedgerScope::default())
            .await
            .expect("read the ledger")
    }
    /// One raw item of the audit table (for the tests that tamper with it, as its writers could).
    pub async fn audit_item(&self, id: &str) -> RawItem {
        self.clients
            .dynamodb
            .get_item()
            .table_name(&self.settings.audit_table)
            .key(recon_core::resources::keys::AUDIT_PK, AttributeValue::S(id.into()))
            .send()
            .await
            .expect("GetItem on the audit table")
            .item
            .unwrap_or_else(|| panic!("no audit item {id}"))
    }

    /// Write a raw item into the audit table, as anyone with write access could.
    pub async fn put_audit_item(&self, item: RawItem) {
        self.clients
            .dynamodb
            .put_item()
            .table_name(&self.settings.audit_table)
            .set_item(Some(item))
            .send()
            .await
            .expect("PutItem on the audit table");
    }

    pub async fn audit(&self) -> Vec<AuditRecord> {
        self.audit_log().scan().await.expect("scan audit")
    }

    /// Put back a posting a test deleted.
    pub async fn restore_posting(&self, posting: &Posting) {
        if let Some(l) = &self.test_ledger {
            l.restore_posting(&self.ledger, posting).await;
        }
    }

    /// Remove the stack's queues and tables (the WORM bucket stays: Object Lock).
    pub async fn cleanup(mut self) {
        let _ = delete_stack(&self.clients, &self.stack).await;
        if let Some(l) = self.test_ledger.take() {
            l.remove(&self.clients).await;
        }
        self.cleaned = true;
    }
}

impl Drop for TestStack {
    /// A test that fails before its `cleanup` still removes its queues and tables: on a thread of
    /// its own (the test's runtime may be unwinding), with clients of its own.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let stack = self.stack.clone();
        let test_ledger = self.test_ledger.take();
        let cleanup = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let clients = AwsClients::connect(Target::local_from_env()).await;
                let _ = delete_stack(&clients, &stack).await;
                if let Some(l) = test_ledger {
                    l.remove(&clients).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// A test stack's variable: `extra` first, then [`TEST_ENV`] (never the process environment, so a
/// developer's `DLQ_*` variables do not change a test).
fn test_env(k: &str, extra: &[(&str, &str)]) -> Option<String> {
    extra
        .iter()
        .chain(TEST_ENV.iter())
        .find(|(n, _)| *n == k)
        .map(|(_, v)| (*v).to_owned())
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn pump_options() -> PumpOptions {
    PumpOptions {
        max_duration: Duration::from_secs(120),
        ..PumpOptions::default()
    }
}

/// A string message attribute of a received SQS message.
pub fn attribute<'m>(m: &'m Message, name: &str) -> Option<&'m str> {
    m.message_attributes()
        .and_then(|a| a.get(name))
        .and_then(|v| v.string_value())
}
