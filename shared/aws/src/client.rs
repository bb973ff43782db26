//! Client setup: the three SDK clients pointed at AWS or at the local emulators, with request
//! counting (what the demo and the benchmarks report per committed message).

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::timeout::TimeoutConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the AWS clients send their requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The real AWS, configured by the standard AWS environment (profile, region, credentials).
    Aws,
    /// The local emulators: LocalStack for SQS/S3/..., DynamoDB Local for DynamoDB.
    Local { edge_url: String, dynamodb_url: String },
}

impl Target {
    /// The local stack, at the ports `infra/local/stack.sh` uses (`LOCALSTACK_PORT`,
    /// `DYNAMODB_PORT`), unless `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_DYNAMODB` say otherwise.
    pub fn local_from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let edge_url = var("AWS_ENDPOINT_URL").unwrap_or_else(|| {
            format!(
                "http://127.0.0.1:{}",
                var("LOCALSTACK_PORT").unwrap_or_else(|| "4566".into())
            )
        });
        let dynamodb_url = var("AWS_ENDPOINT_URL_DYNAMODB").unwrap_or_else(|| {
            format!(
                "http://127.0.0.1:{}",
                var("DYNAMODB_PORT").unwrap_or_else(|| "8000".into())
            )
        });
        Target::Local { edge_url, dynamodb_url }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, Target::Local { .. })
    }
}

/// Counts the requests each client sends, by `service:operation` (every attempt, retries
/// included): how the demo and the benchmark report requests per committed message.
#[derive(Debug, Default)]
pub struct RequestCounter {
    counts: Mutex<BTreeMap<String, u64>>,
    /// S3 requests sent without `ExpectedBucketOwner` (the tests check there are none).
    unowned: Mutex<BTreeMap<String, u64>>,
    /// Each operation with each resource it named (what the least-privilege test holds to the
    /// template's grants), once [`RequestCounter::record_targets`] asked for it: reading them
    /// parses every request's body, which no function should pay for.
    targets: Mutex<BTreeSet<(String, String)>>,
    recording: std::sync::atomic::AtomicBool,
}

impl RequestCounter {
    /// S3 operations sent without an expected bucket owner, with their counts.
    pub fn s3_without_expected_owner(&self) -> BTreeMap<String, u64> {
        self.unowned.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// From now on, record the resources each request names ([`RequestCounter::targets`]).
    pub fn record_targets(&self) {
        self.recording.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every `(service:operation, resource name)` sent since [`RequestCounter::record_targets`]:
    /// a table, a queue, a bucket (path-style addressing, as the local stack's clients use), a
    /// secret.
    pub fn targets(&self) -> BTreeSet<(String, String)> {
        self.targets.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// Requests sent to `service` (case-insensitive, e.g. `dynamodb`).
    pub fn total(&self, service: &str) -> u64 {
        let prefix = format!("{}:", service.to_ascii_lowercase());
        self.snapshot()
            .iter()
            .filter(|(k, _)| k.to_ascii_lowercase().starts_with(&prefix))
            .map(|(_, v)| v)
            .sum()
    }
}

#[derive(Debug, Clone)]
struct CountRequests(Arc<RequestCounter>);

impl Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "CountRequests"
    }
    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let mut key = cfg.load::<Metadata>().map_or_else(
            || "unknown:unknown".to_owned(),
            |m| format!("{}:{}", m.service(), m.name()),
        );
        // A read of one version is another IAM action (s3:GetObjectVersion) than a plain read.
        if key == "S3:GetObject" && ctx.request().uri().contains("versionId=") {
            key = "S3:GetObjectVersion".to_owned();
        }
        // CreateBucket and ListBuckets name no existing bucket, so they take no owner. A
        // presigned request is not sent: it is an address handed to someone (as this role may
        // read, so it counts among the role's requests), who cannot send the owner's header.
        let presigned = ctx.request().uri().contains("X-Amz-Signature=");
        if key.starts_with("S3:")
            && !presigned
            && !matches!(key.as_str(), "S3:CreateBucket" | "S3:ListBuckets")
            && ctx.request().headers().get("x-amz-expected-bucket-owner").is_none()
        {
            *self
                .0
                .unowned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key.clone())
                .or_default() += 1;
        }
        if self.0.recording.load(std::sync::atomic::Ordering::Relaxed) {
            let named = named_resources(&key, ctx.request());
            self.0
                .targets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(named.into_iter().map(|r| (key.clone(), r)));
        }
        *self
            .0
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default() += 1;
        Ok(())
    }
}

