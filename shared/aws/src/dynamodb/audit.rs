//! The audit trail: records linked into hash chains, a head item per chain, the trail's id.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use recon_core::domain::AuditRecord;
use recon_core::domain::TransientKind;
use recon_core::domain::audit::{AUDIT_CHAINS, ChainedRecord, GENESIS};
use recon_core::ports::{AuditLog, ChainPage, StoreError, StoreResult};
use recon_core::resources::keys;

use super::batch::{TRANSACT_BYTES, TRANSACT_ITEMS, estimated_size, groups};
use super::transact::{TransactError, cancellation_codes, tx_put, tx_update};
use super::{applied, item_error, n, s, scan_all};
use crate::error::store_error;
use crate::item::{Item, from_item, get_n, get_s, to_item};

mod page;
mod period;
mod placement;
use placement::{Placement, Taken};

/// The audit trail: one item per record, linked into one of `AUDIT_CHAINS` hash chains, plus one
/// head item per chain. An append writes the record (only if its id is new: idempotent) and moves
/// its chain's head (only if it has not moved: no lost link) in one transaction, from the head as
/// this process left it or as read; when another writer moved the head first, it leaves that chain
/// to the other and tries another ([`placement`]). Chains are independent, so writers settle on
/// chains of their own and never wait on a global lock.
#[derive(Clone, Debug)]
pub struct DynamoAuditLog {
    client: Client,
    table: String,
    placement: Placement,
}

/// The item naming the trail id (a pointer; the trail's identity is its WORM anchor). Not a head
/// key: the roles may put it, and may not put a head.
fn trail_key() -> String {
    "#trail#id".to_owned()
}

/// The item noting the newest seal of a trail a sealer wrote: where the next one starts reading the
/// bucket (a hint: the bucket is the evidence).
fn seal_noted_key(trail: &str) -> String {
    format!("#sealed#{trail}")
}

/// The item holding a function's last recorded configuration.
fn config_key(function: &str) -> String {
    format!("#config#{function}")
}

fn head_id(chain: &str) -> String {
    format!("{}{chain}", keys::AUDIT_HEAD_PREFIX)
}

