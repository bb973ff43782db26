//! A small general ledger behind an HTTP posting API, on loopback, for the tests of the HTTP
//! ledger (`recon-http`): it honours `Idempotency-Key` as a strict ERP would (the key stored with
//! the posting and its body; a repeat with the same body answered `200` without applying it
//! again, a repeat with another body refused `422`), refuses by a rule of its own (`422`), voids
//! keys (or has no void call), and fails on purpose — before applying a posting, *after* applying
//! it (an error or a dropped connection, so the client never learns it was applied), or applying
//! it only after the client gave up. It counts the repeats it
//! answered from a key: the tests' proof that a post whose answer was lost was sent again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use recon_core::domain::Posting;
use recon_http::wire;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A failure the server plays on the next posts, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlFault {
    /// `503` before applying.
    Unavailable,
    /// Apply, then answer `500`.
    ErrorAfterApply,
    /// Apply, then close the connection without an answer.
    DropAfterApply,
    /// Take this long to apply it (the client gives up first): `409` to another request under
    /// the key meanwhile, `404` to a read; not applied if the key is voided meanwhile.
    ApplyLate(std::time::Duration),
}

#[derive(Default)]
struct State {
    postings: BTreeMap<String, Posting>,
    /// The body each key was applied with.
    bodies: BTreeMap<String, wire::Body>,
    /// Posts answered from their key (nothing applied).
    replays: u64,
    applied: BTreeMap<String, u32>,
    faults: std::collections::VecDeque<GlFault>,
    /// Keys with a request being applied.
    in_progress: std::collections::BTreeSet<String>,
    /// Keys voided: every request under them refused.
    voided: std::collections::BTreeSet<String>,
    /// The GL has no void call (answers `404`).
    no_void: bool,
    refuse_counterparty: Option<String>,
    token: Option<String>,
    posts: u64,
}

/// The server; stops when dropped.
pub struct LocalGl {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LocalGl {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl LocalGl {
    /// Listen on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state: Arc<Mutex<State>> = Arc::default();
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Ok(LocalGl { url, state, task })
    }

    /// Play `faults` on the next posts, one each.
    pub fn inject(&self, faults: &[GlFault]) {
        lock(&self.state).faults.extend(faults.iter().copied());
    }

    /// Have no void call (`POST /postings/<key>/void` answers `404`), as a GL without one.
    pub fn without_void(&self) {
        lock(&self.state).no_void = true;
    }

    /// Whether `key` was voided.
    pub fn voided(&self, key: &str) -> bool {
        lock(&self.state).voided.contains(key)
    }

    /// Answer `401` to every request without `Authorization: Bearer <token>`.
    pub fn require_token(&self, token: &str) {
        lock(&self.state).token = Some(token.to_owned());
    }

    /// The bearer token it requires, if any.
    pub fn token(&self) -> Option<String> {
        lock(&self.state).token.clone()
    }

    /// Refuse (`422`, rule `blocked_counterparty`) every posting to this counterparty.
    pub fn refuse_counterparty(&self, counterparty: &str) {
        lock(&self.state).refuse_counterparty = Some(counterparty.to_owned());
    }

    /// How often the posting under `key` was applied (1 at most, if the ledger is right).
    pub fn applied(&self, key: &str) -> u32 {
        lock(&self.state).applied.get(key).copied().unwrap_or(0)
    }

    /// Every key applied more than once, with its count.
    pub fn applied_twice(&self) -> Vec<(String, u32)> {
        lock(&self.state)
            .applied
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    }

    /// Delete the posting under `key` behind the API's back (its key goes with it); whether
    /// there was one.
    pub fn remove(&self, key: &str) -> bool {
        let mut s = lock(&self.state);
        s.bodies.remove(key);
        s.postings.remove(key).is_some()
    }

    /// Put a posting back behind the API's back (not counted as applied).
    pub fn restore(&self, posting: &Posting) {
        let mut s = lock(&self.state);
        s.bodies.insert(posting.source_hash.clone(), wire::Body::of(posting));
        s.postings.insert(posting.source_hash.clone(), posting.clone());
    }

