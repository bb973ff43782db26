//! `recon-dlq`: dead-letter remediation for a bank-feed -> ledger reconciliation pipeline.
//!
//! - [`domain`]: messages, the canonical `source_hash`, failure codes and root causes, reference
//!   data, postings, dead letters, audit records. Pure.
//! - [`decisions`]: retry budget and backoff, failure classification. Pure.
//! - [`ports`]: the traits every store and queue is reached through.
//! - [`adapters`]: AWS (SQS, DynamoDB, S3), in-memory, and fault injection.
//! - [`consume`]: the consumer flow behind the `consumer` Lambda.
//! - [`enrich`]: the enricher flow behind the `enricher` Lambda (envelopes, WORM, overflow).
//! - [`replay`]: the replay flow behind the `replay` Lambda (three gates, claims, sweeps).
//! - [`claim`]: claim -> post -> commit, for a user's own ledger behind the `Ledger` port.
//! - [`resources`]: names and settings of every AWS resource, defined once.
//! - [`config`]: runtime configuration from the environment.

pub mod adapters;
pub mod claim;
pub mod config;
pub mod consume;
pub mod decisions;
pub mod domain;
pub mod enrich;
pub mod evidence;
pub mod local;
pub mod ports;
pub mod reconcile;
pub mod replay;
pub mod resources;
pub mod telemetry;
