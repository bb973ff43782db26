//! Least privilege: the IAM actions each function's role grants, on which resource, and who calls
//! them. The template must grant exactly these (checked by `make test`), and the integration tests
//! check that every action the code is said to call is called by it, and nothing more.

/// Who exercises a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Caller {
    /// The function's own code (observable in the integration tests).
    Code,
    /// Lambda's SQS event-source mapping, polling on the function's behalf.
    EventSourceMapping,
    /// The Lambda runtime (logs, traces).
    Runtime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Grant {
    /// A template resource: a logical id (its ARN), `Id/index/*`, `Id/*` (objects), or `*`.
    pub resource: &'static str,
    pub actions: &'static [&'static str],
    pub caller: Caller,
    /// When not empty, the only item attributes the request may carry (the statement's
    /// `ForAllValues:StringEquals` condition on `dynamodb:Attributes`).
    pub attributes: &'static [&'static str],
    /// Which partition keys the request may name (`dynamodb:LeadingKeys`).
    pub keys: Keys,
    /// The deployments whose role has it (the template's condition on the statement).
    pub when: When,
}

/// Which deployments a grant belongs to: the template states the statement under the
/// condition of this name, so a role has only what its chosen ledger needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum When {
    Always,
    /// `LedgerKind` dynamodb: the reference ledger table.
    UseDynamoLedger,
    /// `LedgerKind` postgres: the functions in your subnets.
    UsePostgres,
    /// `LedgerKind` postgres with a credentials secret.
    HasPostgresSecret,
    /// `LedgerKind` http: the reservation protocol on the dedup table.
    UseReservationProtocol,
    /// `LedgerKind` http with a token secret.
    HasHttpSecret,
}

impl When {
    /// Whether a deployment on `ledger` has grants under this condition.
    pub fn holds_for(self, ledger: &recon_core::config::LedgerSettings) -> bool {
        use recon_core::config::LedgerSettings;
        match (self, ledger) {
            (When::Always, _) => true,
            (When::UseDynamoLedger, LedgerSettings::DynamoDb) => true,
            (When::UsePostgres, LedgerSettings::Postgres(_)) => true,
            (When::HasPostgresSecret, LedgerSettings::Postgres(p)) => p.secret_arn.is_some(),
            (When::UseReservationProtocol, LedgerSettings::Http(_)) => true,
            (When::HasHttpSecret, LedgerSettings::Http(h)) => h.secret_arn.is_some(),
            _ => false,
        }
    }
}

/// A limit on the partition keys a DynamoDB request may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Keys {
    Any,
    /// `ForAllValues:StringLike`: only keys matching one of these patterns.
    Like(&'static [&'static str]),
    /// `ForAllValues:StringNotLike`: no key matching any of these patterns.
    NotLike(&'static [&'static str]),
}

const fn g(resource: &'static str, actions: &'static [&'static str], caller: Caller) -> Grant {
    Grant {
        resource,
        actions,
        caller,
        attributes: &[],
        keys: Keys::Any,
        when: When::Always,
    }
}

/// A grant only deployments of one ledger kind have.
const fn on(when: When, grant: Grant) -> Grant {
    Grant { when, ..grant }
}

/// Lambda in your subnets (the PostgreSQL ledger): the network interfaces Lambda creates with
/// the function's role. Describing them has no resource-level permission.
const VPC: [Grant; 2] = [
    on(
        When::UsePostgres,
        g(
            "*",
            &[
                "ec2:CreateNetworkInterface",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DeleteNetworkInterface",
                "ec2:AssignPrivateIpAddresses",
                "ec2:UnassignPrivateIpAddresses",
            ],
            Runtime,
        ),
    ),
    // The PostgreSQL ledger's user and password.
    on(
        When::HasPostgresSecret,
        g("PostgresSecretArn", &["secretsmanager:GetSecretValue"], Code),
    ),
];

/// The HTTP ledger's bearer token.
const HTTP_TOKEN: Grant = on(
    When::HasHttpSecret,
    g("HttpLedgerSecretArn", &["secretsmanager:GetSecretValue"], Code),
);

/// The audit table as the append protocol uses it: read anything; put records (and the
/// trail and configuration pointers) but never a chain's head; move a head only by updating
/// its `seq` and `hash`. IAM cannot stop a put from overwriting a record (it has no condition
/// on a condition expression): the seals catch that.
const AUDIT: [Grant; 3] = [
    g("AuditTable", &["dynamodb:GetItem"], Code),
    Grant {
        keys: Keys::NotLike(&[HEAD_KEYS]),
        ..g("AuditTable", &["dynamodb:PutItem"], Code)
    },
    Grant {
        keys: Keys::Like(&[HEAD_KEYS]),
        attributes: &["audit_id", "hash", "seq"],
        ..g("AuditTable", &["dynamodb:UpdateItem"], Code)
    },
];

/// The partition keys of the chains' heads.
pub const HEAD_KEYS: &str = "#head#*";

/// A grant limited to requests that carry only `attributes`.
const fn only(
    resource: &'static str,
    actions: &'static [&'static str],
    caller: Caller,
    attributes: &'static [&'static str],
) -> Grant {
    Grant {
        attributes,
        ..g(resource, actions, caller)
    }
}

