//! How the ledger's connections are made: with the credentials held at that moment (read from
//! their secret again when old or refused), and what a failure to get one means for the retry
//! budget.

use std::sync::Arc;

pub use recon_core::config::PostgresTls as Tls;
use recon_core::domain::TransientKind;
use recon_core::ports::{Rotating, StoreError, StoreResult, log_refused};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres::NoTls;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

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
    /// `None`: plaintext (to a loopback host only).
    pub(crate) tls: Option<MakeRustlsConnect>,
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
        let tls = self.tls.clone();
        Box::pin(async move {
            let ended = |e: tokio_postgres::Error| tracing::warn!(error = %e, "PostgreSQL connection ended");
            let (client, task) = match tls {
                Some(tls) => {
                    let (client, connection) = config.connect(tls).await?;
                    (
                        client,
                        tokio::spawn(async move { connection.await.unwrap_or_else(ended) }),
                    )
                }
                None => {
                    let (client, connection) = config.connect(NoTls).await?;
                    (
                        client,
                        tokio::spawn(async move { connection.await.unwrap_or_else(ended) }),
                    )
                }
            };
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

/// The Amazon RDS and RDS Proxy CA certificates (`tools/rds_ca_bundle.sh` writes them).
pub const RDS_CA_BUNDLE: &str = include_str!("../certs/rds-ca-bundle.pem");

/// The TLS connector `tls` asks for (`None`: plaintext), with `config`'s SSL mode set to match.
pub(crate) fn connector(tls: &Tls, config: &mut tokio_postgres::Config) -> StoreResult<Option<MakeRustlsConnect>> {
    match tls {
        Tls::Disable => {
            let remote = config
                .get_hosts()
                .iter()
                .find_map(|h| match h {
                    Host::Tcp(name) if !Tls::loopback(name) => Some(name.clone()),
                    _ => None,
                })
                .or_else(|| {
                    config
                        .get_hostaddrs()
                        .iter()
                        .find(|a| !a.is_loopback())
                        .map(ToString::to_string)
                });
            if let Some(host) = remote {
                return Err(StoreError::infra(format!(
                    "the PostgreSQL ledger refuses plaintext to {host}: TLS may be disabled only to a loopback host (DLQ_POSTGRES_TLS=verify-full)"
                )));
            }
            config.ssl_mode(SslMode::Disable);
            Ok(None)
        }
        Tls::VerifyFull { ca_file } => {
            let (pem, source) = match ca_file {
                Some(path) => (
                    std::fs::read(path)
                        .map_err(|e| StoreError::infra(format!("the CA file {}: {e}", path.display())))?,
                    path.display().to_string(),
                ),
                None => (RDS_CA_BUNDLE.as_bytes().to_vec(), "the Amazon RDS CAs".to_owned()),
            };
            let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| StoreError::infra(format!("{source}: not PEM certificates: {e}")))?;
            let mut roots = rustls::RootCertStore::empty();
            let (added, _unusable) = roots.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(StoreError::infra(format!(
                    "{source}: no CA certificate to verify the server with"
                )));
            }
            let client =
                rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .map_err(|e| StoreError::infra(format!("TLS: {e}")))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
            // Never a plaintext fallback.
            config.ssl_mode(SslMode::Require);
            Ok(Some(MakeRustlsConnect::new(client)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn config(url: &str) -> tokio_postgres::Config {
        url.parse().unwrap()
    }

    #[test]
    fn the_rds_cas_compiled_in_are_trust_anchors() {
        let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(RDS_CA_BUNDLE.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        let (added, unusable) = roots.add_parsable_certificates(certificates);
        assert!(added >= 100 && unusable == 0, "{added} added, {unusable} unusable");
        assert!(
            connector(
                &Tls::VerifyFull { ca_file: None },
                &mut config("postgres://u@db.example.internal/l")
            )
            .is_ok()
        );
    }

    #[test]
    fn plaintext_only_to_loopback_and_a_ca_file_that_is_not_there_is_named() {
        for url in [
            "postgres://u@127.0.0.1:5432/l",
            "postgres://u@localhost/l",
            "postgres://u@[::1]/l",
            "postgres://u@%2Ftmp%2Fsock/l",
        ] {
            let mut c = config(url);
            assert!(matches!(connector(&Tls::Disable, &mut c), Ok(None)), "{url}");
            assert_eq!(c.get_ssl_mode(), SslMode::Disable);
        }
        for url in [
            "postgres://u@db.example.internal/l",
            "postgres://u@10.0.0.5/l",
            "postgres://u@localhost/l?hostaddr=10.0.0.5",
            "postgres://u@127.0.0.1,db.example.internal/l",
        ] {
            let e = connector(&Tls::Disable, &mut config(url)).err().expect(url);
            assert!(e.detail.contains("refuses plaintext"), "{url}: {e}");
        }
        let mut c = config("postgres://u@127.0.0.1/l?sslmode=disable");
        connector(&Tls::VerifyFull { ca_file: None }, &mut c).unwrap();
        assert_eq!(
            c.get_ssl_mode(),
            SslMode::Require,
            "the URL cannot turn verification off"
        );
        let missing = PathBuf::from("/nonexistent/ca.pem");
        let e = connector(
            &Tls::VerifyFull { ca_file: Some(missing) },
            &mut config("postgres://u@h/l"),
        )
        .err()
        .unwrap();
        assert!(e.detail.contains("/nonexistent/ca.pem"), "{e}");
    }
}
