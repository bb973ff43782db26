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
    /// How the connection is secured (`DLQ_POSTGRES_TLS`, `DLQ_POSTGRES_CA_FILE`).
    pub tls: PostgresTls,
}

/// How a connection to the PostgreSQL ledger is secured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostgresTls {
    /// TLS only: the server's certificate verified against the CAs of `ca_file` (PEM), by default
    /// the Amazon RDS and RDS Proxy CAs compiled into the PostgreSQL ledger, and its name or
    /// address against the URL's host.
    VerifyFull { ca_file: Option<std::path::PathBuf> },
    /// No TLS: refused unless every host of the URL is a loopback address or a Unix socket.
    Disable,
}

impl PostgresTls {
    /// Whether plaintext may go to `host` (a name or address of a URL): only to loopback.
    pub fn loopback(host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// The hosts of a PostgreSQL URL (`postgres://user@h1:5432,h2/db`), ports left out; a host given
/// as a Unix socket path (percent-encoded) counts as none.
fn url_hosts(url: &str) -> Vec<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hosts
        .split(',')
        .map(|h| match h.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => h,
        })
        .filter(|h| !h.is_empty() && !h.starts_with('%'))
        .collect()
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
        let tls = env.name(vars::POSTGRES_TLS)?;
        let ca_file = env.optional(vars::POSTGRES_CA_FILE)?;
        Ok(match kind.as_str() {
            "postgres" => {
                let url = required(url, vars::POSTGRES_URL)?;
                let tls = match tls.as_str() {
                    "disable" => {
                        if let Some(host) = url_hosts(&url).into_iter().find(|h| !PostgresTls::loopback(h)) {
                            return Err(ConfigError::Invalid {
                                var: vars::POSTGRES_TLS,
                                value: "disable".into(),
                                allowed: format!(
                                    "verify-full: {host} is not a loopback host, and plaintext may go only to one"
                                ),
                            });
                        }
                        PostgresTls::Disable
                    }
                    _ => PostgresTls::VerifyFull {
                        ca_file: ca_file.map(Into::into),
                    },
                };
                LedgerSettings::Postgres(PostgresLocation { url, secret_arn, tls })
            }
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
