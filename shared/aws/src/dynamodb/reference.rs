//! Reference data in one small table: `CURRENCY`/code and `PERIOD#<entity>`/`YYYY-MM` items.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use recon_core::domain::approval::ApprovalPolicy;
use recon_core::domain::{CurrencyMapping, PeriodRecord, PeriodStatus, ReferenceSnapshot};
use recon_core::ports::{ReferenceData, StoreResult};
use recon_core::resources::keys;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{applied, scan_all};
use crate::error::store_error;
use crate::item::{get_n, get_s};

const CURRENCY_PK: &str = keys::REFERENCE_CURRENCY_PK;
const PERIOD_PK_PREFIX: &str = keys::REFERENCE_PERIOD_PK_PREFIX;
/// The planned close of an open period (YYYY-MM-DD).
const CLOSES_ON: &str = "closes_on";

/// Reference data in one small table, read whole into a snapshot that is cached for `ttl`
/// (so the hot path costs no request). A period close therefore takes effect within `ttl`.
pub struct DynamoReferenceData {
    client: Client,
    table: String,
    ttl: Duration,
    cache: tokio::sync::Mutex<Option<(Instant, Arc<ReferenceSnapshot>)>>,
}

impl DynamoReferenceData {
    pub fn new(client: Client, table: impl Into<String>, ttl: Duration) -> Self {
        DynamoReferenceData {
            client,
            table: table.into(),
            ttl,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    /// Read the whole table (no cache).
    pub async fn load(&self) -> StoreResult<(Vec<CurrencyMapping>, Vec<PeriodRecord>)> {
        let (currencies, periods, _) = self.load_all().await?;
        Ok((currencies, periods))
    }

    /// The approval policy as stored (the default when none is).
    pub async fn approval_policy(&self) -> StoreResult<ApprovalPolicy> {
        Ok(self.load_all().await?.2)
    }

    /// The cached snapshot when younger than `age`, else the table read again (and cached).
    async fn younger_than(&self, age: Duration) -> StoreResult<Arc<ReferenceSnapshot>> {
        let mut cache = self.cache.lock().await;
        if let Some((at, snap)) = cache.as_ref()
            && at.elapsed() < age
        {
            return Ok(snap.clone());
        }
        let (currencies, periods, policy) = self.load_all().await?;
        let snap = Arc::new(ReferenceSnapshot::new(currencies, periods).with_approval(policy));
        *cache = Some((Instant::now(), snap.clone()));
        Ok(snap)
    }

    async fn load_all(&self) -> StoreResult<(Vec<CurrencyMapping>, Vec<PeriodRecord>, ApprovalPolicy)> {
        let mut currencies = Vec::new();
        let mut periods = Vec::new();
        let mut policy = ApprovalPolicy::default();
        for item in scan_all(&self.client, &self.table, None).await? {
            let (Some(pk), Some(sk)) = (get_s(&item, keys::REFERENCE_PK), get_s(&item, keys::REFERENCE_SK)) else {
                continue;
            };
            if pk == keys::REFERENCE_POLICY_PK && sk == keys::REFERENCE_APPROVAL_SK {
                policy = read_policy(get_s(&item, keys::REFERENCE_POLICY_ATTR));
            } else if pk == CURRENCY_PK {
                if let Some(minor_units) = get_n(&item, "minor_units") {
                    currencies.push(CurrencyMapping {
                        code: sk.to_owned(),
                        minor_units,
                        description: get_s(&item, "description").unwrap_or_default().to_owned(),
                    });
                }
            } else if let Some(entity) = pk.strip_prefix(PERIOD_PK_PREFIX)
                && let Some(status) = get_s(&item, "status").and_then(|s| s.parse::<PeriodStatus>().ok())
            {
                periods.push(PeriodRecord {
                    entity: entity.to_owned(),
                    period: sk.to_owned(),
                    status,
                    // A date that does not parse is no planned close (it cannot be acted on).
                    closes_on: get_s(&item, CLOSES_ON).and_then(|d| d.parse().ok()),
                });
            }
        }
        Ok((currencies, periods, policy))
    }

    /// Forget the cached snapshot (after a write through this adapter).
    pub async fn invalidate(&self) {
        *self.cache.lock().await = None;
    }
}

/// A stored policy that cannot be read fails closed: every remediation then needs approval.
fn read_policy(text: Option<&str>) -> ApprovalPolicy {
    let parsed = text
        .ok_or_else(|| "no policy attribute".to_owned())
        .and_then(|t| serde_json::from_str::<ApprovalPolicy>(t).map_err(|e| e.to_string()))
        .and_then(|p| p.check().map(|()| p));
    parsed.unwrap_or_else(|why| {
        tracing::error!(error = %why, "the stored approval policy cannot be read; every remediation needs approval until it is set again");
        ApprovalPolicy {
            max_count: Some(0),
            ..ApprovalPolicy::default()
        }
    })
}

impl ReferenceData for DynamoReferenceData {
    async fn snapshot(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        self.younger_than(self.ttl).await
    }

    async fn refresh(&self) -> StoreResult<Arc<ReferenceSnapshot>> {
        // At most one reload a second, however many messages fail on reference data at once.
        self.younger_than(Duration::from_secs(1)).await
    }

    async fn put_currency(&self, m: &CurrencyMapping) -> StoreResult<()> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item(keys::REFERENCE_PK, AttributeValue::S(CURRENCY_PK.into()))
            .item(keys::REFERENCE_SK, AttributeValue::S(m.code.clone()))
            .item("minor_units", AttributeValue::N(m.minor_units.to_string()))
            .item("description", AttributeValue::S(m.description.clone()))
            .send()
            .await
            .map_err(|e| store_error("PutItem(reference currency)", e))?;
        self.invalidate().await;
        Ok(())
    }

    async fn put_period(&self, p: &PeriodRecord) -> StoreResult<()> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(
                keys::REFERENCE_PK,
                AttributeValue::S(format!("{PERIOD_PK_PREFIX}{}", p.entity)),
            )
            .item(keys::REFERENCE_SK, AttributeValue::S(p.period.clone()))
            .item("status", AttributeValue::S(p.status.as_str().into()));
        // A planned close is written only over an open (or unrecorded) period: never reopening
        // one closed since the caller looked.
        let put = match p.closes_on {
            Some(d) => put
                .item(CLOSES_ON, AttributeValue::S(d.to_string()))
                .condition_expression("attribute_not_exists(#st) OR #st <> :closed")
                .expression_attribute_names("#st", "status")
                .expression_attribute_values(":closed", AttributeValue::S(PeriodStatus::Closed.as_str().into())),
            None => put,
        };
        if !applied(put.send().await, "PutItem(reference period)")? {
            return Err(closed_meanwhile(p));
        }
        self.invalidate().await;
        Ok(())
    }

    async fn put_approval_policy(&self, policy: &ApprovalPolicy) -> StoreResult<()> {
        let text = serde_json::to_string(policy).map_err(|e| crate::dynamodb::item_error("approval policy", e))?;
        self.client
            .put_item()
            .table_name(&self.table)
            .item(keys::REFERENCE_PK, AttributeValue::S(keys::REFERENCE_POLICY_PK.into()))
            .item(
                keys::REFERENCE_SK,
                AttributeValue::S(keys::REFERENCE_APPROVAL_SK.into()),
            )
            .item(keys::REFERENCE_POLICY_ATTR, AttributeValue::S(text))
            .send()
            .await
            .map_err(|e| store_error("PutItem(approval policy)", e))?;
        self.invalidate().await;
        Ok(())
    }
}

/// A planned close refused: the period is closed.
pub fn closed_meanwhile(p: &PeriodRecord) -> recon_core::ports::StoreError {
    recon_core::ports::StoreError::new(
        recon_core::domain::TransientKind::Conflict,
        format!(
            "{} of {} is closed: a closed period has no planned close (`dlqctl period open` first)",
            p.period, p.entity
        ),
    )
}
