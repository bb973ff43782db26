//! The ledger a deployment chose (`DLQ_LEDGER`): the DynamoDB reference ledger, your own
//! PostgreSQL, or your general ledger's HTTP API through the reserve → post → commit protocol.
//! One value serves the consumer's commits, the replay's gate 2 and every read (`dlqctl`
//! reconcile, stats, `audit show`, evidence export), so they always ask the same store.

use aws_sdk_secretsmanager::operation::get_secret_value::GetSecretValueError;
use recon_core::config::{HttpLocation, LedgerSettings, PostgresLocation};
use recon_core::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TxKey};
use recon_core::ports::{
    Fetch, FetchPending, Ledger, LedgerReader, LedgerScope, PostingPage, Rotating, StoreError, StoreResult, SystemClock,
};
use recon_core::reservation::{ReservationSettings, ReservingLedger};
use recon_http::{HttpLedger, HttpSettings};
use recon_postgres::{Credentials, PostgresLedger, PostgresSettings};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

use crate::client::AwsClients;
use crate::dynamodb::{DynamoDedupTable, DynamoLedger};
use crate::error::{SdkError, store_error};

#[derive(Clone)]
pub enum AnyLedger {
    DynamoDb(DynamoLedger),
    Postgres(Box<LazyPostgres>),
    Http(Box<LazyHttp>),
}

/// Your general ledger's HTTP API behind the reserve → post → commit protocol on the dedup table;
/// its client made on first use (the bearer token read from its secret then).
#[derive(Clone)]
pub struct LazyHttp {
    location: HttpLocation,
    clients: AwsClients,
    dedup: DynamoDedupTable,
    ledger: Arc<OnceCell<Arc<ReservingLedger<HttpLedger, DynamoDedupTable>>>>,
}

impl LazyHttp {
    /// The reservation protocol over the HTTP ledger.
    pub async fn get(&self) -> StoreResult<&ReservingLedger<HttpLedger, DynamoDedupTable>> {
        let ledger = self
            .ledger
            .get_or_try_init(|| async {
                // The token is read from its secret again once it is CREDENTIAL_MAX_AGE old, and
                // at once when the GL refuses it: a rotation costs one refused request.
                let token = match &self.location.secret_arn {
                    Some(arn) => Some(rotating_secret(&self.clients, arn, |[token]| token, ["token"])),
                    None => None,
                };
                let t = self.clients.timeouts;
                let gl = HttpLedger::new(&HttpSettings {
                    base_url: self.location.url.clone(),
                    token,
                    connect_timeout: t.connect,
                    timeout: t.attempt,
                })?;
                // The dedup marks outlive the longest replay window any deployment may set: a
                // replay never finds a transaction's mark expired.
                let claims = ReservationSettings {
                    ttl: chrono::Duration::days(longest_replay_window_days() + 35),
                    ..ReservationSettings::default()
                };
                claims
                    .validate(chrono::Duration::days(longest_replay_window_days()))
                    .map_err(StoreError::infra)?;
                Ok::<_, StoreError>(Arc::new(ReservingLedger::new(
                    gl,
                    self.dedup.clone(),
                    claims,
                    Arc::new(SystemClock),
                )))
            })
            .await?;
        Ok(ledger)
    }
}

/// The PostgreSQL ledger, connected on first use: a database that is down when a function
/// starts fails the messages of that moment transiently (their retry budget, classified), not
/// the function's start, and the next use tries again.
#[derive(Clone)]
pub struct LazyPostgres {
    location: PostgresLocation,
    clients: AwsClients,
    pool_size: usize,
    ledger: Arc<OnceCell<PostgresLedger>>,
}

impl LazyPostgres {
    /// The connected ledger (the secret read and the migrations checked once per process).
    pub async fn get(&self) -> StoreResult<&PostgresLedger> {
        self.ledger
            .get_or_try_init(|| async {
                // Read from the secret again once CREDENTIAL_MAX_AGE old, and at once when the
                // database refuses them (28P01, 28000): RDS's rotation, single user or alternating
                // users, costs one refused connection.
                let credentials = self
                    .location
                    .secret_arn
                    .as_ref()
                    .map(|arn| rotating_secret(&self.clients, arn, rds_credentials, RDS_FIELDS));
                // Inside the function's time: a connection as long as one SDK attempt's
                // connection, a statement as long as one SDK attempt.
                let t = self.clients.timeouts;
                PostgresLedger::connect(&PostgresSettings {
                    url: self.location.url.clone(),
                    connect_timeout: t.connect,
                    statement_timeout: t.attempt.max(Duration::from_secs(1)),
                    pool_size: self.pool_size,
                    credentials,
                    tls: self.location.tls.clone(),
                })
                .await
            })
            .await
    }
}