/// The resources a request names: an S3 bucket (the path's first segment; `bucket/*` when the
/// request names an object in it), or from a JSON body the tables (`TableName`, `RequestItems`;
/// `table/index/NAME` for a query of an index), the queue (`QueueUrl`'s last segment), the secret
/// or the KMS key.
fn named_resources(key: &str, request: &aws_smithy_runtime_api::http::Request) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("TableName", serde_json::Value::String(s)) => match map.get("IndexName") {
                            Some(serde_json::Value::String(index)) => out.push(format!("{s}/index/{index}")),
                            _ => out.push(s.clone()),
                        },
                        ("SecretId" | "KeyId", serde_json::Value::String(s)) => out.push(s.clone()),
                        ("QueueUrl", serde_json::Value::String(s)) => {
                            out.extend(s.rsplit('/').next().map(str::to_owned))
                        }
                        ("RequestItems", serde_json::Value::Object(tables)) => out.extend(tables.keys().cloned()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if key.starts_with("S3:") {
        let path = request.uri().split("://").nth(1).and_then(|rest| rest.split_once('/'));
        let path = path.map_or("", |(_, p)| p.split('?').next().unwrap_or_default());
        match path.split_once('/') {
            Some((bucket, key)) if !key.is_empty() => out.push(format!("{bucket}/*")),
            _ => out.extend((!path.is_empty()).then(|| path.trim_end_matches('/').to_owned())),
        }
    } else if let Some(body) = request.body().bytes()
        && let Ok(json) = serde_json::from_slice::<serde_json::Value>(body)
    {
        walk(&json, &mut out);
    }
    out
}

/// The three clients, configured for one target.
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub sqs: aws_sdk_sqs::Client,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub s3: aws_sdk_s3::Client,
    pub requests: Arc<RequestCounter>,
    pub target: Target,
    /// What every client is built from (for the clients only some commands need).
    pub config: aws_config::SdkConfig,
    pub timeouts: ClientTimeouts,
}

/// How long a request may take: its connection, one attempt, and the whole operation with the
/// SDK's retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientTimeouts {
    pub connect: Duration,
    pub attempt: Duration,
    pub operation: Duration,
}

impl ClientTimeouts {
    /// For a command at a terminal (`dlqctl`, the tests): patient.
    pub const INTERACTIVE: ClientTimeouts = ClientTimeouts {
        connect: Duration::from_secs(3),
        attempt: Duration::from_secs(30),
        operation: Duration::from_secs(60),
    };

    /// For a function of `timeout` that starts no new work in its last `margin`: a whole
    /// operation takes at most a third of the time left (and at most a minute), one attempt a
    /// third of that — so one stalled call cannot spend the invocation, and with it every
    /// message's receive.
    pub fn within(timeout: Duration, margin: Duration) -> Self {
        let left = timeout.saturating_sub(margin);
        let operation = (left / 3).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let attempt = (operation / 3).max(Duration::from_millis(500));
        ClientTimeouts {
            connect: attempt.min(Duration::from_secs(3)),
            attempt,
            operation,
        }
    }
}

impl AwsClients {
    /// Build clients for `target` with patient timeouts (see [`AwsClients::connect_with`]).
    pub async fn connect(target: Target) -> Self {
        AwsClients::connect_with(target, ClientTimeouts::INTERACTIVE).await
    }

    /// Build clients for `target`. Against the local stack, region and credentials default to
    /// `us-east-1` and dummy keys when the environment sets none.
    pub async fn connect_with(target: Target, t: ClientTimeouts) -> Self {
        let shared = shared_config(&target, t).await;
        AwsClients::from_config(target, shared, t)
    }

