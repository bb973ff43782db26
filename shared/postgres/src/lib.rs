//! The PostgreSQL ledger: your own relational ledger behind the [`Ledger`] port.
//!
//! One row per transaction in `ledger_entries`, keyed by `source_hash`: the posting and its dedup
//! key are one `INSERT … ON CONFLICT DO NOTHING RETURNING`, atomic by construction. When the
//! insert writes nothing, the row already there is read and returned, so the consumer tells a
//! redelivery of the same SQS message (same `sqs_message_id`) from a genuine duplicate. A
//! hand-off to a manual journal is a row under the same key, so the two exclude each other.
//!
//! The schema comes from versioned migrations (`migrations/`, applied by `migrate.rs`); amounts are
//! `NUMERIC`. Connections are pooled and reused across invocations; every statement carries a
//! timeout. Errors are classified for the retry budget: serialization failures and deadlocks
//! are conflicts, a cancelled statement a timeout, a lost or refused connection a network
//! failure, a server shutting down or out of connections unavailable or throttled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use recon_core::domain::{CommitOutcome, CommittedRef, HandOff, Posting, TransientKind, TxKey};
use recon_core::ports::{Ledger, LedgerReader, LedgerScope, PostingPage, Rotating, StoreError, StoreResult};
use rust_decimal::Decimal;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

/// The advisory lock migrations run under.
const MIGRATION_LOCK: i64 = 0x7265_636f_6e5f_6d69;

mod connect;
mod migrate;
use connect::Connector;
pub use connect::{RDS_CA_BUNDLE, Tls};
pub use migrate::HISTORY_TABLE;

/// How to reach the database and how long anything may take.
#[derive(Clone, Debug)]
pub struct PostgresSettings {
    /// A libpq connection string or URL (`postgres://user@host:port/db`). On AWS it is built from
    /// a Secrets Manager secret; locally it comes from the environment.
    pub url: String,
    pub connect_timeout: Duration,
    /// Every statement's timeout (`statement_timeout`), inside the function's remaining time.
    pub statement_timeout: Duration,
    pub pool_size: usize,
    /// The user and password to connect with, in place of the URL's user (on AWS, read from a
    /// Secrets Manager secret, again once old and at once when the server refuses them); `None`:
    /// the URL's user, without a password.
    pub credentials: Option<Rotating<Credentials>>,
    /// TLS, verified (the default), or plaintext to a loopback host.
    pub tls: Tls,
}

/// A database user and its password; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The ledger on a pool of connections (kept across invocations: a Lambda reuses its process).
#[derive(Clone)]
pub struct PostgresLedger {
    pool: Pool,
    credentials: Option<Rotating<Credentials>>,
    /// Statements sent (the cost per committed message, for the benchmark).
    statements: Arc<AtomicU64>,
    answer_within: Duration,
}

/// What an error of the driver means for the retry budget.
pub fn classify(op: &str, e: &tokio_postgres::Error) -> StoreError {
    let kind = match e.code() {
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED => {
            TransientKind::Conflict
        }
        Some(c) if *c == SqlState::QUERY_CANCELED || *c == SqlState::LOCK_NOT_AVAILABLE => TransientKind::Timeout,
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => TransientKind::Throttled,
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::READ_ONLY_SQL_TRANSACTION =>
        {
            TransientKind::ServiceUnavailable
        }
        Some(c) if c.code().starts_with("08") => TransientKind::Network,
        Some(_) => TransientKind::Infrastructure,
        // No SQLSTATE: the connection was refused, lost or timed out.
        None => TransientKind::Network,
    };
    let code = e.code().map(|c| c.code().to_owned()).unwrap_or_default();
    // The server's own words ("role … does not exist"); the driver's Display says only "db error".
    // Otherwise the driver's words and their causes ("error performing TLS handshake: invalid
    // peer certificate: UnknownIssuer").
    let said = e.as_db_error().map_or_else(
        || {
            let mut said = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                said.push_str(&format!(": {c}"));
                cause = c.source();
            }
            said
        },
        |d| d.message().to_owned(),
    );
    StoreError::new(kind, format!("{op}: {code} {said}"))
}

