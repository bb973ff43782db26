//! SDK errors as the ports report them: a [`StoreError`] whose kind says how transient it is
//! (throttled, conflict, timeout, unavailable, network) and whose detail names the operation and,
//! for a missing resource, how to create it.

use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use recon_core::domain::TransientKind;
use recon_core::ports::StoreError;

pub use aws_smithy_runtime_api::client::result::SdkError;
pub type HttpResponse = aws_smithy_runtime_api::client::orchestrator::HttpResponse;

/// Classify an AWS error code (and HTTP status) into a transient kind.
pub fn classify_code(code: Option<&str>, status: u16) -> TransientKind {
    match code.unwrap_or("") {
        "ThrottlingException"
        | "Throttling"
        | "ProvisionedThroughputExceededException"
        | "RequestLimitExceeded"
        | "RequestThrottled"
        | "SlowDown"
        | "AWS.SimpleQueueService.RequestThrottled" => TransientKind::Throttled,
        "TransactionConflictException" | "TransactionInProgressException" => TransientKind::Conflict,
        "RequestTimeout" | "RequestTimeoutException" => TransientKind::Timeout,
        "InternalServerError" | "InternalFailure" | "ServiceUnavailable" | "InternalError" => {
            TransientKind::ServiceUnavailable
        }
        _ if status == 429 => TransientKind::Throttled,
        _ if status >= 500 => TransientKind::ServiceUnavailable,
        _ => TransientKind::Infrastructure,
    }
}

/// Turn any SDK error into a [`StoreError`], naming the operation.
pub fn store_error<E>(op: &str, err: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let kind = match &err {
        SdkError::TimeoutError(_) => TransientKind::Timeout,
        SdkError::DispatchFailure(d) if d.is_timeout() => TransientKind::Timeout,
        SdkError::DispatchFailure(_) => TransientKind::Network,
        SdkError::ResponseError(_) => TransientKind::ServiceUnavailable,
        SdkError::ServiceError(s) => classify_code(s.err().code(), s.raw().status().as_u16()),
        _ => TransientKind::Infrastructure,
    };
    let detail = match &err {
        // The service's own code and message say it best; the raw response adds only noise.
        SdkError::ServiceError(s) => {
            let code = s.err().code().unwrap_or("ServiceError");
            let hint = match code {
                "ResourceNotFoundException"
                | "AWS.SimpleQueueService.NonExistentQueue"
                | "QueueDoesNotExist"
                | "NoSuchBucket" => {
                    " (does the resource exist? is the stack deployed, or for the local stack `make local-up`?)"
                }
                _ => "",
            };
            format!("{op}: {code}: {}{hint}", s.err().message().unwrap_or(""))
        }
        // Connection problems: the whole chain names the endpoint and the cause.
        _ => format!("{op}: {}", DisplayErrorContext(&err)),
    };
    StoreError::new(kind, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_error_codes_classify_as_transient_kinds() {
        assert_eq!(
            classify_code(Some("ProvisionedThroughputExceededException"), 400),
            TransientKind::Throttled
        );
        assert_eq!(
            classify_code(Some("TransactionConflictException"), 400),
            TransientKind::Conflict
        );
        assert_eq!(
            classify_code(Some("InternalServerError"), 500),
            TransientKind::ServiceUnavailable
        );
        assert_eq!(classify_code(None, 503), TransientKind::ServiceUnavailable);
        assert_eq!(classify_code(None, 429), TransientKind::Throttled);
        assert_eq!(
            classify_code(Some("ResourceNotFoundException"), 400),
            TransientKind::Infrastructure
        );
    }
}
