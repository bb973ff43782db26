//! The operator's commands as a library: `dlqctl` (src/main.rs) parses the command line and calls
//! them; the developer's tool (`cargo xtask`: the demo, the local pump) builds on them. Nothing
//! here links test code (checked by tests/architecture.rs).

pub mod approvals;
pub mod audit;
pub mod bundle;
pub mod calibrate;
pub mod cli;
pub mod console;
pub mod context;
pub mod control;
pub mod edit;
pub mod fanout;
pub mod input;
pub mod ops;
pub mod output;
pub mod remediate;
pub mod text;
pub mod triage;
