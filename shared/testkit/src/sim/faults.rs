//! Faults at every port call of the flows under simulation. Each call first gives way (another
//! task may run, or this invocation may crash there), then the run's generator decides: no fault,
//! an error before the effect, an error *after* it (the write landed, the caller saw a timeout),
//! a write that lands with no answer before the invocation dies at its timeout, or latency.
//! [`Faulty`](super::faulty::Faulty) puts this in front of any port.

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

enum Fault {
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
        }
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

    fn decide(&self) -> Fault {
        let mut g = self.rng.get();
        // Stalls are not faults of the services: they go on in the calm too.
        if let Some((ppm, d)) = self.stall
            && g.chance(ppm)
        {
            return Fault::Stall(d);
        }
        if !self.enabled.load(Ordering::SeqCst) {
            return Fault::None;
        }
        let p = self.plan;
        if g.chance(p.before_ppm) {
            Fault::Before(*g.pick(&KINDS))
        } else if g.chance(p.after_ppm) {
            if g.chance(250_000) {
                Fault::LandsUnanswered
            } else {
                Fault::After(*g.pick(&KINDS))
            }
        } else if g.chance(p.latency_ppm) {
            Fault::Latency(Duration::from_millis(g.between(1, p.max_latency_ms.max(1))))
        } else {
            Fault::None
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
            Fault::None => effect.await,
            Fault::Latency(d) => {
                self.clock.sleep(d).await;
                effect.await
            }
            Fault::LandsUnanswered => {
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
            Fault::Stall(d) => {
                self.trace.log(
                    &self.clock,
                    format!("stall: {op} waits {} s before its effect", d.as_secs()),
                );
                self.clock.sleep(d).await;
                effect.await
            }
            Fault::Before(kind) => {
                self.count(op);
                self.trace
                    .log(&self.clock, format!("fault: {op} fails before its effect ({kind})"));
                Err(StoreError::new(kind, format!("{op}: injected fault before the effect")).into())
            }
            Fault::After(kind) => {
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
