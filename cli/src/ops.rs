//! `send`, `stats`, `env`, `index-periods` and `ledger-migrate`.

use anyhow::{Context, Result, bail};
use recon_aws::AwsClients;
use recon_aws::sqs::{MAX_BATCH, OutgoingMessage, QueueDepth, SqsQueue};
use recon_aws::stack::resolve_stack;
use recon_core::domain::{NewMessage, Tally};
use recon_core::ports::{Backlog, LedgerReader, LedgerScope, tally_postings};
use recon_core::resources::ResourceNames;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;

use crate::context;

fn read_lines(file: Option<PathBuf>) -> Result<Vec<String>> {
    let reader: Box<dyn BufRead> = match file {
        Some(p) if p.as_os_str() != "-" => Box::new(std::io::BufReader::new(
            std::fs::File::open(&p).with_context(|| format!("cannot open {}", p.display()))?,
        )),
        _ => Box::new(std::io::stdin().lock()),
    };
    crate::input::bounded_lines(reader, crate::input::MAX_BODY_BYTES, "the messages")
}

/// Add `source_hash` to a body that lacks one (bodies that are not message objects pass as they are).
fn fill_hash(line: &str, n: usize) -> Result<String> {
    let Ok(serde_json::Value::Object(mut obj)) = serde_json::from_str::<serde_json::Value>(line) else {
        return Ok(line.to_owned());
    };
    if obj.contains_key("source_hash") {
        return Ok(line.to_owned());
    }
    // `trace_id` is optional in the contract (it defaults to `message_id`), and not hashed.
    let mut fields = obj.clone();
    if !fields.contains_key("trace_id")
        && let Some(id) = fields.get("message_id").cloned()
    {
        fields.insert("trace_id".into(), id);
    }
    let msg: NewMessage = serde_json::from_value(serde_json::Value::Object(fields))
        .with_context(|| format!("line {n}: cannot compute source_hash"))?;
    let hash = msg
        .compute_hash()
        .with_context(|| format!("line {n}: cannot compute source_hash"))?;
    obj.insert("source_hash".into(), hash.into());
    Ok(serde_json::Value::Object(obj).to_string())
}

/// Send bodies in batches of ten; returns the SQS message ids in order (failures are errors).
pub async fn send_bodies(queue: &SqsQueue, bodies: &[String], progress: bool) -> Result<Vec<String>> {
    let mut ids = Vec::with_capacity(bodies.len());
    for (i, chunk) in bodies.chunks(MAX_BATCH).enumerate() {
        let batch: Vec<OutgoingMessage> = chunk
            .iter()
            .map(|b| OutgoingMessage {
                body: b.clone(),
                ..Default::default()
            })
            .collect();
        for (j, r) in queue.send_batch(&batch).await?.into_iter().enumerate() {
            match r {
                Ok(id) => ids.push(id),
                Err(e) => bail!("message {} was not accepted by SQS: {e}", i * MAX_BATCH + j + 1),
            }
        }
        if progress && (i + 1) % 100 == 0 {
            eprintln!("  sent {} of {}", ids.len(), bodies.len());
        }
    }
    Ok(ids)
}

pub async fn send(clients: &AwsClients, names: &ResourceNames, file: Option<PathBuf>, fill: bool) -> Result<()> {
    let stack = resolve_stack(clients, names).await?;
    let mut bodies = read_lines(file)?;
    if fill {
        bodies = bodies
            .iter()
            .enumerate()
            .map(|(i, l)| fill_hash(l, i + 1))
            .collect::<Result<_>>()?;
    }
    let queue = SqsQueue::new(clients.sqs.clone(), &stack.main_queue_url);
    let ids = send_bodies(&queue, &bodies, crate::output::progress()).await?;
    let value = serde_json::json!({"queue": stack.main_queue_url, "sent": ids.len(), "message_ids": ids});
    crate::output::emit(&value, || {
        format!("sent {} messages to {}", ids.len(), names.main_queue)
    })
}

