//! DynamoDB transactions (TransactWriteItems): sent again, apart, when cancelled only by a
//! conflict with another transaction, and read for their cancellation reasons.

use aws_sdk_dynamodb::types::TransactWriteItem;
use aws_sdk_dynamodb::types::builders::{PutBuilder, UpdateBuilder};
use recon_core::ports::StoreResult;

use super::item_error;
use crate::error::{SdkError, store_error};

type TransactRequest = aws_sdk_dynamodb::operation::transact_write_items::builders::TransactWriteItemsFluentBuilder;
pub(super) type TransactError =
    SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError, crate::error::HttpResponse>;
type TransactResult =
    Result<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput, TransactError>;

/// Send a transaction; again, several times and apart, when DynamoDB cancelled it only because
/// another transaction held one of its items at the same moment. Every status change also moves
/// the PENDING counter, so concurrent replays meet there; a cancelled transaction wrote nothing,
/// so sending it again is safe (and a conflict no longer costs a whole sweep). The waits grow and
/// are jittered, so that sweeps that met once do not meet again at each retry.
pub(super) async fn transact(req: TransactRequest) -> TransactResult {
    let mut attempt = 0u32;
    loop {
        let result = req.clone().send().await;
        match &result {
            Err(e) if attempt < CONFLICT_RETRIES && conflicted(&cancellation_codes(e)) => {
                tokio::time::sleep(conflict_wait(attempt)).await;
                attempt += 1;
            }
            _ => return result,
        }
    }
}

/// A transaction sent ([`transact`]): `true` when written, `false` when its first item's condition
/// (the envelope's) did not hold.
pub(super) async fn transact_applied(req: TransactRequest, op: &str) -> StoreResult<bool> {
    match transact(req).await {
        Ok(_) => Ok(true),
        Err(e) if first_condition_failed(&e) => Ok(false),
        Err(e) => Err(store_error(op, e)),
    }
}

/// An update as an item of a transaction (`what` names it in an error).
pub(super) fn tx_update(update: UpdateBuilder, what: &str) -> StoreResult<TransactWriteItem> {
    let update = update.build().map_err(|e| item_error(what, e))?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// A put as an item of a transaction (`what` names it in an error).
pub(super) fn tx_put(put: PutBuilder, what: &str) -> StoreResult<TransactWriteItem> {
    let put = put.build().map_err(|e| item_error(what, e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// Times a transaction is sent again after a conflict.
const CONFLICT_RETRIES: u32 = 8;

/// The wait before retry `attempt` (from 0): half of 5 ms doubled each time (at most 160 ms), and a
/// random part up to the other half.
pub(super) fn conflict_wait(attempt: u32) -> std::time::Duration {
    let ceiling = 5u64 << attempt.min(5);
    // Jitter from the clock's nanoseconds: no two invocations read the same ones.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    std::time::Duration::from_millis(ceiling / 2 + nanos % (ceiling / 2 + 1))
}

/// The cancellation reasons of a cancelled transaction, item by item.
pub(super) fn cancellation_codes<R>(
    err: &SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError, R>,
) -> Vec<Option<String>> {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(t)) => t
            .cancellation_reasons()
            .iter()
            .map(|r| r.code().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// Cancelled for a conflict with another transaction, and for nothing else (a condition that
/// failed is an answer, not a conflict).
pub(super) fn conflicted(codes: &[Option<String>]) -> bool {
    let is = |code: &str| codes.iter().any(|c| c.as_deref() == Some(code));
    is("TransactionConflict") && !is("ConditionalCheckFailed")
}

/// Did a transaction fail because its first condition (the envelope's) did not hold?
pub(super) fn first_condition_failed<R>(
    err: &SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError, R>,
) -> bool {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(t)) => t
            .cancellation_reasons()
            .first()
            .and_then(|r| r.code())
            .is_some_and(|c| c == "ConditionalCheckFailed"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{CONFLICT_RETRIES, conflict_wait, conflicted};

    #[test]
    fn conflict_waits_grow_and_stay_bounded() {
        for attempt in 0..CONFLICT_RETRIES {
            let ceiling = 5u128 << attempt.min(5);
            let wait = conflict_wait(attempt).as_millis();
            assert!(wait >= ceiling / 2 && wait <= ceiling, "attempt {attempt}: {wait} ms");
        }
    }

    #[test]
    fn only_a_conflict_and_nothing_else_is_sent_again() {
        let codes = |c: &[Option<&str>]| c.iter().map(|x| x.map(str::to_owned)).collect::<Vec<_>>();
        assert!(conflicted(&codes(&[Some("None"), Some("TransactionConflict")])));
        assert!(!conflicted(&codes(&[
            Some("ConditionalCheckFailed"),
            Some("TransactionConflict")
        ])));
        assert!(!conflicted(&codes(&[Some("ConditionalCheckFailed"), Some("None")])));
        assert!(!conflicted(&codes(&[])));
    }
}
