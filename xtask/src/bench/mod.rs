//! The benchmark drivers (`make bench-*`): figures printed side by side in one run on the local
//! stack, never assertions (BENCHMARKS.md says how to reproduce each).

mod audit_ceiling;
mod console;
mod e2e;
mod evidence;
mod ledger_cost;
mod replay_drain;
mod storm;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Bench {
    /// Audit appends per second by writers sharing a log and each with its own, the chains they
    /// spread over, and their conflicts (`make bench-audit`).
    AuditCeiling(audit_ceiling::AuditCeilingArgs),
    /// The console's reads at a large backlog (`make bench-console`).
    Console(console::ConsoleArgs),
    /// The same messages through our consumer and through a Powertools consumer (`make bench-e2e`).
    E2e(e2e::E2eArgs),
    /// What the evidence commands cost when the ledger is large (`make bench-evidence`).
    Evidence(evidence::EvidenceArgs),
    /// What one committed message costs on each ledger (`make bench-ledgers`).
    LedgerCost(ledger_cost::LedgerCostArgs),
    /// A backlog drained by one replay invocation and by several at once (`make bench-replay`).
    ReplayDrain(replay_drain::ReplayDrainArgs),
    /// The bad day: a steady producer through a ledger outage, the backlog drained after it
    /// (`make bench-storm`).
    Storm(storm::StormArgs),
}

pub async fn run(bench: Bench) {
    match bench {
        Bench::AuditCeiling(args) => audit_ceiling::run(args).await,
        Bench::Console(args) => console::run(args).await,
        Bench::E2e(args) => e2e::run(args).await,
        Bench::Evidence(args) => evidence::run(args).await,
        Bench::LedgerCost(args) => ledger_cost::run(args).await,
        Bench::ReplayDrain(args) => replay_drain::run(args).await,
        Bench::Storm(args) => storm::run(args).await,
    }
}
