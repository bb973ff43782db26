//! Which ledger the consumer commits to and the replay's gate 2 asks (`DLQ_LEDGER`), and where
//! it is.

use super::{ConfigError, Env, required, vars};

/// Where the consumer commits and the replay's gate 2 asks: one ledger for both (`DLQ_LEDGER`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerSettings {
    /// The reference ledger, the DynamoDB table `DLQ_LEDGER_TABLE`.
    DynamoDb,
    /// Your own PostgreSQL ledger.
    Postgres(PostgresLocation),
    /// Your general ledger's HTTP posting API, through the reserve → post → commit protocol.
    Http(HttpLocation),
}

/// Where the HTTP ledger is, its credentials, and the dedup table of the reservation protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpLocation {
    pub url: String,
    pub dedup_table: String,
    /// A Secrets Manager secret whose `token` is sent as a bearer token; unset, none is sent.
    pub secret_arn: Option<String>,
}

/// Where the PostgreSQL ledger is, and where its credentials are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresLocation {
    /// `postgres://user@host:port/db`, never with a password (the rule refuses one: this value is
    /// recorded in the audit trail).
    pub url: String,
    /// A Secrets Manager secret whose `username` and `password` the connection uses (how a
    /// function on AWS gets them). Unset, the URL's user connects without a password (trust
    /// authentication on loopback: the local stack).
    pub secret_arn: Option<String>,
}

impl LedgerSettings {
    pub const KINDS: [&str; 3] = ["dynamodb", "postgres", "http"];

    pub(super) fn read<G: Fn(&str) -> Option<String>>(env: &Env<G>) -> Result<Self, ConfigError> {
        let kind = env.name(vars::LEDGER)?;
        let url = env.optional(vars::POSTGRES_URL)?;
        let secret_arn = env.optional(vars::POSTGRES_SECRET_ARN)?;
        let http_url = env.optional(vars::HTTP_LEDGER_URL)?;
        let http_secret_arn = env.optional(vars::HTTP_LEDGER_SECRET_ARN)?;
        let dedup_table = env.optional(vars::DEDUP_TABLE)?;
        Ok(match kind.as_str() {
            "postgres" => LedgerSettings::Postgres(PostgresLocation {
                url: required(url, vars::POSTGRES_URL)?,
                secret_arn,
            }),
            "http" => LedgerSettings::Http(HttpLocation {
                url: required(http_url, vars::HTTP_LEDGER_URL)?,
                dedup_table: required(dedup_table, vars::DEDUP_TABLE)?,
                secret_arn: http_secret_arn,
            }),
            _ => LedgerSettings::DynamoDb,
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            LedgerSettings::DynamoDb => Self::KINDS[0],
            LedgerSettings::Postgres(_) => Self::KINDS[1],
            LedgerSettings::Http(_) => Self::KINDS[2],
        }
    }
}
