//! `recon-aws`: everything that talks to AWS. The SQS, DynamoDB (one module per table) and S3
//! Object Lock adapters of the `recon-core` ports, the ledger a deployment chose (ours or your
//! PostgreSQL), client setup for AWS or the local emulators,
//! the template reader, the local stack built from it, the IAM grants, telemetry (JSON
//! logs, EMF metrics), and the wiring the three Lambda functions and `dlqctl` use.

pub mod client;
pub mod deployment;
pub mod dynamodb;
pub mod error;
pub mod identity;
pub mod item;
pub mod kms;
pub mod ledger;
pub mod logs;
pub mod s3;
pub mod sqs;
pub mod stack;
pub mod telemetry;
pub mod wiring;

pub use client::{AwsClients, ClientTimeouts, Target};
