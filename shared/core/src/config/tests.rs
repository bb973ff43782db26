use super::*;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A complete, valid environment (what the template sets).
fn valid() -> HashMap<String, String> {
    let n = resources::ResourceNames::derive("acme", "123456789012", "eu-west-1");
    let url = |q: &str| format!("https://sqs.eu-west-1.amazonaws.com/123456789012/{q}");
    environment(
        &n,
        &url(&n.main_queue),
        &url(&n.dead_letter_queue),
        &url(&n.parking_queue),
    )
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

type Parsed = Result<BTreeMap<String, String>, ConfigError>;

/// Every function's parser over `env`: its audited settings, or its error.
fn parse_all(env: &HashMap<String, String>, read: &RefCell<BTreeSet<String>>) -> Vec<(&'static str, Parsed)> {
    let get = |k: &str| {
        read.borrow_mut().insert(k.to_owned());
        env.get(k).cloned()
    };
    vec![
        ("consumer", ConsumerSettings::from_lookup(get).map(|s| s.audited)),
        ("enricher", EnricherSettings::from_lookup(get).map(|s| s.audited)),
        ("replay", ReplaySettings::from_lookup(get).map(|s| s.audited)),
        (
            "reference-audit",
            ReferenceAuditSettings::from_lookup(get).map(|s| s.audited),
        ),
        ("control", ControlSettings::from_lookup(get).map(|s| s.audited)),
    ]
}

/// Values each rule refuses.
fn refused(rule: Rule) -> Vec<String> {
    let mut bad: Vec<String> = vec!["has space".into(), "ünïcode".into()];
    match rule {
        Rule::Whole { min, max, .. } => {
            bad = vec!["three".into(), "1.5".into(), "-1".into(), (max + 1).to_string()];
            if min > 0 {
                bad.push((min - 1).to_string());
            }
        }
        Rule::QueueUrl => bad.extend([
            "sqs.eu-west-1.amazonaws.com/123456789012/q".into(),
            "https://sqs.eu-west-1.amazonaws.com/q".into(),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/".into(),
            "acme-main".into(),
        ]),
        Rule::TableName => bad.extend(["ab".into(), "a/b/c".into(), "x".repeat(256)]),
        Rule::BucketName => bad.extend([
            "Acme-Quarantine".into(),
            "acme_quarantine".into(),
            "-acme".into(),
            "acme..q".into(),
            "x".repeat(64),
        ]),
        Rule::AccountId => bad.extend(["12345678901".into(), "1234567890123".into(), "12345678901a".into()]),
        Rule::ScheduleName => bad.extend(["a/b".into(), "x".repeat(65)]),
        Rule::Prefix => bad.extend([
            "Acme".into(),
            "1acme".into(),
            "ac".into(),
            "acme_dlq".into(),
            "x".repeat(MAX_PREFIX_LEN + 1),
        ]),
        Rule::Namespace => bad.extend(["AWS/Lambda".into(), "a b".into(), "x".repeat(256)]),
        Rule::OneOf(words) => bad.extend([words.join(","), words[0].to_uppercase(), "sqlite".into()]),
        Rule::PostgresUrl => bad.extend([
            "postgres://recon:secret@db.internal:5432/ledger".into(),
            "postgres://recon@db.internal:5432/ledger?password=secret".into(),
            "postgres://recon@db.internal/ledger?sslmode=disable&PassWord=secret".into(),
            "postgres://db.internal:5432/ledger".into(),
            "postgres://recon@db.internal:5432/".into(),
            "postgres://recon@/ledger".into(),
            "mysql://recon@db.internal/ledger".into(),
            "host=db.internal user=recon".into(),
        ]),
        Rule::HttpUrl => bad.extend([
            "http://gl.example.com/api".into(),
            "https://user:pw@gl.example.com/api".into(),
            "https://gl.example.com/api?token=x".into(),
            "ftp://gl.example.com".into(),
            "https://".into(),
        ]),
        Rule::KmsKey => bad.extend(["alias/".into(), "decisions".into(), "arn:aws:sqs:x".into()]),
        Rule::AbsolutePath => bad.extend(["ca.pem".into(), "./ca.pem".into(), "/etc/ca\n.pem".into()]),
        Rule::Senders => bad.extend(["aroa123456789012:".into(), "AROA:".into(), "1234".into()]),
        Rule::OperatorRoles => bad.extend([
            "maker".into(),
            "maker:a,maker:b".into(),
            "boss:acme-boss".into(),
            "maker:a/b".into(),
            format!("maker:{}", "x".repeat(65)),
        ]),
        Rule::ConsoleGroups => bad.extend([
            "maker".into(),
            "maker:a,viewer:a".into(),
            "break-glass:ops".into(),
            "maker:[a]".into(),
        ]),
        Rule::ClaimName => bad.extend(["x".repeat(257)]),
        Rule::Escalation => bad.extend(["4:on-call".into(), "24h:a,4h:b".into(), "4h:On-Call".into()]),
        Rule::SecretArn => bad.extend([
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:".into(),
            "arn:aws:ssm:eu-west-1:123456789012:parameter/ledger".into(),
            "arn:aws:secretsmanager:eu-west-1:12345:secret:ledger".into(),
            "ledger-credentials".into(),
        ]),
    }
    bad
}

#[test]
fn a_complete_environment_parses_in_every_function() {
    let read = RefCell::default();
    for (function, parsed) in parse_all(&valid(), &read) {
        assert!(parsed.is_ok(), "{function}: {parsed:?}");
    }
}

/// What a function records at start-up is what it read: each variable set, as set; each other
/// with a default, as defaulted (a whole number's default, or a name's other than unset).
#[test]
fn the_recorded_configuration_is_what_each_function_read() {
    let mut env = valid();
    env.insert(vars::MAX_ATTEMPTS.into(), "7".into());
    env.insert(vars::REPLAY_PAGE_SIZE.into(), "40".into());
    for i in 0..5 {
        let read: RefCell<BTreeSet<String>> = RefCell::default();
        let get = |k: &str| {
            read.borrow_mut().insert(k.to_owned());
            env.get(k).cloned()
        };
        let (function, audited) = match i {
            0 => ("consumer", ConsumerSettings::from_lookup(get).map(|s| s.audited)),
            1 => ("enricher", EnricherSettings::from_lookup(get).map(|s| s.audited)),
            2 => ("replay", ReplaySettings::from_lookup(get).map(|s| s.audited)),
            3 => (
                "reference-audit",
                ReferenceAuditSettings::from_lookup(get).map(|s| s.audited),
            ),
            _ => ("control", ControlSettings::from_lookup(get).map(|s| s.audited)),
        };
        let mut audited = audited.unwrap();
        assert_eq!(
            audited.remove("code_version").as_deref(),
            Some(env!("CARGO_PKG_VERSION"))
        );
        let read = read.into_inner();
        for v in VARIABLES {
            let defaulted = matches!(v.rule, Rule::Whole { .. }) || v.default.is_some_and(|d| d != UNSET);
            let recorded = audited.get(v.name);
            match env.get(v.name) {
                _ if !read.contains(v.name) => assert_eq!(recorded, None, "{function}: {} not read", v.name),
                Some(set) => assert_eq!(recorded, Some(set), "{function}: {}", v.name),
                None if defaulted => assert!(recorded.is_some_and(|r| v.rule.admits(r)), "{function}: {}", v.name),
                None => assert_eq!(recorded, None, "{function}: {} unset", v.name),
            }
        }
    }
}

#[test]
fn every_variable_read_is_documented_and_every_documented_one_is_read() {
    let read = RefCell::default();
    parse_all(&valid(), &read);
    let read = read.into_inner();
    let documented: BTreeSet<String> = VARIABLES.iter().map(|v| v.name.to_owned()).collect();
    assert_eq!(read, documented);
}

/// A test per variable: each value its rule refuses stops every function that reads it,
/// naming the variable, the value and what is allowed; no other function minds.
#[test]
fn every_variable_refuses_what_its_rule_refuses_naming_variable_value_and_range() {
    for v in VARIABLES {
        for bad in refused(v.rule) {
            let mut env = valid();
            env.insert(v.name.to_owned(), bad.clone());
            let stopped: Vec<_> = parse_all(&env, &RefCell::default())
                .into_iter()
                .filter_map(|(f, p)| p.err().map(|e| (f, e)))
                .collect();
            assert!(!stopped.is_empty(), "{}={bad:?} was accepted everywhere", v.name);
            for (function, e) in stopped {
                assert_eq!(
                    e,
                    ConfigError::Invalid {
                        var: v.name,
                        value: bad.clone(),
                        allowed: v.rule.allowed(),
                    },
                    "{function}"
                );
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!("{}={bad:?} is not valid; allowed: ", v.name)),
                    "{text}"
                );
            }
        }
    }
}