/// Why a statement did not run.
enum Failed {
    Store(StoreError),
    /// The ledger refused the row by a rule of its own.
    Refused {
        rule: String,
        detail: String,
    },
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Self {
        Failed::Store(e)
    }
}

/// A refusal by the database's own rules, which the same row meets again on every retry: a
/// constraint (class 23: check, not null, foreign key, a unique key of yours), a value it cannot
/// hold (class 22: a NUMERIC narrower than the amount, say), or a trigger's `RAISE EXCEPTION`
/// (P0001). The rule is `<SQLSTATE>:<constraint>` (or the trigger's function, or the table), in the
/// characters a root cause may carry; the detail is the server's message.
pub fn refusal(e: &tokio_postgres::Error) -> Option<(String, String)> {
    let db = e.as_db_error()?;
    let code = db.code().code();
    if !(code.starts_with("22") || code.starts_with("23") || code == "P0001") {
        return None;
    }
    // A trigger's RAISE names no constraint; its function is in the context ("PL/pgSQL function
    // f() line 3 at RAISE"). The server's own `routine` is C source, not yours.
    let function = db
        .where_()
        .and_then(|w| w.strip_prefix("PL/pgSQL function "))
        .and_then(|w| w.split('(').next());
    let name = db.constraint().or(function).or(db.table()).unwrap_or("unnamed");
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        .take(63)
        .collect();
    Some((format!("{code}:{name}"), db.message().to_owned()))
}

const ENTRY_COLUMNS: &str = "source_hash, sqs_message_id, message_id, committed_at, manual_journal";

/// A column of a row the store returned, or an error naming it (a row is network data: it is
/// read without panicking, whatever the table holds).
fn column<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> StoreResult<T> {
    row.try_get(i)
        .map_err(|e| StoreError::infra(format!("ledger_entries column {i} unreadable: {e}")))
}

fn committed_ref(row: &Row) -> StoreResult<CommittedRef> {
    Ok(CommittedRef {
        source_hash: column(row, 0)?,
        sqs_message_id: column::<Option<String>>(row, 1)?.unwrap_or_default(),
        message_id: column::<Option<String>>(row, 2)?.unwrap_or_default(),
        committed_at: Some(column::<DateTime<Utc>>(row, 3)?),
        manual_journal: column(row, 4)?,
    })
}

impl PostgresLedger {
    /// Connect (a pool, opened lazily) and check that the schema is this code's: every migration
    /// it carries applied, none it does not. The functions never change the schema: an
    /// unmigrated database is refused, naming the command that migrates it ([`Self::migrate`],
    /// `dlqctl ledger-migrate`, run by the deploy step as the database's migration role).
    pub async fn connect(settings: &PostgresSettings) -> StoreResult<Self> {
        let ledger = Self::pool(settings)?;
        let client = ledger.connection().await?;
        migrate::check(&client).await.map_err(|e| match e {
            migrate::MigrateError::Database(e) => classify("schema check", &e),
            refused => StoreError::infra(format!("the ledger's schema: {refused}")),
        })?;
        Ok(ledger)
    }

    /// As the database's migration role: apply the migrations not yet applied (recorded in
    /// [`HISTORY_TABLE`]; one process at a time), then grant each of `runtime_users` what posting
    /// and reading need: `SELECT` and `INSERT` on the ledger, `SELECT` on the history, the
    /// schema's `USAGE` (nothing to update, delete or create). How many migrations ran.
    pub async fn migrate(settings: &PostgresSettings, runtime_users: &[String]) -> StoreResult<usize> {
        let ledger = Self::pool(settings)?;
        let ran = ledger.apply_migrations().await?;
        let client = ledger.connection().await?;
        let schema: String = client
            .query_one("SELECT current_schema()", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| classify("current schema", &e))?;
        for user in runtime_users {
            client
                .batch_execute(&migrate::grants(&schema, user))
                .await
                .map_err(|e| classify(&format!("grants to {user}"), &e))?;
            // Granted nothing more, but what the user holds otherwise stays: before PostgreSQL
            // 15 every user may create in schema public.
            let creates: bool = client
                .query_one("SELECT has_schema_privilege($1, $2, 'CREATE')", &[user, &schema])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(|e| classify(&format!("privileges of {user}"), &e))?;
            if creates {
                return Err(StoreError::infra(format!(
                    "{user} may create objects in schema {schema} (before PostgreSQL 15 every user may in public): revoke it (REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC, and from {user}), then run this again"
                )));
            }
        }
        Ok(ran)
    }