/// How long a ledger credential read from its secret is used before it is read again (a rotation
/// the ledger has not refused yet is picked up within this).
pub const CREDENTIAL_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// A credential made of the text `fields` of the secret `arn` (by `make`), read when first used,
/// again once [`CREDENTIAL_MAX_AGE`] old and when the ledger refuses it; refused with what the
/// secret's current version still holds, the version a rotation has staged (`AWSPENDING`) is
/// tried once.
fn rotating_secret<T, const N: usize>(
    clients: &AwsClients,
    arn: &str,
    make: fn([String; N]) -> T,
    fields: [&'static str; N],
) -> Rotating<T>
where
    T: Clone + PartialEq + Send + 'static,
{
    let (clients, arn) = (clients.clone(), arn.to_owned());
    let current: Fetch<T> = {
        let (clients, arn) = (clients.clone(), arn.clone());
        Arc::new(move || {
            let (clients, arn) = (clients.clone(), arn.clone());
            Box::pin(async move { secret_fields(&clients, &arn, fields).await.map(make) })
        })
    };
    let pending: FetchPending<T> = Arc::new(move || {
        let (clients, arn) = (clients.clone(), arn.clone());
        Box::pin(async move { staged_fields(&clients, &arn, fields).await.map(|v| v.map(make)) })
    });
    Rotating::new(current, CREDENTIAL_MAX_AGE).with_pending(pending)
}

/// The longest replay window the configuration allows (`DLQ_REPLAY_WINDOW_DAYS`'s rule).
fn longest_replay_window_days() -> i64 {
    use recon_core::config::{Rule, variable, vars};
    match variable(vars::REPLAY_WINDOW_DAYS).map(|v| v.rule) {
        Some(Rule::Whole { max, .. }) => i64::try_from(max).unwrap_or(36_500),
        _ => 36_500,
    }
}

/// The ledger `settings` choose; `pool_size` bounds the PostgreSQL connections (the concurrent
/// commits of one batch). Nothing is connected yet.
pub fn open(clients: &AwsClients, settings: &LedgerSettings, ledger_table: &str, pool_size: usize) -> AnyLedger {
    match settings {
        LedgerSettings::Http(location) => AnyLedger::Http(Box::new(LazyHttp {
            location: location.clone(),
            clients: clients.clone(),
            dedup: DynamoDedupTable::new(clients.dynamodb.clone(), &location.dedup_table),
            ledger: Arc::default(),
        })),
        LedgerSettings::DynamoDb => AnyLedger::DynamoDb(DynamoLedger::new(clients.dynamodb.clone(), ledger_table)),
        LedgerSettings::Postgres(location) => AnyLedger::Postgres(Box::new(LazyPostgres {
            location: location.clone(),
            clients: clients.clone(),
            pool_size,
            ledger: Arc::default(),
        })),
    }
}

/// The fields of a PostgreSQL secret as RDS writes it.
const RDS_FIELDS: [&str; 2] = ["username", "password"];

fn rds_credentials([user, password]: [String; 2]) -> Credentials {
    Credentials { user, password }
}

/// The `username` and `password` of the Secrets Manager secret `arn` (RDS's form), read once.
pub async fn postgres_credentials(clients: &AwsClients, arn: &str) -> StoreResult<Credentials> {
    secret_fields(clients, arn, RDS_FIELDS).await.map(rds_credentials)
}

/// The text `fields` of a Secrets Manager secret holding a JSON object (for PostgreSQL the
/// `username` and `password` RDS writes). Neither the secret's text nor a parse error quoting it
/// reaches an error message.
/// The text of the secret `arn`'s version at `stage` (`None`: Secrets Manager's current one);
/// `Ok(None)` when a stage was asked for and no version has it.
async fn secret_text(clients: &AwsClients, arn: &str, stage: Option<&str>) -> StoreResult<Option<String>> {
    let out = clients
        .secrets_manager()
        .get_secret_value()
        .secret_id(arn)
        .set_version_stage(stage.map(str::to_owned))
        .send()
        .await;
    let out = match out {
        Ok(out) => out,
        Err(SdkError::ServiceError(s)) if matches!(s.err(), GetSecretValueError::ResourceNotFoundException(_)) => {
            return match stage {
                Some(_) => Ok(None),
                None => Err(StoreError::infra(format!("the ledger's secret {arn} does not exist"))),
            };
        }
        Err(e) => return Err(store_error("GetSecretValue", e)),
    };
    let text = out
        .secret_string()
        .ok_or_else(|| StoreError::infra(format!("the ledger's secret {arn} holds no text")))?;
    Ok(Some(text.to_owned()))
}

/// The text `fields` of a secret's JSON object, each present and not empty.
fn fields_of<const N: usize>(arn: &str, text: &str, fields: [&str; N]) -> StoreResult<[String; N]> {
    let unreadable = |what: &str| StoreError::infra(format!("the ledger's secret {arn} {what}"));
    let json: serde_json::Value = serde_json::from_str(text).map_err(|_| unreadable("is not a JSON object"))?;
    let field = |k: &str| {
        json.get(k)
            .and_then(|v| v.as_str())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| unreadable(&format!("has no `{k}`")))
    };
    let mut values = Vec::with_capacity(N);
    for k in fields {
        values.push(field(k)?);
    }
    values.try_into().map_err(|_| unreadable("could not be read"))
}