/// The functions' environment for this deployment (and the local stack's endpoints), KEY=VALUE.
pub async fn env(clients: &AwsClients, names: &ResourceNames) -> Result<()> {
    let mut env = resolve_stack(clients, names).await?.env();
    if let recon_aws::Target::Local { edge_url, dynamodb_url } = &clients.target {
        env.extend([
            ("AWS_ENDPOINT_URL", edge_url.clone()),
            ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_url.clone()),
            ("AWS_REGION", context::region(clients)),
            // LocalStack and DynamoDB Local accept any keys; these are not credentials.
            ("AWS_ACCESS_KEY_ID", "test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
            ("DLQ_S3_FORCE_PATH_STYLE", "true".to_owned()),
        ]);
    }
    let map: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let lines = || {
        env.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    crate::output::emit(&map, lines)
}

fn total_text(currency: &str, t: &Tally) -> String {
    if t.overflowed.contains(currency) {
        "too large to total".to_owned()
    } else {
        t.get(currency).to_string()
    }
}

pub async fn stats(clients: &AwsClients, names: &ResourceNames) -> Result<()> {
    let stack = resolve_stack(clients, names).await?;
    let main = SqsQueue::new(clients.sqs.clone(), &stack.main_queue_url)
        .depth()
        .await?;
    let dlq = SqsQueue::new(clients.sqs.clone(), &stack.dlq_url).depth().await?;
    let ledger = context::ledger(clients, &stack)?;
    let totals = tally_postings(&ledger, &LedgerScope::default()).await?;
    let postings: u64 = totals.values().map(|t| t.count).sum();
    let hand_offs = ledger.hand_offs().await?;
    let mut audit_counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    for r in context::audit_log(clients, names).scan().await? {
        *audit_counts.entry(r.kind.as_str()).or_default() += 1;
    }
    let store = crate::triage::store(clients, names);
    let mut envelope_counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut superseded = std::collections::BTreeSet::new();
    for e in crate::triage::envelopes(&store, None).await? {
        *envelope_counts.entry(e.status.as_str()).or_default() += 1;
        if e.status == recon_core::domain::EnvelopeStatus::Superseded {
            superseded.insert(e.envelope_id);
        }
    }
    // A hand-off is a manual journal's, or an approved edit's original (its envelope SUPERSEDED).
    let by_edits = hand_offs
        .iter()
        .filter(|h| h.manual_journal.as_ref().is_some_and(|e| superseded.contains(e)))
        .count();
    let manual_journals = hand_offs.len() - by_edits;
    let pending_counter = store.pending_count().await?;
    if crate::output::json() {
        let depth =
            |d: &QueueDepth| serde_json::json!({"visible": d.visible, "in_flight": d.in_flight, "delayed": d.delayed});
        let v = serde_json::json!({
            "main_queue": depth(&main),
            "dead_letter_queue": depth(&dlq),
            "ledger": {
                "kind": ledger.kind(),
                "postings": postings,
                "handed_to_manual_journals": manual_journals,
                "handed_off_by_edits": by_edits,
                "by_currency": totals.iter().map(|(c, t)| (c.clone(), serde_json::json!({"count": t.count, "amount": total_text(c, t)}))).collect::<serde_json::Map<_, _>>(),
            },
            "envelopes": envelope_counts,
            "pending_counter": pending_counter,
            "audit": audit_counts,
        });
        return crate::output::print_json(&v);
    }
    for (name, d) in [("main queue", &main), ("DLQ", &dlq)] {
        println!(
            "{name:<12} {:>8} visible {:>8} in flight {:>8} delayed",
            d.visible, d.in_flight, d.delayed
        );
    }
    println!(
        "ledger       {postings:>8} postings, {manual_journals} handed to manual journals, {by_edits} originals handed off by approved edits ({})",
        ledger.kind()
    );
    for (c, t) in &totals {
        println!("  {c:<6}   {:>8} postings  {:>24}", t.count, total_text(c, t));
    }
    println!(
        "envelopes    {:>8} (PENDING counter: {pending_counter})",
        envelope_counts.values().sum::<u64>()
    );
    for (status, n) in &envelope_counts {
        println!("  {status:<22} {n:>8}");
    }
    for (kind, n) in &audit_counts {
        println!("audit {kind:<22} {n:>8}");
    }
    Ok(())
}

/// `dlqctl index-periods`: what was written before the period indexes — the envelopes, and the
/// audit records a reconciliation reads — given its entry (the DynamoDB ledger is read by period
/// through its own key: see `dlqctl ledger-rekey`); then
/// the deployment says so, and reads by period are no longer refused.
pub async fn index_periods(clients: &AwsClients, names: &ResourceNames) -> Result<()> {
    let json = crate::output::json();
    let progress = |what: &'static str| {
        move |n: u64| {
            if !json && n > 0 {
                eprintln!("  {n} {what} indexed so far");
            }
        }
    };
    let store = crate::triage::store(clients, names);
    let envelopes = store.index_periods(progress("envelopes")).await?;
    let records = context::audit_log(clients, names)
        .index_periods(progress("audit records"))
        .await?;
    // All three done: reads by period may now be trusted (and are no longer refused).
    store
        .mark_periods_indexed("dlqctl index-periods", chrono::Utc::now())
        .await?;
    // Triage's totals cover every envelope only where none was PENDING before they were kept:
    // a new stack's table.
    let totals = store
        .mark_totals_kept("dlqctl index-periods", chrono::Utc::now())
        .await?;
    let out = serde_json::json!({"envelopes": envelopes, "audit_records": records, "triage_totals": totals});
    crate::output::emit(&out, || {
        let totals = if totals {
            "triage reads its totals"
        } else {
            "triage counts the envelopes themselves (the table held PENDING envelopes before its totals were kept)"
        };
        format!("given their entry in the period indexes: {envelopes} envelopes, {records} audit records; {totals}")
    })
}

