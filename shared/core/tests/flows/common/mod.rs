//! The replay's test world on in-memory adapters, shared by the replay test files.
#![allow(dead_code, unused_imports)]

pub use aws_lambda_events::event::sqs::SqsMessage;
pub use chrono::{Duration as ChronoDuration, Utc};
pub use recon_core::consume::{Consumer, ConsumerConfig, Disposition};
pub use recon_core::domain::{
    AuditKind, CurrencyMapping, DlqEnvelope, EnvelopeStatus, NewMessage, PeriodRecord, PeriodStatus, ReplayClaim,
    StatusChange, attrs, envelope_from_dlq_message,
};
pub use recon_core::ports::{AuditOutbox, Backlog, Clock, EnvelopeStore, Ledger, ReferenceData, SweepCursors, Worm};
pub use recon_core::replay::{Gate, ReplayConfig, ReplayReport, ReplayRequest, Replayer, Selector};
pub use recon_testkit::builders::{
    self, body, delivery, manual_request as manual, sweep_request as sweep, tx_in, with_attribute,
};
pub use recon_testkit::memory::{
    FixedClock, MemoryAuditLog, MemoryDeadLetterQueue, MemoryEnvelopeStore, MemoryLedger, MemoryMetrics,
    MemoryReferenceData, MemoryReplayQueue, MemoryWorkQueue, MemoryWorm,
};
pub use std::sync::Arc;
pub use std::time::Duration;

pub type TestPorts = (
    Arc<MemoryEnvelopeStore>,
    Arc<MemoryLedger>,
    Arc<MemoryReferenceData>,
    Arc<MemoryReplayQueue>,
    Arc<MemoryWorm>,
    Arc<MemoryAuditLog>,
    MemoryMetrics,
);
pub type TestReplayer = Replayer<TestPorts>;

pub struct World {
    pub store: Arc<MemoryEnvelopeStore>,
    pub ledger: Arc<MemoryLedger>,
    pub reference: Arc<MemoryReferenceData>,
    pub queue: Arc<MemoryReplayQueue>,
    pub worm: Arc<MemoryWorm>,
    pub audit: Arc<MemoryAuditLog>,
    pub clock: Arc<FixedClock>,
}

pub fn world() -> World {
    World {
        store: Arc::default(),
        ledger: Arc::default(),
        reference: Arc::default(),
        queue: Arc::default(),
        worm: Arc::default(),
        audit: Arc::default(),
        clock: builders::clock(),
    }
}

impl World {
    pub fn replayer(&self, config: ReplayConfig) -> TestReplayer {
        TestReplayer {
            progress: None,
            store: self.store.clone(),
            ledger: self.ledger.clone(),
            reference: self.reference.clone(),
            queue: self.queue.clone(),
            worm: self.worm.clone(),
            audit: self.audit.clone(),
            metrics: MemoryMetrics::default(),
            clock: self.clock.clone(),
            config: ReplayConfig {
                rate_per_sec: 0,
                ..config
            },
        }
    }

    /// Store a PENDING envelope for `m`, dead-lettered `age` before now.
    pub async fn envelope(&self, id: &str, m: &NewMessage, age: ChronoDuration) -> DlqEnvelope {
        let msg = with_attribute(
            with_attribute(delivery(id, &body(m), 1), attrs::FAILURE_CODE, "POISON_MESSAGE"),
            attrs::ROOT_CAUSE,
            "UNMAPPED_CURRENCY:XAU",
        );
        let mut e = envelope_from_dlq_message(&msg, self.clock_now(), "test");
        e.dead_lettered_at = self.clock_now() - age;
        self.store.create(&e).await.unwrap();
        e
    }

    pub fn clock_now(&self) -> chrono::DateTime<Utc> {
        self.clock.now()
    }

    pub async fn status(&self, id: &str) -> EnvelopeStatus {
        self.store.get(id).await.unwrap().unwrap().status
    }
}

