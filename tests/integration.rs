//! The suites against the local stack (LocalStack, DynamoDB Local, PostgreSQL), one module per
//! file, in one test binary: each binary links the whole AWS SDK (some 75 MB in a debug build), so
//! fifteen of them filled a CI machine's disk. Run one suite with its module's name as the filter:
//! `cargo test --workspace --test integration -- consume::` (`--workspace`: the feature set the
//! rest of `make test` is built with, so nothing is compiled twice). Every test provisions a
//! deployment of its own (`TestStack`), so the suites run side by side as their tests always did.

mod anchors;
mod approvals;
mod audit;
mod audit_about;
mod audit_placement;
mod console_envelope;
mod console_export;
mod console_signin;
mod consume;
mod control;
mod deploy;
mod enrich;
mod fifo;
mod http_ledger;
mod iam;
mod iam_offline;
mod postgres;
mod postgres_access;
mod provision;
mod reconcile;
mod replay;
mod replay_scale;
mod reservation;