/// `dlqctl ledger-rekey --from OLD`: the old hash-keyed DynamoDB ledger copied into the table
/// keyed by period ([`recon_aws::dynamodb::DynamoLedger::rekey_from`]). Fails, naming them, when
/// an item could not be placed or its key holds something else: a person settles those.
pub async fn ledger_rekey(clients: &AwsClients, names: &ResourceNames, from: &str) -> Result<()> {
    let stack = resolve_stack(clients, names).await?;
    let recon_aws::ledger::AnyLedger::DynamoDb(ledger) = context::ledger(clients, &stack)? else {
        anyhow::bail!("ledger-rekey copies the DynamoDB ledger; this deployment's ledger is another");
    };
    anyhow::ensure!(
        from != stack.names.ledger_table,
        "--from names the ledger table itself ({from}): give the old table"
    );
    let json = crate::output::json();
    let store = crate::triage::store(clients, names);
    let done = ledger
        .rekey_from(from, &store, |d| {
            if !json {
                eprintln!("  {} copied, {} there already so far", d.copied, d.present);
            }
        })
        .await?;
    crate::output::emit(&serde_json::to_value(&done)?, || {
        format!(
            "rekeyed into {}: {} copied, {} there already, {} conflicts, {} not placed",
            stack.names.ledger_table,
            done.copied,
            done.present,
            done.conflicts.len(),
            done.unplaced.len()
        )
    })?;
    let mut problems = Vec::new();
    if !done.conflicts.is_empty() {
        problems.push(format!(
            "keys the new table holds otherwise than the old one (committed there before the copy): {}",
            done.conflicts.join(", ")
        ));
    }
    if !done.unplaced.is_empty() {
        problems.push(format!(
            "items without a period (a hand-off whose envelope names none or is gone), not copied: {}",
            done.unplaced.join(", ")
        ));
    }
    if !problems.is_empty() {
        return Err(crate::output::Exit(1, problems.join("; ")).into());
    }
    Ok(())
}

/// `dlqctl ledger-migrate`: the PostgreSQL ledger's migrations applied as the migration role
/// (`secret_arn`'s user, else the URL's), and each of `grant_to` granted what the functions need.
pub async fn ledger_migrate(
    clients: &AwsClients,
    url: Option<String>,
    secret_arn: Option<&str>,
    grant_to: &[String],
) -> Result<()> {
    use recon_core::config::{Rule, vars};
    let url = url
        .or_else(|| context::given(vars::POSTGRES_URL))
        .context("which database? give --url (or set DLQ_POSTGRES_URL)")?;
    if !Rule::PostgresUrl.admits(&url) {
        // Not echoed: what the rule refuses first is a URL carrying a password.
        bail!("--url is not {}", Rule::PostgresUrl.allowed());
    }
    if let Some(user) = grant_to.iter().find(|u| u.is_empty() || u.len() > 63) {
        bail!("--grant-to {user:?} is not a PostgreSQL user name (1-63 bytes)");
    }
    let credentials = match secret_arn {
        Some(arn) => Some(recon_core::ports::Rotating::fixed(
            recon_aws::ledger::postgres_credentials(clients, arn).await?,
        )),
        None => None,
    };
    let settings = recon_postgres::PostgresSettings {
        url,
        connect_timeout: std::time::Duration::from_secs(10),
        // A migration may rewrite a large table.
        statement_timeout: std::time::Duration::from_secs(3600),
        pool_size: 1,
        credentials,
        tls: match context::given(vars::POSTGRES_TLS).as_deref() {
            Some("disable") => recon_core::config::PostgresTls::Disable,
            None | Some("verify-full") => recon_core::config::PostgresTls::VerifyFull {
                ca_file: context::given(vars::POSTGRES_CA_FILE).map(Into::into),
            },
            Some(other) => bail!("{}={other:?}: verify-full or disable", vars::POSTGRES_TLS),
        },
    };
    let applied = recon_postgres::PostgresLedger::migrate(&settings, grant_to).await?;
    let out = serde_json::json!({"applied": applied, "granted": grant_to});
    crate::output::emit(&out, || {
        let granted = if grant_to.is_empty() {
            "no user granted (--grant-to USER for the functions' user)".to_owned()
        } else {
            format!("SELECT and INSERT granted to {}", grant_to.join(", "))
        };
        format!("ledger schema: {applied} migration(s) applied; {granted}")
    })
}