use Caller::{Code, EventSourceMapping as Esm, Runtime};

const TRACING: Grant = g("*", &["xray:PutTraceSegments", "xray:PutTelemetryRecords"], Runtime);

pub const CONSUMER: &[Grant] = &[
    g(
        "MainQueue",
        &["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
        Esm,
    ),
    g("MainQueue", &["sqs:ChangeMessageVisibility"], Code),
    g("DeadLetterQueue", &["sqs:SendMessage"], Code),
    on(When::UseDynamoLedger, g("LedgerTable", &["dynamodb:PutItem"], Code)),
    VPC[0],
    VPC[1],
    // The reservation protocol: claim, commit, release or leave in doubt: conditional updates all.
    on(
        When::UseReservationProtocol,
        g("DedupTable", &["dynamodb:UpdateItem"], Code),
    ),
    HTTP_TOKEN,
    g("ReferenceTable", &["dynamodb:Scan"], Code),
    AUDIT[0],
    AUDIT[1],
    AUDIT[2],
    // Seals on the append path.
    g("QuarantineBucket/*", &["s3:GetObjectVersion", "s3:PutObject"], Code),
    g(
        "QuarantineBucket",
        &["s3:ListBucketVersions", "s3:GetBucketObjectLockConfiguration"],
        Code,
    ),
    g("ConsumerLogs", &["logs:CreateLogStream", "logs:PutLogEvents"], Runtime),
    TRACING,
];

pub const ENRICHER: &[Grant] = &[
    g(
        "DeadLetterQueue",
        &["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
        Esm,
    ),
    // DeleteItem: the overflow record leaves the audit outbox once it is in the trail.
    g(
        "EnvelopeTable",
        &[
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:GetItem",
            "dynamodb:DeleteItem",
        ],
        Code,
    ),
    AUDIT[0],
    AUDIT[1],
    AUDIT[2],
    g("QuarantineBucket/*", &["s3:GetObjectVersion", "s3:PutObject"], Code),
    g(
        "QuarantineBucket",
        &["s3:ListBucketVersions", "s3:GetBucketObjectLockConfiguration"],
        Code,
    ),
    g("EnricherLogs", &["logs:CreateLogStream", "logs:PutLogEvents"], Runtime),
    TRACING,
];

pub const REPLAY: &[Grant] = &[
    g("MainQueue", &["sqs:SendMessage", "sqs:GetQueueAttributes"], Code),
    g(
        "EnvelopeTable",
        &[
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            // A chunk's records leave the audit outbox together.
            "dynamodb:BatchWriteItem",
        ],
        Code,
    ),
    g("EnvelopeTable/index/*", &["dynamodb:Query"], Code),
    // Gate 2 for a page, and for a claimed chunk, in one read each.
    on(
        When::UseDynamoLedger,
        g("LedgerTable", &["dynamodb:GetItem", "dynamodb:BatchGetItem"], Code),
    ),
    // A reconciliation's segment: the period's postings through the period index.
    on(
        When::UseDynamoLedger,
        g("LedgerTable/index/*", &["dynamodb:Query"], Code),
    ),
    // A hand-off to a manual journal, never a posting: only the hand-off's attributes.
    on(
        When::UseDynamoLedger,
        only(
            "LedgerTable",
            &["dynamodb:PutItem"],
            Code,
            &crate::dynamodb::HAND_OFF_ATTRIBUTES,
        ),
    ),
    VPC[0],
    VPC[1],
    // Gate 2 reads the dedup table; a hand-off claims, commits, releases or leaves in doubt
    // there: conditional updates all.
    on(
        When::UseReservationProtocol,
        g("DedupTable", &["dynamodb:GetItem", "dynamodb:UpdateItem"], Code),
    ),
    HTTP_TOKEN,
    g("ReferenceTable", &["dynamodb:Scan"], Code),
    AUDIT[0],
    AUDIT[1],
    AUDIT[2],
    // A chunk's records linked together: the heads of their chains read at once.
    g("AuditTable", &["dynamodb:BatchGetItem"], Code),
    // Seals: the bucket read by version, the latest seal read, the next one written.
    g(
        "QuarantineBucket",
        &["s3:ListBucketVersions", "s3:GetBucketObjectLockConfiguration"],
        Code,
    ),
    g(
        "QuarantineBucket/*",
        &["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject"],
        Code,
    ),
    // Lambda delivers the function's failed asynchronous events or stream batches there.
    g("UndeliveredQueue", &["sqs:SendMessage"], Runtime),
    g("ReplayLogs", &["logs:CreateLogStream", "logs:PutLogEvents"], Runtime),
    TRACING,
];

pub const REFERENCE_AUDIT: &[Grant] = &[
    g(
        "ReferenceTable/stream/*",
        &[
            "dynamodb:DescribeStream",
            "dynamodb:GetRecords",
            "dynamodb:GetShardIterator",
            "dynamodb:ListStreams",
        ],
        Esm,
    ),
    AUDIT[0],
    AUDIT[1],
    AUDIT[2],
    g("QuarantineBucket/*", &["s3:GetObjectVersion", "s3:PutObject"], Code),
    g(
        "QuarantineBucket",
        &["s3:ListBucketVersions", "s3:GetBucketObjectLockConfiguration"],
        Code,
    ),
    // Lambda delivers the function's failed asynchronous events or stream batches there.
    g("UndeliveredQueue", &["sqs:SendMessage"], Runtime),
    g(
        "ReferenceAuditLogs",
        &["logs:CreateLogStream", "logs:PutLogEvents"],
        Runtime,
    ),
    TRACING,
];

/// Role logical id -> grants.
pub const ROLES: [(&str, &[Grant]); 4] = [
    ("ConsumerRole", CONSUMER),
    ("EnricherRole", ENRICHER),
    ("ReplayRole", REPLAY),
    ("ReferenceAuditRole", REFERENCE_AUDIT),
];

/// The IAM actions an SDK operation (`Service:Operation`, as the request counter names it)
/// needs. A transaction needs the actions of its items: PutItem and UpdateItem here, the only
/// kinds our transactions contain.
pub fn actions_for(operation: &str) -> &'static [&'static str] {
    match operation {
        "SQS:SendMessage" | "SQS:SendMessageBatch" => &["sqs:SendMessage"],
        "SQS:ChangeMessageVisibility" => &["sqs:ChangeMessageVisibility"],
        "SQS:GetQueueAttributes" => &["sqs:GetQueueAttributes"],
        "SQS:ReceiveMessage" => &["sqs:ReceiveMessage"],
        "SQS:DeleteMessage" | "SQS:DeleteMessageBatch" => &["sqs:DeleteMessage"],
        "DynamoDB:PutItem" => &["dynamodb:PutItem"],
        "DynamoDB:GetItem" => &["dynamodb:GetItem"],
        "DynamoDB:UpdateItem" => &["dynamodb:UpdateItem"],
        "DynamoDB:DeleteItem" => &["dynamodb:DeleteItem"],
        "DynamoDB:Query" => &["dynamodb:Query"],
        "DynamoDB:Scan" => &["dynamodb:Scan"],
        "DynamoDB:TransactWriteItems" => &["dynamodb:PutItem", "dynamodb:UpdateItem"],
        "DynamoDB:BatchGetItem" => &["dynamodb:BatchGetItem"],
        "DynamoDB:BatchWriteItem" => &["dynamodb:BatchWriteItem"],
        "S3:PutObject" => &["s3:PutObject"],
        "S3:GetObject" | "S3:HeadObject" => &["s3:GetObject"],
        "S3:GetObjectVersion" => &["s3:GetObjectVersion"],
        "S3:ListObjectVersions" => &["s3:ListBucketVersions"],
        "S3:GetObjectLockConfiguration" => &["s3:GetBucketObjectLockConfiguration"],
        "Secrets Manager:GetSecretValue" => &["secretsmanager:GetSecretValue"],
        _ => &[],
    }
}
