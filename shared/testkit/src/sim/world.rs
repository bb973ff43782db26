//! The simulated deployment: the real consumer, enricher and replay flows on the memory stores
//! and the SQS model, every port behind the fault injector; Lambda's event-source mappings
//! (pollers that start invocations with a deadline and delete what they acknowledged), the
//! EventBridge schedule, the producer and an operator, all as tasks of the deterministic executor.

use aws_lambda_events::event::sqs::SqsEvent;
use recon_core::batch::BatchHandler;
use recon_core::consume::{Consumer, ConsumerConfig};
use recon_core::decisions::RetryPolicy;
use recon_core::domain::{EnvelopeStatus, labels};
use recon_core::enrich::{Enricher, EnricherConfig};
use recon_core::ports::{Clock, EnvelopeStore, OutgoingMessage};
use recon_core::replay::{Invocation, ReplayConfig, ReplayRequest, Replayer, parse_invocation};
use recon_core::resources::{CONSUMER_TIMEOUT, ENRICHER_TIMEOUT, REPLAY_TIMEOUT};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use super::clock::SimClock;
use super::exec::{JoinHandle, Spawner};
use super::faults::Injector;
use super::faulty::Faulty;
use super::gl::SimGl;
use super::ledger::{Books, SimLedger};
use super::rng::SharedRng;
use super::sqs::{QueueSpec, SimQueue, SqsModel};
use super::trace::Trace;
use super::workload::{Produced, Transaction, Workload};
use crate::memory::{MemoryAuditLog, MemoryEnvelopeStore, MemoryMetrics, MemoryReferenceData, MemoryWorm};

mod auditor;
mod operator;
mod settings;

pub use settings::{DLQ_RETENTION, MAIN_QUEUE_RETENTION, MAIN_QUEUE_VISIBILITY, Settings};

pub const MAIN: &str = "main";
/// Lambda's limit on an invocation's payload: an SQS batch above it is cut.
pub const LAMBDA_EVENT_BYTES: usize = 6 * 1024 * 1024;
/// The consumer's name (its actor in the records).
pub const CONSUMER: &str = "consumer";
pub const DLQ: &str = "dead-letter";

pub type SimConsumer = Consumer<
    Faulty<SimLedger>,
    Faulty<SimQueue>,
    Faulty<SimQueue>,
    Faulty<Arc<MemoryReferenceData>>,
    Faulty<Arc<MemoryAuditLog>>,
>;
pub type SimEnricher = Enricher<
    Faulty<Arc<MemoryEnvelopeStore>>,
    Faulty<Arc<MemoryWorm>>,
    Faulty<Arc<MemoryAuditLog>>,
    Arc<MemoryMetrics>,
>;
pub type SimReplayer = Replayer<(
    Faulty<Arc<MemoryEnvelopeStore>>,
    Faulty<SimLedger>,
    Faulty<Arc<MemoryReferenceData>>,
    Faulty<SimQueue>,
    Faulty<Arc<MemoryWorm>>,
    Faulty<Arc<MemoryAuditLog>>,
    Arc<MemoryMetrics>,
)>;

/// The stores, as the oracle reads them after the run.
pub struct Stores {
    pub books: Books,
    pub reference: Arc<MemoryReferenceData>,
    pub audit: Arc<MemoryAuditLog>,
    pub envelopes: Arc<MemoryEnvelopeStore>,
    pub worm: Arc<MemoryWorm>,
    pub metrics: Arc<MemoryMetrics>,
    pub sqs: Arc<SqsModel>,
}

