//! Faults at every port call of the flows under simulation. Each call first gives way (another
//! task may run, or this invocation may crash there), then the run's generator decides: no fault,
//! an error before the effect, an error *after* it (the write landed, the caller saw a timeout),
//! a write that lands with no answer before the invocation dies at its timeout, or latency.
//! [`Faulty`](super::faulty::Faulty) puts this in front of any port.
//!
//! The same injector, built [`Injector::outages`], is the tests' and the demo's on the local
//! stack: no random faults, only the outages a test names — a transaction's ledger writes failing
//! a number of times, or for good, before they reach the store.

use recon_core::domain::TransientKind;
use recon_core::ports::{Clock, StoreError};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::clock::SimClock;
use super::exec::yield_now;
use super::rng::SharedRng;
use super::trace::Trace;

/// How often each fault strikes, in parts per million of port calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    pub before_ppm: u32,
    pub after_ppm: u32,
    pub latency_ppm: u32,
    pub max_latency_ms: u64,
}

const KINDS: [TransientKind; 5] = [
    TransientKind::Throttled,
    TransientKind::Timeout,
    TransientKind::ServiceUnavailable,
    TransientKind::Conflict,
    TransientKind::Network,
];

/// An outage a test names for one transaction's ledger writes (its `source_hash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail the next `n` writes, then let them through.
    Times(u32),
    /// Fail every write.
    Always,
}

enum Strike {
    None,
    Before(TransientKind),
    After(TransientKind),
    Latency(Duration),
    Stall(Duration),
    /// The write lands, and its answer does not come back before the caller's invocation dies
    /// at its timeout (a caller with no timeout gets an error long after).
    LandsUnanswered,
}

pub struct Injector {
    rng: SharedRng,
    clock: SimClock,
    trace: Trace,
    plan: FaultPlan,
    enabled: AtomicBool,
    /// A stall (a laptop suspended mid-command): how often a call stalls, and for how long.
    stall: Option<(u32, Duration)>,
    /// Faults fired, by operation: what explains a gap a later layer repaired.
    fired: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// Audit records each flow that says so attempted to append (`Faulty::used_by`).
    pub attempts: std::sync::Mutex<std::collections::BTreeSet<(&'static str, String)>>,
    /// The outages named for transactions, and the error they fail with.
    outages: std::sync::Mutex<std::collections::HashMap<String, Fault>>,
    outage_kind: TransientKind,
}

impl Injector {
    pub fn new(rng: SharedRng, clock: SimClock, trace: Trace, plan: FaultPlan) -> Self {
        Injector {
            rng,
            clock,
            trace,
            plan,
            enabled: AtomicBool::new(true),
            stall: None,
            fired: Default::default(),
            attempts: Default::default(),
            outages: Default::default(),
            outage_kind: TransientKind::Throttled,
        }
    }

    /// An injector of named outages only, each failing with `kind`, for ports on real time.
    pub fn outages(kind: TransientKind) -> Self {
        let clock = SimClock::new(chrono::Utc::now());
        Injector {
            outage_kind: kind,
            ..Injector::new(SharedRng::new(0), clock, Trace::keeping(1), FaultPlan::default())
        }
    }

    /// The writes of the transaction `source_hash` fail as `fault` says.
    pub fn inject(&self, source_hash: &str, fault: Fault) {
        self.outages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(source_hash.to_owned(), fault);
    }

