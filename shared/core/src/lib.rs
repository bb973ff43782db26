//! `recon-core`: dead-letter remediation for a bank-feed -> ledger reconciliation pipeline, with
//! no AWS SDK in it (a test checks it). The AWS adapters and the Lambda wiring are `recon-aws`;
//! the memory adapters, fault injection and test builders are `recon-testkit`.
//!
//! Layers, each depending only on those above it (a test checks the module graph):
//!
//! - [`domain`]: messages, the canonical `source_hash`, failure codes and root causes, reference
//!   data, postings, dead letters, envelopes and their life cycle, audit records. Pure.
//! - [`resources`]: names and settings of every AWS resource, defined once. Pure.
//! - [`decisions`]: retry budget and backoff, failure classification, triage. Pure.
//! - [`ports`]: the traits every store and queue is reached through, and the clock.
//! - [`config`]: runtime configuration from the environment, validated.
//! - the flows, generic over the ports:
//!   [`batch`] (the shape of an SQS-triggered handler), [`consume`] (the `consumer` Lambda),
//!   [`enrich`] (the `enricher` Lambda), [`envelopes`] (steps enrich and replay share),
//!   [`replay`] (the `replay` Lambda), [`reservation`] (reserve -> post -> commit for an external
//!   ledger), [`reconcile`] (completeness), [`evidence`] (seals, verification, bundles),
//!   [`calibrate`] (the retry budget from history).

pub mod batch;
pub mod calibrate;
pub mod config;
pub mod consume;
pub mod control;
pub mod decisions;
pub mod domain;
pub mod enrich;
pub mod envelopes;
pub mod evidence;
pub mod ports;
pub mod reconcile;
pub mod reference_audit;
pub mod replay;
pub mod reservation;
pub mod resources;
