//! The one place where the names and settings of every AWS resource are defined: names derived
//! from a prefix, table keys and indexes, timeouts, retentions and limits.
//!
//! Functions, `dlqctl`, the local provisioning code, the tests and the infrastructure drift
//! check all read these values; nothing else spells a queue name, a table key or a retention.
//! How the template names them (logical ids) and what each role may do live beside the
//! provisioning code, in `recon_aws::deployment`.

use std::time::Duration;

/// The end of every FIFO queue's name.
pub const FIFO_SUFFIX: &str = ".fifo";

/// Default prefix for every resource name; a deployment may choose another (`DLQ_STACK_PREFIX`).
pub const DEFAULT_PREFIX: &str = "recon-dlq";

/// Each function's timeout, as the template sets it (`Timeout`; a test compares): the budget
/// the function plans its work within.
pub const CONSUMER_TIMEOUT: Duration = Duration::from_secs(30);
pub const ENRICHER_TIMEOUT: Duration = Duration::from_secs(60);
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(300);
/// The reference-audit Lambda's timeout (a batch of stream records, one append each).
pub const REFERENCE_AUDIT_TIMEOUT: Duration = Duration::from_secs(60);
/// Lambda's largest synchronous response (6 MB), less room for the runtime's framing: what a
/// function invoked directly or behind an HTTP API can answer.
pub const LAMBDA_MAX_RESPONSE_BYTES: usize = 6_000_000 - 16_384;
/// The control plane's timeout: inside the HTTP API's 30-second integration limit, so a caller
/// hears how a request ended (a run stopped at the deadline pauses, and says so).
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(29);

