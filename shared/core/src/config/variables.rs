//! Every variable the functions read, each with its rule, default and meaning: the one table
//! the parsers check against and docs/configuration.md shows.

use super::rules::{Rule, UNSET};
use super::vars;
use crate::decisions::retry::MAX_VISIBILITY_SECS;
use crate::resources;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    pub name: &'static str,
    pub rule: Rule,
    /// `None`: required (the template sets it).
    pub default: Option<&'static str>,
    pub meaning: &'static str,
}

const fn required(name: &'static str, rule: Rule, meaning: &'static str) -> Variable {
    Variable {
        name,
        rule,
        default: None,
        meaning,
    }
}

const fn whole(
    name: &'static str,
    min: u64,
    max: u64,
    unit: &'static str,
    default: &'static str,
    meaning: &'static str,
) -> Variable {
    Variable {
        name,
        rule: Rule::Whole { min, max, unit },
        default: Some(default),
        meaning,
    }
}

/// Every variable the functions read, in docs/configuration.md's order.
pub const VARIABLES: &[Variable] = &[
    required(
        vars::STACK_PREFIX,
        Rule::Prefix,
        "the deployment's name: a dimension of every metric",
    ),
    required(
        vars::MAIN_QUEUE_URL,
        Rule::QueueUrl,
        "the main queue (the consumer reads it, replay re-injects into it)",
    ),
    required(
        vars::DEAD_LETTER_QUEUE_URL,
        Rule::QueueUrl,
        "the DLQ the consumer dead-letters to (and whose depth the control plane's reconciliation waits on)",
    ),
    required(
        vars::PARKING_QUEUE_URL,
        Rule::QueueUrl,
        "the queue behind the DLQ, where the dead letters the enricher kept failing on wait (the control plane's reconciliation waits on it)",
    ),
    required(vars::LEDGER_TABLE, Rule::TableName, "the ledger table"),
    required(
        vars::REFERENCE_TABLE,
        Rule::TableName,
        "the reference data table (currencies, periods)",
    ),
    required(vars::AUDIT_TABLE, Rule::TableName, "the audit table"),
    required(vars::ENVELOPE_TABLE, Rule::TableName, "the envelope table"),
    required(
        vars::QUARANTINE_BUCKET,
        Rule::BucketName,
        "the Object Lock bucket (every function writes seals there)",
    ),
    required(
        vars::QUARANTINE_BUCKET_OWNER,
        Rule::AccountId,
        "the account every request to the bucket expects to own it",
    ),
    required(
        vars::SWEEP_SCHEDULE,
        Rule::ScheduleName,
        "the only schedule whose scheduled event starts a sweep",
    ),
    required(
        vars::SEAL_SCHEDULE,
        Rule::ScheduleName,
        "the schedule whose scheduled event only seals the audit trail",
    ),
    whole(
        vars::MAX_ATTEMPTS,
        1,
        1000,
        "receives",
        "5",
        "retry budget; must equal the redrive policy's maxReceiveCount",
    ),
    whole(
        vars::BACKOFF_BASE_SECS,
        1,
        MAX_VISIBILITY_SECS as u64,
        "seconds",
        "2",
        "backoff min(cap, base·2^(n-1) + jitter)",
    ),
    whole(
        vars::BACKOFF_CAP_SECS,
        1,
        MAX_VISIBILITY_SECS as u64,
        "seconds, not below the base",
        "300",
        "the longest backoff (SQS hides a message 12 hours at most)",
    ),
    whole(
        vars::DEADLINE_MARGIN_MS,
        100,
        15_000,
        "milliseconds",
        "3000 (replay: 5000)",
        "hand back unstarted work when less is left of the invocation",
    ),
    whole(
        vars::BATCH_CONCURRENCY,
        1,
        100,
        "messages",
        "10",
        "messages of one batch processed at once",
    ),
    whole(
        vars::REFERENCE_CACHE_SECS,
        0,
        3600,
        "seconds",
        "30",
        "how long the consumer caches reference data",
    ),
    whole(
        vars::OVERFLOW_HIGH_WATER,
        0,
        1_000_000_000,
        "PENDING envelopes",
        "1000",
        "PENDING envelopes above this raise DLQ_OVERFLOW",
    ),
    whole(
        vars::REPLAY_LEASE_SECS,
        1,
        86_400,
        "seconds",
        "300",
        "how long a replay's claim protects a re-injection",
    ),
    whole(
        vars::REPLAY_MAX_PER_ENVELOPE,
        1,
        100,
        "replays",
        "3",
        "replays of one message before it is quarantined for review",
    ),
    whole(
        vars::REPLAY_WINDOW_DAYS,
        1,
        3650,
        "days",
        "90",
        "envelopes older than this are quarantined, not replayed (keep it below any dedup TTL)",
    ),
    whole(
        vars::REPLAY_RATE_PER_SEC,
        0,
        10_000,
        "messages per second, 0 for no limit",
        "50",
        "re-injections per second, across every replay of the deployment at once",
    ),
    Variable {
        name: vars::ESCALATION,
        rule: Rule::Escalation,
        default: Some(crate::decisions::escalation::DEFAULT_ESCALATION),
        meaning: "after how long a PENDING dead letter's failure code is escalated to whom (an ESCALATED record per stage; the alarm on PendingEscalated by Stage pages its topic)",
    },
    whole(
        vars::PERIOD_CLOSE_WARNING_HOURS,
        0,
        8760,
        "hours",
        "48",
        "how long before an open period's planned close (dlqctl period schedule) its PENDING dead letters are escalated (an ESCALATED record per entity and period; the alarm on PendingBeforePeriodClose pages the finance controller's topic)",
    ),
    whole(
        vars::SWEEP_CANARY,
        0,
        1000,
        "re-injections, 0 for none",
        "0",
        "re-injections of one group (failure code and root cause) a scheduled sweep makes before it has seen such copies post: the rest of a larger group waits until every copy committed, a copy dead-lettered again holds the group for 24 hours (the template sets 10)",
    ),
    whole(
        vars::REPLAY_QUEUE_HIGH_WATER,
        1,
        1_000_000_000,
        "visible messages",
        "10000",
        "back-pressure: stop re-injecting while the main queue holds more",
    ),
    whole(
        vars::REPLAY_PAGE_SIZE,
        1,
        1000,
        "envelopes per page",
        "100",
        "envelopes read per page",
    ),
    whole(
        vars::SEAL_EVERY_MINUTES,
        2,
        1440,
        "minutes",
        "15",
        "the seal schedule's interval; verify calls sealing stopped when a record waits twice this",
    ),
    whole(
        vars::SEAL_EVERY_RECORDS,
        1,
        100_000,
        "records",
        "500",
        "the functions seal on the append path whenever an audit chain reaches a multiple of this",
    ),
    Variable {
        name: vars::METRICS_NAMESPACE,
        rule: Rule::Namespace,
        default: Some(resources::DEFAULT_METRICS_NAMESPACE),
        meaning: "CloudWatch namespace of the EMF metrics",
    },
    Variable {
        name: vars::LEDGER,
        rule: Rule::OneOf(&super::LedgerSettings::KINDS),
        default: Some("dynamodb"),
        meaning: "the ledger the consumer commits to and the replay's gate 2 asks (one ledger for both)",
    },
    Variable {
        name: vars::POSTGRES_URL,
        rule: Rule::PostgresUrl,
        default: Some(UNSET),
        meaning: "the PostgreSQL ledger's database (required when DLQ_LEDGER is postgres)",
    },
    Variable {
        name: vars::POSTGRES_SECRET_ARN,
        rule: Rule::SecretArn,
        default: Some(UNSET),
        meaning: "the secret holding the PostgreSQL ledger's username and password (on AWS)",
    },
    Variable {
        name: vars::POSTGRES_TLS,
        rule: Rule::OneOf(&["verify-full", "disable"]),
        default: Some("verify-full"),
        meaning: "TLS to the PostgreSQL ledger, the server's certificate and name verified; disable only to a loopback host",
    },
    Variable {
        name: vars::POSTGRES_CA_FILE,
        rule: Rule::AbsolutePath,
        default: Some(UNSET),
        meaning: "the CA certificates (PEM) the PostgreSQL ledger's server certificate is verified against; unset, the Amazon RDS and RDS Proxy CAs compiled in",
    },
    Variable {
        name: vars::HTTP_LEDGER_URL,
        rule: Rule::HttpUrl,
        default: Some(UNSET),
        meaning: "the HTTP ledger's API (required when DLQ_LEDGER is http)",
    },
    Variable {
        name: vars::HTTP_LEDGER_SECRET_ARN,
        rule: Rule::SecretArn,
        default: Some(UNSET),
        meaning: "the secret holding the HTTP ledger's bearer token (`token`)",
    },
    required(
        vars::DECISION_KEY,
        Rule::KmsKey,
        "the KMS HMAC key only the control plane may seal its decisions with (an approval without its seal does not run)",
    ),
    required(
        vars::CONSUMER_SENDERS,
        Rule::Senders,
        "who may dead-letter (the consumer's role): `dlq.*` attributes from anyone else are dropped, not believed",
    ),
    required(
        vars::REPLAY_SENDERS,
        Rule::Senders,
        "who may re-inject (the replay's and the control plane's roles): `replay.*` attributes from anyone else are dropped",
    ),
    required(
        vars::OPERATOR_ROLES,
        Rule::OperatorRoles,
        "the control plane's operator roles by IAM role name: what each caller may ask",
    ),
    Variable {
        name: vars::DEDUP_TABLE,
        rule: Rule::TableName,
        default: Some(UNSET),
        meaning: "the dedup table of the reservation protocol (required when DLQ_LEDGER is http)",
    },
    Variable {
        name: vars::CONSOLE_GROUPS,
        rule: Rule::ConsoleGroups,
        default: Some(UNSET),
        meaning: "the console's operator roles by the identity provider's group (unset: the control plane answers no console sign-in)",
    },
    Variable {
        name: vars::CONSOLE_GROUPS_CLAIM,
        rule: Rule::ClaimName,
        default: Some(crate::domain::console::DEFAULT_GROUPS_CLAIM),
        meaning: "the claim of a console sign-in's token that lists its groups (Cognito: `cognito:groups`)",
    },
    Variable {
        name: vars::CONSOLE_ISSUER,
        rule: Rule::HttpUrl,
        default: Some(UNSET),
        meaning: "the identity provider the console's page signs people in with (OpenID Connect, authorization code with PKCE; its tokens' `iss`); unset: the control plane serves no console page",
    },
    Variable {
        name: vars::CONSOLE_CLIENT_ID,
        rule: Rule::ClaimName,
        default: Some(UNSET),
        meaning: "the console's client id at the identity provider, its tokens' audience (required with DLQ_CONSOLE_ISSUER)",
    },
    Variable {
        name: vars::CONSOLE_SIGN_IN_ORIGIN,
        rule: Rule::HttpUrl,
        default: Some(UNSET),
        meaning: "the origin of the provider's authorization and token endpoints where it is not the issuer's (Cognito: the user pool's domain); the page may connect to it and the issuer only",
    },
    Variable {
        name: vars::CONSOLE_NAME_CLAIM,
        rule: Rule::ClaimName,
        default: Some(crate::domain::console::DEFAULT_NAME_CLAIM),
        meaning: "the claim that names the person signed in at the console: what their operator role sessions are named after, so one person is one person through both doors",
    },
];

/// The configuration table of docs/configuration.md, rows in [`VARIABLES`]' order (a test
/// compares); `<` and `>` escaped, so a placeholder such as `<region>` is text, not an HTML tag.
pub fn configuration_table() -> String {
    let cell = |s: String| s.replace('<', "&lt;").replace('>', "&gt;");
    let mut out = String::from("| variable | default | allowed | meaning |\n|---|---|---|---|\n");
    for v in VARIABLES {
        let default = v.default.map_or_else(|| "required".to_owned(), |d| format!("`{d}`"));
        out.push_str(&format!(
            "| `{}` | {default} | {} | {} |\n",
            v.name,
            cell(v.rule.allowed().to_string()),
            cell(v.meaning.to_string())
        ));
    }
    out
}
