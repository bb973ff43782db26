//! The operator: the period closed from the start, then, as drawn, a currency mapped and its
//! group replayed by hand, the period reopened, the rest quarantined by hand, one transaction
//! edited under maker-checker approval. Its commands run in-process on a machine that may stall.

use recon_core::domain::{CurrencyMapping, EnvelopeStatus, PeriodRecord, PeriodStatus, labels};
use recon_core::ports::{Clock, EnvelopeStore, ReferenceData};
use recon_core::replay::{ReplayRequest, Selector};
use recon_core::resources::REPLAY_TIMEOUT;
use std::time::Duration;

use super::World;
use crate::sim::workload::{CLOSED_ENTITY, CLOSED_PERIOD, Transaction};

impl World {
    /// The operator: the workload's closed period from the start; then, as drawn, XAU mapped
    /// (and a replay of that group by hand), the period reopened, the rest quarantined by hand.
    pub(super) async fn operate(&self) {
        let reference = &self.stores.reference;
        let closed = PeriodRecord {
            entity: CLOSED_ENTITY.into(),
            period: CLOSED_PERIOD.into(),
            status: PeriodStatus::Closed,
            closes_on: None,
        };
        let _ = reference.put_period(&closed).await;
        let mut actions: Vec<(Duration, &str)> = Vec::new();
        if let Some(t) = self.settings.fix_currency_at {
            actions.push((t, "map XAU"));
        }
        if let Some(t) = self.settings.reopen_period_at {
            actions.push((t, "reopen period"));
        }
        if let Some(t) = self.settings.operator_quarantine_at {
            actions.push((t, "quarantine the rest"));
        }
        if let Some(t) = self.settings.edit_at {
            actions.push((t, "edit"));
        }
        actions.sort();
        for (at, action) in actions {
            self.clock.sleep(at.saturating_sub(self.clock.elapsed())).await;
            self.log(format!("operator: {action}"));
            match action {
                "map XAU" => {
                    let xau = CurrencyMapping {
                        code: "XAU".into(),
                        minor_units: 4,
                        description: "gold, troy ounce".into(),
                    };
                    let _ = reference.put_currency(&xau).await;
                    self.start_replay(
                        operator_request(
                            Selector {
                                root_cause: Some("UNMAPPED_CURRENCY:*".into()),
                                ..Selector::default()
                            },
                            "XAU mapped",
                            false,
                        ),
                        "replay-by-hand",
                        true,
                    )
                    .await;
                }
                "edit" => self.edit_one().await,
                "reopen period" => {
                    let _ = reference
                        .put_period(&PeriodRecord {
                            status: PeriodStatus::Open,
                            closes_on: None,
                            ..closed.clone()
                        })
                        .await;
                }
                _ => self
                    .start_replay(
                        operator_request(Selector::default(), "cannot be fixed: book by hand", true),
                        "quarantine-by-hand",
                        true,
                    )
                    .await
                    .unwrap_or_default(),
            }
        }
        self.operating.set(false);
    }

    /// An approved edit of one PENDING gold transaction that was dollars: the currency, the amount
    /// at the cents it was, and the value date moved into the next period. What it posts is the
    /// edited transaction (the ground truth learns it here).
    async fn edit_one(&self) {
        use recon_core::domain::approval::{Identity, RequestStatus};
        use recon_core::domain::edit::Proposal;
        let Ok((page, _)) = self
            .stores
            .envelopes
            .list_by_status(EnvelopeStatus::Pending, None, 200)
            .await
        else {
            return;
        };
        let Some((e, m)) = page.iter().find_map(|e| {
            let body = e.original.body.as_deref()?;
            let m = recon_core::domain::decode(body).ok()?;
            (m.currency == "XAU").then(|| (e.clone(), m.message_id.to_string()))
        }) else {
            return;
        };
        let Some(amount) = e
            .amount
            .as_deref()
            .and_then(|a| a.split_once('.').map(|(i, f)| format!("{i}.{:.2}", f)))
        else {
            return;
        };
        let day = 1 + (e.envelope_id.len() % 9);
        let fields = [
            ("currency", "USD".to_owned()),
            ("amount", amount.clone()),
            ("value_date", format!("2026-12-0{day}")),
        ];
        let proposal = Proposal::Set(fields.iter().map(|(f, v)| ((*f).to_owned(), v.clone())).collect());
        let who = |name: &str| Identity {
            arn: format!("arn:aws:iam::000000000000:user/{name}"),
            name: None,
        };
        let r = &self.operator_replayer;
        let q = match r
            .request_edit(&e.envelope_id, &proposal, "booked as gold, was dollars", &who("maker"))
            .await
        {
            Ok(q) => q,
            Err(err) => return self.log(format!("operator: edit of {} refused: {err}", e.envelope_id)),
        };
        if let Some(edit) = &q.edit
            && let Some(t) = self.transaction_of(&m)
        {
            self.edits.borrow_mut().insert(
                t,
                Transaction {
                    currency: "USD".into(),
                    amount: recon_core::domain::money::parse_amount(&amount)
                        .map(|a| a.normalize())
                        .unwrap_or_default(),
                    value_date: format!("2026-12-0{day}"),
                    source_hash: Some(edit.source_hash.clone()),
                    ..self
                        .transactions
                        .borrow()
                        .iter()
                        .find(|x| x.id == t)
                        .cloned()
                        .unwrap_or_else(|| Transaction {
                            id: t,
                            ledger_entity: String::new(),
                            currency: String::new(),
                            amount: Default::default(),
                            value_date: String::new(),
                            source_hash: None,
                        })
                },
            );
        }
        if let Err(err) = r.decide(&q.request_id, &who("checker"), true, "checked").await {
            return self.log(format!("operator: decision on {} failed: {err}", q.request_id));
        }
        // The maker executes it, and resumes it until it is done (an execution that failed or
        // died keeps its claim: only the request's own resumption finishes it, once that
        // execution's lease has ended), for a day if need be.
        for _ in 0..150 {
            let deadline = Some(self.clock.now() + REPLAY_TIMEOUT);
            let who = who("maker");
            match r.execute(&q.request_id, "operator", Some(&who), deadline).await {
                Ok((done, report)) if done.status != RequestStatus::Paused => {
                    return self.log(format!(
                        "operator: edit {} executed: {}",
                        q.request_id,
                        report.summary()
                    ));
                }
                Ok((_, report)) => self.log(format!("operator: edit {} paused: {}", q.request_id, report.summary())),
                Err(err) => self.log(format!("operator: edit {} failed, resumed later: {err}", q.request_id)),
            }
            self.clock.sleep(Duration::from_secs(600)).await;
        }
    }

    /// The transaction a message id carries, by construction.
    fn transaction_of(&self, message_id: &str) -> Option<usize> {
        self.sent
            .borrow()
            .iter()
            .find(|p| labels(&p.body).message_id.as_deref() == Some(message_id))
            .and_then(|p| p.txn)
    }
}

fn operator_request(selector: Selector, reason: &str, quarantine: bool) -> ReplayRequest {
    ReplayRequest {
        selector,
        dry_run: false,
        reason: reason.into(),
        triggered_by: "operator".into(),
        invocation: None,
        scheduled: false,
        quarantine,
    }
}