pub mod keys {
    /// Ledger (reference DynamoDB ledger): one item per committed transaction, under its
    /// period's shard ([`LEDGER_PK`]) and its `source_hash` ([`LEDGER_SK`]). The hash covers the
    /// value date, so a transaction has one key, and a commit conditional on its key being new is
    /// the dedup mark; a period is read from the table itself, with no index to write.
    /// The partition: `YYYY-MM#<h>` with `h` the first hex digit of the `source_hash`
    /// ([`super::ledger_period_shard`]). A period's postings are spread over
    /// [`super::LEDGER_PERIOD_SHARDS`] partitions, so a month-end does not write one hot
    /// partition, and a period is read shard by shard, at once.
    pub const LEDGER_PK: &str = "period_shard";
    /// The sort key: the transaction's `source_hash`.
    pub const LEDGER_SK: &str = "source_hash";
    /// Reference data: `pk` = `CURRENCY` or `PERIOD#<entity>`, `sk` = code or `YYYY-MM`.
    pub const REFERENCE_PK: &str = "pk";
    pub const REFERENCE_SK: &str = "sk";
    /// The reference table's partition of currency mappings (`sk` = the code) and the prefix of
    /// its period partitions (`PERIOD#<entity>`, `sk` = `YYYY-MM`).
    pub const REFERENCE_CURRENCY_PK: &str = "CURRENCY";
    pub const REFERENCE_PERIOD_PK_PREFIX: &str = "PERIOD#";
    /// The approval policy: `POLICY`/`approval`, its JSON in the `policy` attribute.
    pub const REFERENCE_POLICY_PK: &str = "POLICY";
    pub const REFERENCE_APPROVAL_SK: &str = "approval";
    pub const REFERENCE_POLICY_ATTR: &str = "policy";
    /// Envelopes: one item per dead letter, keyed by its deterministic envelope id.
    pub const ENVELOPE_PK: &str = "envelope_id";
    /// Index attributes of the envelope table (all strings).
    pub const ENVELOPE_STATUS: &str = "status";
    /// `dead_lettered_at` in a fixed-width UTC format + `#` + envelope id: sorts by age.
    pub const ENVELOPE_AGE: &str = "age_key";
    pub const ENVELOPE_CODE: &str = "failure_code";
    /// `root_cause#age_key`: groups by root cause within a failure code, oldest first.
    pub const ENVELOPE_CAUSE: &str = "cause_key";
    /// The ledger entity, or `-` when the body has none.
    pub const ENVELOPE_ENTITY: &str = "entity_key";
    /// Key of the item that counts PENDING envelopes and holds the overflow flag.
    pub const ENVELOPE_META_ID: &str = "#meta#pending";
    /// Key of the item that says every item of the deployment written before the period indexes
    /// has its entry there (`dlqctl index-periods` puts it when done; the local setup, when it
    /// created the tables with their indexes): until it exists, reads by period are refused.
    pub const ENVELOPE_PERIODS_MARKER: &str = "#meta#periods";
    /// Key of the item that says triage's totals cover every envelope (`decisions::totals`): put
    /// only while the table never held a PENDING envelope (the local setup, `dlqctl
    /// index-periods` on a new stack); until it exists, triage counts the envelopes themselves.
    pub const ENVELOPE_TOTALS_MARKER: &str = "#meta#totals";
    /// Prefix of triage's totals items: `#totals#<month>#<code>#<digest of the root cause>`.
    pub const ENVELOPE_TOTALS_PREFIX: &str = "#totals#";
    /// The `status` of the totals items: their partition of the status index.
    pub const ENVELOPE_TOTALS_STATUS: &str = "#TRIAGE_TOTALS";
    /// Prefix of the audit outbox's items (records written with the decision they record).
    pub const ENVELOPE_OUTBOX_PREFIX: &str = "#outbox#";
    /// The `status` of outbox items: their partition of the status index, oldest first.
    pub const ENVELOPE_OUTBOX_STATUS: &str = "#AUDIT_OUTBOX";
    /// Prefix of the items that keep replay sweep cursors.
    pub const ENVELOPE_CURSOR_PREFIX: &str = "#meta#cursor#";
    /// Prefix of the items that count re-injections per second (the replay's shared rate limit).
    /// Approval requests: `#request#<id>`, listed through the status index under this status.
    pub const ENVELOPE_REQUEST_PREFIX: &str = "#request#";
    pub const ENVELOPE_REQUEST_STATUS: &str = "#APPROVAL_REQUEST";
    pub const ENVELOPE_RATE_PREFIX: &str = "#meta#rate#";
    /// Top-level copy of the replay claim's lease end (epoch ms), for conditional takeovers.
    pub const ENVELOPE_LEASE: &str = "lease_until_ms";
    /// Audit records: one item per decision, keyed by a deterministic id.
    pub const AUDIT_PK: &str = "audit_id";
    /// Audit index attributes: the chain, `seq` zero-padded, the source hash, the time + id.
    pub const AUDIT_CHAIN: &str = "chain";
    pub const AUDIT_SEQ_KEY: &str = "seq_key";
    pub const AUDIT_SOURCE_HASH: &str = "source_hash";
    pub const AUDIT_AT_KEY: &str = "at_key";
    /// Prefix of the items that hold each chain's head.
    pub const AUDIT_HEAD_PREFIX: &str = "#head#";
    /// An exception's shard of its accounting period, `YYYY-MM#<h>` (`-#<h>` for none), on
    /// envelopes and on the audit records a reconciliation reads ([`super::exception_period_shard`]):
    /// the partition of their tables' period indexes.
    pub const EXCEPTION_PERIOD_SHARD: &str = "period_shard";
    /// Dedup/claim table used when the ledger is external (reserve -> post -> commit).
    pub const DEDUP_PK: &str = "source_hash";
    /// TTL attribute of the dedup table (epoch seconds).
    pub const DEDUP_TTL: &str = "expires_at";
}

/// The Object Lock bucket and the account that must own it (`ExpectedBucketOwner` on every
/// request: a bucket of that name in another account is never written or trusted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub name: String,
    pub owner: String,
}

/// Names of every resource of one deployment, and the account that owns them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceNames {
    /// The prefix every name starts with (`DLQ_STACK_PREFIX`, the template's `StackPrefix`).
    pub prefix: String,
    pub main_queue: String,
    pub dead_letter_queue: String,
    /// Behind the DLQ: the dead letters the enricher kept failing on.
    pub parking_queue: String,
    pub ledger_table: String,
    pub envelope_table: String,
    pub reference_table: String,
    pub audit_table: String,
    pub dedup_table: String,
    /// Bucket names are global: the deployment's carries its account and region, so it can be
    /// neither someone else's nor another region's.
    pub quarantine_bucket: String,
    /// The account every request to the bucket expects to own it (`ExpectedBucketOwner`).
    pub account: String,
    /// The EventBridge Scheduler schedule that triggers the replay sweep (the only schedule a
    /// scheduled event may name).
    pub sweep_schedule: String,
    /// The schedule that seals the audit trail (its own, whatever the sweep does).
    pub seal_schedule: String,
}