/// A transaction in XAU (poison until XAU is mapped).
pub fn xau(n: u32) -> NewMessage {
    tx_in(n, "XAU", &format!("{n}.125"))
}

pub async fn add_xau(w: &World) {
    w.reference
        .put_currency(&CurrencyMapping {
            code: "XAU".into(),
            minor_units: 4,
            description: "troy ounce".into(),
        })
        .await
        .unwrap();
}

/// An operator's quarantine of these envelopes.
pub fn quarantine_of(ids: &[&str]) -> ReplayRequest {
    ReplayRequest {
        quarantine: true,
        ..manual(
            Selector {
                envelope_ids: ids.iter().map(|i| (*i).to_owned()).collect(),
                ..Selector::default()
            },
            false,
        )
    }
}

pub fn outcomes(r: &ReplayReport) -> Vec<&'static str> {
    r.items.iter().map(|i| i.outcome.as_str()).collect()
}

/// `m` with a narrative field (not hashed) that makes its body about `bytes` long.
pub fn padded(m: &NewMessage, bytes: usize) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&body(m)).unwrap();
    v["statement_narrative"] = "x".repeat(bytes.saturating_sub(body(m).len() + 30)).into();
    v.to_string()
}

impl World {
    /// A PENDING envelope whose original is `body`, its bytes in the WORM bucket as the enricher
    /// keeps large bodies.
    pub async fn large_envelope(&self, id: &str, body: &str) -> DlqEnvelope {
        let msg = with_attribute(
            with_attribute(delivery(id, body, 1), attrs::FAILURE_CODE, "POISON_MESSAGE"),
            attrs::ROOT_CAUSE,
            "UNMAPPED_CURRENCY:XAU",
        );
        let mut e = envelope_from_dlq_message(&msg, self.clock_now(), "test");
        let key = e.payload_key();
        self.worm.put(&key, body.as_bytes()).await.unwrap();
        e.original.body_key = Some(key);
        e.original.body = None;
        self.store.create(&e).await.unwrap();
        e
    }
}

impl World {
    /// Claim `e` as replay `replay_id` did before it died: REPLAYING, lease of five minutes.
    pub async fn claimed_by_a_replay_that_died(&self, e: &DlqEnvelope, replay_id: &str) {
        let t0 = self.clock_now();
        let claim = ReplayClaim {
            replay_id: replay_id.into(),
            triggered_by: "schedule".into(),
            reason: "sweep".into(),
            claimed_at: t0,
            lease_until: t0 + ChronoDuration::minutes(5),
        };
        let change = StatusChange {
            status: EnvelopeStatus::Replaying,
            at: t0,
            actor: "schedule".into(),
            reason: "claimed".into(),
            manual_journal: false,
        };
        assert!(
            self.store
                .claim(&e.envelope_id, &claim, t0, &change, None)
                .await
                .unwrap()
        );
    }

    /// Close (or reopen, or plan the close of) ACME-US's 2026-11, the test transactions' period.
    pub async fn set_november(&self, status: PeriodStatus, closes_on: Option<chrono::NaiveDate>) {
        self.reference
            .put_period(&PeriodRecord {
                entity: "ACME-US".into(),
                period: "2026-11".into(),
                status,
                closes_on,
            })
            .await
            .unwrap();
    }

    /// A consumer on this world's ledger and reference data.
    pub fn consumer(&self) -> TestConsumer {
        Consumer {
            ledger: self.ledger.clone(),
            queue: MemoryWorkQueue::default(),
            dlq: MemoryDeadLetterQueue::default(),
            reference: self.reference.clone(),
            audit: MemoryAuditLog::default(),
            clock: self.clock.clone(),
            config: ConsumerConfig::default(),
        }
    }
}

pub type TestConsumer =
    Consumer<Arc<MemoryLedger>, MemoryWorkQueue, MemoryDeadLetterQueue, Arc<MemoryReferenceData>, MemoryAuditLog>;