    fn pool(settings: &PostgresSettings) -> StoreResult<Self> {
        let mut config: tokio_postgres::Config = settings
            .url
            .parse()
            .map_err(|e| StoreError::infra(format!("the PostgreSQL URL does not parse: {e}")))?;
        config.connect_timeout(settings.connect_timeout);
        // Added to the URL's own options (a search_path, say), not in place of them.
        let mut options = config.get_options().map(|o| format!("{o} ")).unwrap_or_default();
        options.push_str(&format!(
            "-c statement_timeout={ms} -c lock_timeout={ms}",
            ms = settings.statement_timeout.as_millis()
        ));
        config.options(options);
        let tls = connect::connector(&settings.tls, &mut config)?;
        let manager = Manager::from_connect(
            config,
            Connector {
                credentials: settings.credentials.clone(),
                tls,
            },
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .wait_timeout(Some(settings.connect_timeout))
            .create_timeout(Some(settings.connect_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::infra(format!("pool: {e}")))?;
        let ledger = PostgresLedger {
            pool,
            credentials: settings.credentials.clone(),
            statements: Arc::default(),
            // The server cancels a statement at its timeout; the client gives up a little later
            // (a half-open connection answers nothing at all).
            answer_within: settings.statement_timeout + Duration::from_secs(1),
        };
        Ok(ledger)
    }

    /// How many versioned migrations this code carries.
    pub fn migrations() -> usize {
        migrate::MIGRATIONS.len()
    }

    /// Apply the migrations not yet applied, one process at a time (two deploy steps racing on an
    /// empty schema wait for each other).
    async fn apply_migrations(&self) -> StoreResult<usize> {
        let mut object = self.connection().await?;
        let client: &mut tokio_postgres::Client = &mut object;
        client
            .batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))
            .await
            .map_err(|e| classify("migration lock", &e))?;
        let ran = migrate::run(client).await;
        let unlocked = client
            .batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))
            .await;
        if ran.is_err() || unlocked.is_err() {
            // The session may still hold the lock (or an aborted transaction): closed, never
            // handed to the next caller, and the lock goes with it.
            drop(deadpool_postgres::Object::take(object));
        }
        let ran = ran.map_err(|e| StoreError::infra(format!("migrations: {e}")))?;
        unlocked.map_err(|e| classify("migration unlock", &e))?;
        Ok(ran)
    }

    /// One statement on a pooled connection: prepared once per connection (one round trip per
    /// call after that), bounded on the client too, and a connection that failed or gave no
    /// answer is discarded, never handed to the next caller.
    async fn run(
        &self,
        op: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, Failed> {
        let client = self.connection().await?;
        self.count();
        let answer = tokio::time::timeout(self.answer_within, async {
            let statement = client.prepare_cached(sql).await?;
            client.query(&statement, params).await
        })
        .await;
        match answer {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                if let Some((rule, detail)) = refusal(&e) {
                    return Err(Failed::Refused { rule, detail });
                }
                let error = classify(op, &e);
                if matches!(error.kind, TransientKind::Network | TransientKind::ServiceUnavailable) {
                    drop(deadpool_postgres::Object::take(client));
                }
                Err(error.into())
            }
            Err(_) => {
                drop(deadpool_postgres::Object::take(client));
                Err(StoreError::new(
                    TransientKind::Timeout,
                    format!("{op}: no answer within {:?}", self.answer_within),
                )
                .into())
            }
        }
    }

    /// A read: a refusal is not expected of one, and is reported as the store's failure.
    async fn query(
        &self,
        op: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        self.run(op, sql, params).await.map_err(|f| match f {
            Failed::Store(e) => e,
            Failed::Refused { rule, detail } => StoreError::infra(format!("{op}: refused ({rule}): {detail}")),
        })
    }

    /// An insert-or-nothing of `source_hash`: what it did, a refusal included.
    async fn insert(
        &self,
        op: &str,
        source_hash: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<CommitOutcome> {
        match self.run(op, sql, params).await {
            Ok(rows) => self.outcome(op, source_hash, rows.into_iter().next()).await,
            // PostgreSQL checks constraints and runs BEFORE triggers before it looks for the
            // conflicting row: a redelivery or duplicate of a transaction committed before a
            // rule was added is answered by that row, not refused.
            Err(Failed::Refused { rule, detail }) => match self.existing(source_hash).await? {
                Some(held) => Ok(CommitOutcome::AlreadyCommitted(held)),
                None => Ok(CommitOutcome::Refused { rule, detail }),
            },
            Err(Failed::Store(e)) => Err(e),
        }
    }

    /// A statement that returns at most one row (the first, if it returned more).
    async fn query_opt(
        &self,
        op: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<Option<Row>> {
        Ok(self.query(op, sql, params).await?.into_iter().next())
    }

    /// Statements this ledger has sent (migrations aside).
    pub fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.statements.fetch_add(1, Ordering::Relaxed);
    }

    async fn existing(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        let row = self
            .query_opt(
                "lookup",
                &format!("SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE source_hash = $1"),
                &[&source_hash],
            )
            .await?;
        row.as_ref().map(committed_ref).transpose()
    }

    /// What an insert-or-nothing did: wrote the row (`Committed`), or found one, which is read
    /// and returned. A conflicting row that is gone by then means a store that lost one (nothing
    /// deletes rows): the message retries rather than guess.
    async fn outcome(&self, op: &str, source_hash: &str, written: Option<Row>) -> StoreResult<CommitOutcome> {
        if written.is_some() {
            return Ok(CommitOutcome::Committed);
        }
        self.existing(source_hash)
            .await?
            .map(CommitOutcome::AlreadyCommitted)
            .ok_or_else(|| StoreError::infra(format!("{op} of {source_hash} conflicted with a row that is gone")))
    }

    /// The posting of `source_hash`, if there is one (not a hand-off).
    pub async fn posting(&self, source_hash: &str) -> StoreResult<Option<Posting>> {
        let row = self
            .query_opt(
                "posting",
                &format!("SELECT {POSTING_COLUMNS} FROM ledger_entries WHERE source_hash = $1 AND kind = 'POSTING'"),
                &[&source_hash],
            )
            .await?;
        row.as_ref().map(posting).transpose()
    }
}