impl DynamoAuditLog {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoAuditLog {
            client,
            table: table.into(),
            placement: Placement::default(),
        }
    }

    /// Every record (all chains), without the chain bookkeeping.
    pub async fn scan(&self) -> StoreResult<Vec<AuditRecord>> {
        Ok(self.scan_chained().await?.into_iter().map(|c| c.record).collect())
    }

    /// Every record of the chains verification reads (`c0`..`c63`): reconcile, stats and `audit
    /// show` count nothing that verification does not see.
    pub async fn scan_chained(&self) -> StoreResult<Vec<recon_core::domain::audit::ChainedRecord>> {
        Ok(scan_all(&self.client, &self.table, None)
            .await?
            .iter()
            .filter(|i| get_s(i, keys::AUDIT_PK).is_some_and(|id| !id.starts_with('#')))
            .map(chained_from)
            .filter(|c| recon_core::domain::audit::is_chain(&c.chain))
            .collect())
    }

    /// The configuration last recorded for `function`.
    pub async fn config_state(&self, function: &str) -> StoreResult<Option<recon_core::evidence::ConfigState>> {
        let Some(item) = self.item(&config_key(function), "config state").await? else {
            return Ok(None);
        };
        let item = &item;
        // A state that does not read (edited) is a lost state, not no state: the next record
        // still differs from every earlier one.
        Ok(Some(
            get_s(item, "state")
                .and_then(|j| serde_json::from_str(j).ok())
                .unwrap_or_else(|| recon_core::evidence::ConfigState {
                    version: 0,
                    fingerprint: "unreadable".into(),
                    settings: Default::default(),
                }),
        ))
    }

    /// Record `state` as `function`'s configuration, only over the version before it (a cold start
    /// that lost the race leaves the winner's). Returns whether it was written.
    pub async fn put_config_state(
        &self,
        function: &str,
        state: &recon_core::evidence::ConfigState,
    ) -> StoreResult<bool> {
        let json = serde_json::to_string(state).map_err(|e| item_error("config state", e))?;
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(keys::AUDIT_PK, s(config_key(function)))
            .item("version", n(i64::try_from(state.version).unwrap_or(i64::MAX)))
            .item("state", s(json))
            .condition_expression("attribute_not_exists(#id) OR #v = :prev")
            .expression_attribute_names("#id", keys::AUDIT_PK)
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":prev", n(i64::try_from(state.version.saturating_sub(1)).unwrap_or(0)))
            .send()
            .await;
        applied(put, "PutItem(config state)")
    }

    pub(super) async fn item(&self, key: &str, op: &str) -> StoreResult<Option<Item>> {
        super::get_consistent(&self.client, &self.table, keys::AUDIT_PK, key, op).await
    }

    async fn head(&self, chain: &str) -> StoreResult<(u64, String)> {
        Ok(head_of(self.item(&head_id(chain), "audit head").await?.as_ref()))
    }

    /// `records` (distinct ids) linked onto one chain this process takes, from its head as left
    /// or read now: each record's put (only if its id is new) with its `seq`, in order, then the
    /// head's move (only if it has not moved since), for one transaction to write together, with
    /// other items if the caller has any (the envelope store settles envelopes in the same one).
    /// The caller says what came of it with [`settle`].
    pub(crate) async fn links(&self, records: &[&AuditRecord]) -> StoreResult<Links> {
        let mut chain = self.placement.take();
        let (read, read_hash) = match chain.known_head() {
            Some(head) => head,
            None => self.head(chain.chain()).await?,
        };
        let (mut seq, mut hash) = (read, read_hash.clone());
        let mut puts = Vec::with_capacity(records.len());
        for r in records {
            let linked = recon_core::domain::audit::link((*r).clone(), chain.chain(), seq, &hash);
            puts.push((self.record_put(&linked)?, linked.seq));
            (seq, hash) = (linked.seq, linked.hash);
        }
        let heads = vec![self.head_move(chain.chain(), seq, &hash, read, &read_hash)?];
        Ok(Links {
            puts,
            heads,
            chain,
            to: (seq, hash),
        })
    }

    /// Link `records` (distinct ids, at most [`LINK_AT_ONCE`]) in one transaction: each record
    /// only if its id is new, each head moved only if it has not moved since read. `Ok(Ok(seqs))`
    /// when linked; `Ok(Err(None))` when a head moved (read them again); `Ok(Err(Some(recorded)))`
    /// names those already recorded, when any were (nothing was written: link the others again).
    async fn link_at_once(&self, records: &[&AuditRecord]) -> StoreResult<Result<Vec<u64>, Option<BTreeSet<usize>>>> {
        let Links { puts, heads, chain, to } = self.links(records).await?;
        let (mut items, seqs): (Vec<_>, Vec<u64>) = puts.into_iter().unzip();
        items.extend(heads);
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let outcome = match sent {
            Ok(_) => Ok(Ok(seqs)),
            Err(e) => not_linked(e, records.len()).map(Err),
        };
        let settled = match &outcome {
            Ok(Ok(_)) => Linked::Written,
            Ok(Err(None)) => Linked::HeadMoved,
            _ => Linked::Unknown,
        };
        settle(chain, to, settled);
        outcome
    }

    fn record_put(&self, linked: &ChainedRecord) -> StoreResult<TransactWriteItem> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(audit_item(linked)?))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", keys::AUDIT_PK);
        tx_put(put, "audit put")
    }

    /// Move `chain`'s head to `(seq, hash)`, only from `prev` (0: no head yet) with `prev_hash`:
    /// a head this process remembers from a trail since rebuilt under the same name, at the same
    /// `seq` by chance, is not taken for the head there now.
    fn head_move(
        &self,
        chain: &str,
        seq: u64,
        hash: &str,
        prev: u64,
        prev_hash: &str,
    ) -> StoreResult<TransactWriteItem> {
        let update = Update::builder()
            .table_name(&self.table)
            .key(keys::AUDIT_PK, s(head_id(chain)))
            .update_expression("SET #seq = :seq, #hash = :hash")
            .condition_expression(
                "(attribute_not_exists(#id) AND :prev = :zero) OR (#seq = :prev AND #hash = :prev_hash)",
            )
            .expression_attribute_names("#id", keys::AUDIT_PK)
            .expression_attribute_names("#seq", "seq")
            .expression_attribute_names("#hash", "hash")
            .expression_attribute_values(":seq", n(i64::try_from(seq).unwrap_or(i64::MAX)))
            .expression_attribute_values(":hash", s(hash))
            .expression_attribute_values(":prev", n(i64::try_from(prev).unwrap_or(i64::MAX)))
            .expression_attribute_values(":prev_hash", s(prev_hash))
            .expression_attribute_values(":zero", n(0));
        tx_update(update, "audit head")
    }
}

