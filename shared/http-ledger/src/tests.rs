use super::*;
use recon_core::ports::Fetch;

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
fn the_body_under_one_key_is_the_same_whatever_the_delivery_and_the_headers_carry_the_rest() {
    use recon_core::domain::{MatchDecision, Posting};
    let parse_time = |t: &str| t.parse().unwrap();
    let first = Posting {
        source_hash: "ab".repeat(32),
        sqs_message_id: "sqs-1".into(),
        message_id: "m-ü 1".into(),
        trace_id: "t%1".into(),
        ledger_entity: "ACME-US".into(),
        currency: "USD".into(),
        amount: "10.50".parse().unwrap(),
        value_date: "2026-11-30".parse().unwrap(),
        period: "2026-11".into(),
        match_decision: MatchDecision::Matched,
        external_ref: "BANK-1".into(),
        counterparty: "Globex".into(),
        attempt_count: 1,
        committed_at: parse_time("2026-12-01T00:00:00Z"),
        replay_of: None,
    };
    let retry = Posting {
        sqs_message_id: "sqs-2".into(),
        message_id: "m-2".into(),
        match_decision: MatchDecision::Partial,
        amount: "10.5".parse().unwrap(),
        attempt_count: 3,
        committed_at: parse_time("2026-12-02T00:00:00Z"),
        replay_of: Some("env_1".into()),
        ..first.clone()
    };
    let body = wire::Body::of(&first);
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        serde_json::to_string(&wire::Body::of(&retry)).unwrap()
    );
    let headers = wire::headers(&first);
    assert!(
        headers
            .iter()
            .all(|(_, v)| v.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
    );
    let rebuilt = wire::posting(&body, |k| headers.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()));
    assert_eq!(rebuilt, Some(first));
}

/// A ledger that answers `body` to any request, `content_length` said or not, then closes.
async fn answering(body: Vec<u8>, content_length: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let length = if content_length {
                format!("Content-Length: {}\r\n", body.len())
            } else {
                String::new()
            };
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}Connection: close\r\n\r\n");
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&body).await;
            let _ = socket.shutdown().await;
        }
    });
    format!("http://{addr}")
}

/// A ledger that knows no posting (404) and refuses (401) a request without `Bearer <token>`.
async fn requiring(token: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = vec![0u8; 8192];
            let n = socket.read(&mut request).await.unwrap_or(0);
            let text = String::from_utf8_lossy(&request[..n]).to_ascii_lowercase();
            let status = if text.contains(&format!("authorization: bearer {token}\r\n")) {
                "404 Not Found"
            } else {
                "401 Unauthorized"
            };
            let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    format!("http://{addr}")
}

/// A token that starts as "old" and is then read as `token`, counting the reads.
fn fetching(token: &'static str, fetches: Arc<AtomicU64>, max_age: Duration) -> Option<Rotating<String>> {
    let fetch: Fetch<String> = Arc::new(move || {
        fetches.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move { Ok(token.to_owned()) })
    });
    Some(Rotating::new(fetch, max_age).starting_with("old".into()))
}

#[tokio::test]
async fn a_rotated_token_is_fetched_again_once_refused_and_once_old() {
    let url = requiring("new").await;
    let hash = "b".repeat(64);
    let settings = |token| HttpSettings {
        base_url: url.clone(),
        token,
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(5),
    };
    // A token that never changes stays refused: transient, until the retry budget is spent.
    let fixed = HttpLedger::new(&settings(Some(Rotating::fixed("old".into())))).unwrap();
    assert_eq!(
        LedgerReader::posting(&fixed, &TxKey::hash_only(&hash))
            .await
            .unwrap_err()
            .kind,
        TransientKind::Infrastructure
    );
    // One that rotates: refused once, fetched, sent again; then kept while young.
    let fetches = Arc::new(AtomicU64::new(0));
    let rotating = HttpLedger::new(&settings(fetching("new", fetches.clone(), Duration::from_secs(3600)))).unwrap();
    assert_eq!(
        LedgerReader::posting(&rotating, &TxKey::hash_only(&hash))
            .await
            .unwrap(),
        None
    );
    assert_eq!((fetches.load(Ordering::Relaxed), rotating.requests()), (1, 2));
    assert_eq!(
        LedgerReader::posting(&rotating, &TxKey::hash_only(&hash))
            .await
            .unwrap(),
        None
    );
    assert_eq!((fetches.load(Ordering::Relaxed), rotating.requests()), (1, 3));
    // Once old, fetched before it is sent (a rotation the API has not refused yet).
    let fetches = Arc::new(AtomicU64::new(0));
    let aging = HttpLedger::new(&settings(fetching("new", fetches.clone(), Duration::ZERO))).unwrap();
    assert_eq!(
        LedgerReader::posting(&aging, &TxKey::hash_only(&hash)).await.unwrap(),
        None
    );
    assert_eq!((fetches.load(Ordering::Relaxed), aging.requests()), (1, 1));
}

#[tokio::test]
async fn an_answer_larger_than_the_cap_is_refused_not_buffered() {
    let hash = "a".repeat(64);
    for content_length in [true, false] {
        let huge = format!("{{\"padding\": \"{}\"}}", "x".repeat(MAX_ANSWER_BYTES)).into_bytes();
        let ledger = HttpLedger::new(&HttpSettings {
            base_url: answering(huge, content_length).await,
            token: None,
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(20),
        })
        .unwrap();
        let e = LedgerReader::posting(&ledger, &TxKey::hash_only(&hash))
            .await
            .unwrap_err();
        assert!(
            e.detail.contains("larger than"),
            "content length said: {content_length}: {e}"
        );
    }
}

#[test]
fn a_token_is_never_printed() {
    let s = HttpSettings {
        base_url: "https://gl.example.com".into(),
        token: Some(Rotating::fixed("s3cr3t".into())),
        connect_timeout: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    };
    assert!(!format!("{s:?}").contains("s3cr3t"));
}