pub struct World {
    pub settings: Settings,
    pub clock: SimClock,
    pub trace: Trace,
    pub stores: Stores,
    pub faults: Arc<Injector>,
    pub crash_ppm: Arc<AtomicU32>,
    spawner: Spawner,
    consumer: Rc<SimConsumer>,
    enricher: Rc<SimEnricher>,
    replayer: Rc<SimReplayer>,
    /// The operator's replays: in-process, on a machine that may stall.
    operator_replayer: Rc<SimReplayer>,
    /// The bodies SQS accepted from the producer (the manifest, each with its SQS message id).
    pub sent: RefCell<Vec<Produced>>,
    /// The transactions the workload means (the oracle's ground truth).
    pub transactions: RefCell<Vec<Transaction>>,
    producing: Cell<bool>,
    /// The operator still has actions to take.
    operating: Cell<bool>,
    stopping: Cell<bool>,
    /// The schedule still starts sweeps.
    sweeping: Cell<bool>,
    /// Invocations that crashed or timed out (set once the run is over).
    pub deaths: Cell<u64>,
    /// What the auditor's reconciliations during the run found wrong, and when.
    pub audits: RefCell<Vec<(Duration, String)>>,
    /// Transactions an approved edit changed: what they must post as now.
    pub edits: RefCell<BTreeMap<usize, Transaction>>,
    invocations: Cell<u64>,
}

impl World {
    pub fn new(settings: Settings, clock: SimClock, rng: SharedRng, trace: Trace, spawner: Spawner) -> Rc<Self> {
        let faults = Arc::new(Injector::new(
            rng.clone(),
            clock.clone(),
            trace.clone(),
            settings.faults,
        ));
        let operator_faults = Arc::new(match settings.operator_stall {
            Some(d) => Injector::new(rng.clone(), clock.clone(), trace.clone(), settings.faults).stalling(50_000, d),
            None => Injector::new(rng.clone(), clock.clone(), trace.clone(), settings.faults),
        });
        let sqs = Arc::new(SqsModel::new(
            clock.clone(),
            rng.clone(),
            settings.duplicate_ppm,
            vec![
                QueueSpec {
                    name: MAIN.into(),
                    arn: "arn:aws:sqs:us-east-1:000000000000:sim-main".into(),
                    fifo: settings.fifo,
                    visibility: settings::MAIN_QUEUE_VISIBILITY,
                    retention: settings.main_retention,
                    redrive: Some((DLQ.into(), settings.max_attempts)),
                },
                QueueSpec {
                    name: DLQ.into(),
                    arn: "arn:aws:sqs:us-east-1:000000000000:sim-dead-letter".into(),
                    fifo: settings.fifo,
                    visibility: ENRICHER_TIMEOUT * 6,
                    retention: settings.dlq_retention,
                    redrive: None,
                },
            ],
        ));
        let books = match settings.gl {
            Some(plan) => Books::Claiming {
                gl: Arc::new(SimGl::new(clock.clone(), rng.clone(), trace.clone(), plan)),
                dedup: Arc::default(),
            },
            None => Books::Reference(Arc::default()),
        };
        let stores = Stores {
            books,
            reference: Arc::default(),
            audit: Arc::default(),
            envelopes: Arc::default(),
            worm: Arc::default(),
            metrics: Arc::default(),
            sqs: sqs.clone(),
        };
        let lag_clock: Arc<dyn Clock> = Arc::new(clock.clone());
        stores
            .envelopes
            .set_index_lag(settings.index_lag.map(|d| (d, lag_clock)));
        if settings.linked_trail {
            stores.envelopes.link_into(Some(stores.audit.clone()));
        }
        let q = |name: &str, faults: &Arc<Injector>| {
            Faulty::new(
                SimQueue {
                    model: sqs.clone(),
                    name: name.into(),
                },
                faults.clone(),
            )
        };
        let clock_port: Arc<dyn Clock> = Arc::new(clock.clone());
        let ledger = stores.books.ledger(&faults, clock_port.clone());
        let consumer = Rc::new(Consumer {
            ledger: Faulty::new(ledger.clone(), faults.clone()),
            queue: q(MAIN, &faults),
            dlq: q(DLQ, &faults),
            reference: Faulty::new(stores.reference.clone(), faults.clone()),
            audit: Faulty::new(stores.audit.clone(), faults.clone()).used_by(CONSUMER),
            clock: clock_port.clone(),
            config: ConsumerConfig {
                retry: RetryPolicy {
                    max_attempts: settings.max_attempts,
                    ..RetryPolicy::default()
                },
                actor: CONSUMER.into(),
                ..ConsumerConfig::default()
            },
        });
        let enricher = Rc::new(Enricher {
            store: Faulty::new(stores.envelopes.clone(), faults.clone()),
            worm: Faulty::new(stores.worm.clone(), faults.clone()),
            audit: Faulty::new(stores.audit.clone(), faults.clone()),
            metrics: stores.metrics.clone(),
            clock: clock_port.clone(),
            config: EnricherConfig {
                actor: "enricher".into(),
                overflow_high_water: settings.overflow_high_water,
                ..EnricherConfig::default()
            },
        });
        // The replay function, and the operator's replays in-process: the same flow over the
        // same stores, the operator's behind their own machine's stalls.
        let replayer = |faults: &Arc<Injector>| {
            Rc::new(SimReplayer {
                progress: None,
                store: Faulty::new(stores.envelopes.clone(), faults.clone()),
                ledger: Faulty::new(ledger.clone(), faults.clone()),
                reference: Faulty::new(stores.reference.clone(), faults.clone()),
                queue: q(MAIN, faults),
                worm: Faulty::new(stores.worm.clone(), faults.clone()),
                audit: Faulty::new(stores.audit.clone(), faults.clone()),
                metrics: stores.metrics.clone(),
                clock: clock_port.clone(),
                config: ReplayConfig {
                    actor: "replay".into(),
                    page_size: settings.page_size,
                    overflow_high_water: settings.overflow_high_water,
                    ..ReplayConfig::default()
                },
            })
        };
        let operator_replayer = replayer(&operator_faults);
        let replayer = replayer(&faults);
        Rc::new(World {
            crash_ppm: Arc::new(AtomicU32::new(settings.crash_ppm)),
            settings,
            clock,
            trace,
            stores,
            faults,
            spawner,
            consumer,
            enricher,
            replayer,
            operator_replayer,
            sent: RefCell::new(Vec::new()),
            transactions: RefCell::new(Vec::new()),
            producing: Cell::new(true),
            operating: Cell::new(true),
            stopping: Cell::new(false),
            sweeping: Cell::new(true),
            deaths: Cell::new(0),
            audits: RefCell::new(Vec::new()),
            edits: RefCell::new(BTreeMap::new()),
            invocations: Cell::new(0),
        })
    }

