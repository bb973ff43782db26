//! How the ledger's connections are made: with the credentials held at that moment (read from
//! their secret again when old or refused), and what a failure to get one means for the retry
//! budget.

use recon_core::domain::TransientKind;
use recon_core::ports::{Rotating, StoreError, StoreResult, log_refused};
use tokio_postgres::NoTls;

use super::{Credentials, PostgresLedger, classify};

/// The server refused the connection's credentials (class 28: a wrong password, an unknown or
/// not yet created user).
fn refused_credentials(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code().starts_with("28"))
}

/// Connects with the credentials held at that moment (the pool's own connector would keep the
/// ones it was made with for ever).
pub(crate) struct Connector {
    pub(crate) credentials: Option<Rotating<Credentials>>,
}

impl deadpool_postgres::Connect for Connector {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
                > + Send
                + '_,
        >,
    > {
        let mut config = pg_config.clone();
        if let Some(c) = self.credentials.as_ref().and_then(Rotating::latest) {
            config.user(&c.user).password(&c.password);
        }
        Box::pin(async move {
            let (client, connection) = config.connect(NoTls).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "PostgreSQL connection ended");
                }
            });
            Ok((client, task))
        })
    }
}

pub(crate) fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => classify("connect", &e),
        deadpool_postgres::PoolError::Timeout(_) => StoreError::new(TransientKind::Timeout, format!("connect: {e}")),
        other => StoreError::infra(format!("connect: {other}")),
    }
}

impl PostgresLedger {
    /// A pooled connection. A new one connects with the credentials held now, read first if they
    /// are old; refused for its credentials (class 28: a rotation the secret has and this process
    /// has not yet), they are read again and, if they changed, the connection tried once more; a
    /// refusal that rereading does not cure is logged for the alarm.
    pub(crate) async fn connection(&self) -> StoreResult<deadpool_postgres::Object> {
        let used = match &self.credentials {
            Some(credentials) => Some(credentials.current().await?),
            None => None,
        };
        let refused = match self.pool.get().await {
            Err(deadpool_postgres::PoolError::Backend(e)) if refused_credentials(&e) => e,
            other => return other.map_err(pool_error),
        };
        let detail = classify("connect", &refused).detail;
        let (Some(credentials), Some(used)) = (&self.credentials, &used) else {
            log_refused("postgres", &detail);
            return Err(pool_error(deadpool_postgres::PoolError::Backend(refused)));
        };
        match credentials.refused(used, "postgres", &detail).await? {
            Some(_) => self.pool.get().await.map_err(pool_error),
            None => Err(pool_error(deadpool_postgres::PoolError::Backend(refused))),
        }
    }
}
