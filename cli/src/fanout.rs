//! `dlqctl reconcile --period P --fan-out N`: the period's ledger read as N requests, one segment
//! each, for a ledger one machine reads too slowly: by default asked of the control plane
//! (`reconcile-segment`, which only the auditor role may ask); with `--function` or
//! `--invoke-endpoint`, invocations of that function (`{"reconcile_segment": …}`: the replay
//! function answers it, for whoever may invoke it; `cargo lambda watch` locally). Each invocation is sent this process's links (what makes a posting
//! part of a lineage), so every segment keeps exactly the postings a read here would keep, and
//! returns its segment's read: those postings whole, the rest counted. The reads merge exactly
//! (`LedgerRead::merge`); what the merged read does not meet is looked up here, as a local read
//! of the segments does. At most `at_once` run at a time (the function's reserved concurrency
//! bounds them too: a throttled invocation is retried).

use anyhow::{Context, Result, bail};
use aws_sdk_lambda::config::retry::RetryConfig;
use aws_sdk_lambda::config::timeout::TimeoutConfig;
use aws_sdk_lambda::primitives::Blob;
use futures::{StreamExt, TryStreamExt};
use recon_aws::AwsClients;
use recon_core::domain::Segment;
use recon_core::reconcile::{LedgerRead, Links, SegmentRead};
use recon_core::resources::{REPLAY_TIMEOUT, ResourceNames};
use std::time::Duration;

/// Lambda's largest synchronous request (6 MB), less room for the envelope around the links.
const MAX_REQUEST_BYTES: usize = 6_000_000 - 16_384;

/// Who reads a fan-out's segments, and over how many segments.
#[derive(Clone, Debug)]
pub struct FanOut {
    pub segments: u32,
    /// Requests running at once.
    pub at_once: u32,
    /// The function invoked for each segment (none: the control plane is asked).
    pub function: Option<String>,
    /// The Lambda Invoke API (none: AWS's for the region).
    pub endpoint: Option<String>,
}

/// A Lambda client that waits as long as an invocation may run, and retries a throttled one
/// (the function's reserved concurrency is taken) for a few minutes.
fn client(clients: &AwsClients, endpoint: Option<&str>) -> aws_sdk_lambda::Client {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(10))
        .operation_attempt_timeout(REPLAY_TIMEOUT + Duration::from_secs(30))
        .operation_timeout(4 * REPLAY_TIMEOUT)
        .build();
    let retries = RetryConfig::standard()
        .with_max_attempts(12)
        .with_max_backoff(Duration::from_secs(20));
    let mut b = aws_sdk_lambda::config::Builder::from(&clients.config)
        .timeout_config(timeouts)
        .retry_config(retries);
    if let Some(url) = endpoint {
        b = b.endpoint_url(url);
    }
    aws_sdk_lambda::Client::from_conf(b.build())
}

/// The period's ledger read with `links`, segment by segment by the control plane (or the
/// function), merged.
pub async fn read(
    clients: &AwsClients,
    names: &ResourceNames,
    f: &FanOut,
    period: &str,
    links: &Links,
) -> Result<LedgerRead> {
    let segments = Segment::all_of(f.segments);
    if segments.is_empty() {
        bail!("--fan-out takes 1 to {} segments", Segment::MAX);
    }
    let at_once = usize::try_from(f.at_once.max(1)).unwrap_or(1);
    let reads: Vec<LedgerRead> = match (&f.function, &f.endpoint) {
        (None, None) => {
            let control = crate::control::connect_as_cli(clients, names).await?;
            futures::stream::iter(segments)
                .map(|s| ask(&control, period, s, links))
                .buffer_unordered(at_once)
                .try_collect()
                .await?
        }
        (function, endpoint) => {
            let client = client(clients, endpoint.as_deref());
            let function = function.clone().unwrap_or_else(|| format!("{}-replay", names.prefix));
            futures::stream::iter(segments)
                .map(|s| invoke(&client, &function, period, s, links))
                .buffer_unordered(at_once)
                .try_collect()
                .await?
        }
    };
    let mut read = LedgerRead::default();
    for r in reads {
        read.merge(r);
    }
    Ok(read)
}

/// Segment `s` of `period` read with `links`; refused when the links are larger than `max`, what
/// one request may carry (Lambda's 6 MB, or the control plane's body limit).
fn segment_read(period: &str, s: Segment, links: &Links, max: usize) -> Result<SegmentRead> {
    let request = SegmentRead {
        period: period.to_owned(),
        segment: format!("{}/{}", s.index, s.of),
        links: links.clone(),
    };
    let size = serde_json::to_vec(&request)?.len();
    if size > max {
        bail!(
            "the period's links (what makes a posting part of a lineage) are {size} bytes, above what one request may carry ({max}): reconcile the period in this process (without --fan-out)"
        );
    }
    Ok(request)
}

/// One segment asked of the control plane (as the caller: an auditor).
async fn ask(control: &crate::control::ControlPlane, period: &str, s: Segment, links: &Links) -> Result<LedgerRead> {
    let request = segment_read(period, s, links, recon_core::control::http::MAX_BODY_BYTES)?;
    let segment = request.segment.clone();
    let read = control
        .ask(&recon_core::control::Command::ReconcileSegment(request))
        .await
        .with_context(|| format!("segment {segment} of {period}"))?;
    serde_json::from_value(read).with_context(|| format!("segment {segment}'s answer from the control plane"))
}

async fn invoke(
    client: &aws_sdk_lambda::Client,
    function: &str,
    period: &str,
    s: Segment,
    links: &Links,
) -> Result<LedgerRead> {
    let request = segment_read(period, s, links, MAX_REQUEST_BYTES)?;
    let segment = request.segment.clone();
    let payload = serde_json::to_vec(&serde_json::json!({ "reconcile_segment": request }))?;
    let out = client
        .invoke()
        .function_name(function)
        .payload(Blob::new(payload))
        .send()
        .await
        .with_context(|| format!("invoking {function} for segment {segment} of {period}"))?;
    let body = out.payload().map(|b| b.as_ref().to_vec()).unwrap_or_default();
    if let Some(error) = out.function_error() {
        bail!(
            "{function} failed on segment {segment} of {period} ({error}): {}",
            crate::text::printable(&String::from_utf8_lossy(&body))
        );
    }
    serde_json::from_slice(&body).with_context(|| format!("segment {segment}'s answer from {function}"))
}
