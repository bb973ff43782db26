//! How the PostgreSQL ledger reaches its database (Debian's PostgreSQL on loopback, LocalStack's
//! Secrets Manager): credentials from a secret, their rotation mid-run, and TLS verified.

use recon_core::domain::{CommitOutcome, TransientKind};
use recon_core::ports::Ledger;
use recon_postgres::{PostgresLedger, PostgresSettings};
use recon_testkit::conformance::posting;
use std::time::Duration;

use crate::postgres::{migrated, settings, sql};

/// On AWS the ledger's user and password come from a Secrets Manager secret (LocalStack's here):
/// the secret's user connects in place of the URL's (a role that does not exist), and a secret
/// that is missing or incomplete fails transiently, naming the secret and never its contents.
#[tokio::test]
async fn the_chosen_postgres_ledger_takes_its_credentials_from_a_secret() {
    use recon_aws::ledger::open;
    use recon_core::config::{LedgerSettings, PostgresLocation};

    let db = migrated("secret").await;
    let clients = recon_aws::AwsClients::connect(recon_aws::Target::local_from_env()).await;
    let secrets = clients.secrets_manager();
    let tag = format!("{}-{}", std::process::id(), chrono::Utc::now().timestamp_subsec_nanos());
    let mut arns = Vec::new();
    for (name, text) in [
        (
            "good",
            r#"{"username":"recon","password":"not-checked-on-loopback-trust"}"#,
        ),
        ("nopass", r#"{"username":"recon","password-hint":"s3cr3t-value"}"#),
    ] {
        let out = secrets
            .create_secret()
            .name(format!("recon-ledger-{name}-{tag}"))
            .secret_string(text)
            .send()
            .await
            .expect("LocalStack creates the secret (is Secrets Manager among its services?)");
        arns.push(out.arn().expect("an ARN").to_owned());
    }
    // The URL's user does not exist: only the secret's user can connect.
    let url = db.url.replacen("postgres://recon@", "postgres://no_such_role@", 1);
    assert_ne!(url, db.url);
    let chosen = |secret_arn: Option<String>| {
        open(
            &clients,
            &LedgerSettings::Postgres(PostgresLocation {
                url: url.clone(),
                secret_arn,
                tls: recon_harness::postgres::local_tls(),
            }),
            "unused-table",
            2,
        )
    };

    let unreachable = open(
        &clients,
        &LedgerSettings::Postgres(PostgresLocation {
            url: "postgres://recon@127.0.0.1:1/recon".into(),
            secret_arn: None,
            tls: recon_harness::postgres::local_tls(),
        }),
        "unused-table",
        2,
    );
    recon_testkit::conformance::ledger_fails_transiently_when_unreachable(&unreachable, "pg-gone").await;

    let without = chosen(None)
        .lookup(&recon_core::domain::TxKey::hash_only("ab".repeat(32)))
        .await
        .unwrap_err();
    assert!(without.detail.contains("no_such_role"), "{without:?}");

    let ledger = chosen(Some(arns[0].clone()));
    let p = posting("secret", 1, "sqs-1");
    assert_eq!(ledger.commit(&p).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(ledger.kind(), "postgres");

    let incomplete = chosen(Some(arns[1].clone())).lookup(&p.key()).await.unwrap_err();
    assert_eq!(incomplete.kind, TransientKind::Infrastructure);
    assert!(incomplete.detail.contains("has no `password`"), "{incomplete:?}");
    assert!(
        !incomplete.detail.contains("s3cr3t"),
        "the secret's text leaked: {incomplete:?}"
    );

    let gone = format!("{}-gone", arns[0]);
    let missing = chosen(Some(gone.clone())).lookup(&p.key()).await.unwrap_err();
    assert!(missing.detail.contains(&gone), "{missing:?}");

    let printed = format!(
        "{:?}",
        recon_postgres::Credentials {
            user: "recon".into(),
            password: "hunter2".into()
        }
    );
    assert!(!printed.contains("hunter2"), "{printed}");
    for arn in arns {
        let _ = secrets
            .delete_secret()
            .secret_id(arn)
            .force_delete_without_recovery(true)
            .send()
            .await;
    }
    db.drop().await;
}

/// RDS rotates the ledger's password mid-run: first as a single user (the password changed, the
/// secret updated), then with alternating users (the secret names the other user, the first one's
/// password changes). Each time the connections made before are closed, so the next commits
/// connect with the credentials the process holds: refused (28P01), the secret is read again and
/// the connection made with what it holds. Every commit succeeds at its first attempt: nothing is
/// left to the retry budget, nothing dead-lettered.
#[tokio::test]
async fn a_password_rotated_mid_run_dead_letters_nothing() {
    let s = recon_harness::stack::TestStack::new_postgres("pg-rotate").await;
    let recon_core::config::LedgerSettings::Postgres(location) = &s.settings.ledger else {
        panic!("a PostgreSQL stack");
    };
    let arn = location.secret_arn.clone().expect("the credentials come from a secret");
    let url = s.postgres_url().unwrap().to_owned();
    // Two users who must give their password, granted what the functions need.
    let admin = sql(&url).await;
    let tag = format!("{}_{}", std::process::id(), chrono::Utc::now().timestamp_subsec_nanos());
    let (a, b) = (format!("rot_a_{tag}"), format!("rot_b_{tag}"));
    for user in [&a, &b] {
        admin
            .batch_execute(&format!(
                "CREATE ROLE {user} LOGIN PASSWORD 'first-{tag}' IN ROLE recon_password_auth"
            ))
            .await
            .unwrap();
    }
    PostgresLedger::migrate(&settings(&url), &[a.clone(), b.clone()])
        .await
        .unwrap();
    let put_secret = |user: String, password: String| {
        let (clients, arn) = (s.clients.clone(), arn.clone());
        async move {
            clients
                .secrets_manager()
                .put_secret_value()
                .secret_id(&arn)
                .secret_string(serde_json::json!({"username": user, "password": password}).to_string())
                .send()
                .await
                .unwrap();
        }
    };
    // Closes `user`'s connections, then waits until the pool can tell they are closed.
    let close_connections_of = |user: String| {
        let admin = &admin;
        async move {
            admin
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1",
                    &[&user],
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    put_secret(a.clone(), format!("first-{tag}")).await;
    let ledger = s.ledger();
    let mut n = 0;
    let mut commit_some = async |phase: &str| {
        for _ in 0..5 {
            n += 1;
            let p = posting("pg-rotate", n, &format!("sqs-{n}"));
            match ledger.commit(&p).await {
                Ok(CommitOutcome::Committed) => {}
                other => panic!("{phase}: commit {n} at its first attempt: {other:?}"),
            }
        }
    };
    commit_some("before any rotation").await;

    // Single user: the password changes, then the secret.
    admin
        .batch_execute(&format!("ALTER ROLE {a} PASSWORD 'second-{tag}'"))
        .await
        .unwrap();
    put_secret(a.clone(), format!("second-{tag}")).await;
    close_connections_of(a.clone()).await;
    commit_some("after a single-user rotation").await;

    // Single user, mid-rotation: the password changed and staged (AWSPENDING) while the secret's
    // current version still holds the old one, as between a rotation's setSecret and finishSecret.
    admin
        .batch_execute(&format!("ALTER ROLE {a} PASSWORD 'staged-{tag}'"))
        .await
        .unwrap();
    s.clients
        .secrets_manager()
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(serde_json::json!({"username": a, "password": format!("staged-{tag}")}).to_string())
        .version_stages("AWSPENDING")
        .send()
        .await
        .unwrap();
    close_connections_of(a.clone()).await;
    commit_some("mid single-user rotation (only the staged password connects)").await;
    put_secret(a.clone(), format!("staged-{tag}")).await;

    // Alternating users: the secret names the other user; the first one's password changes.
    put_secret(b.clone(), format!("first-{tag}")).await;
    admin
        .batch_execute(&format!("ALTER ROLE {a} PASSWORD 'third-{tag}'"))
        .await
        .unwrap();
    close_connections_of(a.clone()).await;
    commit_some("after an alternating-users rotation").await;

    let by: Vec<String> = admin
        .query("SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname = current_database() AND usename LIKE 'rot_%'", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(by, [b.clone()], "the ledger connects as the secret's user now");
    assert_eq!(s.postings().await.len(), 20);
    s.cleanup().await;
    for user in [a, b] {
        let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {user}")).await;
    }
}

/// TLS to the ledger is verified: with the local server's CA every connection of the pool is
/// encrypted (as the server sees them); the RDS CAs compiled in do not vouch for the local
/// server's certificate, nor does a certificate vouch for another name, so both are refused;
/// plaintext goes to a loopback host only, and is refused before connecting to any other.
#[tokio::test]
async fn tls_is_verified_and_plaintext_goes_only_to_loopback() {
    use recon_postgres::Tls;
    let db = migrated("tls").await;
    let url = db.url.clone();
    let admin = sql(&url).await;
    let connections = async |encrypted: bool| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                 WHERE a.datname = current_database() AND s.ssl = $1 AND a.pid <> pg_backend_pid()",
                &[&encrypted],
            )
            .await
            .unwrap()
            .get(0)
    };
    let verified = PostgresLedger::connect(&settings(&url)).await.unwrap();
    verified.commit(&posting("tls", 1, "sqs-1")).await.unwrap();
    assert!(connections(true).await >= 1);
    assert_eq!(
        connections(false).await,
        0,
        "every connection of the ledger is encrypted"
    );
    drop(verified);

    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap()
        .to_owned();
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    for (what, settings) in [
        (
            "the RDS CAs",
            PostgresSettings {
                tls: Tls::VerifyFull { ca_file: None },
                ..settings(&url)
            },
        ),
        (
            "another name",
            settings(&format!(
                "postgres://recon@ledger.example.invalid:{port}/{database}?hostaddr=127.0.0.1"
            )),
        ),
    ] {
        let e = PostgresLedger::connect(&settings).await.err().expect(what);
        assert!(e.detail.contains("certificate"), "{what}: {e}");
    }

    let plain = PostgresLedger::connect(&PostgresSettings {
        tls: Tls::Disable,
        ..settings(&url)
    })
    .await
    .unwrap();
    assert!(
        plain
            .lookup(&recon_core::domain::TxKey::hash_only("ab".repeat(32)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(connections(false).await >= 1, "plaintext to loopback, when asked");
    let remote = PostgresLedger::connect(&PostgresSettings {
        url: format!("postgres://recon@ledger.example.invalid:{port}/{database}"),
        tls: Tls::Disable,
        ..settings(&url)
    })
    .await
    .err()
    .expect("refused");
    assert!(
        remote.detail.contains("refuses plaintext to ledger.example.invalid"),
        "{remote}"
    );
    drop(plain);
    db.drop().await;
}
