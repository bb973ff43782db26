//! The local stack's PostgreSQL (`infra/local/postgres.sh`): its URL, and a database of its own
//! for each test or benchmark run, dropped when done.

/// The local PostgreSQL (`DLQ_POSTGRES_URL`, else the one `make local-up` starts).
pub fn server_url() -> String {
    std::env::var("DLQ_POSTGRES_URL").unwrap_or_else(|_| {
        let port = std::env::var("POSTGRES_PORT").unwrap_or_else(|_| "55432".into());
        format!("postgres://recon@127.0.0.1:{port}/recon")
    })
}

/// The CA the local server's certificate is signed by (`DLQ_POSTGRES_CA_FILE`, else where
/// `infra/local/postgres.sh` made it).
pub fn ca_file() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("DLQ_POSTGRES_CA_FILE") {
        return path.into();
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../infra/local/postgres.sh");
    let out = std::process::Command::new(script)
        .arg("ca")
        .output()
        .unwrap_or_else(|e| panic!("{script} ca: {e}"));
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// How the ledger reaches the local server: TLS, its certificate verified against the local CA
/// (as on AWS against the RDS CAs).
pub fn local_tls() -> recon_core::config::PostgresTls {
    recon_core::config::PostgresTls::VerifyFull {
        ca_file: Some(ca_file()),
    }
}

/// A connection to the server's own database (to create and drop the scratch ones).
pub async fn admin() -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(&server_url(), tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("the local PostgreSQL is not reachable; start it with `make local-up` ({e})"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// A fresh database: its name and URL; `drop` removes it.
pub struct ScratchDatabase {
    pub name: String,
    pub url: String,
}

impl ScratchDatabase {
    /// Create `<purpose>_<pid>_<nanos>` on the local server.
    pub async fn create(purpose: &str) -> Result<Self, String> {
        let name = format!(
            "{purpose}_{}_{}",
            std::process::id(),
            chrono::Utc::now().timestamp_subsec_nanos()
        );
        Self::make(name, false).await
    }

    /// `name` (lower-case letters, digits, `_`) on the local server, empty: dropped first if it
    /// was there.
    pub async fn renew(name: &str) -> Result<Self, String> {
        if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!("{name:?} is not a plain database name"));
        }
        Self::make(name.to_owned(), true).await
    }

    async fn make(name: String, drop_first: bool) -> Result<Self, String> {
        let admin = admin().await?;
        if drop_first {
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
                .map_err(|e| format!("cannot drop database {name}: {e}"))?;
        }
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| format!("cannot create database {name}: {e}"))?;
        let base = server_url();
        let at = base.rfind('/').unwrap_or(base.len());
        Ok(ScratchDatabase {
            url: format!("{}/{name}", &base[..at]),
            name,
        })
    }

    /// The ledger's schema migrated, as the database's owner (what `dlqctl ledger-migrate` does
    /// in a deploy step): the functions connect to a migrated database only.
    pub async fn migrated(self) -> Result<Self, String> {
        let settings = recon_postgres::PostgresSettings {
            url: self.url.clone(),
            connect_timeout: std::time::Duration::from_secs(5),
            statement_timeout: std::time::Duration::from_secs(60),
            pool_size: 1,
            credentials: None,
            tls: local_tls(),
        };
        recon_postgres::PostgresLedger::migrate(&settings, &[])
            .await
            .map_err(|e| format!("cannot migrate database {}: {e}", self.name))?;
        Ok(self)
    }

    pub async fn drop(self) {
        if let Ok(admin) = admin().await {
            let _ = admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
                .await;
        }
    }
}
