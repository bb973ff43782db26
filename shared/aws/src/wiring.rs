//! The flows wired to AWS (or the local stack): which adapter serves which port, built from the
//! validated settings. The three Lambda mains and `dlqctl` use these and nothing else.

use chrono::Duration as ChronoDuration;
use recon_core::config::{
    ConsumerSettings, ControlSettings, EnricherSettings, ReferenceAuditSettings, ReplaySettings, SealPolicy,
};
use recon_core::consume::{Consumer, ConsumerConfig};
use recon_core::control::ControlPlane;
use recon_core::enrich::{Enricher, EnricherConfig};
use recon_core::evidence::SealingAuditLog;
use recon_core::ports::{Ledger, Metrics, SystemClock};
use recon_core::reference_audit::ReferenceAuditor;
use recon_core::replay::{ReplayConfig, Replayer};
use recon_core::resources::Bucket;
use std::sync::Arc;
use std::time::Duration;

use crate::client::AwsClients;
use crate::dynamodb::{DynamoAuditLog, DynamoEnvelopeStore, DynamoReferenceData};
use crate::kms::KmsSigner;
use crate::ledger::AnyLedger;
use crate::s3::S3Worm;
use crate::sqs::SqsQueue;
use crate::telemetry::EmfMetrics;

/// The audit trail as the functions append to it: sealed into the bucket on the append path.
pub type AwsAuditLog = SealingAuditLog<DynamoAuditLog, S3Worm>;

pub fn audit_log(clients: &AwsClients, table: &str, bucket: &Bucket, seal: &SealPolicy) -> AwsAuditLog {
    SealingAuditLog {
        log: DynamoAuditLog::new(clients.dynamodb.clone(), table),
        worm: S3Worm::new(clients.s3.clone(), bucket),
        clock: Arc::new(SystemClock),
        every_records: seal.every_records,
    }
}

/// The consumer on SQS queues, DynamoDB reference data and audit, and a ledger (the chosen one,
/// or a wrapper around it).
pub type AwsConsumer<L = AnyLedger> = Consumer<L, SqsQueue, SqsQueue, Arc<DynamoReferenceData>, AwsAuditLog>;

pub fn consumer<L: Ledger>(
    clients: &AwsClients,
    settings: &ConsumerSettings,
    ledger: L,
    actor: &str,
) -> AwsConsumer<L> {
    Consumer {
        ledger,
        queue: SqsQueue::new(clients.sqs.clone(), &settings.main_queue_url),
        dlq: SqsQueue::new(clients.sqs.clone(), &settings.dead_letter_queue_url),
        reference: Arc::new(DynamoReferenceData::new(
            clients.dynamodb.clone(),
            &settings.reference_table,
            settings.reference_cache,
        )),
        audit: audit_log(
            clients,
            &settings.audit_table,
            &settings.quarantine_bucket,
            &settings.seal,
        ),
        clock: Arc::new(SystemClock),
        config: ConsumerConfig {
            retry: settings.retry,
            deadline_margin: settings.deadline_margin,
            concurrency: settings.concurrency,
            actor: actor.to_owned(),
            trust: settings.trust.clone(),
        },
    }
}

/// The enricher; metrics in EMF unless said otherwise.
pub type AwsEnricher<M = EmfMetrics> = Enricher<DynamoEnvelopeStore, S3Worm, AwsAuditLog, M>;

pub fn enricher<M: Metrics>(clients: &AwsClients, s: &EnricherSettings, actor: &str, metrics: M) -> AwsEnricher<M> {
    Enricher {
        store: DynamoEnvelopeStore::new(clients.dynamodb.clone(), &s.envelope_table),
        worm: S3Worm::new(clients.s3.clone(), &s.quarantine_bucket),
        audit: audit_log(clients, &s.audit_table, &s.quarantine_bucket, &s.seal),
        metrics,
        clock: Arc::new(SystemClock),
        config: EnricherConfig {
            actor: actor.to_owned(),
            overflow_high_water: s.overflow_high_water,
            concurrency: s.concurrency,
            deadline_margin: s.deadline_margin,
            trust: s.trust.clone(),
        },
    }
}

/// The replay's ports on AWS.
pub type AwsReplayPorts<M> = (
    DynamoEnvelopeStore,
    AnyLedger,
    DynamoReferenceData,
    SqsQueue,
    S3Worm,
    AwsAuditLog,
    M,
);

/// The replay; metrics in EMF unless said otherwise.
pub type AwsReplayer<M = EmfMetrics> = Replayer<AwsReplayPorts<M>>;

/// The control plane: the replay engine run for the operator who asks (its actor).
pub type AwsControlPlane<M = EmfMetrics> = ControlPlane<AwsReplayPorts<M>, KmsSigner>;

