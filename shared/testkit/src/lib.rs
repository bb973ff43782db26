//! `recon-testkit`: what tests, benchmarks, the demo and the simulator run on, with no AWS SDK
//! and linked by no Lambda function (a test checks both). In-memory adapters with the same
//! semantics as the AWS ones, fault injection, the builders every test crate shares, and the
//! conformance checks every adapter of a port runs.

pub mod builders;
pub mod conformance;
pub mod fuzz;
pub mod memory;
pub mod sim;