/// How many transactions one append tries (each on a chain no writer was on when it began).
const APPEND_ATTEMPTS: u32 = 50;

/// Records linked in one transaction at most: with their chain's head, its 100 items.
const LINK_AT_ONCE: usize = TRANSACT_ITEMS - 1;

/// Records linked onto a chain's head ([`DynamoAuditLog::links`]): each record's put and the `seq`
/// it takes, in order, then the head's move; written in one transaction, or not at all. The
/// chain is held until [`settle`]d with `to` (the head once written).
pub(crate) struct Links {
    pub(crate) puts: Vec<(TransactWriteItem, u64)>,
    pub(crate) heads: Vec<TransactWriteItem>,
    pub(crate) chain: Taken,
    pub(crate) to: (u64, String),
}

/// What came of the transaction on `chain`: written, it keeps the head it moved to, `to`; a head
/// that had moved leaves the chain to the writer that moved it; anything else has it read again.
pub(crate) fn settle(chain: Taken, to: (u64, String), outcome: Linked) {
    match outcome {
        Linked::Written => chain.written(to),
        Linked::HeadMoved => chain.head_moved(),
        Linked::Unknown => drop(chain),
    }
}

/// What came of a transaction of [`Links`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Linked {
    Written,
    /// The head had moved: another writer is on the chain.
    HeadMoved,
    /// Not written for another reason, or not known: the head is read again next time.
    Unknown,
}

/// A head item's `(seq, hash)`; a chain without one starts at genesis.
fn head_of(item: Option<&Item>) -> (u64, String) {
    let Some(item) = item else {
        return (0, GENESIS.to_owned());
    };
    (
        get_n(item, "seq").unwrap_or(0),
        get_s(item, "hash").unwrap_or(GENESIS).to_owned(),
    )
}

/// Why a transaction linking `records` records (their puts first, then the heads' moves) was not
/// written: `Some` of those already recorded, when any were (nothing was written); `None` when a
/// head moved or another writer met it (read the heads again); any other failure is an error.
fn not_linked(err: TransactError, records: usize) -> StoreResult<Option<BTreeSet<usize>>> {
    let codes = cancellation_codes(&err);
    let failed = |i: usize| codes.get(i).and_then(|c| c.as_deref()) == Some("ConditionalCheckFailed");
    let recorded: BTreeSet<usize> = (0..records).filter(|&i| failed(i)).collect();
    if !recorded.is_empty() {
        return Ok(Some(recorded));
    }
    if (records..codes.len()).any(failed) || codes.iter().flatten().any(|c| c == "TransactionConflict") {
        return Ok(None);
    }
    Err(store_error("TransactWriteItems(audit append)", err))
}