pub fn control_plane<M: Metrics>(
    clients: &AwsClients,
    s: &ControlSettings,
    actor: &str,
    metrics: M,
) -> AwsControlPlane<M> {
    let mut replayer = replayer(clients, &s.replay, actor, metrics);
    // Its reconciliation waits on every queue of the pipeline.
    replayer.queue = replayer
        .queue
        .with_dead_letters(&s.dead_letter_queue_url, &s.parking_queue_url);
    ControlPlane {
        replayer,
        signer: KmsSigner::new(clients.kms(), &s.decision_key),
        max_unsealed: s.replay.seal.max_unsealed(),
    }
}

/// The replay, its gate 2 asking the ledger the settings choose (the one the consumer commits to).
pub fn replayer<M: Metrics>(clients: &AwsClients, s: &ReplaySettings, actor: &str, metrics: M) -> AwsReplayer<M> {
    let audit = audit_log(clients, &s.audit_table, &s.quarantine_bucket, &s.seal);
    AwsReplayer::<M> {
        progress: None,
        // The re-injections' records linked into the trail with their marks (through the same
        // log as its other records: one placement, so its appends never meet each other).
        store: DynamoEnvelopeStore::new(clients.dynamodb.clone(), &s.envelope_table).with_trail(audit.log.clone()),
        ledger: crate::ledger::open(clients, &s.ledger, &s.ledger_table, REPLAY_CONCURRENCY),
        // Gate 1 must see today's reference data: no cache.
        reference: DynamoReferenceData::new(clients.dynamodb.clone(), &s.reference_table, Duration::ZERO),
        queue: SqsQueue::new(clients.sqs.clone(), &s.main_queue_url),
        worm: S3Worm::new(clients.s3.clone(), &s.quarantine_bucket),
        audit,
        metrics,
        clock: Arc::new(SystemClock),
        config: ReplayConfig {
            actor: actor.to_owned(),
            lease: ChronoDuration::seconds(s.lease_secs),
            max_replays: s.max_replays,
            replay_window: ChronoDuration::days(s.window_days),
            rate_per_sec: s.rate_per_sec,
            main_queue_high_water: s.main_queue_high_water,
            concurrency: REPLAY_CONCURRENCY,
            page_size: s.page_size,
            overflow_high_water: s.overflow_high_water,
            deadline_margin: s.deadline_margin,
            escalation: s.escalation.clone(),
            period_close_warning: ChronoDuration::hours(i64::from(s.period_close_warning_hours)),
            sweep_canary: s.sweep_canary,
        },
    }
}

/// Envelopes one sweep settles at once.
const REPLAY_CONCURRENCY: usize = 8;

/// The consumer's ledger: the one its settings choose, with a connection per message of a batch
/// processed at once.
pub fn consumer_ledger(clients: &AwsClients, settings: &ConsumerSettings) -> AnyLedger {
    crate::ledger::open(clients, &settings.ledger, &settings.ledger_table, settings.concurrency)
}

/// Record the function's configuration at start-up: a `CONFIG_CHANGED` record when it differs
/// from the last one recorded for `function` (the first start included). Returns the record's id.
pub async fn record_configuration(
    clients: &AwsClients,
    audit_table: &str,
    function: &str,
    settings: &std::collections::BTreeMap<String, String>,
) -> recon_core::ports::StoreResult<Option<String>> {
    use recon_core::ports::{AuditLog, Clock};
    let log = DynamoAuditLog::new(clients.dynamodb.clone(), audit_table);
    let previous = log.config_state(function).await?;
    let Some((record, state)) =
        recon_core::evidence::config_change(function, previous.as_ref(), settings, SystemClock.now())
    else {
        return Ok(None);
    };
    log.append(&record).await?;
    log.put_config_state(function, &state).await?;
    Ok(Some(record.audit_id))
}

/// [`record_configuration`] at a function's start-up: logged, never fatal (a function that could
/// not record its configuration still runs; the next cold start records it).
pub async fn log_configuration(
    clients: &AwsClients,
    audit_table: &str,
    function: &str,
    settings: &std::collections::BTreeMap<String, String>,
) {
    match record_configuration(clients, audit_table, function, settings).await {
        Ok(Some(id)) => tracing::info!(audit_id = %id, "configuration changed: recorded"),
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "configuration not recorded; the next cold start tries again"),
    }
}

/// The reference table's stream to the audit trail.
pub fn reference_auditor(clients: &AwsClients, s: &ReferenceAuditSettings) -> ReferenceAuditor<AwsAuditLog> {
    ReferenceAuditor {
        audit: audit_log(clients, &s.audit_table, &s.quarantine_bucket, &s.seal),
        clock: Arc::new(SystemClock),
        actor: format!("stream:{}", s.reference_table),
    }
}

/// EMF metrics in the namespace the settings name.
pub fn emf(namespace: &str, stack: &str) -> EmfMetrics {
    EmfMetrics {
        namespace: namespace.to_owned(),
        stack: stack.to_owned(),
    }
}

/// The function's name on Lambda (`AWS_LAMBDA_FUNCTION_NAME`), recorded as the actor of its
/// decisions; `default` elsewhere.
pub fn function_name(default: &str) -> String {
    std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| default.to_owned())
}
