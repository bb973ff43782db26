//! Message attribute names: the wire contract between the consumer (which puts them on a dead
//! letter), the enricher (which reads them back) and the replay (which marks re-injected copies).
//! SQS allows ten attributes per message; a dead letter uses four and keeps everything else
//! (including the original message's own attributes, verbatim) inside the JSON context attribute.

pub const FAILURE_CODE: &str = "dlq.failure_code";
pub const ROOT_CAUSE: &str = "dlq.root_cause";
pub const ATTEMPT_COUNT: &str = "dlq.attempt_count";
pub const CONTEXT: &str = "dlq.context";
/// Set on messages re-injected by the replay function.
pub const REPLAY_OF: &str = "replay.of";
pub const REPLAY_ID: &str = "replay.id";
pub const TRIGGERED_BY: &str = "replay.triggered_by";
/// How many replays this message has been through (1 for the first re-injection).
pub const REPLAY_GENERATION: &str = "replay.generation";
/// SQS's limit on message attributes per message.
pub const MAX_PER_MESSAGE: usize = 10;
