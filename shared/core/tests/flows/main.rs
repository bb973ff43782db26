//! The flows on the in-memory adapters (consume, enrich, reservation, replay and its gates, approvals,
//! edits, reconcile, evidence, audit verify), one module per file, in one test binary: each test
//! binary links the core and its dependencies again, and fifteen of them cost a CI machine's disk
//! for nothing. One file's tests: `cargo test -p recon-core --test flows -- replay_memory::`.

mod common;

mod approval_memory;
mod calibrate_memory;
mod consume_memory;
mod control_memory;
mod edit_memory;
mod enrich_memory;
mod escalation_memory;
mod evidence_bucket;
mod evidence_memory;
mod export_stream;
mod reconcile_period;
mod replay_memory;
mod replay_quarantine_memory;
mod reservation_memory;
mod sweep_canary_memory;
mod verify_from_seal;
mod verify_streaming;
