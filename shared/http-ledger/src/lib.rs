//! Your general ledger behind an HTTP posting API (an ERP's, say), as the [`ExternalLedger`] of
//! the reserve → post → commit protocol (`recon_core::reservation`), and read through [`LedgerReader`].
//!
//! The API this adapter speaks (the local test server in `recon-harness` implements it):
//! - `POST /postings` with `Idempotency-Key: <source_hash>`. The body ([`wire::Body`]) is what the
//!   key determines — the transaction's hashed content — so every retry under one key sends the
//!   same bytes (a GL may refuse a key reused with another body). The delivery's particulars
//!   (message and SQS ids, attempt, time, replay) go in `X-Recon-*` headers ([`wire::headers`]),
//!   which the GL keeps with the posting it applies. `201` posted, `200` posted before under this
//!   key (nothing applied again; the posting says by which delivery), `409` a request with this
//!   key is in progress, `422 {"rule", "message"}` refused by a rule of the ledger's own; a
//!   redirect is an error, never followed (a POST followed as a GET would read as posted). The GL
//!   keeps a key at least `ReservationSettings::in_doubt_for` (4 hours) after applying it, and applies
//!   a request within that time of receiving it or never;
//! - `GET /postings/<source_hash>`: `200` the posting, `404` none;
//! - `POST /postings/<source_hash>/void`: `200` the key is void — every request under it, one
//!   still in progress included, is refused from now on (`422`, rule `key_voided`); `409` with
//!   the posting the key already holds; `404`/`405`/`501` the GL has no such call (a hand-off to
//!   a manual journal then waits out `in_doubt_for` after a request with no definite answer);
//! - `GET /postings?period=&entity=&after=&limit=`: `{"postings": [...], "next": <cursor or null>}`
//!   in `source_hash` order.
//!
//! Exactly once rests on two things together: the claim in the dedup table (one delivery posts
//! at a time) and the key (a post whose answer was lost is asked about before it is sent again,
//! and a request still in progress under the key is recognised by the ledger and applied once).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use recon_core::domain::{CommittedRef, Posting, TransientKind, TxKey};
use recon_core::ports::{
    ExternalLedger, LedgerReader, LedgerScope, Posted, PostingPage, Rotating, StoreError, StoreResult, Voided,
    log_refused,
};