    /// Postings held.
    pub fn len(&self) -> usize {
        lock(&self.state).postings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// POST requests received.
    pub fn posts(&self) -> u64 {
        lock(&self.state).posts
    }

    /// Posts answered from their key: a repeat of a post already applied.
    pub fn replays(&self) -> u64 {
        lock(&self.state).replays
    }
}

/// One request per connection (answers close it).
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some((method, target, headers, body)) = read_request(&mut stream).await else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let wanted = lock(&state).token.as_ref().map(|t| format!("Bearer {t}"));
    let answer = match (method.as_str(), path) {
        _ if wanted.is_some() && headers.get("authorization") != wanted.as_ref() => (401, "{}".into()),
        ("POST", "/postings") => match post(&state, &headers, &body) {
            PostAnswer::Answer(answer) => answer,
            // The fault that applies and then says nothing.
            PostAnswer::Silence => return,
            PostAnswer::Late(key, late, after) => {
                let (posting, wire_body) = *late;
                // Applied when due (unless voided meanwhile), answered then: the client is gone.
                tokio::time::sleep(after).await;
                let mut s = lock(&state);
                s.in_progress.remove(&key);
                if !s.voided.contains(&key) && !s.bodies.contains_key(&key) {
                    s.postings.insert(key.clone(), posting);
                    s.bodies.insert(key.clone(), wire_body);
                    *s.applied.entry(key).or_default() += 1;
                }
                (201, r#"{"idempotent_replayed":false}"#.into())
            }
        },
        ("POST", p) if p.starts_with("/postings/") && p.ends_with("/void") => {
            let key = &p["/postings/".len()..p.len() - "/void".len()];
            void(&state, key)
        }
        ("GET", "/postings") => page(&state, query),
        ("GET", p) if p.starts_with("/postings/") => {
            let hash = &p["/postings/".len()..];
            match lock(&state).postings.get(hash) {
                Some(posting) => (200, serde_json::to_string(posting).unwrap_or_default()),
                None => (404, "{}".into()),
            }
        }
        _ => (404, "{}".into()),
    };
    let (status, body) = answer;
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// What a post gets.
enum PostAnswer {
    Answer((u16, String)),
    /// Applied, and the connection dropped without an answer.
    Silence,
    /// To be applied after this long (key, posting, body).
    Late(String, Box<(Posting, wire::Body)>, std::time::Duration),
}

/// `POST /postings/<key>/void`.
fn void(state: &Mutex<State>, key: &str) -> (u16, String) {
    let mut s = lock(state);
    if s.no_void {
        return (404, "{}".into());
    }
    if let Some(p) = s.postings.get(key) {
        return (409, serde_json::to_string(p).unwrap_or_default());
    }
    s.voided.insert(key.to_owned());
    (200, r#"{"voided":true}"#.into())
}

/// A post.
fn post(state: &Mutex<State>, headers: &BTreeMap<String, String>, body: &[u8]) -> PostAnswer {
    let answer = |status: u16, body: &str| PostAnswer::Answer((status, body.into()));
    let mut s = lock(state);
    s.posts += 1;
    let Some(key) = headers.get("idempotency-key").cloned() else {
        return answer(400, r#"{"message":"Idempotency-Key is required"}"#);
    };
    let Ok(body) = serde_json::from_slice::<wire::Body>(body) else {
        return answer(400, r#"{"message":"not a posting"}"#);
    };
    let Some(posting) = wire::posting(&body, |k| headers.get(k).cloned()) else {
        return answer(400, r#"{"message":"a delivery header is missing or malformed"}"#);
    };
    if posting.source_hash != key {
        return answer(400, r#"{"message":"the key is not the posting's source_hash"}"#);
    }
    if s.voided.contains(&key) {
        let refusal = serde_json::json!({"rule": "key_voided", "message": "this key was voided"});
        return answer(422, &refusal.to_string());
    }
    if s.in_progress.contains(&key) {
        return answer(409, r#"{"message":"a request with this key is in progress"}"#);
    }
    let fault = s.faults.pop_front();
    if fault == Some(GlFault::Unavailable) {
        return answer(503, "{}");
    }
    if let Some(applied) = s.bodies.get(&key) {
        if *applied != body {
            let refusal = serde_json::json!({
                "rule": "idempotency_key_reused",
                "message": "this key was used with another body",
            });
            return answer(422, &refusal.to_string());
        }
        // A repeat of a key already applied: the stored result, nothing applied again.
        s.replays += 1;
        return answer(200, r#"{"idempotent_replayed":true}"#);
    }
    if s.refuse_counterparty.as_deref() == Some(posting.counterparty.as_str()) {
        let refusal = serde_json::json!({
            "rule": "blocked_counterparty",
            "message": format!("counterparty {} is blocked", posting.counterparty),
        });
        return answer(422, &refusal.to_string());
    }
    if let Some(GlFault::ApplyLate(after)) = fault {
        s.in_progress.insert(key.clone());
        return PostAnswer::Late(key, Box::new((posting, body)), after);
    }
    s.postings.insert(key.clone(), posting);
    s.bodies.insert(key.clone(), body);
    *s.applied.entry(key).or_default() += 1;
    match fault {
        Some(GlFault::ErrorAfterApply) => answer(500, "{}"),
        Some(GlFault::DropAfterApply) => PostAnswer::Silence,
        _ => answer(201, r#"{"idempotent_replayed":false}"#),
    }
}

/// `GET /postings?period=&entity=&after=&limit=`, in `source_hash` order.
fn page(state: &Mutex<State>, query: &str) -> (u16, String) {
    let params: BTreeMap<String, String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect();
    let limit: usize = params.get("limit").and_then(|l| l.parse().ok()).unwrap_or(100).max(1);
    let s = lock(state);
    let mut postings: Vec<&Posting> = s
        .postings
        .values()
        .filter(|p| params.get("period").is_none_or(|x| *x == p.period))
        .filter(|p| params.get("entity").is_none_or(|x| *x == p.ledger_entity))
        .filter(|p| params.get("after").is_none_or(|x| p.source_hash > *x))
        .take(limit + 1)
        .collect();
    let more = postings.len() > limit;
    postings.truncate(limit);
    let next = if more {
        postings.last().map(|p| p.source_hash.clone())
    } else {
        None
    };
    (200, serde_json::json!({"postings": postings, "next": next}).to_string())
}

/// A query component: form encoding (`+` is a space, `%2B` a plus), the wire's percent-decoding.
fn decode(s: &str) -> String {
    wire::decode(&s.replace('+', " "))
}

type Request = (String, String, BTreeMap<String, String>, Vec<u8>);

/// The request line, headers (lower-case names) and body of one HTTP/1.1 request.
async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > 1 << 20 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((method, target, headers, body))
}
