//! Write units as DynamoDB charges them, for the benchmarks: a client interceptor that asks every
//! write (`PutItem`, `UpdateItem`, `DeleteItem`, `TransactWriteItems`) for its consumed capacity
//! and adds up what DynamoDB reports. A write refused by its condition reports nothing, but AWS
//! still charges it (at least one unit), so each such refusal counts one unit. The Python
//! peer of `make bench-e2e` counts the same way (boto3 event hooks), so the figures compare.

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::delete_item::{DeleteItemError, DeleteItemInput, DeleteItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemInput, PutItemOutput};
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsInput, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemInput, UpdateItemOutput};
use aws_sdk_dynamodb::types::{ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Write units consumed by the writes of the clients it meters (thousandths, summed atomically).
#[derive(Debug, Default)]
pub struct WriteUnits {
    milli: AtomicU64,
    refused: AtomicU64,
    /// Thousandths of a unit per operation and table.
    by: Mutex<BTreeMap<String, u64>>,
}

impl WriteUnits {
    /// Units reported by DynamoDB, plus one per conditional write refused.
    pub fn total(&self) -> f64 {
        (self.milli.load(Ordering::Relaxed) + 1000 * self.refused.load(Ordering::Relaxed)) as f64 / 1000.0
    }
    /// Conditional writes refused (each counted as one unit in [`WriteUnits::total`]).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
    /// Units per operation and table (`PutItem <table>`), refusals included.
    pub fn breakdown(&self) -> BTreeMap<String, f64> {
        let by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        by.iter().map(|(k, v)| (k.clone(), *v as f64 / 1000.0)).collect()
    }
    fn add<'a>(&self, op: &str, c: impl IntoIterator<Item = &'a ConsumedCapacity>) {
        let mut by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        for c in c {
            // Whole thousandths: DynamoDB reports halves at the finest.
            let milli = (c.capacity_units().unwrap_or(0.0) * 1000.0).round() as u64;
            self.milli.fetch_add(milli, Ordering::Relaxed);
            *by.entry(format!("{op} {}", c.table_name().unwrap_or("?"))).or_default() += milli;
        }
    }
    fn refuse(&self, op: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut by = self.by.lock().unwrap_or_else(|p| p.into_inner());
        *by.entry(format!("{op} refused")).or_default() += 1000;
    }
}

/// `client` again, with its writes metered into `units`.
pub fn metered(client: &aws_sdk_dynamodb::Client, units: Arc<WriteUnits>) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(client.config().to_builder().interceptor(Meter(units)).build())
}

#[derive(Debug, Clone)]
struct Meter(Arc<WriteUnits>);

impl Intercept for Meter {
    fn name(&self) -> &'static str {
        "WriteUnits"
    }

    fn modify_before_serialization(
        &self,
        ctx: &mut BeforeSerializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let total = Some(ReturnConsumedCapacity::Total);
        let input = ctx.input_mut();
        if let Some(i) = input.downcast_mut::<PutItemInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<DeleteItemInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<TransactWriteItemsInput>() {
            i.return_consumed_capacity = total;
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        ctx: &AfterDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg.load::<Metadata>().map_or("unknown", Metadata::name);
        match ctx.output_or_error() {
            Ok(out) => {
                if let Some(o) = out.downcast_ref::<PutItemOutput>() {
                    self.0.add(op, o.consumed_capacity());
                } else if let Some(o) = out.downcast_ref::<UpdateItemOutput>() {
                    self.0.add(op, o.consumed_capacity());
                } else if let Some(o) = out.downcast_ref::<DeleteItemOutput>() {
                    self.0.add(op, o.consumed_capacity());
                } else if let Some(o) = out.downcast_ref::<TransactWriteItemsOutput>() {
                    self.0.add(op, o.consumed_capacity());
                }
            }
            Err(e) => {
                let refused = e.as_operation_error().is_some_and(|e| {
                    e.downcast_ref::<PutItemError>()
                        .is_some_and(PutItemError::is_conditional_check_failed_exception)
                        || e.downcast_ref::<UpdateItemError>()
                            .is_some_and(UpdateItemError::is_conditional_check_failed_exception)
                        || e.downcast_ref::<DeleteItemError>()
                            .is_some_and(DeleteItemError::is_conditional_check_failed_exception)
                        || e.downcast_ref::<TransactWriteItemsError>()
                            .is_some_and(TransactWriteItemsError::is_transaction_canceled_exception)
                });
                if refused {
                    self.0.refuse(op);
                }
            }
        }
        Ok(())
    }
}