/// Where the API is and how long a call may take.
#[derive(Clone)]
pub struct HttpSettings {
    /// `https://gl.example.com/api` (the paths above are appended).
    pub base_url: String,
    /// A bearer token, when the API wants one (on AWS read from a Secrets Manager secret, again
    /// once old and at once when the API refuses it with 401 or 403).
    pub token: Option<Rotating<String>>,
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
    /// The token, shared by every clone.
    token: Option<Rotating<String>>,
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
        // A redirect is not followed (a POST followed as a GET would read as posted): the URL is
        // the deployment's to fix.
        300..=399 => TransientKind::Infrastructure,
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
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.timeout)
            .build()
            .map_err(|e| StoreError::infra(format!("HTTP client: {e}")))?;
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
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// Send the request `make` builds, with the bearer token; refused as unauthorised (401, 403)
    /// (logged for the alarm), once more with the token read again if the secret holds another.
    async fn send(&self, op: &str, make: impl Fn() -> reqwest::RequestBuilder) -> StoreResult<reqwest::Response> {
        let attempt = |token: Option<&String>| {
            self.requests.fetch_add(1, Ordering::Relaxed);
            let request = make();
            match token {
                Some(t) => request.bearer_auth(t),
                None => request,
            }
        };
        let used = match &self.token {
            Some(token) => Some(token.current().await?),
            None => None,
        };
        let response = attempt(used.as_ref()).send().await.map_err(|e| request_error(op, &e))?;
        let status = response.status();
        if !matches!(status.as_u16(), 401 | 403) {
            return Ok(response);
        }
        let detail = format!("{op}: HTTP {status}");
        let (Some(token), Some(used)) = (&self.token, &used) else {
            log_refused("http", &detail);
            return Ok(response);
        };
        match token.refused(used, "http", &detail).await? {
            Some(fresh) => attempt(Some(&fresh)).send().await.map_err(|e| request_error(op, &e)),
            None => Ok(response),
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(op: &str, response: reqwest::Response) -> StoreResult<T> {
        let body = capped_body(op, response).await?;
        serde_json::from_slice(&body).map_err(|e| StoreError::infra(format!("{op}: the answer does not parse: {e}")))
    }
}

/// The most of one answer the ledger reads into memory: a posting's answer is a few hundred
/// bytes, a page of postings its page size times that. A larger answer is refused, never buffered
/// whole (a broken or hostile ledger could otherwise exhaust the function's memory).
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

/// The answer's body, read chunk by chunk up to [`MAX_ANSWER_BYTES`].
async fn capped_body(op: &str, mut response: reqwest::Response) -> StoreResult<Vec<u8>> {
    let too_large = || StoreError::infra(format!("{op}: the answer is larger than {MAX_ANSWER_BYTES} bytes"));
    if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| request_error(op, &e))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
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
        let make = || {
            let mut request = self
                .request(reqwest::Method::POST, "/postings")
                .header("Idempotency-Key", &posting.source_hash)
                .json(&wire::Body::of(posting));
            for (name, value) in wire::headers(posting) {
                request = request.header(name, value);
            }
            request
        };
        let response = self.send(op, make).await?;
        match response.status().as_u16() {
            201 => Ok(Posted::Applied),
            200 => Ok(Posted::Before),
            422 => {
                let why: Refusal = match capped_body(op, response).await {
                    Ok(body) => serde_json::from_slice(&body).unwrap_or_default(),
                    Err(_) => Refusal::default(),
                };
                Ok(Posted::Refused {
                    rule: format!("HTTP422:{}", rule_name(&why.rule)),
                    detail: why.message,
                })
            }
            _ => Err(status_error(op, response.status())),
        }
    }

    async fn posted(&self, source_hash: &str) -> StoreResult<Option<CommittedRef>> {
        Ok(LedgerReader::posting(self, &TxKey::hash_only(source_hash))
            .await?
            .map(|p| (&p).into()))
    }

    /// `POST /postings/<key>/void`: `200` voided, `409` with the posting the key holds, `404`,
    /// `405` or `501` no such call (the GL cannot void).
    async fn void(&self, source_hash: &str) -> StoreResult<Voided> {
        let op = "POST /postings/<hash>/void";
        if !source_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::infra(format!("{op}: not a source_hash")));
        }
        let path = format!("/postings/{source_hash}/void");
        let response = self.send(op, || self.request(reqwest::Method::POST, &path)).await?;
        match response.status().as_u16() {
            200 => Ok(Voided::Voided),
            409 => {
                let held: Posting = Self::json(op, response).await?;
                Ok(Voided::Posted((&held).into()))
            }
            404 | 405 | 501 => Ok(Voided::Unsupported),
            _ => Err(status_error(op, response.status())),
        }
    }
}

/// What the wire carries: the body of a post, the delivery's headers, and a posting rebuilt from
/// both (the local GL server keeps it so, and `GET` answers it).
pub mod wire {
    use recon_core::domain::Posting;

    pub const MESSAGE_ID: &str = "x-recon-message-id";
    pub const TRACE_ID: &str = "x-recon-trace-id";
    pub const MATCH_DECISION: &str = "x-recon-match-decision";
    pub const SQS_MESSAGE_ID: &str = "x-recon-sqs-message-id";
    pub const ATTEMPT: &str = "x-recon-attempt";
    pub const COMMITTED_AT: &str = "x-recon-committed-at";
    pub const REPLAY_OF: &str = "x-recon-replay-of";

