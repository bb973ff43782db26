//! Implementations of the ports: AWS (SQS, DynamoDB, S3), in-memory, and a fault-injecting
//! wrapper used by tests and the demo.

pub mod aws;
pub mod faults;
pub mod memory;
