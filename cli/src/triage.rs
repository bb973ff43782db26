//! `triage` and `show`: what is in the DLQ, grouped for a bulk fix; one envelope in full.

use anyhow::{Result, bail};
use chrono::{DateTime, NaiveDate, Utc};
use recon_aws::AwsClients;
use recon_aws::dynamodb::DynamoEnvelopeStore;
use recon_core::decisions::escalation::EscalationChain;
use recon_core::decisions::{TriageGroup, triage};
use recon_core::domain::{DlqEnvelope, EnvelopeStatus, FailureCode, ReferenceSnapshot};
use recon_core::envelopes::original_body;
use recon_core::ports::{EnvelopeStore, ReferenceData};
use recon_core::resources::ResourceNames;
use serde_json::json;
use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::output::fit;
use crate::text::{printable, printable_lines};

pub fn store(clients: &AwsClients, names: &ResourceNames) -> DynamoEnvelopeStore {
    DynamoEnvelopeStore::new(clients.dynamodb.clone(), &names.envelope_table)
}

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

/// Per group, the earliest planned close among its envelopes' open periods, and whether it is
/// within the warning window (or past): the group must be decided before.
#[derive(Clone, Debug, Default)]
pub struct Deadlines {
    by_group: BTreeMap<(FailureCode, String), NaiveDate>,
    warning: chrono::Duration,
}

impl Deadlines {
    pub fn of(list: &[DlqEnvelope], snapshot: &ReferenceSnapshot, warning: chrono::Duration) -> Self {
        let by_group = recon_core::decisions::triage::deadlines(list, snapshot);
        Deadlines { by_group, warning }
    }

    /// The group's deadline and whether it is within the warning window by `now`.
    fn get(&self, g: &TriageGroup, now: DateTime<Utc>) -> Option<(NaiveDate, bool)> {
        let on = *self.by_group.get(&(g.failure_code, g.root_cause.clone()))?;
        Some((on, now + self.warning >= on.and_time(chrono::NaiveTime::MIN).and_utc()))
    }
}

fn deadline(d: Option<(NaiveDate, bool)>) -> String {
    match d {
        Some((on, true)) => format!("{on} !"),
        Some((on, false)) => on.to_string(),
        None => "-".into(),
    }
}

/// The triage table, readable in a terminal (labels from bodies escaped: see `text`), with the
/// escalation stages each group's oldest envelope has reached when a chain is given, and the
/// planned period close each group must be decided before (`!`: within the warning window).
pub fn table(
    groups: &[TriageGroup],
    chain: Option<&EscalationChain>,
    deadlines: &Deadlines,
    now: DateTime<Utc>,
) -> String {
    let mut out = format!(
        "{:<22} {:<34} {:>6}  {:<19}  {:<19}  {:<28} {:<18} {:<28} {:<13} SAMPLE\n",
        "FAILURE CODE",
        "ROOT CAUSE",
        "COUNT",
        "OLDEST (UTC)",
        "NEWEST (UTC)",
        "AMOUNT",
        "ENTITIES",
        "ESCALATED TO",
        "DECIDE BEFORE"
    );
    for g in groups {
        let stages = reached(g, chain, now).join(",");
        out.push_str(&format!(
            "{:<22} {:<34} {:>6}  {:<19}  {:<19}  {:<28} {:<18} {:<28} {:<13} {}\n",
            g.failure_code.as_str(),
            fit(&printable(&g.root_cause), 34),
            g.tally.count,
            g.oldest.format("%Y-%m-%d %H:%M:%S"),
            g.newest.format("%Y-%m-%d %H:%M:%S"),
            fit(&amounts(g), 28),
            fit(&entities(g), 18),
            fit(if stages.is_empty() { "-" } else { &stages }, 28),
            deadline(deadlines.get(g, now)),
            g.sample_ids.first().map_or("", String::as_str),
        ));
    }
    let total: u64 = groups.iter().map(|g| g.tally.count).sum();
    out.push_str(&format!("{total} envelopes in {} groups", groups.len()));
    out
}

pub fn print_table(groups: &[TriageGroup], chain: Option<&EscalationChain>, now: DateTime<Utc>) {
    println!("{}", table(groups, chain, &Deadlines::default(), now));
}

