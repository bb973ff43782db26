//! The ledger behind a test stack, of the kind `DLQ_TEST_LEDGER` names: the stack's DynamoDB
//! ledger table; a PostgreSQL database of its own on the local server, its credentials in a
//! secret on LocalStack as on AWS; or a local HTTP general ledger (`http_ledger::LocalGl`) behind
//! the reservation protocol on the stack's dedup table. What a test does to "the ledger" behind the
//! functions' back (delete a posting, put it back) it does here, whatever the kind.

use aws_sdk_dynamodb::types::AttributeValue;
use recon_aws::AwsClients;
use recon_aws::ledger::AnyLedger;
use recon_core::config::{LedgerSettings, vars};
use recon_core::domain::Posting;
use recon_core::ports::Ledger;
use recon_core::resources::ResourceNames;

use crate::http_ledger::LocalGl;
use crate::postgres::ScratchDatabase;

/// The ledger kind the test stacks use: `DLQ_TEST_LEDGER` (dynamodb, the default, postgres or http).
pub fn test_ledger_kind() -> String {
    match std::env::var("DLQ_TEST_LEDGER") {
        Ok(k) if LedgerSettings::KINDS.contains(&k.as_str()) => k,
        Ok(k) if !k.trim().is_empty() => panic!("DLQ_TEST_LEDGER={k:?}: one of {}", LedgerSettings::KINDS.join(", ")),
        _ => LedgerSettings::KINDS[0].to_owned(),
    }
}

/// What a test stack's ledger is made of, besides its tables.
pub enum TestLedger {
    DynamoDb { table: String },
    Postgres { db: ScratchDatabase, secret_arn: String },
    Http { gl: LocalGl, secret_arn: String },
}

/// A secret on LocalStack holding `value` (as a function on AWS finds its ledger's credentials).
async fn secret(clients: &AwsClients, name: String, value: serde_json::Value) -> String {
    clients
        .secrets_manager()
        .create_secret()
        .name(name)
        .secret_string(value.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("LocalStack's Secrets Manager: {e:?}"))
        .arn()
        .unwrap_or_default()
        .to_owned()
}

impl TestLedger {
    /// Provision a ledger of `kind` for the stack named `names`; the variables its functions get.
    pub async fn provision(
        kind: &str,
        clients: &AwsClients,
        names: &ResourceNames,
        tag: &str,
    ) -> (Self, Vec<(&'static str, String)>) {
        match kind {
            "postgres" => {
                let db = match ScratchDatabase::create(&format!("it_{tag}")).await {
                    Ok(db) => db.migrated().await,
                    Err(e) => Err(e),
                }
                .unwrap_or_else(|e| panic!("{e}"));
                // As on AWS, the user and password come from a secret (the local server trusts
                // loopback, so the password is not checked; the user is).
                let secret_arn = secret(
                    clients,
                    format!("{}-ledger", names.prefix),
                    serde_json::json!({"username": "recon", "password": "local-stack"}),
                )
                .await;
                let env = vec![
                    (vars::LEDGER, "postgres".to_owned()),
                    (vars::POSTGRES_URL, db.url.clone()),
                    (vars::POSTGRES_SECRET_ARN, secret_arn.clone()),
                    // TLS verified against the local server's own CA.
                    (vars::POSTGRES_TLS, "verify-full".to_owned()),
                    (vars::POSTGRES_CA_FILE, crate::postgres::ca_file().display().to_string()),
                ];
                (TestLedger::Postgres { db, secret_arn }, env)
            }
            "http" => {
                let gl = LocalGl::start()
                    .await
                    .unwrap_or_else(|e| panic!("the local HTTP ledger: {e}"));
                // The GL wants a bearer token, which the functions read from a secret.
                let token = format!("token-{tag}-{}", std::process::id());
                gl.require_token(&token);
                let secret_arn = secret(
                    clients,
                    format!("{}-gl-token", names.prefix),
                    serde_json::json!({ "token": token }),
                )
                .await;
                let env = vec![
                    (vars::LEDGER, "http".to_owned()),
                    (vars::HTTP_LEDGER_URL, gl.url.clone()),
                    (vars::DEDUP_TABLE, names.dedup_table.clone()),
                    (vars::HTTP_LEDGER_SECRET_ARN, secret_arn.clone()),
                ];
                (TestLedger::Http { gl, secret_arn }, env)
            }
            _ => (
                TestLedger::DynamoDb {
                    table: names.ledger_table.clone(),
                },
                Vec::new(),
            ),
        }
    }

    /// Delete a transaction's posting, as someone with write access to the ledger could.
    pub async fn delete_posting(&self, clients: &AwsClients, posting: &Posting) {
        use recon_core::resources::{keys, ledger_period_shard};
        let source_hash = posting.source_hash.as_str();
        match self {
            TestLedger::DynamoDb { table } => {
                let shard = ledger_period_shard(&posting.period, source_hash).expect("a transaction hash");
                clients
                    .dynamodb
                    .delete_item()
                    .table_name(table)
                    .key(keys::LEDGER_PK, AttributeValue::S(shard))
                    .key(keys::LEDGER_SK, AttributeValue::S(source_hash.into()))
                    .send()
                    .await
                    .expect("DeleteItem on the ledger table");
            }
            TestLedger::Postgres { db, .. } => {
                let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
                    .await
                    .expect("connect to the test's database");
                tokio::spawn(connection);
                client
                    .execute("DELETE FROM ledger_entries WHERE source_hash = $1", &[&source_hash])
                    .await
                    .expect("DELETE from ledger_entries");
            }
            TestLedger::Http { gl, .. } => assert!(gl.remove(source_hash), "no posting {source_hash} in the GL"),
        }
    }

    /// Put back a posting a test deleted: into the GL's own store behind the API's back (the
    /// dedup table still says committed), else committed through `ledger` (nothing holds its key).
    pub async fn restore_posting(&self, ledger: &AnyLedger, posting: &Posting) {
        if let TestLedger::Http { gl, .. } = self {
            gl.restore(posting);
            return;
        }
        assert_eq!(
            ledger.commit(posting).await.expect("restore posting"),
            recon_core::domain::CommitOutcome::Committed
        );
    }

    /// The local HTTP ledger, on an `http` stack.
    pub fn gl(&self) -> Option<&LocalGl> {
        match self {
            TestLedger::Http { gl, .. } => Some(gl),
            _ => None,
        }
    }

    /// The URL of the PostgreSQL database, on a `postgres` stack.
    pub fn postgres_url(&self) -> Option<&str> {
        match self {
            TestLedger::Postgres { db, .. } => Some(&db.url),
            _ => None,
        }
    }

    /// Remove what this ledger holds outside the stack's tables (the database, the secret).
    pub async fn remove(self, clients: &AwsClients) {
        let secret_arn = match self {
            TestLedger::DynamoDb { .. } => return,
            TestLedger::Postgres { db, secret_arn } => {
                db.drop().await;
                secret_arn
            }
            TestLedger::Http { secret_arn, .. } => secret_arn,
        };
        let _ = clients
            .secrets_manager()
            .delete_secret()
            .secret_id(secret_arn)
            .force_delete_without_recovery(true)
            .send()
            .await;
    }
}