/// The columns [`posting`] reads, in its order.
const POSTING_COLUMNS: &str = "source_hash, sqs_message_id, message_id, trace_id, ledger_entity, currency, amount,
    value_date, period, match_decision, external_ref, counterparty, attempt_count, committed_at, replay_of";

/// A posting from a row of [`POSTING_COLUMNS`].
fn posting(r: &Row) -> StoreResult<Posting> {
    let decision: String = column(r, 9)?;
    let attempt: i32 = column(r, 12)?;
    Ok(Posting {
        source_hash: column(r, 0)?,
        sqs_message_id: column(r, 1)?,
        message_id: column(r, 2)?,
        trace_id: column(r, 3)?,
        ledger_entity: column(r, 4)?,
        currency: column(r, 5)?,
        amount: column::<Decimal>(r, 6)?,
        value_date: column::<NaiveDate>(r, 7)?,
        period: column(r, 8)?,
        match_decision: serde_json::from_value(serde_json::Value::String(decision.clone()))
            .map_err(|_| StoreError::infra(format!("unknown match decision {decision:?}")))?,
        external_ref: column(r, 10)?,
        counterparty: column(r, 11)?,
        attempt_count: u32::try_from(attempt)
            .map_err(|_| StoreError::infra(format!("attempt count {attempt} out of range")))?,
        committed_at: column(r, 13)?,
        replay_of: column(r, 14)?,
    })
}