pub async fn run(clients: &AwsClients, names: &ResourceNames, status: Option<EnvelopeStatus>) -> Result<()> {
    let store = store(clients, names);
    let list = envelopes(&store, status).await?;
    let groups = triage(&list);
    // PENDING groups against the deployment's escalation chain and planned period closes.
    let (chain, deadlines) = if status == Some(EnvelopeStatus::Pending) {
        let stack = recon_aws::stack::resolve_stack(clients, names).await?;
        let settings = crate::context::replay_settings(&stack)?;
        let reference = crate::context::reference(clients, names);
        let warning = chrono::Duration::hours(i64::from(settings.period_close_warning_hours));
        let deadlines = Deadlines::of(&list, &*reference.snapshot().await?, warning);
        (Some(settings.escalation), deadlines)
    } else {
        (None, Deadlines::default())
    };
    let now = Utc::now();
    let rows: Vec<serde_json::Value> = groups
        .iter()
        .map(|g| {
            let d = deadlines.get(g, now);
            let mut v = serde_json::to_value(g).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("escalated_to".into(), json!(reached(g, chain.as_ref(), now)));
                o.insert("decide_before".into(), json!(d.map(|(on, _)| on)));
                o.insert("deadline_near".into(), json!(d.is_some_and(|(_, near)| near)));
            }
            v
        })
        .collect();
    crate::output::emit(&rows, || table(&groups, chain.as_ref(), &deadlines, now))
}

pub async fn show(clients: &AwsClients, names: &ResourceNames, envelope_id: &str, body: bool) -> Result<()> {
    let Some(envelope) = store(clients, names).get(envelope_id).await? else {
        bail!(
            "no envelope {envelope_id} in {} (ids look like env_<32 hex>; `dlqctl triage` lists samples)",
            names.envelope_table
        );
    };
    let original = if body {
        Some(original_body(&envelope, &crate::context::worm(clients, names)).await?)
    } else {
        None
    };
    if crate::output::json() {
        let value = serde_json::json!({"envelope": envelope, "body": original.clone().flatten()});
        return crate::output::emit(&value, String::new);
    }
    crate::output::print_json(&envelope)?;
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
        let t = table(&triage(&[e]), None, &Deadlines::default(), now());
        assert!(!t.contains('\u{1b}'), "{t}");
        assert!(t.contains("ACME\\u{1b}[2J"), "{t}");
    }

    #[test]
    fn a_group_shows_the_stages_its_oldest_envelope_reached() {
        let mut old = envelope_from_dlq_message(&delivery("s1", "{}", 1), now(), "t");
        old.dead_lettered_at = now() - chrono::Duration::hours(30);
        let young = envelope_from_dlq_message(&delivery("s2", "{}", 1), now(), "t");
        let chain = EscalationChain::default();
        let t = table(&triage(&[old]), Some(&chain), &Deadlines::default(), now());
        assert!(t.contains("on-call,finance-controller"), "{t}");
        let t = table(&triage(&[young]), Some(&chain), &Deadlines::default(), now());
        assert!(!t.contains("on-call"), "{t}");
    }

    #[test]
    fn a_group_shows_the_period_close_it_must_be_decided_before() {
        use recon_core::domain::{PeriodRecord, PeriodStatus};
        let e = recon_testkit::builders::envelope("env_1");
        let close = |on: chrono::NaiveDate| {
            ReferenceSnapshot::new(
                [],
                [PeriodRecord {
                    entity: "acme-us".into(),
                    period: "2026-11".into(),
                    status: PeriodStatus::Open,
                    closes_on: Some(on),
                }],
            )
        };
        let soon = (now() + chrono::Duration::hours(30)).date_naive();
        let d = Deadlines::of(std::slice::from_ref(&e), &close(soon), chrono::Duration::hours(48));
        let t = table(&triage(std::slice::from_ref(&e)), None, &d, now());
        assert!(t.contains(&format!("{soon} !")), "{t}");
        let later = soon + chrono::Duration::days(10);
        let d = Deadlines::of(std::slice::from_ref(&e), &close(later), chrono::Duration::hours(48));
        let t = table(&triage(std::slice::from_ref(&e)), None, &d, now());
        assert!(
            t.contains(&later.to_string()) && !t.contains(&format!("{later} !")),
            "{t}"
        );
    }
}