    fn log(&self, line: impl Into<String>) {
        self.trace.log(&self.clock, line);
    }

    fn invocation_name(&self, function: &str) -> String {
        let n = self.invocations.get() + 1;
        self.invocations.set(n);
        format!("{function}#{n}")
    }

    /// Start every driver: the producer, the pollers, the schedule, the operator, the clock
    /// jumps, and the settling that ends the run.
    pub fn start(self: &Rc<Self>, workload: Workload) {
        *self.transactions.borrow_mut() = workload.transactions;
        let w = self.clone();
        let messages = workload.messages;
        self.spawner.spawn("producer", async move { w.produce(messages).await });
        for i in 0..self.settings.consumer_pollers {
            let w = self.clone();
            let h = self.consumer.clone();
            self.spawner.spawn(format!("consumer-poller-{i}"), async move {
                w.poll(MAIN, "consumer", h, CONSUMER_TIMEOUT).await
            });
        }
        for i in 0..self.settings.enricher_pollers {
            let w = self.clone();
            let h = self.enricher.clone();
            self.spawner.spawn(format!("enricher-poller-{i}"), async move {
                w.poll(DLQ, "enricher", h, ENRICHER_TIMEOUT).await
            });
        }
        let w = self.clone();
        self.spawner.spawn("schedule", async move { w.schedule().await });
        let w = self.clone();
        self.spawner.spawn("operator", async move { w.operate().await });
        for (at, by) in self.settings.clock_jumps.clone() {
            let w = self.clone();
            self.spawner.spawn("clock-jump", async move {
                w.clock.sleep(at).await;
                w.clock.jump(chrono::Duration::seconds(by));
                w.log(format!("wall clock jumps by {by} s"));
            });
        }
        for at in self.settings.audit_at.clone() {
            let w = self.clone();
            self.spawner.spawn("auditor", async move {
                w.clock.sleep(at).await;
                w.audit_now();
            });
        }
        let w = self.clone();
        self.spawner.spawn("settle", async move { w.settle().await });
    }

