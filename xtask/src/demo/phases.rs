//! The demo's pipeline, phase by phase: the happy path (and what it costs in DynamoDB), the messy
//! workload with transient ledger faults, enrichment of the dead letters, a checkpoint against the
//! workload's expectations, then the operator's remediation (fix, replay, sweep, quarantine).

use anyhow::{Result, bail};
use dlqctl::control::ControlPlane;
use recon_aws::AwsClients;
use recon_aws::dynamodb::DynamoAuditLog;
use recon_aws::ledger::AnyLedger;
use recon_aws::sqs::SqsQueue;
use recon_aws::telemetry::TracingMetrics;
use recon_aws::wiring::{AwsConsumer, AwsEnricher};
use recon_core::control::{Command, Remediation};
use recon_core::decisions::{RetryPolicy, triage};
use recon_core::domain::approval::{ApprovalPolicy, ApprovalRequest};
use recon_core::domain::canary::{Canary, CanarySlice};
use recon_core::domain::{AuditKind, EnvelopeStatus, PeriodRecord, PeriodStatus, TransientKind};
use recon_core::ports::{LedgerScope, ReferenceData, read_postings};
use recon_core::replay::ReplayReport;
use recon_harness::provision::Stack;
use recon_harness::pump::PumpOptions;
use recon_testkit::sim::faulty::Faulty;
use std::collections::BTreeMap;

use super::workload::{CLOSED, Expect, Workload, count};
use dlqctl::context;

const ACTOR: &str = "dlqctl-demo";

pub struct Pipeline<'a> {
    clients: &'a AwsClients,
    stack: &'a Stack,
    consumer: AwsConsumer<Faulty<AnyLedger>>,
    enricher: AwsEnricher<TracingMetrics>,
    main: SqsQueue,
    opts: PumpOptions,
}

impl<'a> Pipeline<'a> {
    /// The consumer (its ledger failing as the workload says, short backoffs so the transient
    /// faults play out in seconds), the enricher, and the closed period of the workload.
    pub async fn new(clients: &'a AwsClients, stack: &'a Stack, max_attempts: u32, mess: &Workload) -> Result<Self> {
        let mut settings = context::consumer_settings(stack)?;
        settings.retry = RetryPolicy {
            max_attempts,
            backoff_base_secs: 1,
            backoff_cap_secs: 4,
        };
        let ledger = Faulty::with_outages(context::ledger(clients, stack)?, TransientKind::Throttled);
        for (hash, fault) in &mess.faults {
            ledger.faults.inject(hash, *fault);
        }
        let consumer = recon_aws::wiring::consumer(clients, &settings, ledger, ACTOR);
        consumer
            .reference
            .put_period(&PeriodRecord {
                entity: CLOSED.0.into(),
                period: CLOSED.1.into(),
                status: PeriodStatus::Closed,
                closes_on: None,
            })
            .await?;
        Ok(Pipeline {
            clients,
            stack,
            consumer,
            enricher: context::enricher(clients, stack, ACTOR)?,
            main: SqsQueue::new(clients.sqs.clone(), &stack.main_queue_url),
            opts: PumpOptions {
                progress_every: 10,
                ..PumpOptions::default()
            },
        })
    }

    /// Phase 1: the happy path only, to measure what a committed message costs.
    pub async fn happy_path(&self, happy: &Workload) -> Result<()> {
        println!("== phase 1: {} valid transactions", happy.bodies.len());
        dlqctl::ops::send_bodies(&self.main, &happy.bodies, true).await?;
        let before = self.clients.requests.total("dynamodb");
        let p1 = crate::pump::pump_main(self.clients, self.stack, &self.consumer, &self.opts).await?;
        let ddb_requests = self.clients.requests.total("dynamodb") - before;
        let committed = p1.outcomes.get("COMMITTED").copied().unwrap_or(0);
        let ledger = &self.consumer.ledger.inner;
        let (cost, unit) = ledger.cost();
        println!(
            "   {committed} committed; DynamoDB: {ddb_requests} requests ({:.3} per committed message, reference-data loads included); ledger ({}): {cost:.1} {unit} ({:.3} per committed message)",
            ddb_requests as f64 / committed.max(1) as f64,
            ledger.kind(),
            cost / committed.max(1) as f64
        );
        Ok(())
    }

    /// Phase 2: duplicates, poison, unrecoverable payloads, transient ledger faults.
    pub async fn messy(&self, mess: &Workload) -> Result<()> {
        println!(
            "== phase 2: {} more messages: duplicates, poison, unrecoverable, transient ledger faults (backoff 1-4 s)",
            mess.bodies.len()
        );
        dlqctl::ops::send_bodies(&self.main, &mess.bodies, true).await?;
        let p2 = crate::pump::pump_main(self.clients, self.stack, &self.consumer, &self.opts).await?;
        let retries = p2.outcomes.get("RETRY_SCHEDULED").copied().unwrap_or(0);
        println!(
            "   pumped {} deliveries ({retries} transient retries with growing visibility timeouts)",
            p2.received
        );
        Ok(())
    }