    /// The same clients acting with `credentials` (another identity's).
    pub fn with_credentials(&self, credentials: aws_sdk_dynamodb::config::Credentials) -> Self {
        let shared = self
            .config
            .to_builder()
            .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(credentials))
            .build();
        AwsClients::from_config(self.target.clone(), shared, self.timeouts)
    }

    fn from_config(target: Target, shared: aws_config::SdkConfig, t: ClientTimeouts) -> Self {
        let requests = Arc::new(RequestCounter::default());
        let counter = CountRequests(requests.clone());

        let mut sqs = aws_sdk_sqs::config::Builder::from(&shared).interceptor(counter.clone());
        let mut dynamodb = aws_sdk_dynamodb::config::Builder::from(&shared).interceptor(counter.clone());
        let mut s3 = aws_sdk_s3::config::Builder::from(&shared).interceptor(counter);
        // S3 by path (not virtual host), as LocalStack needs; set when a function runs against it.
        if std::env::var("DLQ_S3_FORCE_PATH_STYLE").is_ok_and(|v| v == "true" || v == "1") {
            s3 = s3.force_path_style(true);
        }
        if let Target::Local { edge_url, dynamodb_url } = &target {
            sqs = sqs.endpoint_url(edge_url);
            dynamodb = dynamodb.endpoint_url(dynamodb_url);
            // LocalStack serves buckets by path, not by virtual host.
            s3 = s3.endpoint_url(edge_url).force_path_style(true);
        }
        AwsClients {
            sqs: aws_sdk_sqs::Client::from_conf(sqs.build()),
            dynamodb: aws_sdk_dynamodb::Client::from_conf(dynamodb.build()),
            s3: aws_sdk_s3::Client::from_conf(s3.build()),
            requests,
            target,
            config: shared,
            timeouts: t,
        }
    }

    /// A Secrets Manager client (only the PostgreSQL ledger's start needs one), requests counted.
    pub fn secrets_manager(&self) -> aws_sdk_secretsmanager::Client {
        let mut b = aws_sdk_secretsmanager::config::Builder::from(&self.config)
            .interceptor(CountRequests(self.requests.clone()));
        if let Target::Local { edge_url, .. } = &self.target {
            b = b.endpoint_url(edge_url);
        }
        aws_sdk_secretsmanager::Client::from_conf(b.build())
    }

    /// A KMS client (only the control plane seals with a key), requests counted.
    pub fn kms(&self) -> aws_sdk_kms::Client {
        let mut b = aws_sdk_kms::config::Builder::from(&self.config).interceptor(CountRequests(self.requests.clone()));
        if let Target::Local { edge_url, .. } = &self.target {
            b = b.endpoint_url(edge_url);
        }
        aws_sdk_kms::Client::from_conf(b.build())
    }
}

/// The HTTPS client of every SDK client (credential providers included): rustls with ring, the
/// crypto `reqwest` links as well (the SDK's default would link aws-lc beside it).
fn https_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// The SDK configuration every client is built from: timeouts, and against the local stack a
/// default region and dummy credentials when the environment sets none.
pub async fn shared_config(target: &Target, t: ClientTimeouts) -> aws_config::SdkConfig {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(t.connect)
        .operation_attempt_timeout(t.attempt)
        .operation_timeout(t.operation)
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts)
        .http_client(https_client());
    if target.is_local() {
        if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
            loader = loader.region(aws_config::Region::new("us-east-1"));
        }
        if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
            loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test",
                "test",
                None,
                None,
                "local-stack",
            ));
        }
    }
    loader.load().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::resources::{CONSUMER_TIMEOUT, ENRICHER_TIMEOUT, REPLAY_TIMEOUT};

    #[test]
    fn a_functions_requests_give_up_well_inside_its_time() {
        // Regression: 30 s per attempt and 60 s per operation, as long as the consumer's whole
        // invocation: one stalled call killed the batch.
        for (timeout, margin) in [
            (CONSUMER_TIMEOUT, Duration::from_secs(3)),
            (ENRICHER_TIMEOUT, Duration::from_secs(3)),
            (REPLAY_TIMEOUT, Duration::from_secs(5)),
        ] {
            let t = ClientTimeouts::within(timeout, margin);
            assert!(t.operation * 3 <= timeout - margin, "{timeout:?}: {t:?}");
            assert!(t.attempt < t.operation && t.connect <= t.attempt, "{t:?}");
        }
        assert_eq!(
            ClientTimeouts::within(CONSUMER_TIMEOUT, Duration::from_secs(3)).operation,
            Duration::from_secs(9)
        );
    }
}