#[test]
fn every_required_variable_unset_or_blank_stops_the_functions_that_read_it() {
    for v in VARIABLES.iter().filter(|v| v.default.is_none()) {
        for blank in [None, Some("  ")] {
            let mut env = valid();
            match blank {
                None => env.remove(v.name),
                Some(b) => env.insert(v.name.to_owned(), b.to_owned()),
            };
            let errors: Vec<_> = parse_all(&env, &RefCell::default())
                .into_iter()
                .filter_map(|(_, p)| p.err())
                .collect();
            assert!(!errors.is_empty(), "{} unset was accepted", v.name);
            for e in errors {
                assert_eq!(e.variable(), v.name);
                assert!(
                    e.to_string()
                        .starts_with(&format!("{} is not set: {}", v.name, v.meaning)),
                    "{e}"
                );
            }
        }
    }
}

#[test]
fn defaults_are_the_documented_ones_and_admitted_by_their_rules() {
    let read = RefCell::default();
    for (function, parsed) in parse_all(&valid(), &read) {
        let audited = parsed.unwrap();
        for v in VARIABLES {
            let (Some(default), Some(value)) = (v.default, audited.get(v.name)) else {
                continue;
            };
            if valid().contains_key(v.name) {
                continue; // set, not defaulted
            }
            let documented: Vec<&str> = default
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            assert!(
                default == value || documented.contains(&value.as_str()),
                "{function}: {} = {value}, documented {default}",
                v.name
            );
            assert!(v.rule.admits(value), "{function}: default {} = {value}", v.name);
        }
    }
}

