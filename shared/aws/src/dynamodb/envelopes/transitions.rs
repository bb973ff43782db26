//! Envelopes' status transitions as conditional updates: one envelope's claim and settlement, and
//! several envelopes' claims or settlements in as few transactions as DynamoDB's limits allow (100
//! items, 4 MB of items a transaction).
//! Each transaction is all or nothing: one refused because an envelope's condition did not hold
//! is sent again without that envelope, which is then answered on its own (a claim: from PENDING,
//! then the takeover of an expired lease, as `claim` does; a settlement: its claim was lost).
//! A group still cancelled for conflicts with other transactions (the PENDING counter, which
//! every status change moves) is sent again in the next round; anything else that fails a group
//! leaves its envelopes to be asked one at a time.

use aws_sdk_dynamodb::types::builders::UpdateBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use chrono::{DateTime, Utc};
use recon_core::domain::status::check_transition;
use recon_core::domain::{AuditRecord, DlqEnvelope, EnvelopeStatus, ReplayClaim, ReplayRecord, StatusChange};
use recon_core::ports::{EnvelopeStore, Finish, FlowResult, Settled, StoreError, StoreResult};
use recon_core::resources::keys;

use super::super::transact::{cancellation_codes, conflict_wait, conflicted, transact, tx_update};
use super::{DynamoEnvelopeStore, outbox_put, pending_delta, totals, totals_moved};
use crate::dynamodb::audit::{Linked, Links, settle};
use crate::dynamodb::batch::{TRANSACT_BYTES, TRANSACT_ITEMS, estimated_size, groups, json_size};
use crate::dynamodb::{item_error, n, s};
use crate::item::to_item;
use futures::StreamExt;
use recon_core::decisions::totals::Contribution;

/// Times a group is sent (again without the envelopes it was refused for, or after conflicts).
const ROUNDS: usize = 4;

/// The condition of a claim from PENDING (the caller adds `:pending`: [`from_pending`]).
pub(super) const FROM_PENDING: &str = "#status = :pending";
/// The condition of a claim taking over an expired lease (the caller adds `:now`: [`takeover`]).
pub(super) const TAKEOVER: &str = "#status = :replaying AND #lease < :now";
/// Times a group of linked records is sent (linked again from the heads as they then are, after
/// they moved or met another writer); then its envelopes are settled through the outbox.
const LINK_ROUNDS: u32 = 6;
/// Envelopes asked about one at a time, at once.
const ALONE_AT_ONCE: usize = 8;

/// A claim and its status-history entry as attribute values: made once for every envelope the
/// claim is asked for.
pub(super) struct ClaimValues {
    claim: AttributeValue,
    change: AttributeValue,
    lease: AttributeValue,
}

impl ClaimValues {
    pub(super) fn of(claim: &ReplayClaim, change: &StatusChange) -> StoreResult<Self> {
        let claim_item = to_item(claim).map_err(|e| item_error("replay claim", e))?;
        let entry = to_item(change).map_err(|e| item_error("status change", e))?;
        Ok(ClaimValues {
            claim: AttributeValue::M(claim_item),
            change: AttributeValue::L(vec![AttributeValue::M(entry)]),
            lease: n(claim.lease_until.timestamp_millis()),
        })
    }
}

/// A claim's update of the envelope, under `condition` (and, with `seen`, only if its status
/// history is as long as the caller read it).
pub(super) fn claim_update(
    table: &str,
    envelope_id: &str,
    values: &ClaimValues,
    seen: Option<usize>,
    condition: &str,
) -> UpdateBuilder {
    // Unchanged since the caller read it: its status history is as long as it was then.
    let unchanged = if seen.is_some() {
        " AND size(status_history) = :seen"
    } else {
        ""
    };
    let u = Update::builder()
        .table_name(table)
        .key(keys::ENVELOPE_PK, s(envelope_id))
        .update_expression(
            "SET #status = :replaying, replay = :claim, #lease = :lease, status_history = list_append(status_history, :change)",
        )
        .condition_expression(format!("{condition}{unchanged}"))
        .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
        .expression_attribute_names("#lease", keys::ENVELOPE_LEASE)
        .expression_attribute_values(":replaying", s(EnvelopeStatus::Replaying.as_str()))
        .expression_attribute_values(":claim", values.claim.clone())
        .expression_attribute_values(":lease", values.lease.clone())
        .expression_attribute_values(":change", values.change.clone());
    match seen {
        Some(len) => u.expression_attribute_values(":seen", n(i64::try_from(len).unwrap_or(i64::MAX))),
        None => u,
    }
}

