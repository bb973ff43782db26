//! What each variable may hold: the one vocabulary of the configuration, and its table.

use super::vars;
use crate::decisions::retry::MAX_VISIBILITY_SECS;
use crate::resources;

/// What a variable may hold ([`Rule::allowed`] says it in words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A whole number from `min` to `max` (inclusive), counted in `unit`.
    Whole {
        min: u64,
        max: u64,
        unit: &'static str,
    },
    QueueUrl,
    TableName,
    BucketName,
    AccountId,
    ScheduleName,
    /// A deployment prefix: what the template's `StackPrefix` allows.
    Prefix,
    Namespace,
    OneOf(&'static [&'static str]),
    PostgresUrl,
    SecretArn,
    HttpUrl,
    Escalation,
    OperatorRoles,
    KmsKey,
    /// SQS sender ids ([`crate::domain::sqs::Senders`]).
    Senders,
    /// An absolute file path.
    AbsolutePath,
}

/// The default of a variable that may stay unset (nothing is used in its place).
pub const UNSET: &str = "unset";

/// The longest deployment prefix: the bucket's name (`<prefix>-quarantine-<account>-<region>`,
/// at most 63 characters) must fit in every region, the longest of which have 14 characters.
pub const MAX_PREFIX_LEN: usize = 63 - "-quarantine-".len() - 12 - 1 - 14;

/// The options a PostgreSQL URL may carry: none of them a secret (a password comes from a secret),
/// and none about TLS (`DLQ_POSTGRES_TLS` and `DLQ_POSTGRES_CA_FILE` say how it is secured).
pub const POSTGRES_OPTIONS: [&str; 7] = [
    "channel_binding",
    "application_name",
    "connect_timeout",
    "target_session_attrs",
    "load_balance_hosts",
    "keepalives",
    "keepalives_idle",
];