/// Refuses an id of the table's own items (heads, pointers start with '#'; no record id does).
fn record_id(record: &AuditRecord) -> StoreResult<()> {
    if record.audit_id.starts_with('#') {
        return Err(StoreError::infra(format!(
            "audit id {:?} is not a record id",
            record.audit_id
        )));
    }
    Ok(())
}

fn audit_records(items: &[Item]) -> StoreResult<Vec<recon_core::domain::audit::ChainedRecord>> {
    Ok(items.iter().map(chained_from).collect())
}

/// A stored record, or — when an edited field no longer reads as one — its place in the chain and
/// why, so that verification names that record instead of failing as a whole.
fn chained_from(item: &Item) -> recon_core::domain::audit::ChainedRecord {
    from_item(item).unwrap_or_else(|e| {
        recon_core::domain::audit::ChainedRecord::unreadable(
            get_s(item, keys::AUDIT_PK).unwrap_or_default(),
            get_s(item, "chain").unwrap_or_default(),
            get_n(item, "seq").unwrap_or(0),
            get_s(item, "prev_hash").unwrap_or_default(),
            get_s(item, "hash").unwrap_or_default(),
            e.to_string().chars().flat_map(char::escape_default).take(200).collect(),
        )
    })
}

/// Index attributes of a chained record: each index's key on the records it holds only.
fn audit_item(c: &recon_core::domain::audit::ChainedRecord) -> StoreResult<Item> {
    let mut item = to_item(c).map_err(|e| item_error("audit item", e))?;
    item.insert(keys::AUDIT_SEQ_KEY.into(), s(format!("{:012}", c.seq)));
    if period::in_by_source_hash(&c.record) {
        item.insert(
            keys::AUDIT_AT_KEY.into(),
            s(format!(
                "{}#{}",
                c.record.at.format("%Y-%m-%dT%H:%M:%S%.9fZ"),
                c.record.audit_id
            )),
        );
    }
    item.extend(period::period_entry(&c.record));
    Ok(item)
}

