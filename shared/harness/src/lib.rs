//! `recon-harness`: the functions on the local stack. The stand-in for Lambda's SQS event-source
//! mapping (`pump`), which `cargo xtask pump` and the demo use, and a deployment of its own for each
//! integration test (`stack`), the local PostgreSQL (`postgres`) and a local HTTP general ledger
//! that fails on purpose (`http_ledger`). It links the AWS SDK; the memory adapters, builders and the
//! simulator in `recon-testkit` do not. No Lambda function links either (a test checks it).

pub mod capacity;
pub mod http_ledger;
pub mod latency;
pub mod ledgers;
pub mod postgres;
pub mod provision;
pub mod pump;
pub mod stack;
pub mod streams;
pub mod template;
