//! `triage` and `show`: what is in the DLQ, grouped for a bulk fix; one envelope in full.

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use recon_aws::AwsClients;
use recon_aws::dynamodb::DynamoEnvelopeStore;
use recon_aws::s3::S3Worm;
use recon_core::decisions::escalation::EscalationChain;
use recon_core::decisions::{TriageGroup, triage};
use recon_core::domain::{DlqEnvelope, EnvelopeStatus};
use recon_core::envelopes::original_body;
use recon_core::ports::EnvelopeStore;
use recon_core::resources::ResourceNames;
use std::borrow::Cow;

use crate::output::fit;
use crate::text::{printable, printable_lines};

pub fn store(clients: &AwsClients, names: &ResourceNames) -> DynamoEnvelopeStore {
    DynamoEnvelopeStore::new(clients.dynamodb.clone(), &names.envelope_table)
}

/// Every envelope in `status` (or every envelope).
pub async fn envelopes(store: &impl EnvelopeStore, status: Option<EnvelopeStatus>) -> Result<Vec<DlqEnvelope>> {
    Ok(recon_core::ports::all_envelopes(store, status).await?)
}

fn amounts(g: &TriageGroup) -> String {
    let mut parts: Vec<String> = g
        .tally
        .amounts
        .iter()
        .map(|(c, a)| format!("{a} {}", printable(c)))
        .collect();
    if g.tally.without_amount > 0 {
        parts.push(format!("{} unparsed", g.tally.without_amount));
    }
    parts.join("; ")
}

fn entities(g: &TriageGroup) -> String {
    let shown: Vec<Cow<'_, str>> = g.entities.iter().take(2).map(|e| printable(e)).collect();
    let more = g.entities.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} +{more}", shown.join(","))
    } else {
        shown.join(",")
    }
}

/// The stages of `chain` a group's oldest envelope has reached, by `now` (empty: none).
fn reached(g: &TriageGroup, chain: Option<&EscalationChain>, now: DateTime<Utc>) -> Vec<String> {
    let age = u64::try_from((now - g.oldest).num_seconds()).unwrap_or(0);
    chain.map_or_else(Vec::new, |c| c.reached(age).map(|s| s.name.clone()).collect())
}

/// The triage table, readable in a terminal (labels from bodies escaped: see `text`), with the
/// escalation stages each group's oldest envelope has reached when a chain is given.
pub fn table(groups: &[TriageGroup], chain: Option<&EscalationChain>, now: DateTime<Utc>) -> String {
    let mut out = format!(
        "{:<22} {:<34} {:>6}  {:<19}  {:<19}  {:<28} {:<18} {:<28} SAMPLE\n",
        "FAILURE CODE", "ROOT CAUSE", "COUNT", "OLDEST (UTC)", "NEWEST (UTC)", "AMOUNT", "ENTITIES", "ESCALATED TO"
    );
    for g in groups {
        let stages = reached(g, chain, now).join(",");
        out.push_str(&format!(
            "{:<22} {:<34} {:>6}  {:<19}  {:<19}  {:<28} {:<18} {:<28} {}\n",
            g.failure_code.as_str(),
            fit(&printable(&g.root_cause), 34),
            g.tally.count,
            g.oldest.format("%Y-%m-%d %H:%M:%S"),
            g.newest.format("%Y-%m-%d %H:%M:%S"),
            fit(&amounts(g), 28),
            fit(&entities(g), 18),
            fit(if stages.is_empty() { "-" } else { &stages }, 28),
            g.sample_ids.first().map_or("", String::as_str),
        ));
    }
    let total: u64 = groups.iter().map(|g| g.tally.count).sum();
    out.push_str(&format!("{total} envelopes in {} groups", groups.len()));
    out
}

pub fn print_table(groups: &[TriageGroup], chain: Option<&EscalationChain>, now: DateTime<Utc>) {
    println!("{}", table(groups, chain, now));
}

/// Envelopes in `status` (every envelope with `None`), grouped.
pub async fn run(clients: &AwsClients, names: &ResourceNames, status: Option<EnvelopeStatus>) -> Result<()> {
    let store = store(clients, names);
    let list = envelopes(&store, status).await?;
    let groups = triage(&list);
    // PENDING groups against the deployment's escalation chain.
    let chain = if status == Some(EnvelopeStatus::Pending) {
        let stack = recon_aws::provision::resolve_stack(clients, names).await?;
        Some(crate::context::replay_settings(&stack)?.escalation)
    } else {
        None
    };
    let now = Utc::now();
    let rows: Vec<serde_json::Value> = groups
        .iter()
        .map(|g| {
            let mut v = serde_json::to_value(g).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert(
                    "escalated_to".into(),
                    serde_json::json!(reached(g, chain.as_ref(), now)),
                );
            }
            v
        })
        .collect();
    crate::output::emit(&rows, || table(&groups, chain.as_ref(), now))
}

pub async fn show(clients: &AwsClients, names: &ResourceNames, envelope_id: &str, body: bool) -> Result<()> {
    let Some(envelope) = store(clients, names).get(envelope_id).await? else {
        bail!(
            "no envelope {envelope_id} in {} (ids look like env_<32 hex>; `dlqctl triage` lists samples)",
            names.envelope_table
        );
    };
    let original = if body {
        let worm = S3Worm::new(clients.s3.clone(), &names.bucket());
        Some(original_body(&envelope, &worm).await?)
    } else {
        None
    };
    if crate::output::json() {
        let value = serde_json::json!({"envelope": envelope, "body": original.clone().flatten()});
        return crate::output::emit(&value, String::new);
    }
    println!("{}", serde_json::to_string_pretty(&envelope)?);
    match original {
        Some(Some(b)) => println!("--- original body ({} bytes) ---\n{}", b.len(), printable_lines(&b)),
        Some(None) => println!("--- original body not found ---"),
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::domain::envelope_from_dlq_message;
    use recon_testkit::builders::{delivery, now};

    #[test]
    fn labels_from_bodies_cannot_drive_the_terminal() {
        // Regression: an entity read from an invalid body was printed raw; an escape sequence in
        // it could clear the screen or hide a line from the operator.
        let body = r#"{"ledger_entity": "ACME\u001b[2J", "currency": "US\u001bD", "amount": "1.00"}"#;
        let e = envelope_from_dlq_message(&delivery("s1", body, 1), now(), "t");
        let t = table(&triage(&[e]), None, now());
        assert!(!t.contains('\u{1b}'), "{t}");
        assert!(t.contains("ACME\\u{1b}[2J"), "{t}");
    }

    #[test]
    fn a_group_shows_the_stages_its_oldest_envelope_reached() {
        let mut old = envelope_from_dlq_message(&delivery("s1", "{}", 1), now(), "t");
        old.dead_lettered_at = now() - chrono::Duration::hours(30);
        let young = envelope_from_dlq_message(&delivery("s2", "{}", 1), now(), "t");
        let chain = EscalationChain::default();
        let t = table(&triage(&[old]), Some(&chain), now());
        assert!(t.contains("on-call,finance-controller"), "{t}");
        let t = table(&triage(&[young]), Some(&chain), now());
        assert!(!t.contains("on-call"), "{t}");
    }
}