    /// The DLQ through the enricher.
    pub async fn enrich(&self) -> Result<()> {
        let p3 = crate::pump::pump_dlq(self.clients, self.stack, &self.enricher, &self.opts).await?;
        let quarantined = p3.outcomes.get("QUARANTINED").copied().unwrap_or(0);
        println!(
            "== enrichment: {} dead letters wrapped in envelopes (WORM copies in {}), {quarantined} quarantined at once",
            p3.outcomes.get("ENRICHED").copied().unwrap_or(0) + quarantined,
            self.stack.names.quarantine_bucket,
        );
        Ok(())
    }

    /// What the consumer and the enricher did, read back from the stores, against what the
    /// workload expects; then the triage of the PENDING envelopes.
    pub async fn checkpoint(&self, happy: &Workload, mess: &Workload) -> Result<()> {
        let names = &self.stack.names;
        let audit = DynamoAuditLog::new(self.clients.dynamodb.clone(), &names.audit_table)
            .scan()
            .await?;
        let envelopes = dlqctl::triage::envelopes(&self.enricher.store, None).await?;
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
        let committed = read_postings(&context::ledger(self.clients, self.stack)?, &LedgerScope::default())
            .await?
            .len() as u64;
        let dead_lettered = envelopes.len() as u64;
        println!(
            "   so far: {committed} committed (expected {exp_commit}), {duplicates} duplicates suppressed (expected {exp_dup}), \
             {dead_lettered} dead-lettered (expected {}; the consumer's audit says {dead_lettered_audit})",
            exp_dead.values().sum::<u64>()
        );
        let stage_ok = committed == exp_commit
            && duplicates == exp_dup
            && by_cause == exp_dead
            && dead_lettered_audit == dead_lettered
            && sent == committed + duplicates + dead_lettered;
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
        let pending: Vec<_> = envelopes
            .into_iter()
            .filter(|e| e.status == EnvelopeStatus::Pending)
            .collect();
        dlqctl::triage::print_table(&triage(&pending), None, chrono::Utc::now());
        Ok(())
    }

    /// The operator's remediation, step by step: fix root causes, replay, sweep, quarantine the
    /// rest; then the re-injected copies through the consumer, and any new dead letters through
    /// the enricher.
    pub async fn remediate(&self) -> Result<()> {
        println!("\n== remediation (each change asked of the control plane, as an operator role)");
        let admin = self.operator("admin:ada").await?;
        let xau = Command::PutCurrency {
            code: "XAU".into(),
            minor_units: 4,
            description: "gold, troy ounce".into(),
        };
        admin.ask(&xau).await?;
        self.consumer.ledger.faults.heal();
        println!("   ada (admin) maps XAU in the reference table (4 minor units); the ledger's outage is over");
        let policy = ApprovalPolicy {
            max_count: Some(5),
            closed_period: true,
            ..ApprovalPolicy::default()
        };
        println!("   ada (admin) sets the approval policy: {policy}");
        admin.ask(&Command::SetPolicy { policy }).await?;
        let remediation = |root_cause: Option<&str>, reason: &str, canary: Option<Canary>| Remediation {
            reason: reason.into(),
            root_cause: root_cause.map(str::to_owned),
            canary,
            ..Remediation::default()
        };
        let canary = Canary {
            slice: CanarySlice::Count(2),
            max_failure_percent: 0,
            wait_secs: 60,
        };
        let xau = remediation(Some("UNMAPPED_CURRENCY:*"), "XAU mapped", Some(canary));
        let xau = self.governed(Command::Replay(xau)).await?;
        println!(
            "   replay UNMAPPED_CURRENCY:*       -> {} re-injected, {} still failing",
            xau.reinjected, xau.still_failing
        );
        let sweep = crate::pump::sweep(self.clients, self.stack).await?;
        println!(
            "   scheduled sweep                  -> {} re-injected, {} quarantined (closed period: manual journal), {} still failing",
            sweep.reinjected, sweep.quarantined, sweep.still_failing
        );
        let why = "cannot be fixed by reference data: returned to the bank-feed owner, book by hand";
        let rest = self.governed(Command::Quarantine(remediation(None, why, None))).await?;
        println!(
            "   alice quarantines the rest       -> {} quarantined for a manual journal",
            rest.quarantined
        );
        crate::pump::pump_main(self.clients, self.stack, &self.consumer, &self.opts).await?;
        crate::pump::pump_dlq(self.clients, self.stack, &self.enricher, &self.opts).await?;
        Ok(())
    }

    /// The control plane as operator `who` (`ROLE:PERSON`, a role assumed through the local STS).
    async fn operator(&self, who: &str) -> Result<ControlPlane> {
        dlqctl::control::connect(self.clients, &self.stack.names, None, Some(who)).await
    }

