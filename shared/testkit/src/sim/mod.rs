//! The deterministic simulator: the adversary that looks for runs breaking the promise. One seed
//! fixes the workload, the deployment's settings, the interleaving of concurrent invocations,
//! every injected fault and crash, and the clock; the same seed replays the same run.
//!
//! | module       | what it is                                                               |
//! |--------------|--------------------------------------------------------------------------|
//! | [`rng`]      | the seeded generator                                                     |
//! | [`exec`]     | the executor (one task polled at a time, chosen at random) and virtual time |
//! | [`sqs`]      | SQS with AWS's semantics and limits                                      |
//! | [`faults`]   | faults at every port call                                                |
//! | [`gl`]       | a general ledger behind an HTTP API: late applies, `409`s, lost answers  |
//! | [`ledger`]   | the run's ledger: the reference one, or a GL behind the reservation protocol  |
//! | [`workload`] | what the producer sends                                                  |
//! | [`world`]    | the deployment: flows, event-source mappings, schedule, operator         |
//! | [`oracle`]   | what must hold after the run                                             |
//! | [`protocol`] | each layer's own protocol, from the stores' journal                      |
//! | [`truth`]    | the ground truth: each message's kind and transaction, judged field by field |
//! | [`trace`]    | what happened, for a failing seed                                        |

pub mod clock;
pub mod exec;
pub mod faults;
pub mod faulty;
pub mod gl;
pub mod ledger;
pub mod oracle;
pub mod protocol;
pub mod rng;
pub mod sqs;
pub mod trace;
pub mod truth;
pub mod workload;
pub mod world;

use chrono::{TimeZone, Utc};
use std::panic::{AssertUnwindSafe, catch_unwind};

use clock::SimClock;
use exec::Executor;
use rng::SharedRng;
use trace::Trace;
use world::{Settings, World};

/// Polls before a run counts as a livelock.
const MAX_POLLS: u64 = 5_000_000;

/// What one seed's run showed.
#[derive(Debug)]
pub struct RunResult {
    pub seed: u64,
    pub settings: Option<Settings>,
    /// Every broken invariant (empty: the run held).
    pub violations: Vec<String>,
    /// The last lines of the run's trace (all of them with `run_seed_keeping(seed, usize::MAX)`).
    pub trace: Vec<String>,
    pub polls: u64,
    pub virtual_secs: u64,
    pub messages: usize,
}

impl RunResult {
    pub fn held(&self) -> bool {
        self.violations.is_empty()
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Run one seed to its end and judge it, keeping the last lines of its trace.
pub fn run_seed(seed: u64) -> RunResult {
    run_seed_keeping(seed, 60)
}

/// Run one seed to its end and judge it, keeping the last `trace_lines` lines of its trace.
pub fn run_seed_keeping(seed: u64, trace_lines: usize) -> RunResult {
    let rng = SharedRng::new(seed);
    let trace = Trace::keeping(trace_lines);
    let start = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).single().unwrap_or_default();
    let clock = SimClock::new(start);
    let mut result = RunResult {
        seed,
        settings: None,
        violations: Vec::new(),
        trace: Vec::new(),
        polls: 0,
        virtual_secs: 0,
        messages: 0,
    };
    let run = catch_unwind(AssertUnwindSafe(|| {
        let settings = Settings::draw(&mut rng.get());
        let workload = workload::generate(&mut rng.get());
        result.settings = Some(settings.clone());
        let mut executor = Executor::new(clock.clone());
        let world = World::new(settings, clock.clone(), rng.clone(), trace.clone(), executor.spawner());
        world.start(workload);
        let ended = executor.run(&rng, &world.crash_ppm, MAX_POLLS, &trace);
        result.polls = executor.polls;
        world.deaths.set(executor.deaths);
        result.messages = world.sent.borrow().len();
        if let Err(e) = ended {
            result.violations.push(e);
        }
        result.violations.extend(oracle::check(&world));
    }));
    if let Err(p) = run {
        result.violations.push(format!("panic: {}", panic_text(&*p)));
    }
    result.virtual_secs = clock.elapsed().as_secs();
    result.trace = trace.lines();
    result
}