/// `fields` of the secret's current version.
async fn secret_fields<const N: usize>(clients: &AwsClients, arn: &str, fields: [&str; N]) -> StoreResult<[String; N]> {
    let text = secret_text(clients, arn, None)
        .await?
        .ok_or_else(|| StoreError::infra(format!("the ledger's secret {arn} does not exist")))?;
    fields_of(arn, &text, fields)
}

/// `fields` of the version a rotation in progress has staged (`AWSPENDING`), if any.
async fn staged_fields<const N: usize>(
    clients: &AwsClients,
    arn: &str,
    fields: [&str; N],
) -> StoreResult<Option<[String; N]>> {
    match secret_text(clients, arn, Some("AWSPENDING")).await? {
        Some(text) => fields_of(arn, &text, fields).map(Some),
        None => Ok(None),
    }
}

impl AnyLedger {
    pub fn kind(&self) -> &'static str {
        match self {
            AnyLedger::DynamoDb(_) => LedgerSettings::KINDS[0],
            AnyLedger::Postgres(_) => LedgerSettings::KINDS[1],
            AnyLedger::Http(_) => LedgerSettings::KINDS[2],
        }
    }

    /// What its work has cost so far, and in what: DynamoDB's write units (commits), or the
    /// statements sent to PostgreSQL (reads included).
    pub fn cost(&self) -> (f64, &'static str) {
        match self {
            AnyLedger::DynamoDb(l) => (l.write_units(), "write units"),
            AnyLedger::Postgres(l) => (
                l.ledger.get().map_or(0, PostgresLedger::statements) as f64,
                "statements",
            ),
            AnyLedger::Http(l) => (l.ledger.get().map_or(0, |c| c.gl.requests()) as f64, "HTTP requests"),
        }
    }
}

impl Ledger for AnyLedger {
    async fn commit(&self, posting: &Posting) -> StoreResult<CommitOutcome> {
        match self {
            AnyLedger::DynamoDb(l) => l.commit(posting).await,
            AnyLedger::Postgres(l) => l.get().await?.commit(posting).await,
            AnyLedger::Http(l) => l.get().await?.commit(posting).await,
        }
    }

    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        match self {
            AnyLedger::DynamoDb(l) => l.lookup(key).await,
            AnyLedger::Postgres(l) => l.get().await?.lookup(key).await,
            // The dedup table's mark, else the GL's own answer (a post whose answer was lost).
            AnyLedger::Http(l) => l.get().await?.lookup(key).await,
        }
    }

    async fn lookup_many(&self, keys: &[TxKey]) -> StoreResult<std::collections::HashMap<String, CommittedRef>> {
        match self {
            AnyLedger::DynamoDb(l) => l.lookup_many(keys).await,
            AnyLedger::Postgres(l) => l.get().await?.lookup_many(keys).await,
            AnyLedger::Http(l) => l.get().await?.lookup_many(keys).await,
        }
    }

    async fn hand_off(&self, hand_off: &HandOff) -> StoreResult<CommitOutcome> {
        match self {
            AnyLedger::DynamoDb(l) => l.hand_off(hand_off).await,
            AnyLedger::Postgres(l) => l.get().await?.hand_off(hand_off).await,
            AnyLedger::Http(l) => l.get().await?.hand_off(hand_off).await,
        }
    }
}

impl LedgerReader for AnyLedger {
    async fn posting(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        match self {
            AnyLedger::DynamoDb(l) => LedgerReader::posting(l, key).await,
            AnyLedger::Postgres(l) => LedgerReader::posting(l.get().await?, key).await,
            AnyLedger::Http(l) => l.get().await?.gl.posting(key).await,
        }
    }

    async fn postings_of(&self, keys: &[TxKey]) -> StoreResult<Vec<Posting>> {
        match self {
            AnyLedger::DynamoDb(l) => l.postings_of(keys).await,
            AnyLedger::Postgres(l) => l.get().await?.postings_of(keys).await,
            AnyLedger::Http(l) => l.get().await?.gl.postings_of(keys).await,
        }
    }

    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        match self {
            AnyLedger::DynamoDb(l) => l.postings_page(scope, cursor, limit).await,
            AnyLedger::Postgres(l) => l.get().await?.postings_page(scope, cursor, limit).await,
            AnyLedger::Http(l) => l.get().await?.gl.postings_page(scope, cursor, limit).await,
        }
    }

    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        match self {
            AnyLedger::DynamoDb(l) => LedgerReader::hand_offs(l).await,
            AnyLedger::Postgres(l) => LedgerReader::hand_offs(l.get().await?).await,
            // Hand-offs never reach the general ledger: the dedup table holds them.
            AnyLedger::Http(l) => l.dedup.hand_offs().await,
        }
    }
}