    /// A remediation asked by alice, a maker: within the approval policy it runs; above it, the
    /// control plane makes a request, refuses alice's own approval (whatever role she asks in),
    /// and bob, an approver, approves and runs it.
    async fn governed(&self, command: Command) -> Result<ReplayReport> {
        let asked = self.operator("maker:alice").await?.ask(&command).await?;
        let Some(request) = asked.get("request").filter(|r| !r.is_null()) else {
            return Ok(serde_json::from_value(asked["report"].clone())?);
        };
        let request: ApprovalRequest = serde_json::from_value(request.clone())?;
        let id = request.request_id.clone();
        println!(
            "   needs approval ({}): request {id} by {}",
            request.why.join("; "),
            request.requested_by
        );
        let approve = |reason: &str| Command::Approve {
            request_id: id.clone(),
            reason: reason.into(),
        };
        match self.operator("approver:alice").await?.ask(&approve("looks fine")).await {
            Err(e) => println!("     alice approves it as approver   -> {e}"),
            Ok(_) => bail!("the requester approved their own request"),
        }
        let bob = self.operator("approver:bob").await?;
        bob.ask(&approve("root cause and totals checked")).await?;
        // Its canary waits for the consumer, which Lambda would run beside it: the local pump does.
        let finished = std::sync::atomic::AtomicBool::new(false);
        let execute = async {
            let x = bob.ask(&Command::Execute { request_id: id.clone() }).await;
            finished.store(true, std::sync::atomic::Ordering::SeqCst);
            x
        };
        let (executed, pumped) = tokio::join!(execute, self.pump_until(&finished));
        pumped?;
        let ran = executed?;
        let done: ApprovalRequest = serde_json::from_value(ran["request"].clone())?;
        let report: ReplayReport = serde_json::from_value(ran["report"].clone())?;
        println!(
            "     bob (approver) approves it       -> {}, {} changed since",
            done.status,
            report.changed_since.len()
        );
        if let Some(c) = &report.canary {
            println!("     {c}");
        }
        Ok(report)
    }

    /// A morning after, left for the console to look at: a bank feed's new metals (XPD, XPT,
    /// which no one has mapped) dead-lettered and filed as envelopes, and alice's request to
    /// quarantine the XPD group, waiting for an approver.
    pub async fn leave_for_console(&self) -> Result<()> {
        use recon_core::domain::message::{MatchDecision, NewMessage};
        let metal = |n: usize, currency: &str, entity: &str| NewMessage {
            message_id: format!("m-{}-{n}", currency.to_lowercase()),
            ledger_entity: entity.into(),
            currency: currency.into(),
            amount: format!("{}.{:02}", 10 + n * 7, n * 13 % 100),
            match_decision: MatchDecision::Matched,
            trace_id: format!("t-{}-{n}", currency.to_lowercase()),
            value_date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
            external_ref: format!("BANK-{currency}-{n:04}"),
            counterparty: "Metals Desk <Zurich>".into(),
        };
        let mut bodies = Vec::new();
        for n in 1..=8 {
            let entity = if n % 3 == 0 { "ACME-UK" } else { "ACME-US" };
            bodies.push(metal(n, "XPD", entity).to_body()?);
        }
        for n in 1..=3 {
            bodies.push(metal(n, "XPT", "ACME-DE").to_body()?);
        }
        dlqctl::ops::send_bodies(&self.main, &bodies, false).await?;
        let quiet = PumpOptions {
            progress_every: 0,
            ..self.opts.clone()
        };
        crate::pump::pump_main(self.clients, self.stack, &self.consumer, &quiet).await?;
        crate::pump::pump_dlq(self.clients, self.stack, &self.enricher, &quiet).await?;
        let quarantine = Command::Quarantine(Remediation {
            reason: "XPD is booked by the metals desk by hand (ticket FIN-51)".into(),
            root_cause: Some("UNMAPPED_CURRENCY:XPD".into()),
            ..Remediation::default()
        });
        let asked = self.operator("maker:alice").await?.ask(&quarantine).await?;
        let Some(request) = asked["request"]["request_id"].as_str() else {
            bail!("alice's quarantine of XPD ran within the approval policy: nothing left for an approver ({asked})");
        };
        println!(
            "\n== left for the console: {} new dead letters (XPD, XPT), alice's request {request} to quarantine XPD",
            bodies.len()
        );
        println!(
            "   make console   (then http://127.0.0.1:8750/console/: sign in as alice/maker, bob/approver, vera/viewer)"
        );
        Ok(())
    }

    /// Run the consumer and the enricher over what arrives until `finished`.
    async fn pump_until(&self, finished: &std::sync::atomic::AtomicBool) -> Result<()> {
        let quiet = PumpOptions {
            progress_every: 0,
            ..self.opts.clone()
        };
        while !finished.load(std::sync::atomic::Ordering::SeqCst) {
            crate::pump::pump_main(self.clients, self.stack, &self.consumer, &quiet).await?;
            crate::pump::pump_dlq(self.clients, self.stack, &self.enricher, &quiet).await?;
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        Ok(())
    }
}