    /// End every named outage.
    pub fn heal(&self) {
        self.outages.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Whether a named outage fails this write of `source_hash` (and counts it down).
    fn out(&self, source_hash: &str) -> bool {
        let mut outages = self.outages.lock().unwrap_or_else(|p| p.into_inner());
        match outages.get_mut(source_hash) {
            Some(Fault::Always) => true,
            Some(Fault::Times(n)) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// [`Injector::call`] of a write of transaction `source_hash`: failed before its effect while
    /// an outage is named for it.
    pub async fn write<T, E: From<StoreError>>(
        &self,
        op: &'static str,
        source_hash: &str,
        effect: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        if self.out(source_hash) {
            self.count(op);
            let detail = format!("{op}: ledger unavailable (injected outage)");
            return Err(StoreError::new(self.outage_kind, detail).into());
        }
        self.call(op, effect).await
    }

    /// Whether a call of `op` the run does not make through a port (the event source's delete)
    /// fails now: as often as a fault before the effect.
    pub fn strikes(&self, op: &'static str) -> bool {
        if !self.enabled.load(Ordering::SeqCst) {
            return false;
        }
        let hit = self.rng.get().chance(self.plan.before_ppm);
        if hit {
            self.count(op);
            self.trace.log(&self.clock, format!("fault: {op} fails"));
        }
        hit
    }

    /// How many faults (before or after the effect) struck `op`.
    pub fn fired(&self, op: &str) -> u64 {
        self.fired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(op)
            .copied()
            .unwrap_or(0)
    }

    fn count(&self, op: &'static str) {
        *self
            .fired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(op)
            .or_default() += 1;
    }

    /// The same faults, and now and then (`ppm` of calls) a stall of `for_` before the effect:
    /// an operator's machine suspended in the middle of a command, whatever leases it holds.
    pub fn stalling(mut self, ppm: u32, for_: Duration) -> Self {
        self.stall = Some((ppm, for_));
        self
    }

    /// Faults on or off (the run turns them off to let the system settle).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    fn decide(&self) -> Strike {
        let mut g = self.rng.get();
        // Stalls are not faults of the services: they go on in the calm too.
        if let Some((ppm, d)) = self.stall
            && g.chance(ppm)
        {
            return Strike::Stall(d);
        }
        if !self.enabled.load(Ordering::SeqCst) {
            return Strike::None;
        }
        let p = self.plan;
        if g.chance(p.before_ppm) {
            Strike::Before(*g.pick(&KINDS))
        } else if g.chance(p.after_ppm) {
            if g.chance(250_000) {
                Strike::LandsUnanswered
            } else {
                Strike::After(*g.pick(&KINDS))
            }
        } else if g.chance(p.latency_ppm) {
            Strike::Latency(Duration::from_millis(g.between(1, p.max_latency_ms.max(1))))
        } else {
            Strike::None
        }
    }

    /// `effect`, behind an await point and the fault the generator picks.
    pub async fn call<T, E: From<StoreError>>(
        &self,
        op: &'static str,
        effect: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        yield_now().await;
        match self.decide() {
            Strike::None => effect.await,
            Strike::Latency(d) => {
                self.clock.sleep(d).await;
                effect.await
            }
            Strike::LandsUnanswered => {
                let result = effect.await;
                if result.is_ok() {
                    self.count(op);
                    self.trace
                        .log(&self.clock, format!("fault: {op} took effect, its answer never comes"));
                    // Longer than any function's timeout: the invocation dies waiting.
                    self.clock.sleep(Duration::from_secs(20 * 60)).await;
                    return Err(StoreError::new(TransientKind::Timeout, format!("{op}: no answer")).into());
                }
                result
            }
            Strike::Stall(d) => {
                self.trace.log(
                    &self.clock,
                    format!("stall: {op} waits {} s before its effect", d.as_secs()),
                );
                self.clock.sleep(d).await;
                effect.await
            }
            Strike::Before(kind) => {
                self.count(op);
                self.trace
                    .log(&self.clock, format!("fault: {op} fails before its effect ({kind})"));
                Err(StoreError::new(kind, format!("{op}: injected fault before the effect")).into())
            }
            Strike::After(kind) => {
                let result = effect.await;
                if result.is_ok() {
                    self.count(op);
                    self.trace
                        .log(&self.clock, format!("fault: {op} took effect, caller sees {kind}"));
                    return Err(StoreError::new(kind, format!("{op}: injected fault after the effect")).into());
                }
                result
            }
        }
    }
}
