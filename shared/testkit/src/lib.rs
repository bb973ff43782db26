//! `recon-testkit`: what tests, benchmarks, the demo and the simulator run on, and no Lambda
//! function links (a test checks it). In-memory adapters with the same semantics as the AWS
//! ones, fault injection, the local stand-in for Lambda's SQS event-source mapping, and the
//! builders every test crate shares.

pub mod builders;
pub mod conformance;
pub mod faults;
pub mod memory;
pub mod pump;
pub mod stack;