/// Pages in `source_hash` order, keyset-paged (`source_hash > cursor`); one period's rows are
/// found by the `(period, ledger_entity)` index and sorted; a segment holds the keys whose
/// `hashtext` falls in it. A transaction is keyed by its `source_hash` alone: the period of a
/// key is not needed.
impl LedgerReader for PostgresLedger {
    async fn posting(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        PostgresLedger::posting(self, &key.source_hash).await
    }

    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        let limit = limit.max(1);
        // One more than asked: whether another page follows, without a second statement.
        let fetch = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
        let mut sql = format!("SELECT {POSTING_COLUMNS} FROM ledger_entries WHERE kind = 'POSTING'");
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = Vec::new();
        for (column, value) in [
            ("period =", scope.period.as_ref()),
            ("ledger_entity =", scope.entity.as_ref()),
        ] {
            if let Some(v) = value {
                params.push(v);
                sql.push_str(&format!(" AND {column} ${}", params.len()));
            }
        }
        // A segment by a hash of the key: hashtext is stable within a server, which one read is.
        let segment = scope
            .segment
            .filter(|s| s.of > 1)
            .map(|s| (i64::from(s.of), i64::from(s.index)));
        if let Some((of, index)) = &segment {
            params.push(of);
            params.push(index);
            sql.push_str(&format!(
                " AND (hashtext(source_hash)::bigint + 2147483648) % ${} = ${}",
                params.len() - 1,
                params.len()
            ));
        }
        let cursor = cursor.map(str::to_owned);
        if let Some(c) = &cursor {
            params.push(c);
            sql.push_str(&format!(" AND source_hash > ${}", params.len()));
        }
        params.push(&fetch);
        sql.push_str(&format!(" ORDER BY source_hash LIMIT ${}", params.len()));
        let rows = self.query("postings", &sql, &params).await?;
        let mut postings = rows.iter().map(posting).collect::<StoreResult<Vec<_>>>()?;
        let more = postings.len() > limit;
        postings.truncate(limit);
        let next = more.then(|| postings.last().map(|p| p.source_hash.clone())).flatten();
        Ok(PostingPage { postings, next })
    }

    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        self.query(
            "hand-offs",
            &format!("SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE kind = 'HAND_OFF' ORDER BY source_hash"),
            &[],
        )
        .await?
        .iter()
        .map(committed_ref)
        .collect()
    }
}

impl Ledger for PostgresLedger {
    async fn commit(&self, p: &Posting) -> StoreResult<CommitOutcome> {
        let attempt = i32::try_from(p.attempt_count).unwrap_or(i32::MAX);
        self.insert(
            "commit",
            &p.source_hash,
            "INSERT INTO ledger_entries (source_hash, kind, committed_at, sqs_message_id, message_id,
                        trace_id, ledger_entity, currency, amount, value_date, period, match_decision,
                        external_ref, counterparty, attempt_count, replay_of)
                 VALUES ($1, 'POSTING', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
                 ON CONFLICT (source_hash) DO NOTHING
                 RETURNING source_hash",
            &[
                &p.source_hash,
                &p.committed_at,
                &p.sqs_message_id,
                &p.message_id,
                &p.trace_id,
                &p.ledger_entity,
                &p.currency,
                &p.amount,
                &p.value_date,
                &p.period,
                &p.match_decision.as_str(),
                &p.external_ref,
                &p.counterparty,
                &attempt,
                &p.replay_of,
            ],
        )
        .await
    }

    async fn lookup(&self, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        self.existing(&key.source_hash).await
    }

    /// One statement for all of them (the replay asks a page's and a chunk's at once).
    async fn lookup_many(&self, keys: &[TxKey]) -> StoreResult<std::collections::HashMap<String, CommittedRef>> {
        let source_hashes: Vec<&str> = keys.iter().map(|k| k.source_hash.as_str()).collect();
        if source_hashes.is_empty() {
            return Ok(Default::default());
        }
        self.query(
            "lookup",
            &format!("SELECT {ENTRY_COLUMNS} FROM ledger_entries WHERE source_hash = ANY($1)"),
            &[&source_hashes],
        )
        .await?
        .iter()
        .map(|row| committed_ref(row).map(|c| (c.source_hash.clone(), c)))
        .collect()
    }

    async fn hand_off(&self, h: &HandOff) -> StoreResult<CommitOutcome> {
        self.insert(
            "hand-off",
            &h.source_hash,
            "INSERT INTO ledger_entries (source_hash, kind, committed_at, manual_journal, replay_id)
                 VALUES ($1, 'HAND_OFF', $2, $3, $4)
                 ON CONFLICT (source_hash) DO NOTHING
                 RETURNING source_hash",
            &[&h.source_hash, &h.handed_off_at, &h.envelope_id, &h.replay_id],
        )
        .await
    }
}
