//! The schema's versioned migrations (`migrations/V<n>__<name>.sql`), applied in order by the
//! deploy step (`dlqctl ledger-migrate`, as the database's migration role), each in its own
//! transaction with its row in `ledger_schema_history` (version, name, the SHA-256 of its text,
//! when). The functions only check, at their first connection, that the history is this code's.
//!
//! Our own few lines rather than a migration library: the one we used parsed file names with a
//! regular expression at run time, which put a regex engine (about half a megabyte) into every
//! function package. A database it migrated is taken over: its applied versions are recorded in
//! our history on first use, and nothing is applied twice.
//!
//! Refused, as errors naming the version: a version recorded that this code does not carry (a
//! newer release migrated the database), and a migration whose text changed after it was applied.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

/// One migration: its version, name and SQL. Applied migrations are never edited; a change is a
/// new version.
pub(crate) struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in version order.
pub(crate) const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "ledger",
    sql: include_str!("../migrations/V1__ledger.sql"),
}];

/// Where applied migrations are recorded.
pub const HISTORY_TABLE: &str = "ledger_schema_history";

/// The history a database migrated by the earlier library carries.
const EARLIER_HISTORY: &str = "refinery_schema_history";

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0}")]
    Database(#[from] tokio_postgres::Error),
    #[error(
        "the database records migration V{0}, which this code does not carry: a newer release migrated it; deploy that release or a later one"
    )]
    Unknown(i32),
    #[error(
        "migration V{version}__{name} changed after it was applied (its text no longer has the digest recorded): add a new migration instead of editing an applied one"
    )]
    Changed { version: i32, name: &'static str },
    #[error(
        "migration V{version}__{name} is not applied: run `dlqctl ledger-migrate` as the database's migration role (the functions never change the schema)"
    )]
    Missing { version: i32, name: &'static str },
}

fn checksum(sql: &str) -> String {
    Sha256::digest(sql.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The history's versions and digests; none when there is no history yet.
async fn applied(client: &Client) -> Result<Vec<(i32, String)>, MigrateError> {
    let exists: bool = client
        .query_one(&format!("SELECT to_regclass('{HISTORY_TABLE}') IS NOT NULL"), &[])
        .await?
        .try_get(0)?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(client
        .query(
            &format!("SELECT version, checksum FROM {HISTORY_TABLE} ORDER BY version"),
            &[],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, tokio_postgres::Error>>()?)
}

/// Every applied migration is one this code carries, with the text it carries.
fn known(applied: &[(i32, String)]) -> Result<(), MigrateError> {
    for (version, recorded) in applied {
        let m = MIGRATIONS
            .iter()
            .find(|m| m.version == *version)
            .ok_or(MigrateError::Unknown(*version))?;
        if *recorded != checksum(m.sql) {
            return Err(MigrateError::Changed {
                version: m.version,
                name: m.name,
            });
        }
    }
    Ok(())
}

/// The schema is this code's: every migration it carries applied as it carries it, and no other.
/// Reads only (what the functions' user may do).
pub(crate) async fn check(client: &Client) -> Result<(), MigrateError> {
    let applied = applied(client).await?;
    known(&applied)?;
    match MIGRATIONS
        .iter()
        .find(|m| !applied.iter().any(|(v, _)| *v == m.version))
    {
        Some(m) => Err(MigrateError::Missing {
            version: m.version,
            name: m.name,
        }),
        None => Ok(()),
    }
}

/// `name` as a quoted SQL identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// What the functions' `user` is granted in `schema`: reading and inserting, nothing else.
pub(crate) fn grants(schema: &str, user: &str) -> String {
    let (schema, user) = (quoted(schema), quoted(user));
    format!(
        "GRANT USAGE ON SCHEMA {schema} TO {user};
         GRANT SELECT, INSERT ON ledger_entries TO {user};
         GRANT SELECT ON {HISTORY_TABLE} TO {user};"
    )
}

/// Apply the migrations not yet applied; how many were. The caller holds the migration lock.
pub(crate) async fn run(client: &mut Client) -> Result<usize, MigrateError> {
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (
                version    integer     PRIMARY KEY,
                name       text        NOT NULL,
                checksum   text        NOT NULL,
                applied_on timestamptz NOT NULL DEFAULT now())"
        ))
        .await?;
    adopt_earlier_history(client).await?;
    let applied = applied(client).await?;
    known(&applied)?;
    let mut ran = 0;
    for m in MIGRATIONS
        .iter()
        .filter(|m| !applied.iter().any(|(v, _)| *v == m.version))
    {
        let tx = client.transaction().await?;
        tx.batch_execute(m.sql).await?;
        tx.execute(
            &format!("INSERT INTO {HISTORY_TABLE} (version, name, checksum) VALUES ($1, $2, $3)"),
            &[&m.version, &m.name, &checksum(m.sql)],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version = m.version, name = m.name, "ledger schema migrated");
        ran += 1;
    }
    Ok(ran)
}

/// A database the earlier library migrated: the versions it applied go into our history (with
/// the digest of the text this code carries, which is the text it applied: migrations are never
/// edited, and it refused divergent ones itself). A version this code does not carry is refused
/// before anything is recorded, so the release that carries it takes it over later.
async fn adopt_earlier_history(client: &Client) -> Result<(), MigrateError> {
    let earlier: bool = client
        .query_one(&format!("SELECT to_regclass('{EARLIER_HISTORY}') IS NOT NULL"), &[])
        .await?
        .try_get(0)?;
    if !earlier {
        return Ok(());
    }
    let versions: Vec<i32> = client
        .query(&format!("SELECT version FROM {EARLIER_HISTORY}"), &[])
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let carried: Vec<&Migration> = versions
        .iter()
        .map(|v| {
            MIGRATIONS
                .iter()
                .find(|m| m.version == *v)
                .ok_or(MigrateError::Unknown(*v))
        })
        .collect::<Result<_, _>>()?;
    for m in carried {
        client
            .execute(
                &format!(
                    "INSERT INTO {HISTORY_TABLE} (version, name, checksum) VALUES ($1, $2, $3) ON CONFLICT (version) DO NOTHING"
                ),
                &[&m.version, &m.name, &checksum(m.sql)],
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file in `migrations/` is in [`MIGRATIONS`] under its own version and name, with its
    /// text, and the versions run 1, 2, 3, … : a new file left out of the list would never run.
    #[test]
    fn the_list_is_the_migrations_directory() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("the migrations directory")
            .map(|e| {
                let path = e.expect("a directory entry").path();
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .expect("a file name")
                    .to_owned();
                (name, std::fs::read_to_string(&path).expect("a migration's text"))
            })
            .collect();
        files.sort();
        let listed: Vec<(String, String)> = MIGRATIONS
            .iter()
            .map(|m| (format!("V{}__{}.sql", m.version, m.name), m.sql.to_owned()))
            .collect();
        assert_eq!(files, listed);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(usize::try_from(m.version).ok(), Some(i + 1), "versions run 1, 2, 3, …");
        }
    }
}