impl AuditLog for DynamoAuditLog {
    async fn append(&self, record: &AuditRecord) -> StoreResult<Option<u64>> {
        record_id(record)?;
        for attempt in 0..APPEND_ATTEMPTS {
            match self.link_at_once(&[record]).await? {
                Ok(seqs) => return Ok(seqs.first().copied()),
                Err(Some(_)) => return Ok(None), // this decision is already recorded
                // Another writer moved that chain's head: another chain at once; after a few,
                // a short pause (every chain this process tried is busy).
                Err(None) if attempt >= 8 => {
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt % 8) * 5 + 1)).await;
                }
                Err(None) => {}
            }
        }
        Err(StoreError::new(
            TransientKind::Conflict,
            format!("audit trail too contended: {APPEND_ATTEMPTS} chains tried; append not done"),
        ))
    }

    /// Every record in one transaction per [`LINK_AT_ONCE`] (heads read in one request), instead
    /// of a read and a transaction each; records already recorded are left, a moved head read
    /// again; after three conflicts in a row, or an error that is not one, each record left is
    /// appended on its own.
    async fn append_many(&self, records: &[AuditRecord]) -> StoreResult<Vec<Option<u64>>> {
        records.iter().try_for_each(record_id)?;
        let mut linked = vec![None; records.len()];
        let mut seen = BTreeSet::new();
        // A record twice in the call is appended once (the second is "already recorded").
        let mut todo: Vec<usize> = (0..records.len())
            .filter(|&i| seen.insert(&records[i].audit_id))
            .collect();
        let mut attempt = 0u32;
        while !todo.is_empty() && attempt < 3 {
            // As many as one transaction holds, by count and by size; after a head moved under
            // a group (another writer), half as many each time: a smaller group meets fewer.
            let at_once = (LINK_AT_ONCE >> attempt).max(1);
            let costs: Vec<(usize, usize)> = todo
                .iter()
                .take(at_once)
                .map(|&i| (1, estimated_size(&records[i])))
                .collect();
            let first = groups(&costs, at_once, TRANSACT_BYTES).first().map_or(0, |g| g.end);
            let slice: Vec<usize> = todo.iter().copied().take(first.max(1)).collect();
            let these: Vec<&AuditRecord> = slice.iter().map(|&i| &records[i]).collect();
            let linked_at_once = match self.link_at_once(&these).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    // Not a conflict (a record DynamoDB refuses, a transaction too large): each
                    // on its own below (the caller publishes each on its own if one still fails).
                    tracing::warn!(error = %e, "audit records not linked together; one by one");
                    break;
                }
            };
            match linked_at_once {
                Ok(seqs) => {
                    for (&i, seq) in slice.iter().zip(seqs) {
                        linked[i] = Some(seq);
                    }
                    todo.drain(..slice.len());
                    attempt = 0;
                }
                Err(Some(recorded)) => {
                    let gone: BTreeSet<usize> = recorded.iter().map(|&k| slice[k]).collect();
                    todo.retain(|i| !gone.contains(i));
                }
                Err(None) => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt) * 5 + 1)).await;
                }
            }
        }
        for i in todo {
            linked[i] = self.append(&records[i]).await?;
        }
        Ok(linked)
    }

    async fn chain_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        self.read_page(chain, from_seq, cursor, limit).await
    }

    async fn current_trail(&self) -> StoreResult<Option<String>> {
        let item = self.item(&trail_key(), "audit trail id").await?;
        Ok(item.as_ref().and_then(|i| get_s(i, "trail")).map(str::to_owned))
    }

    async fn start_trail(&self, candidate: &str) -> StoreResult<String> {
        if let Some(id) = self.current_trail().await? {
            return Ok(id);
        }
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(keys::AUDIT_PK, s(trail_key()))
            .item("trail", s(candidate))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", keys::AUDIT_PK)
            .send()
            .await;
        if applied(put, "PutItem(audit trail id)")? {
            return Ok(candidate.to_owned());
        }
        // Someone else started it first: theirs is the trail's id.
        self.current_trail()
            .await?
            .ok_or_else(|| StoreError::new(TransientKind::Conflict, "audit trail id vanished"))
    }

    async fn sealed_up_to(&self, trail: &str) -> StoreResult<Option<u64>> {
        let item = self.item(&seal_noted_key(trail), "audit seal noted").await?;
        Ok(item.as_ref().and_then(|i| get_n(i, "seq")))
    }

    async fn note_seal(&self, trail: &str, seq: u64) -> StoreResult<()> {
        let seq = n(i64::try_from(seq).map_err(|_| StoreError::infra("a seal number beyond i64"))?);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(keys::AUDIT_PK, s(seal_noted_key(trail)))
            .item("seq", seq.clone())
            // Never lowered: a slower sealer that wrote an earlier seal leaves the later one noted.
            .condition_expression("attribute_not_exists(#id) OR #seq < :seq")
            .expression_attribute_names("#id", keys::AUDIT_PK)
            .expression_attribute_names("#seq", "seq")
            .expression_attribute_values(":seq", seq)
            .send()
            .await;
        applied(put, "PutItem(audit seal noted)").map(|_| ())
    }

    /// Every chain's head, read at once (strongly consistent `GetItem`s side by side: the roles
    /// that seal hold `GetItem` on the table, not `BatchGetItem`), in the order of their names.
    async fn heads(&self) -> StoreResult<Vec<recon_core::domain::audit::ChainHead>> {
        let mut chains: Vec<String> = (0..AUDIT_CHAINS).map(|i| format!("c{i}")).collect();
        chains.sort();
        let read = futures::future::try_join_all(chains.iter().map(|c| self.head(c))).await?;
        Ok(chains
            .into_iter()
            .zip(read)
            .filter(|(_, (seq, _))| *seq > 0)
            .map(|(chain, (seq, hash))| recon_core::domain::audit::ChainHead { chain, seq, hash })
            .collect())
    }
}