impl ResourceNames {
    /// The names the template gives a deployment with `prefix` in `account` and `region` (a test
    /// holds the two equal): what `dlqctl --prefix` finds a deployment by (`--stack` reads its
    /// outputs instead), and the tests' and the simulator's names.
    pub fn derive(prefix: &str, account: &str, region: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            main_queue: format!("{prefix}-main"),
            dead_letter_queue: format!("{prefix}-dead-letter"),
            parking_queue: format!("{prefix}-parked"),
            ledger_table: format!("{prefix}-ledger-by-period"),
            envelope_table: format!("{prefix}-envelopes"),
            reference_table: format!("{prefix}-reference"),
            audit_table: format!("{prefix}-audit"),
            dedup_table: format!("{prefix}-dedup"),
            quarantine_bucket: format!("{prefix}-quarantine-{account}-{region}"),
            account: account.to_owned(),
            sweep_schedule: format!("{prefix}-replay-sweep"),
            seal_schedule: format!("{prefix}-audit-seal"),
        }
    }

    pub fn table(&self, kind: TableKind) -> &str {
        match kind {
            TableKind::Ledger => &self.ledger_table,
            TableKind::Envelopes => &self.envelope_table,
            TableKind::Reference => &self.reference_table,
            TableKind::Audit => &self.audit_table,
            TableKind::Dedup => &self.dedup_table,
        }
    }

    pub fn bucket(&self) -> Bucket {
        Bucket {
            name: self.quarantine_bucket.clone(),
            owner: self.account.clone(),
        }
    }

    /// The same deployment with FIFO queues (SQS wants their names to end in `.fifo`): producers
    /// set the message group to the ledger entity, so each entity's transactions keep their order.
    pub fn with_fifo_queues(mut self) -> Self {
        for q in [
            &mut self.main_queue,
            &mut self.dead_letter_queue,
            &mut self.parking_queue,
        ] {
            if !q.ends_with(FIFO_SUFFIX) {
                q.push_str(FIFO_SUFFIX);
            }
        }
        self
    }

    pub fn fifo(&self) -> bool {
        self.main_queue.ends_with(FIFO_SUFFIX)
    }
}

/// The local stack's Object Lock retention, days (a deployment's is the template's `WormRetentionDays`).
pub const LOCAL_WORM_RETENTION_DAYS: i32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableKind {
    Ledger,
    Envelopes,
    Reference,
    Audit,
    Dedup,
}

/// A global secondary index the code queries (declared in `infra/template.yaml`; key attributes are strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexSpec {
    pub name: &'static str,
    pub partition_key: &'static str,
    pub sort_key: &'static str,
}

/// How many partitions of the ledger table one period's postings are spread over.
pub const LEDGER_PERIOD_SHARDS: u32 = 16;

/// The ledger table's partition of a transaction of `period` (`None` for a hash that does not
/// start with a hex digit: no transaction of ours).
pub fn ledger_period_shard(period: &str, source_hash: &str) -> Option<String> {
    let first = source_hash.chars().next()?.to_digit(16)?;
    Some(shard_key(period, first))
}

/// The ledger table's partitions of one period, in shard order.
pub fn ledger_period_shards(period: &str) -> impl Iterator<Item = (u32, String)> + '_ {
    (0..LEDGER_PERIOD_SHARDS).map(move |n| (n, shard_key(period, n)))
}

/// How many index partitions one period's exceptions (envelopes, and the audit records a
/// reconciliation reads) are spread over: a month-end's dead letters write no hot partition. (The
/// records about one transaction share its shard, as they share one `by_source_hash` partition:
/// a storm of one message's duplicates is one partition's, either way.)
pub const EXCEPTION_PERIOD_SHARDS: u32 = 16;

/// The period of an exception whose body gave no readable value date (and, after
/// `dlqctl index-periods`, of an audit record from before records carried their period): read by
/// every period's reconciliation.
pub const NO_PERIOD: &str = "-";

/// The period index's partition of an exception (an envelope by its id, an audit record by its
/// transaction's hash — by its own id when it has none, or was written before that rule) of
/// `period` (none: [`NO_PERIOD`]).
pub fn exception_period_shard(period: Option<&str>, id: &str) -> String {
    use sha2::{Digest, Sha256};
    let first = Sha256::digest(id.as_bytes())[0];
    shard_key(period.unwrap_or(NO_PERIOD), u32::from(first) % EXCEPTION_PERIOD_SHARDS)
}

/// The index partitions of one period's exceptions (none: those of no known period).
pub fn exception_period_shards(period: Option<&str>) -> impl Iterator<Item = String> + '_ {
    (0..EXCEPTION_PERIOD_SHARDS).map(move |n| shard_key(period.unwrap_or(NO_PERIOD), n))
}