#[test]
fn each_function_needs_exactly_the_variables_it_is_said_to_need() {
    let functions = ["consumer", "enricher", "replay", "reference-audit", "control"];
    let said = [
        needs::CONSUMER,
        needs::ENRICHER,
        needs::REPLAY,
        needs::REFERENCE_AUDIT,
        needs::CONTROL,
    ];
    for (i, function) in functions.iter().enumerate() {
        let mut stopped_by: Vec<&str> = VARIABLES
            .iter()
            .filter(|v| v.default.is_none())
            .filter(|v| {
                let mut env = valid();
                env.remove(v.name);
                parse_all(&env, &RefCell::default())[i].1.is_err()
            })
            .map(|v| v.name)
            .collect();
        let mut expected = said[i].to_vec();
        stopped_by.sort_unstable();
        expected.sort_unstable();
        assert_eq!(stopped_by, expected, "{function}");
    }
}

#[test]
fn the_configuration_page_lists_every_variable_as_this_table_does() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md"))
        .unwrap_or_default();
    let table = configuration_table();
    if !doc.contains(&table) {
        println!("{table}");
        panic!("docs/configuration.md's table differs from config::VARIABLES (printed above)");
    }
}

#[test]
fn a_backoff_cap_below_its_base_blames_the_cap() {
    let mut env = valid();
    env.insert(vars::BACKOFF_BASE_SECS.into(), "60".into());
    env.insert(vars::BACKOFF_CAP_SECS.into(), "10".into());
    let e = ConsumerSettings::from_lookup(|k| env.get(k).cloned()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "DLQ_BACKOFF_CAP_SECS=\"10\" is not valid; allowed: DLQ_BACKOFF_BASE_SECS (60) to 43200 seconds"
    );
}

#[test]
fn names_the_template_derives_are_admitted_for_the_longest_prefix_in_the_longest_region() {
    let prefix = format!("a{}", "b".repeat(MAX_PREFIX_LEN - 1));
    assert!(Rule::Prefix.admits(&prefix));
    let n = resources::ResourceNames::derive(&prefix, "123456789012", "ap-southeast-3");
    assert!(Rule::BucketName.admits(&n.quarantine_bucket), "{}", n.quarantine_bucket);
    for t in [
        &n.ledger_table,
        &n.envelope_table,
        &n.reference_table,
        &n.audit_table,
        &n.dedup_table,
    ] {
        assert!(Rule::TableName.admits(t));
    }
    assert!(Rule::ScheduleName.admits(&n.sweep_schedule) && Rule::ScheduleName.admits(&n.seal_schedule));
    assert!(Rule::QueueUrl.admits(&format!("http://127.0.0.1:4566/000000000000/{}", n.main_queue)));
    assert!(Rule::QueueUrl.admits("https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo"));
}

