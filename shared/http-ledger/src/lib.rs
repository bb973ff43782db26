//! Your general ledger behind an HTTP posting API (an ERP's, say), as the [`ExternalLedger`] of
//! the claim → post → commit protocol (`recon_core::claim`), and read through [`LedgerReader`].
//!
//! The API this adapter speaks (the local test server in `recon-harness` implements it):
//! - `POST /postings` with the posting as JSON and `Idempotency-Key: <source_hash>`: `201` posted,
//!   `200` posted before under this key (nothing applied again), `409` a request with this key is
//!   in progress, `422 {"rule", "message"}` refused by a rule of the ledger's own;
//! - `GET /postings/<source_hash>`: `200` the posting, `404` none;
//! - `GET /postings?period=&entity=&after=&limit=`: `{"postings": [...], "next": <cursor or null>}`
//!   in `source_hash` order.
//!
//! Exactly once rests on two things together: the claim in the dedup table (one delivery posts
//! at a time) and the key (a post whose answer was lost, retried after its claim was released or
//! expired, is recognised by the ledger and applied once).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use recon_core::domain::{CommittedRef, Posting, TransientKind};
use recon_core::ports::{ExternalLedger, LedgerReader, LedgerScope, Posted, PostingPage, StoreError, StoreResult};

/// Where the API is and how long a call may take.
#[derive(Clone)]
pub struct HttpSettings {
    /// `https://gl.example.com/api` (the paths above are appended).
    pub base_url: String,
    /// A bearer token, when the API wants one (on AWS from a Secrets Manager secret).
    pub token: Option<String>,
    pub connect_timeout: Duration,
    /// One request, start to end.
    pub timeout: Duration,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("base_url", &self.base_url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The HTTP ledger: a client kept across invocations (its connections are pooled).
#[derive(Clone)]
pub struct HttpLedger {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
    /// Requests sent (the cost per committed message).
    requests: Arc<AtomicU64>,
}

/// A page as the API returns it.
#[derive(serde::Deserialize)]
struct Page {
    postings: Vec<Posting>,
    next: Option<String>,
}

/// A refusal as the API explains it.
#[derive(serde::Deserialize, Default)]
struct Refusal {
    #[serde(default)]
    rule: String,
    #[serde(default)]
    message: String,
}

fn infra(detail: impl Into<String>) -> StoreError {
    StoreError::new(TransientKind::Infrastructure, detail)
}

/// What a failed request means for the retry budget.
fn request_error(op: &str, e: &reqwest::Error) -> StoreError {
    let kind = if e.is_timeout() {
        TransientKind::Timeout
    } else if e.is_connect() || e.is_request() || e.is_body() {
        TransientKind::Network
    } else {
        TransientKind::Infrastructure
    };
    StoreError::new(kind, format!("{op}: {e}"))
}

/// What an unexpected status means for the retry budget (never blamed on the message).
fn status_error(op: &str, status: reqwest::StatusCode) -> StoreError {
    let kind = match status.as_u16() {
        409 => TransientKind::Conflict,
        429 => TransientKind::Throttled,
        408 | 504 => TransientKind::Timeout,
        500..=599 => TransientKind::ServiceUnavailable,
        // 401/403 (credentials), 400 (a request this adapter should not send), anything else.
        _ => TransientKind::Infrastructure,
    };
    StoreError::new(kind, format!("{op}: HTTP {status}"))
}

impl HttpLedger {
    pub fn new(settings: &HttpSettings) -> StoreResult<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.timeout)
            .build()
            .map_err(|e| infra(format!("HTTP client: {e}")))?;
        Ok(HttpLedger {
            client,
            base: settings.base_url.trim_end_matches('/').to_owned(),
            token: settings.token.clone(),
            requests: Arc::default(),
        })
    }

    /// Requests sent so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let req = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(op: &str, response: reqwest::Response) -> StoreResult<T> {
        response
            .json::<T>()
            .await
            .map_err(|e| infra(format!("{op}: the answer does not parse: {e}")))
    }
}

/// A rule name in the characters a root cause carries.
fn rule_name(rule: &str) -> String {
    let name: String = rule
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':'))
        .take(63)
        .collect();
    if name.is_empty() { "unnamed".into() } else { name }
}

impl ExternalLedger for HttpLedger {
    async fn post(&self, posting: &Posting) -> StoreResult<Posted> {
        let op = "POST /postings";
        let response = self
            .request(reqwest::Method::POST, "/postings")
            .header("Idempotency-Key", &posting.source_hash)
            .json(posting)
            .send()
            .await
            .map_err(|e| request_error(op, &e))?;
        match response.status().as_u16() {
            200 | 201 => Ok(Posted::Posted),
            422 => {
                let why: Refusal = response.json().await.unwrap_or_default();
                Ok(Posted::Refused {
                    rule: format!("HTTP422:{}", rule_name(&why.rule)),
                    detail: why.message,
                })
            }
            _ => Err(status_error(op, response.status())),
        }
    }
}

impl LedgerReader for HttpLedger {
    async fn posting(&self, source_hash: &str) -> StoreResult<Option<Posting>> {
        let op = "GET /postings/<hash>";
        if !source_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let response = self
            .request(reqwest::Method::GET, &format!("/postings/{source_hash}"))
            .send()
            .await
            .map_err(|e| request_error(op, &e))?;
        match response.status().as_u16() {
            200 => Ok(Some(Self::json(op, response).await?)),
            404 => Ok(None),
            _ => Err(status_error(op, response.status())),
        }
    }

    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        let op = "GET /postings";
        let mut query: Vec<(&str, String)> = vec![("limit", limit.max(1).to_string())];
        query.extend(scope.period.clone().map(|p| ("period", p)));
        query.extend(scope.entity.clone().map(|e| ("entity", e)));
        query.extend(cursor.map(|c| ("after", c.to_owned())));
        let response = self
            .request(reqwest::Method::GET, "/postings")
            .query(&query)
            .send()
            .await
            .map_err(|e| request_error(op, &e))?;
        if response.status().as_u16() != 200 {
            return Err(status_error(op, response.status()));
        }
        let page: Page = Self::json(op, response).await?;
        Ok(PostingPage {
            postings: page.postings,
            next: page.next,
        })
    }

    /// A general ledger knows no hand-offs to manual journals: they are in the dedup table.
    async fn hand_offs(&self) -> StoreResult<Vec<CommittedRef>> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_rules_are_classified() {
        let kind = |s: u16| status_error("t", reqwest::StatusCode::from_u16(s).unwrap()).kind;
        assert_eq!(kind(429), TransientKind::Throttled);
        assert_eq!(kind(503), TransientKind::ServiceUnavailable);
        assert_eq!(kind(504), TransientKind::Timeout);
        assert_eq!(kind(409), TransientKind::Conflict);
        assert_eq!(kind(401), TransientKind::Infrastructure);
        assert_eq!(rule_name("amount limit!"), "amountlimit");
        assert_eq!(rule_name(""), "unnamed");
    }

    #[test]
    fn a_token_is_never_printed() {
        let s = HttpSettings {
            base_url: "https://gl.example.com".into(),
            token: Some("s3cr3t".into()),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        };
        assert!(!format!("{s:?}").contains("s3cr3t"));
    }
}