    /// The body of a post: exactly what the `source_hash` determines (the hashed fields, the
    /// amount in its canonical form, the period of the value date).
    #[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Body {
        pub source_hash: String,
        pub ledger_entity: String,
        pub currency: String,
        pub amount: String,
        pub value_date: String,
        pub period: String,
        pub external_ref: String,
        pub counterparty: String,
    }

    impl Body {
        pub fn of(p: &Posting) -> Self {
            Body {
                source_hash: p.source_hash.clone(),
                ledger_entity: p.ledger_entity.clone(),
                currency: p.currency.clone(),
                amount: recon_core::domain::hash::canonical_amount(p.amount),
                value_date: p.value_date.to_string(),
                period: p.period.clone(),
                external_ref: p.external_ref.clone(),
                counterparty: p.counterparty.clone(),
            }
        }
    }

    /// A header value: printable ASCII and spaces as they are, every other byte (and `%`)
    /// percent-encoded.
    fn encode(value: &str) -> String {
        value
            .bytes()
            .map(|b| {
                if (b.is_ascii_graphic() && b != b'%') || b == b' ' {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }

    /// The inverse of `encode` (an invalid escape is kept as it is).
    pub fn decode(value: &str) -> String {
        let bytes = value.as_bytes();
        let hex = |b: Option<&u8>| b.and_then(|b| char::from(*b).to_digit(16));
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                (b'%', Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 3;
                }
                (b, _, _) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The delivery's particulars, as headers.
    pub fn headers(p: &Posting) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (MESSAGE_ID, encode(&p.message_id)),
            (TRACE_ID, encode(&p.trace_id)),
            (MATCH_DECISION, p.match_decision.as_str().to_owned()),
            (SQS_MESSAGE_ID, encode(&p.sqs_message_id)),
            (ATTEMPT, p.attempt_count.to_string()),
            (COMMITTED_AT, p.committed_at.to_rfc3339()),
        ];
        out.extend(p.replay_of.as_ref().map(|r| (REPLAY_OF, encode(r))));
        out
    }

    /// The posting a post describes (`header` looks a header up by its lower-case name); `None`
    /// when a part is missing or malformed.
    pub fn posting(body: &Body, header: impl Fn(&str) -> Option<String>) -> Option<Posting> {
        let text = |name: &str| header(name).map(|v| decode(&v));
        Some(Posting {
            source_hash: body.source_hash.clone(),
            sqs_message_id: text(SQS_MESSAGE_ID)?,
            message_id: text(MESSAGE_ID)?,
            trace_id: text(TRACE_ID)?,
            ledger_entity: body.ledger_entity.clone(),
            currency: body.currency.clone(),
            amount: body.amount.parse().ok()?,
            value_date: body.value_date.parse().ok()?,
            period: body.period.clone(),
            match_decision: serde_json::from_value(serde_json::Value::String(header(MATCH_DECISION)?)).ok()?,
            external_ref: body.external_ref.clone(),
            counterparty: body.counterparty.clone(),
            attempt_count: header(ATTEMPT)?.parse().ok()?,
            committed_at: header(COMMITTED_AT)?.parse().ok()?,
            replay_of: text(REPLAY_OF),
        })
    }
}

/// The GL keeps a posting under its idempotency key alone: the period is not asked.
impl LedgerReader for HttpLedger {
    async fn posting(&self, key: &TxKey) -> StoreResult<Option<Posting>> {
        let source_hash = key.source_hash.as_str();
        let op = "GET /postings/<hash>";
        if !source_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let path = format!("/postings/{source_hash}");
        let response = self.send(op, || self.request(reqwest::Method::GET, &path)).await?;
        match response.status().as_u16() {
            200 => Ok(Some(Self::json(op, response).await?)),
            404 => Ok(None),
            _ => Err(status_error(op, response.status())),
        }
    }

    async fn postings_page(&self, scope: &LedgerScope, cursor: Option<&str>, limit: usize) -> StoreResult<PostingPage> {
        let op = "GET /postings";
        // The posting API does not split a read: segment 0 reads the scope, the others nothing.
        if scope.segment.is_some_and(|s| s.index > 0) {
            return Ok(PostingPage::default());
        }
        let mut query: Vec<(&str, String)> = vec![("limit", limit.max(1).to_string())];
        query.extend(scope.period.clone().map(|p| ("period", p)));
        query.extend(scope.entity.clone().map(|e| ("entity", e)));
        query.extend(cursor.map(|c| ("after", c.to_owned())));
        let response = self
            .send(op, || self.request(reqwest::Method::GET, "/postings").query(&query))
            .await?;
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
mod tests;
