//! What one run varies, drawn from its seed.

use std::time::Duration;

use crate::sim::faults::FaultPlan;
use crate::sim::gl::GlPlan;
use crate::sim::rng::Rng;

/// The queues the simulator models, as `infra/template.yaml` declares them (a test compares):
/// the main queue hides a received message for six consumer timeouts and keeps messages four
/// days; the DLQ keeps them fourteen. A run may draw shorter retentions.
pub const MAIN_QUEUE_VISIBILITY: Duration = Duration::from_secs(180);
pub const MAIN_QUEUE_RETENTION: Duration = Duration::from_secs(4 * 24 * 3600);
pub const DLQ_RETENTION: Duration = Duration::from_secs(14 * 24 * 3600);

/// What one run varies, drawn from its seed.
#[derive(Clone, Debug)]
pub struct Settings {
    /// FIFO queues (main and DLQ), groups by ledger entity.
    pub fifo: bool,
    pub consumer_pollers: usize,
    pub enricher_pollers: usize,
    pub max_attempts: u32,
    pub faults: FaultPlan,
    pub crash_ppm: u32,
    pub duplicate_ppm: u32,
    pub sweep_every: Duration,
    pub overflow_high_water: i64,
    pub page_size: usize,
    /// When the operator maps XAU (never, if `None`).
    pub fix_currency_at: Option<Duration>,
    /// When the operator reopens the closed period (never, if `None`).
    pub reopen_period_at: Option<Duration>,
    /// When the operator quarantines the still-failing groups by hand (never, if `None`).
    pub operator_quarantine_at: Option<Duration>,
    /// When the operator edits a gold transaction that was dollars, moving its value date into
    /// the next period: a maker requests it, a checker approves, the maker executes (never, if
    /// `None`).
    pub edit_at: Option<Duration>,
    /// Wall-clock jumps (at, by seconds), the monotonic clock unmoved.
    pub clock_jumps: Vec<(Duration, i64)>,
    /// Faults and crashes stop here; the run then settles.
    pub calm_at: Duration,
    /// How late the envelope table's status index shows a write (eventually consistent reads).
    pub index_lag: Option<Duration>,
    /// The replay's marks written with their records linked into the trail (as the DynamoDB
    /// store given the trail does), rather than through the outbox.
    pub linked_trail: bool,
    /// A general ledger behind the reservation protocol, slow as drawn (`None`: the reference ledger).
    pub gl: Option<GlPlan>,
    /// The operator's commands run in-process on their machine, which may be suspended in the
    /// middle of one for this long (now and then), whatever it holds.
    pub operator_stall: Option<Duration>,
    /// How long each queue keeps a message (the DLQ counting from its first enqueue on the main
    /// queue, as SQS does for a standard queue): the deployment's days, or, in some runs, short
    /// enough that a message nothing settles in time really expires.
    pub main_retention: Duration,
    pub dlq_retention: Duration,
    /// When an auditor reconciles during the run, messages still queued.
    pub audit_at: Vec<Duration>,
    /// What an outsider does to the ledger once the run is over (the oracle's adversary).
    pub tamper: Option<crate::sim::oracle::Tamper>,
}

impl Settings {
    pub fn draw(rng: &mut Rng) -> Self {
        let faulty = rng.chance(850_000);
        let minutes = |rng: &mut Rng, lo, hi| Duration::from_secs(60 * rng.between(lo, hi));
        let mut s = Settings {
            fifo: rng.chance(200_000),
            consumer_pollers: rng.between(1, 3) as usize,
            enricher_pollers: rng.between(1, 2) as usize,
            max_attempts: rng.between(2, 5) as u32,
            faults: if faulty {
                FaultPlan {
                    before_ppm: rng.between(0, 60_000) as u32,
                    after_ppm: rng.between(0, 40_000) as u32,
                    latency_ppm: rng.between(0, 100_000) as u32,
                    max_latency_ms: rng.between(10, 40_000),
                }
            } else {
                FaultPlan::default()
            },
            crash_ppm: if faulty { rng.between(0, 4_000) as u32 } else { 0 },
            duplicate_ppm: rng.between(0, 50_000) as u32,
            sweep_every: minutes(rng, 2, 15),
            overflow_high_water: rng.between(0, 12) as i64,
            page_size: rng.between(1, 8) as usize,
            fix_currency_at: rng.chance(800_000).then(|| minutes(rng, 1, 60)),
            reopen_period_at: rng.chance(300_000).then(|| minutes(rng, 1, 60)),
            operator_quarantine_at: rng.chance(500_000).then(|| minutes(rng, 20, 90)),
            edit_at: rng.chance(400_000).then(|| minutes(rng, 5, 60)),
            clock_jumps: (0..rng.below(3))
                .map(|_| (minutes(rng, 1, 60), rng.between(0, 7200) as i64 - 3600))
                .collect(),
            calm_at: minutes(rng, 30, 120),
            index_lag: rng.chance(500_000).then(|| Duration::from_millis(rng.between(1, 3000))),
            linked_trail: rng.chance(500_000),
            gl: rng.chance(400_000).then(|| GlPlan::draw(rng)),
            operator_stall: rng.chance(500_000).then(|| minutes(rng, 6, 40)),
            main_retention: MAIN_QUEUE_RETENTION,
            dlq_retention: DLQ_RETENTION,
            audit_at: Vec::new(),
            tamper: None,
        };
        if rng.chance(300_000) {
            use crate::sim::oracle::Tamper;
            s.tamper = Some(*rng.pick(&[
                Tamper::PostsAManualJournal,
                Tamper::DeletesAPosting,
                Tamper::AltersAnAmount,
            ]));
        }
        s.audit_at = (0..rng.between(1, 3)).map(|_| minutes(rng, 2, 90)).collect();
        if rng.chance(250_000) {
            s.main_retention = minutes(rng, 45, 180);
            s.dlq_retention = s.main_retention + minutes(rng, 30, 180);
        }
        s
    }
}