/// A claim's update from PENDING.
pub(super) fn from_pending(update: UpdateBuilder) -> StoreResult<TransactWriteItem> {
    tx_update(
        update.expression_attribute_values(":pending", s(EnvelopeStatus::Pending.as_str())),
        "replay claim",
    )
}

/// A claim's update taking over a lease that ended before `now`.
pub(super) fn takeover(update: UpdateBuilder, now: DateTime<Utc>) -> StoreResult<TransactWriteItem> {
    tx_update(
        update.expression_attribute_values(":now", n(now.timestamp_millis())),
        "replay takeover",
    )
}

/// A settlement's update of the envelope: only if it is REPLAYING under `replay_id`.
pub(super) fn finish_update(
    table: &str,
    envelope_id: &str,
    replay_id: &str,
    change: &StatusChange,
    record: &ReplayRecord,
) -> StoreResult<TransactWriteItem> {
    let entry = to_item(change).map_err(|e| item_error("status change", e))?;
    let record = to_item(record).map_err(|e| item_error("replay record", e))?;
    let update = Update::builder()
        .table_name(table)
        .key(keys::ENVELOPE_PK, s(envelope_id))
        .update_expression(
            "SET #status = :to, status_history = list_append(status_history, :change), \
             replays = list_append(if_not_exists(replays, :empty), :record)",
        )
        .condition_expression("#status = :replaying AND #replay.#rid = :rid")
        .expression_attribute_names("#status", keys::ENVELOPE_STATUS)
        .expression_attribute_names("#replay", "replay")
        .expression_attribute_names("#rid", "replay_id")
        .expression_attribute_values(":to", s(change.status.as_str()))
        .expression_attribute_values(":replaying", s(EnvelopeStatus::Replaying.as_str()))
        .expression_attribute_values(":rid", s(replay_id))
        .expression_attribute_values(":change", AttributeValue::L(vec![AttributeValue::M(entry)]))
        .expression_attribute_values(":record", AttributeValue::L(vec![AttributeValue::M(record)]))
        .expression_attribute_values(":empty", AttributeValue::L(vec![]));
    tx_update(update, "replay finish")
}

/// What sending a group came to.
enum Sent {
    Written,
    /// Refused for these of its envelopes (positions in the group): their conditions did not hold.
    Refused(Vec<usize>),
    /// A chain's head moved since it was read (or a record was in the trail already), and these
    /// of its envelopes were refused as well: link again from the heads as they are now.
    Moved(Vec<usize>),
    /// Cancelled for conflicts with other transactions still, after `transact`'s retries.
    Conflicted,
    /// Anything else (throttled, unreachable, an item DynamoDB would not store).
    Failed,
}

/// What an item of a group's transaction is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// The envelope at this position in the group.
    Envelope(usize),
    /// The PENDING counter, or an outbox record: items without a condition of their own.
    Other,
    /// A record linked into the trail, or a chain's head.
    Link,
}

/// Send a group's transaction: `owners[k]` is what item `k` is about. A group with links is
/// not sent again as it is after a conflict (the heads it met have most likely moved by then: the
/// caller links it again from them); any other is, a few times.
async fn send_group(store: &DynamoEnvelopeStore, items: Vec<TransactWriteItem>, owners: &[Owner]) -> Sent {
    let request = store.client.transact_write_items().set_transact_items(Some(items));
    let sent = if owners.contains(&Owner::Link) {
        request.send().await
    } else {
        transact(request).await
    };
    match sent {
        Ok(_) => Sent::Written,
        Err(err) => {
            let codes = cancellation_codes(&err);
            let refused = |code: &Option<String>| code.as_deref() == Some("ConditionalCheckFailed");
            let failed: Vec<Owner> = codes
                .iter()
                .zip(owners)
                .filter(|(code, _)| refused(code))
                .map(|(_, owner)| *owner)
                .collect();
            let mut positions: Vec<usize> = failed
                .iter()
                .filter_map(|o| match o {
                    Owner::Envelope(p) => Some(*p),
                    _ => None,
                })
                .collect();
            positions.dedup();
            let only_conditions = codes
                .iter()
                .all(|c| refused(c) || matches!(c.as_deref(), None | Some("None")));
            if conflicted(&codes) {
                return Sent::Conflicted;
            }
            if failed.contains(&Owner::Link) && only_conditions {
                return Sent::Moved(positions);
            }
            if positions.is_empty() || !only_conditions {
                tracing::warn!(error = %crate::error::store_error("TransactWriteItems(envelope group)", err), "asking one at a time");
                Sent::Failed
            } else {
                Sent::Refused(positions)
            }
        }
    }
}