    async fn produce(&self, workload: Vec<Produced>) {
        let mut last = Duration::ZERO;
        for p in workload {
            self.clock.sleep(p.at.saturating_sub(last)).await;
            last = p.at;
            let group = labels(&p.body).ledger_entity.unwrap_or_else(|| "unlabelled".into());
            let m = OutgoingMessage {
                body: p.body.clone(),
                attributes: p.attributes.clone(),
                group_id: self.settings.fifo.then_some(group),
                dedup_id: None,
                trace_header: None,
            };
            match self.stores.sqs.send(MAIN, &m) {
                Ok(id) => {
                    self.log(format!(
                        "producer sent {id} ({:?} {}, transaction {:?}, {} bytes)",
                        p.kind,
                        labels(&p.body).message_id.unwrap_or_default(),
                        p.txn,
                        p.body.len()
                    ));
                    self.sent.borrow_mut().push(Produced { sqs_id: id, ..p });
                }
                Err(e) => self.log(format!("producer: SQS refused a {:?} message: {e}", p.kind)),
            }
        }
        self.producing.set(false);
    }

    /// Lambda's SQS event-source mapping: receive a batch, invoke, delete what was acknowledged;
    /// an invocation that crashed or timed out deletes nothing.
    async fn poll<H>(&self, queue: &'static str, function: &str, handler: Rc<H>, timeout: Duration)
    where
        H: BatchHandler + 'static,
        H::Outcome: std::fmt::Debug,
    {
        while !self.stopping.get() {
            let mut records = self.stores.sqs.receive(queue, 10);
            if records.is_empty() {
                self.clock.sleep(Duration::from_secs(1)).await;
                continue;
            }
            // Lambda invokes with at most 6 MB of event: the messages past it go back to the
            // queue at once, for the next batch.
            let mut bytes = 0usize;
            let fits = records
                .iter()
                .take_while(|r| {
                    bytes += r.body.as_deref().map_or(0, str::len) + 1024;
                    bytes <= LAMBDA_EVENT_BYTES
                })
                .count()
                .max(1);
            for back in records.split_off(fits) {
                let _ = self
                    .stores
                    .sqs
                    .change_visibility(queue, back.receipt_handle.as_deref().unwrap_or_default(), 0);
            }
            let receipts: Vec<(String, String)> = records
                .iter()
                .map(|r| {
                    (
                        r.message_id.clone().unwrap_or_default(),
                        r.receipt_handle.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let mut event = SqsEvent::default();
            event.records = records;
            let name = self.invocation_name(function);
            let deadline = self.clock.now() + timeout;
            let h = handler.clone();
            let report = self
                .spawner
                .invoke(name.clone(), Some(self.clock.elapsed() + timeout), async move {
                    h.handle(&event, Some(deadline)).await
                })
                .await;
            let Some(report) = report else { continue };
            let response = &report.response;
            let failed: Vec<&str> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.as_str())
                .collect();
            // The event source's deletes fail now and then (the message comes back after its
            // visibility timeout, acknowledged or not).
            let mut deleted = 0;
            for (id, receipt) in &receipts {
                if !failed.contains(&id.as_str())
                    && !self.faults.strikes("SQS.DeleteMessage")
                    && self.stores.sqs.delete(queue, receipt)
                {
                    deleted += 1;
                }
            }
            self.log(format!(
                "{name}: {} messages, {deleted} deleted, {} handed back",
                receipts.len(),
                failed.len()
            ));
            for (id, outcome) in report.items.iter().filter(|(id, _)| failed.contains(&id.as_str())) {
                self.log(format!("  {id}: {outcome:?}"));
            }
        }
    }

    /// EventBridge: a scheduled sweep every `sweep_every`, whether the last one has ended or not.
    async fn schedule(&self) {
        while !self.stopping.get() {
            self.clock.sleep(self.settings.sweep_every).await;
            if self.stopping.get() || !self.sweeping.get() {
                return;
            }
            let payload = serde_json::json!({
                "detail-type": "Scheduled Event", "source": "aws.events",
                "resources": ["arn:aws:events:us-east-1:000000000000:rule/sim-sweep"]
            });
            let Ok(Invocation::Sweep(request)) = parse_invocation(&payload, "sim-sweep", "sim-seal") else {
                return;
            };
            self.replay(request, "replay-sweep");
        }
    }

    /// Start a replay invocation (not awaited: it runs beside everything else).
    fn replay(&self, request: ReplayRequest, function: &str) {
        drop(self.start_replay(request, function, false));
    }

    /// Start a replay: the replay function's (within its timeout), or the operator's own
    /// in-process run (`by_hand`: on their machine, as `dlqctl` runs it, no Lambda deadline).
    fn start_replay(&self, request: ReplayRequest, function: &str, by_hand: bool) -> JoinHandle<()> {
        let name = self.invocation_name(function);
        let (r, deadline, dies_at) = if by_hand {
            (self.operator_replayer.clone(), None, None)
        } else {
            (
                self.replayer.clone(),
                Some(self.clock.now() + REPLAY_TIMEOUT),
                Some(self.clock.elapsed() + REPLAY_TIMEOUT),
            )
        };
        let trace = self.trace.clone();
        let clock = self.clock.clone();
        let label = name.clone();
        self.spawner.invoke(name, dies_at, async move {
            match r.run(&request, deadline).await {
                Ok(rep) => trace.log(
                    &clock,
                    format!(
                        "{label}: {} selected, {} re-injected, {} suppressed, {} quarantined, {} still failing, {} skipped{}",
                        rep.selected,
                        rep.reinjected,
                        rep.suppressed_duplicate,
                        rep.quarantined,
                        rep.still_failing,
                        rep.skipped,
                        rep.stopped.map(|s| format!(" (stopped: {s})")).unwrap_or_default()
                    ),
                ),
                Err(e) => trace.log(&clock, format!("{label} failed: {e}")),
            }
        })
    }

    /// After `calm_at`, no more faults or crashes; once everything sent is settled (queues empty,
    /// no replay holding a claim) and a few more sweeps changed nothing, the run ends.
    async fn settle(&self) {
        self.clock.sleep(self.settings.calm_at).await;
        self.faults.set_enabled(false);
        self.crash_ppm.store(0, std::sync::atomic::Ordering::SeqCst);
        self.log("calm: no more faults or crashes");
        let horizon = self.settings.calm_at + Duration::from_secs(3 * 24 * 3600);
        let mut quiet_rounds = 0;
        while quiet_rounds < 3 && self.clock.elapsed() < horizon {
            self.clock.sleep(self.settings.sweep_every).await;
            let quiet = !self.producing.get()
                && !self.operating.get()
                && self.stores.sqs.depth(MAIN).total() == 0
                && self.stores.sqs.depth(DLQ).total() == 0
                && !self.replaying().await;
            quiet_rounds = if quiet { quiet_rounds + 1 } else { 0 };
        }
        self.log(if quiet_rounds >= 3 {
            "quiet: the schedule stops"
        } else {
            "not quiet at the horizon: the schedule stops"
        });
        // No new sweep; one still running ends within its timeout, and what it sent is consumed
        // before the pollers stop.
        self.sweeping.set(false);
        self.clock.sleep(REPLAY_TIMEOUT + Duration::from_secs(60)).await;
        while self.stores.sqs.depth(MAIN).total() + self.stores.sqs.depth(DLQ).total() > 0
            && self.clock.elapsed() < horizon
        {
            self.clock.sleep(Duration::from_secs(60)).await;
        }
        self.log("stopping");
        self.stopping.set(true);
    }

    async fn replaying(&self) -> bool {
        match self
            .stores
            .envelopes
            .list_by_status(EnvelopeStatus::Replaying, None, 1)
            .await
        {
            Ok((page, _)) => !page.is_empty(),
            Err(_) => true,
        }
    }
}