#[test]
fn the_ledger_is_one_choice_for_the_consumer_and_the_replay() {
    let mut env = valid();
    for (function, parsed) in parse_all(&env, &RefCell::default()) {
        if let Ok(audited) = parsed
            && function != "enricher"
            && function != "reference-audit"
        {
            assert_eq!(audited.get(vars::LEDGER).map(String::as_str), Some("dynamodb"));
            assert!(!audited.contains_key(vars::POSTGRES_URL), "{function}");
        }
    }
    env.insert(vars::LEDGER.into(), "postgres".into());
    let missing = ConsumerSettings::from_lookup(|k| env.get(k).cloned()).unwrap_err();
    assert_eq!(missing.variable(), vars::POSTGRES_URL);
    assert_eq!(
        ReplaySettings::from_lookup(|k| env.get(k).cloned()).unwrap_err(),
        missing
    );
    assert!(EnricherSettings::from_lookup(|k| env.get(k).cloned()).is_ok());

    let url = "postgres://recon@db.internal:5432/ledger?application_name=dlq";
    let arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ledger-AbCdEf";
    env.insert(vars::POSTGRES_URL.into(), url.into());
    env.insert(vars::POSTGRES_SECRET_ARN.into(), arn.into());
    let expected = LedgerSettings::Postgres(PostgresLocation {
        url: url.into(),
        secret_arn: Some(arn.into()),
        tls: PostgresTls::VerifyFull { ca_file: None },
    });
    let consumer = ConsumerSettings::from_lookup(|k| env.get(k).cloned()).unwrap();
    let replay = ReplaySettings::from_lookup(|k| env.get(k).cloned()).unwrap();
    assert_eq!(consumer.ledger, expected);
    assert_eq!(replay.ledger, expected);
    for audited in [consumer.audited, replay.audited] {
        assert_eq!(audited.get(vars::LEDGER).map(String::as_str), Some("postgres"));
        assert_eq!(audited.get(vars::POSTGRES_URL).map(String::as_str), Some(url));
        assert_eq!(audited.get(vars::POSTGRES_SECRET_ARN).map(String::as_str), Some(arn));
        assert_eq!(audited.get(vars::POSTGRES_TLS).map(String::as_str), Some("verify-full"));
    }

    // TLS is verified by default; a CA file of one's own; plaintext only to a loopback host.
    env.insert(vars::POSTGRES_CA_FILE.into(), "/opt/ca/ledger.pem".into());
    let own_ca = ConsumerSettings::from_lookup(|k| env.get(k).cloned()).unwrap();
    let LedgerSettings::Postgres(location) = own_ca.ledger else {
        panic!("postgres")
    };
    assert_eq!(
        location.tls,
        PostgresTls::VerifyFull {
            ca_file: Some("/opt/ca/ledger.pem".into())
        }
    );
    env.insert(vars::POSTGRES_TLS.into(), "disable".into());
    let refused = ConsumerSettings::from_lookup(|k| env.get(k).cloned()).unwrap_err();
    assert_eq!(refused.variable(), vars::POSTGRES_TLS);
    assert!(
        refused.to_string().contains("db.internal is not a loopback host"),
        "{refused}"
    );
    for local in [
        "postgres://recon@127.0.0.1:55432/ledger",
        "postgres://recon@localhost/ledger",
        "postgres://recon@[::1]:5432/ledger",
    ] {
        env.insert(vars::POSTGRES_URL.into(), local.into());
        let plain = ConsumerSettings::from_lookup(|k| env.get(k).cloned()).unwrap();
        let LedgerSettings::Postgres(location) = plain.ledger else {
            panic!("postgres")
        };
        assert_eq!(location.tls, PostgresTls::Disable, "{local}");
    }
    env.insert(
        vars::POSTGRES_URL.into(),
        "postgres://recon@127.0.0.1,db.internal/ledger".into(),
    );
    assert!(
        ConsumerSettings::from_lookup(|k| env.get(k).cloned()).is_err(),
        "one remote host of several"
    );
}

#[test]
fn postgres_urls_name_user_host_and_database_and_never_a_password() {
    for good in [
        "postgres://recon@127.0.0.1:55432/recon",
        "postgresql://ledger_writer@db.internal/gl",
        "postgres://recon@[::1]:5432/recon?application_name=recon",
    ] {
        assert!(Rule::PostgresUrl.admits(good), "{good}");
    }
    assert!(
        Rule::PostgresUrl
            .admits("postgres://recon@db/gl?channel_binding=require&application_name=recon&connect_timeout=5")
    );
    for bad in [
        "postgres://recon:hunter2@db/gl",
        // The driver decodes percent-encoding: a password in disguise is still one.
        "postgres://recon%3Ahunter2@db/gl",
        "postgres://recon@db/gl?%70assword=hunter2",
        "postgres://recon@db/gl?PASSWORD=hunter2",
        "postgres://recon@db/gl?sslmode=require&pass%77ord=hunter2",
        // Only listed options (none of them a secret), and no broken escape.
        "postgres://recon@db/gl?passfile=/tmp/x",
        "postgres://recon@db/gl?sslmode=require&unknown=1",
        // TLS is the variables' to say, never the URL's.
        "postgres://recon@db/gl?sslmode=disable",
        "postgres://recon@db/gl?sslrootcert=/tmp/ca.pem",
        "postgres://recon%zz@db/gl",
    ] {
        assert!(!Rule::PostgresUrl.admits(bad), "{bad}");
    }
}
