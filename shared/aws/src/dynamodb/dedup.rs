//! The dedup table of the reserve -> post -> commit protocol (`recon_core::reservation`).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use recon_core::domain::{CommittedRef, TransientKind};
use recon_core::ports::{DedupTable, ReserveOutcome, StoreError, StoreResult};
use recon_core::resources::keys;

use super::{HAND_OFF_BY, applied, committed_ref, n, s};
use crate::error::{SdkError, store_error};
use crate::item::{Item, get_n, get_s};

#[derive(Clone, Debug)]
pub struct DynamoDedupTable {
    client: Client,
    table: String,
}

const CLAIMED: &str = "CLAIMED";
const COMMITTED: &str = "COMMITTED";
/// Free again: its reservation was released with a definite answer (nothing applied).
const RELEASED: &str = "RELEASED";
/// When the key was first reserved (epoch ms), kept across takeovers.
const FIRST_CLAIMED_AT: &str = "first_claimed_at";

impl DynamoDedupTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDedupTable {
            client,
            table: table.into(),
        }
    }

    /// Every transaction handed to a manual journal (a scan: the general ledger knows nothing of
    /// them, this table is where they are).
    pub async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        Ok(super::scan_all(&self.client, &self.table, None)
            .await?
            .iter()
            .filter(|i| get_s(i, "state") == Some(COMMITTED) && i.contains_key(HAND_OFF_BY))
            .map(committed_ref)
            .collect())
    }

    /// An update of `source_hash`'s item, made only while `owner` holds its claim (it names
    /// `#state`, `#owner`, `#lease`, `:claimed` and `:owner`).
    fn owned(&self, source_hash: &str, owner: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(keys::DEDUP_PK, s(source_hash))
            .condition_expression("#state = :claimed AND #owner = :owner")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#lease", "lease_until")
            .expression_attribute_values(":claimed", s(CLAIMED))
            .expression_attribute_values(":owner", s(owner))
    }
}

/// A time stored as epoch milliseconds.
fn millis(item: &Item, name: &str) -> Option<DateTime<Utc>> {
    get_n(item, name).and_then(DateTime::<Utc>::from_timestamp_millis)
}

fn claim_outcome_from(item: &Item) -> ReserveOutcome {
    if get_s(item, "state") == Some(COMMITTED) {
        return ReserveOutcome::AlreadyCommitted(committed_ref(item));
    }
    let lease_until = millis(item, "lease_until").unwrap_or_default();
    ReserveOutcome::HeldElsewhere {
        owner: get_s(item, "owner").unwrap_or_default().to_owned(),
        lease_until,
    }
}

impl DedupTable for DynamoDedupTable {
    /// A conditional update (not a put): the key's first reservation time stays across takeovers,
    /// and the item it replaced comes back (`ALL_OLD`), so a takeover knows it is one.
    async fn reserve(
        &self,
        source_hash: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<ReserveOutcome> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(keys::DEDUP_PK, s(source_hash))
            .update_expression(
                "SET #state = :claimed, #owner = :owner, #lease = :lease, #ttl = :ttl, #first = if_not_exists(#first, :now)",
            )
            .condition_expression(
                "attribute_not_exists(#pk) OR #state = :released OR (#state = :claimed AND #lease < :now)",
            )
            .expression_attribute_names("#pk", keys::DEDUP_PK)
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#lease", "lease_until")
            .expression_attribute_names("#ttl", keys::DEDUP_TTL)
            .expression_attribute_names("#first", FIRST_CLAIMED_AT)
            .expression_attribute_values(":claimed", s(CLAIMED))
            .expression_attribute_values(":released", s(RELEASED))
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":lease", n(lease_until.timestamp_millis()))
            .expression_attribute_values(":ttl", n(expires_at.timestamp()))
            .expression_attribute_values(":now", n(now.timestamp_millis()))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => Ok(ReserveOutcome::Reserved {
                // Taken over: in doubt since the key was first reserved (an item from before that
                // was kept: since now, later than it can be, so never too early).
                in_doubt_since: out
                    .attributes()
                    .filter(|old| get_s(old, "state") == Some(CLAIMED))
                    .map(|old| millis(old, FIRST_CLAIMED_AT).unwrap_or(now)),
            }),
            Err(SdkError::ServiceError(e)) if e.err().is_conditional_check_failed_exception() => {
                let held = match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(c) => c.item(),
                    _ => None,
                };
                held.map(claim_outcome_from).ok_or_else(|| {
                    StoreError::new(TransientKind::Conflict, "reservation refused without the current item")
                })
            }
            Err(e) => Err(store_error("UpdateItem(dedup reservation)", e)),
        }
    }

    async fn commit(&self, owner: &str, committed: &CommittedRef) -> StoreResult<bool> {
        let at = committed.committed_at.map(|t| t.to_rfc3339()).unwrap_or_default();
        let mut set =
            "SET #state = :committed, sqs_message_id = :sqs, message_id = :mid, committed_at = :at".to_owned();
        if committed.manual_journal.is_some() {
            set.push_str(&format!(", {HAND_OFF_BY} = :mj"));
        }
        let mut request = self
            .owned(&committed.source_hash, owner)
            .update_expression(format!("{set} REMOVE #lease"))
            .expression_attribute_values(":committed", s(COMMITTED))
            .expression_attribute_values(":sqs", s(&committed.sqs_message_id))
            .expression_attribute_values(":mid", s(&committed.message_id))
            .expression_attribute_values(":at", s(at));
        if let Some(envelope) = &committed.manual_journal {
            request = request.expression_attribute_values(":mj", s(envelope));
        }
        applied(request.send().await, "UpdateItem(dedup commit)")
    }

    /// Marks the key released (an update: the roles need no delete), its first reservation
    /// forgotten: the next reservation is a fresh one, in no doubt.
    async fn release(&self, source_hash: &str, owner: &str) -> StoreResult<()> {
        let result = self
            .owned(source_hash, owner)
            .update_expression("SET #state = :released REMOVE #owner, #lease, #first")
            .expression_attribute_names("#first", FIRST_CLAIMED_AT)
            .expression_attribute_values(":released", s(RELEASED))
            .send()
            .await;
        applied(result, "UpdateItem(dedup release)").map(drop)
    }

    async fn leave_in_doubt(&self, source_hash: &str, owner: &str, now: DateTime<Utc>) -> StoreResult<()> {
        let result = self
            .owned(source_hash, owner)
            .update_expression("SET #lease = :ended")
            .expression_attribute_values(":ended", n(now.timestamp_millis() - 1))
            .send()
            .await;
        applied(result, "UpdateItem(dedup leave in doubt)").map(drop)
    }

    async fn lookup(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        let item = super::get_consistent(&self.client, &self.table, keys::DEDUP_PK, source_hash, "dedup").await?;
        Ok(item
            .as_ref()
            .filter(|i| get_s(i, "state") == Some(COMMITTED))
            .map(committed_ref))
    }
}