/// `answers` with each one no group gave asked for on its own (`ask(i)`), eight at once.
async fn answered_alone<T, F, A>(mut answers: Vec<Option<FlowResult<T>>>, ask: F) -> Vec<FlowResult<T>>
where
    F: Fn(usize) -> A,
    A: std::future::Future<Output = FlowResult<T>>,
{
    let alone: Vec<usize> = (0..answers.len()).filter(|&i| answers[i].is_none()).collect();
    let asked: Vec<(usize, FlowResult<T>)> = futures::stream::iter(alone)
        .map(|i| {
            let answer = ask(i);
            async move { (i, answer.await) }
        })
        .buffered(ALONE_AT_ONCE)
        .collect()
        .await;
    for (i, answer) in asked {
        answers[i] = Some(answer);
    }
    // Every one unanswered was asked: none is left without an answer.
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(StoreError::infra("not answered").into())))
        .collect()
}

/// Send `group` (indexes into the caller's envelopes) as `build` makes its transaction, again
/// without the envelopes it is refused for, a few rounds: `(written, refused, left)`, the last
/// for the caller to ask about one at a time.
async fn send_rounds<B>(
    store: &DynamoEnvelopeStore,
    group: Vec<usize>,
    build: B,
) -> (Vec<usize>, Vec<usize>, Vec<usize>)
where
    B: Fn(&[usize]) -> StoreResult<(Vec<TransactWriteItem>, Vec<Owner>)>,
{
    let mut left = group;
    let mut refused = Vec::new();
    for _ in 0..ROUNDS {
        if left.is_empty() {
            break;
        }
        let Ok((items, owners)) = build(&left) else {
            break;
        };
        match send_group(store, items, &owners).await {
            Sent::Written => return (left, refused, Vec::new()),
            Sent::Refused(positions) | Sent::Moved(positions) => {
                refused.extend(positions.iter().map(|&p| left[p]));
                left = without(&left, &positions);
            }
            // Another round: the transactions it met are likely done by now.
            Sent::Conflicted => {}
            Sent::Failed => break,
        }
    }
    (Vec::new(), refused, left)
}

/// `members` without those at `positions`.
fn without(members: &[usize], positions: &[usize]) -> Vec<usize> {
    members
        .iter()
        .enumerate()
        .filter(|(p, _)| !positions.contains(p))
        .map(|(_, &i)| i)
        .collect()
}

impl DynamoEnvelopeStore {
    /// [`EnvelopeStore::claim_many`] in groups: those read PENDING claimed from PENDING (the
    /// counter moved once per group), those read REPLAYING by taking over their expired lease (no
    /// count change); an envelope refused in its group, or of a group that failed, is claimed on
    /// its own (several at once).
    pub(super) async fn claim_group(
        &self,
        envelopes: &[&DlqEnvelope],
        claim: &ReplayClaim,
        now: DateTime<Utc>,
        change: &StatusChange,
    ) -> Vec<FlowResult<bool>> {
        let mut answers: Vec<Option<FlowResult<bool>>> = vec![None; envelopes.len()];
        let values = check_transition(EnvelopeStatus::Pending, change.status)
            .ok()
            .and_then(|()| ClaimValues::of(claim, change).ok());
        // Without them (an illegal change, a claim that does not serialise) each envelope is asked
        // on its own, and answered with the error.
        if let Some(values) = &values {
            // What each claim adds to its envelope.
            let adds = json_size(claim) + json_size(change);
            for from in [EnvelopeStatus::Pending, EnvelopeStatus::Replaying] {
                let counted = from == EnvelopeStatus::Pending;
                let members: Vec<usize> = (0..envelopes.len()).filter(|&i| envelopes[i].status == from).collect();
                // Those claimed from PENDING in runs of one totals item each.
                let runs = if counted {
                    totals::by_key(&members, |i| Some(Contribution::of(envelopes[i]).key))
                } else {
                    vec![members]
                };
                for members in runs {
                    let costs: Vec<(usize, usize)> = members
                        .iter()
                        .map(|&i| (1, estimated_size(envelopes[i]) + adds))
                        .collect();
                    // With the PENDING counter and the totals, two items of each transaction are theirs.
                    for group in groups(&costs, TRANSACT_ITEMS - 2 * usize::from(counted), TRANSACT_BYTES) {
                        let build = |left: &[usize]| {
                            let mut items = Vec::with_capacity(left.len() + 1);
                            for &i in left {
                                let e = envelopes[i];
                                let seen = Some(e.status_history.len());
                                items.push(if counted {
                                    from_pending(claim_update(&self.table, &e.envelope_id, values, seen, FROM_PENDING))?
                                } else {
                                    takeover(claim_update(&self.table, &e.envelope_id, values, seen, TAKEOVER), now)?
                                });
                            }
                            let mut owners: Vec<Owner> = (0..left.len()).map(Owner::Envelope).collect();
                            if counted {
                                items.push(pending_delta(&self.table, -i64::try_from(left.len()).unwrap_or(0))?);
                                items.extend(totals_moved(&self.table, left.iter().map(|&i| envelopes[i]), -1)?);
                                owners.resize(items.len(), Owner::Other);
                            }
                            Ok((items, owners))
                        };
                        let (written, _, _) = send_rounds(self, members[group].to_vec(), build).await;
                        for i in written {
                            answers[i] = Some(Ok(true));
                        }
                    }
                }
            }
        }
        // Refused in a group (held, changed, settled), or not sent.
        answered_alone(answers, |i| {
            let e = envelopes[i];
            self.claim(&e.envelope_id, claim, now, change, Some(e.status_history.len()))
        })
        .await
    }