/// `text` with its `%XX` escapes decoded, as the driver reads it (`None`: a broken escape, or not
/// UTF-8).
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Rule {
    /// What the rule allows, as the error and docs/configuration.md say it.
    pub fn allowed(&self) -> String {
        match self {
            Rule::Whole { min, max, unit } => format!("{min}-{max} {unit}"),
            Rule::QueueUrl => "an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)".into(),
            Rule::TableName => "a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -)".into(),
            Rule::BucketName => {
                "an S3 bucket name (3-63 of a-z 0-9 . -, starting and ending with a letter or digit)".into()
            }
            Rule::AccountId => "an AWS account id (12 digits)".into(),
            Rule::ScheduleName => "a schedule name (1-64 of A-Z a-z 0-9 _ . -)".into(),
            Rule::Prefix => format!("a prefix of 3-{MAX_PREFIX_LEN} of a-z 0-9 -, starting with a letter"),
            Rule::Namespace => "a CloudWatch namespace (1-255 of A-Z a-z 0-9 . - _ / # :, not AWS/…)".into(),
            Rule::OneOf(words) => format!("one of {}", words.join(", ")),
            Rule::PostgresUrl => format!(
                "postgres://<user>@<host>[:<port>]/<database>[?<options>], without a password (options: {})",
                POSTGRES_OPTIONS.join(", ")
            ),
            Rule::SecretArn => {
                "a Secrets Manager secret ARN (arn:<partition>:secretsmanager:<region>:<account>:secret:<name>)".into()
            }
            Rule::HttpUrl => {
                "https://<host>[:<port>][/<path>] (http:// only to 127.0.0.1 or localhost), without user or query"
                    .into()
            }
            Rule::KmsKey => "a KMS key: alias/<name>, a key id, or its ARN".into(),
            Rule::AbsolutePath => "an absolute file path (/…)".into(),
            Rule::Senders => {
                "SQS sender ids, comma-separated: a role's unique id followed by `:` (AROA…:), a user's unique id, or (LocalStack) the account".into()
            }
            Rule::OperatorRoles => format!(
                "ROLE:IAM_ROLE_NAME pairs, comma-separated, each role once, a name 1-64 of A-Z a-z 0-9 + . @ _ - (roles: {})",
                crate::domain::operator::OperatorRole::ALL
                    .map(|r| r.as_str())
                    .join(", ")
            ),
            Rule::Escalation => {
                "stages HOURSh:NAME in increasing age, comma-separated (NAME 1-40 of a-z 0-9 -), or empty for none"
                    .into()
            }
        }
    }

    /// Whether `value` is a name this rule allows (a whole number is checked by [`Rule::whole`]).
    pub fn admits(&self, value: &str) -> bool {
        let chars = |min: usize, max: usize, ok: &dyn Fn(char) -> bool| {
            (min..=max).contains(&value.chars().count()) && value.chars().all(ok)
        };
        let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        match self {
            Rule::Whole { .. } => self.whole(value).is_some(),
            Rule::QueueUrl => {
                let rest = value.strip_prefix("https://").or_else(|| value.strip_prefix("http://"));
                rest.is_some_and(|r| {
                    let mut parts = r.split('/');
                    let host = parts.next().unwrap_or_default();
                    let path: Vec<&str> = parts.collect();
                    !host.is_empty()
                        && !host.contains(char::is_whitespace)
                        && path.len() == 2
                        && path[0].len() == 12
                        && path[0].bytes().all(|b| b.is_ascii_digit())
                        && Rule::queue_name(path[1])
                })
            }
            Rule::TableName => chars(3, 255, &word),
            Rule::BucketName => {
                let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
                chars(3, 63, &|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-')
                }) && edge(value.chars().next())
                    && edge(value.chars().last())
                    && !value.contains("..")
            }
            Rule::AccountId => value.len() == 12 && value.bytes().all(|b| b.is_ascii_digit()),
            Rule::ScheduleName => chars(1, 64, &word),
            Rule::Prefix => {
                chars(3, MAX_PREFIX_LEN, &|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
                }) && value.starts_with(|c: char| c.is_ascii_lowercase())
            }
            Rule::Namespace => {
                chars(1, 255, &|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | '#' | ':')
                }) && !value.starts_with("AWS/")
            }
            Rule::OneOf(words) => words.contains(&value),
            Rule::HttpUrl => {
                let secure = value.starts_with("https://");
                let Some(rest) = value.strip_prefix("https://").or_else(|| value.strip_prefix("http://")) else {
                    return false;
                };
                let host = rest.split('/').next().unwrap_or_default();
                let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
                value.bytes().all(|b| b.is_ascii_graphic())
                    && !host.is_empty()
                    && !rest.contains(['@', '?', '#'])
                    && (secure || name == "127.0.0.1" || name == "localhost")
            }
            Rule::PostgresUrl => Rule::postgres_url(value),
            Rule::AbsolutePath => value.starts_with('/') && !value.chars().any(char::is_control),
            Rule::Escalation => value.parse::<crate::decisions::escalation::EscalationChain>().is_ok(),
            Rule::KmsKey => {
                let alias = value.strip_prefix("alias/").is_some_and(|a| {
                    !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "/_-".contains(c))
                });
                let id = value.len() == 36 && value.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
                let arn = value.starts_with("arn:aws") && value.split(':').nth(2) == Some("kms");
                (alias || id || arn) && chars(1, 2048, &|c| c.is_ascii_graphic())
            }
            Rule::OperatorRoles => value.parse::<crate::domain::operator::RoleNames>().is_ok(),
            Rule::Senders => value.parse::<crate::domain::sqs::Senders>().is_ok(),
            Rule::SecretArn => {
                let parts: Vec<&str> = value.splitn(7, ':').collect();
                parts.len() == 7
                    && parts[0] == "arn"
                    && parts[1].starts_with("aws")
                    && parts[2] == "secretsmanager"
                    && !parts[3].is_empty()
                    && Rule::AccountId.admits(parts[4])
                    && parts[5] == "secret"
                    && chars(1, 512, &|c| c.is_ascii_alphanumeric() || "/_+=.@-:".contains(c))
                    && !parts[6].is_empty()
            }
        }
    }

    /// `value` as a whole number within this rule's range.
    pub(super) fn whole(&self, value: &str) -> Option<u64> {
        match self {
            Rule::Whole { min, max, .. } => value.parse::<u64>().ok().filter(|n| (*min..=*max).contains(n)),
            _ => None,
        }
    }

    /// `postgres://user@host[:port]/db[?options]` (or `postgresql://`): printable ASCII without
    /// white space, a user and a database named, and no password (this value is recorded in the
    /// audit trail; a password comes from a secret).
    fn postgres_url(value: &str) -> bool {
        let Some(rest) = value
            .strip_prefix("postgres://")
            .or_else(|| value.strip_prefix("postgresql://"))
        else {
            return false;
        };
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return false;
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let database = path.split('?').next().unwrap_or_default();
        let Some((user, host)) = authority.rsplit_once('@') else {
            return false;
        };
        // Nor a password anywhere the driver would find one: it decodes percent-encoding, so the
        // checks read the decoded text (`user%3Apw@`, `?%70assword=`), and an option must be one
        // of those listed, none of which carries a secret.
        let decoded_user = percent_decoded(user);
        let options = path.split_once('?').map_or("", |(_, o)| o);
        let options_listed = options.is_empty()
            || options.split('&').all(|kv| {
                let name = percent_decoded(kv.split('=').next().unwrap_or_default());
                name.is_some_and(|n| POSTGRES_OPTIONS.contains(&n.as_str()))
            });
        decoded_user.is_some_and(|u| !u.is_empty() && !u.contains(':'))
            && !host.is_empty()
            && !host.starts_with(':')
            && !database.is_empty()
            && options_listed
    }

    fn queue_name(name: &str) -> bool {
        let base = name.strip_suffix(".fifo").unwrap_or(name);
        (1..=80).contains(&name.len())
            && base
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }
}

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
        "the DLQ the consumer dead-letters to",
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