/// Shard `n` of `period`: `YYYY-MM#<n in hex>`.
fn shard_key(period: &str, n: u32) -> String {
    format!("{period}#{n:x}")
}

pub mod indexes {
    use super::{IndexSpec, keys};
    /// A group's envelopes (failure code; root cause, then age): the console's page of a group.
    pub const BY_FAILURE_CAUSE: IndexSpec = IndexSpec {
        name: "by_failure_cause",
        partition_key: keys::ENVELOPE_CODE,
        sort_key: keys::ENVELOPE_CAUSE,
    };
    /// By status, oldest first: the replay sweep (triage's totals and the outbox have partitions
    /// of their own there).
    pub const BY_STATUS_AGE: IndexSpec = IndexSpec {
        name: "by_status_age",
        partition_key: keys::ENVELOPE_STATUS,
        sort_key: keys::ENVELOPE_AGE,
    };
    /// Audit records of one chain in order (verification).
    pub const AUDIT_BY_CHAIN: IndexSpec = IndexSpec {
        name: "by_chain",
        partition_key: keys::AUDIT_CHAIN,
        sort_key: keys::AUDIT_SEQ_KEY,
    };
    /// Audit records about one transaction in time order (`audit show`), but for those a
    /// reconciliation reads (`AuditKind::reconciled`): they are found by period, and written
    /// without this index's sort key.
    pub const AUDIT_BY_SOURCE_HASH: IndexSpec = IndexSpec {
        name: "by_source_hash",
        partition_key: keys::AUDIT_SOURCE_HASH,
        sort_key: keys::AUDIT_AT_KEY,
    };
    /// Envelopes by accounting period, sharded ([`keys::EXCEPTION_PERIOD_SHARD`]): a period's
    /// reconciliation reads its envelopes, not every one. Keys only: an envelope changes status
    /// often, and a keys-only index is written once, when the envelope is.
    pub const ENVELOPES_BY_PERIOD: IndexSpec = IndexSpec {
        name: "by_period",
        partition_key: keys::EXCEPTION_PERIOD_SHARD,
        sort_key: keys::ENVELOPE_PK,
    };
    /// The audit records a reconciliation reads (`AuditKind::reconciled`), by accounting period,
    /// sharded by their transaction's hash (so `audit show` reads one shard of a period; records
    /// written before that rule by their id); other records stay out of it.
    pub const AUDIT_BY_PERIOD: IndexSpec = IndexSpec {
        name: "by_period",
        partition_key: keys::EXCEPTION_PERIOD_SHARD,
        sort_key: keys::AUDIT_PK,
    };
}

/// SQS's largest message (1 MiB): both queues accept it, so a large original always fits the DLQ.
pub const MAX_MESSAGE_BYTES: u32 = 1_048_576;

/// DynamoDB's largest item: 400 KB (names and values of every attribute, see
/// `recon_testkit::memory` for how the size is counted).
pub const DYNAMODB_MAX_ITEM_BYTES: usize = 400 * 1024;

/// Bodies up to this size are kept inside the envelope item; larger ones live in the WORM bucket
/// (a DynamoDB item holds at most 400 KB, and the envelope carries more than the body).
pub const INLINE_BODY_LIMIT: usize = 64 * 1024;

/// CloudWatch namespace of the functions' metrics unless `DLQ_METRICS_NAMESPACE` says otherwise.
pub const DEFAULT_METRICS_NAMESPACE: &str = "ReconDlq";

/// Messages of one batch processed at once, by default: the event source mappings' `BatchSize`
/// (10), so that a batch is committed in one wave of round trips rather than two.
pub const DEFAULT_BATCH_CONCURRENCY: usize = 10;

/// Default high-water mark of PENDING envelopes that raises `DLQ_OVERFLOW`.
pub const DEFAULT_OVERFLOW_HIGH_WATER: i64 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_share_the_prefix_and_the_bucket_carries_account_and_region() {
        let n = ResourceNames::derive("acme", "123456789012", "eu-west-1");
        assert_eq!(n.main_queue, "acme-main");
        assert_eq!(n.dead_letter_queue, "acme-dead-letter");
        assert_eq!(n.ledger_table, "acme-ledger-by-period");
        assert_eq!(n.quarantine_bucket, "acme-quarantine-123456789012-eu-west-1");
        assert_eq!(n.account, "123456789012");
    }
}
