//! What each variable may hold: the one vocabulary of the configuration, and its table.

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
    /// The console's operator roles by group ([`crate::domain::console::ConsoleGroups`]).
    ConsoleGroups,
    /// A claim of an identity token (`email`, `cognito:groups`).
    ClaimName,
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
            Rule::ConsoleGroups => format!(
                "ROLE:GROUP pairs, comma-separated, each group once, a group without spaces, commas or brackets (roles: {})",
                crate::domain::operator::OperatorRole::ALL
                    .iter()
                    .filter(|r| **r != crate::domain::operator::OperatorRole::BreakGlass)
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Rule::ClaimName => "a token claim's name (1-256 printable characters, no space)".into(),
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
            Rule::ConsoleGroups => value.parse::<crate::domain::console::ConsoleGroups>().is_ok(),
            Rule::ClaimName => chars(1, 256, &|c| c.is_ascii_graphic()),
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