    /// [`EnvelopeStore::finish_many`]: in groups. With a trail, those with an audit record first
    /// linked straight into it ([`DynamoEnvelopeStore::finish_linked`]); then the others, each
    /// envelope's update with its outbox record, the PENDING counter moved once per group for
    /// those released. Refused in a group means the claim was lost.
    pub(super) async fn finish_group(&self, replay_id: &str, settlements: &[Finish<'_>]) -> Vec<FlowResult<Settled>> {
        let mut answers: Vec<Option<FlowResult<Settled>>> = vec![None; settlements.len()];
        let valid = settlements
            .iter()
            .all(|f| check_transition(EnvelopeStatus::Replaying, f.change.status).is_ok());
        if valid {
            if let Some(trail) = &self.trail {
                self.finish_linked(trail, replay_id, settlements, &mut answers).await;
            }
            let rest: Vec<usize> = (0..settlements.len()).filter(|&i| answers[i].is_none()).collect();
            for rest in totals::by_key(&rest, |i| released_key(&settlements[i])) {
                let costs: Vec<(usize, usize)> = rest
                    .iter()
                    .map(|&i| {
                        let f = &settlements[i];
                        let audit = f.audit.map_or(0, estimated_size);
                        (
                            1 + usize::from(f.audit.is_some()),
                            estimated_size(f.envelope) + settles(f) + audit,
                        )
                    })
                    .collect();
                for group in groups(&costs, TRANSACT_ITEMS - 2, TRANSACT_BYTES) {
                    let build = |members: &[usize]| {
                        let (mut items, mut owners) = (Vec::new(), Vec::new());
                        for (p, &i) in members.iter().enumerate() {
                            let f = &settlements[i];
                            items.push(self.settle_item(replay_id, f)?);
                            owners.push(Owner::Envelope(p));
                            if let Some(r) = f.audit {
                                items.push(outbox_put(&self.table, r)?);
                                owners.push(Owner::Other);
                            }
                        }
                        self.released_delta(members.iter().map(|&i| &settlements[i]), &mut items, &mut owners)?;
                        Ok((items, owners))
                    };
                    let (written, refused, _) = send_rounds(self, rest[group].to_vec(), build).await;
                    for i in written {
                        answers[i] = Some(Ok(Settled::InOutbox));
                    }
                    for i in refused {
                        answers[i] = Some(Ok(Settled::ClaimLost));
                    }
                }
            }
        }
        answered_alone(answers, |i| {
            let f = &settlements[i];
            let settled = self.finish(&f.envelope.envelope_id, replay_id, f.change, f.record, f.audit);
            async move { settled.await.map(Settled::in_outbox) }
        })
        .await
    }

    /// The settlements with an audit record, each envelope's update with its record linked into
    /// `trail` (onto the chains' heads as read just before; the heads moved in the same
    /// transaction), in groups. A group whose transaction is refused because a head moved is
    /// linked again from the heads as they are then, a few rounds; what no round wrote is left
    /// unanswered, for the outbox.
    async fn finish_linked(
        &self,
        trail: &crate::dynamodb::DynamoAuditLog,
        replay_id: &str,
        settlements: &[Finish<'_>],
        answers: &mut [Option<FlowResult<Settled>>],
    ) {
        let linked: Vec<(usize, &AuditRecord)> = settlements
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.audit.map(|r| (i, r)))
            // The audit table's own items start with '#'; no record id does (`append` refuses one).
            .filter(|(_, r)| !r.audit_id.starts_with('#'))
            .collect();
        let costs: Vec<(usize, usize)> = linked
            .iter()
            .map(|&(i, r)| {
                let f = &settlements[i];
                (2, estimated_size(f.envelope) + settles(f) + estimated_size(r))
            })
            .collect();
        // Each group leaves room for its chain's head, the PENDING counter and the totals; a
        // group moves one totals item.
        let room = TRANSACT_ITEMS - 3;
        let all: Vec<usize> = (0..linked.len()).collect();
        for run in totals::by_key(&all, |k| released_key(&settlements[linked[k].0])) {
            let costs: Vec<(usize, usize)> = run.iter().map(|&k| costs[k]).collect();
            for group in groups(&costs, room, TRANSACT_BYTES) {
                let mut left: Vec<usize> = run[group].to_vec();
                for round in 0..LINK_ROUNDS {
                    if left.is_empty() {
                        break;
                    }
                    let records: Vec<&AuditRecord> = left.iter().map(|&k| linked[k].1).collect();
                    let Ok(Links { puts, heads, chain, to }) = trail.links(&records).await else {
                        break;
                    };
                    let built = (|| {
                        let (mut items, mut owners) = (Vec::new(), Vec::new());
                        for (p, (&k, (put, _))) in left.iter().zip(&puts).enumerate() {
                            items.push(self.settle_item(replay_id, &settlements[linked[k].0])?);
                            owners.push(Owner::Envelope(p));
                            items.push(put.clone());
                            owners.push(Owner::Link);
                        }
                        owners.extend(heads.iter().map(|_| Owner::Link));
                        items.extend(heads);
                        let members = left.iter().map(|&k| &settlements[linked[k].0]);
                        self.released_delta(members, &mut items, &mut owners)?;
                        Ok::<_, StoreError>((items, owners))
                    })();
                    let Ok((items, owners)) = built else {
                        break;
                    };
                    let sent = send_group(self, items, &owners).await;
                    let outcome = match &sent {
                        Sent::Written => Linked::Written,
                        // Moved: a head that moved, or a record already there (head unmoved); the
                        // head is read again either way. Conflicted: another writer on the items.
                        Sent::Conflicted => Linked::HeadMoved,
                        Sent::Moved(_) | Sent::Refused(_) | Sent::Failed => Linked::Unknown,
                    };
                    settle(chain, to, outcome);
                    match sent {
                        Sent::Written => {
                            for (&k, (_, seq)) in left.iter().zip(&puts) {
                                answers[linked[k].0] = Some(Ok(Settled::InTrail(*seq)));
                            }
                            left.clear();
                        }
                        Sent::Refused(positions) | Sent::Moved(positions) => {
                            for &p in &positions {
                                answers[linked[left[p]].0] = Some(Ok(Settled::ClaimLost));
                            }
                            left = without(&left, &positions);
                        }
                        // Another writer of the chain: link onto another one.
                        Sent::Conflicted => tokio::time::sleep(conflict_wait(round)).await,
                        Sent::Failed => break,
                    }
                }
            }
        }
    }

    /// A settlement's update of its envelope, as a transaction item.
    fn settle_item(&self, replay_id: &str, f: &Finish<'_>) -> StoreResult<TransactWriteItem> {
        finish_update(&self.table, &f.envelope.envelope_id, replay_id, f.change, f.record)
    }

    /// The PENDING counter moved for those of `settled` released back to PENDING, if any.
    fn released_delta<'f>(
        &self,
        settled: impl Iterator<Item = &'f Finish<'f>>,
        items: &mut Vec<TransactWriteItem>,
        owners: &mut Vec<Owner>,
    ) -> StoreResult<()> {
        let released: Vec<&DlqEnvelope> = settled
            .filter(|f| f.change.status == EnvelopeStatus::Pending)
            .map(|f| f.envelope)
            .collect();
        if !released.is_empty() {
            items.push(pending_delta(
                &self.table,
                i64::try_from(released.len()).unwrap_or(i64::MAX),
            )?);
            items.extend(totals_moved(&self.table, released, 1)?);
            owners.resize(items.len(), Owner::Other);
        }
        Ok(())
    }
}

/// The totals key a settlement moves: its envelope's, when it is released back to PENDING.
fn released_key(f: &Finish<'_>) -> Option<recon_core::decisions::totals::TotalsKey> {
    (f.change.status == EnvelopeStatus::Pending).then(|| Contribution::of(f.envelope).key)
}

/// What a settlement adds to its envelope.
fn settles(f: &Finish<'_>) -> usize {
    json_size(f.change) + json_size(f.record)
}
