//! `dlqctl console`: the operator console on loopback, against the local stack.
//!
//! It serves the console's files (`recon_core::control::assets`) and answers its requests
//! (`POST /console/operations`) through the control plane's own `answer()`, given what API
//! Gateway's JWT authorizer would give it: the claims of a sign-in. The local sign-in stands in
//! for an identity provider: a tester names a person and the one operator role to act in (the
//! groups claim holds that role), and gets a random token that names the sign-in for 8 hours.
//! What each role may do is decided by the control plane, exactly as on AWS; the console's pages
//! only hide what the role may not ask.
//!
//! With `--issuer` and `--client-id` it signs in through an OpenID Connect provider instead, as the
//! console on AWS does, verifying each token as API Gateway's JWT authorizer would (`oidc`).
//!
//! Loopback only, and only for requests addressed to it (the `Host` header), so a web page
//! elsewhere cannot reach it through a name that resolves to 127.0.0.1.

mod oidc;

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use recon_aws::AwsClients;
use recon_aws::telemetry::TracingMetrics;
use recon_aws::wiring::AwsControlPlane;
use recon_core::config::ControlSettings;
use recon_core::control::assets;
use recon_core::control::http::{CONSOLE_ROUTE, MAX_BODY_BYTES};
use recon_core::domain::console::ConsoleSignIn;
use recon_core::domain::operator::OperatorRole;
use recon_core::resources::ResourceNames;
use serde_json::json;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

/// The local sign-in's issuer (the `iss` of its claims).
const ISSUER: &str = "dlqctl-console-local";
/// How long a local sign-in lasts.
const SIGN_IN_HOURS: i64 = 8;
/// The most sign-ins held at once (the oldest are forgotten first).
const MAX_SIGN_INS: usize = 256;
/// The roles a local sign-in may act in: every operator role but break-glass (which the console
/// door refuses, as on AWS).
const ROLES: [OperatorRole; 5] = recon_core::domain::operator::READERS;

/// The Content-Security-Policy of every answer: the console's own origin, and the identity
/// provider's when it signs in through one.
static POLICY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A local sign-in: who, in which role, until when.
struct SignIn {
    person: String,
    role: OperatorRole,
    until: chrono::DateTime<chrono::Utc>,
}

struct Console {
    /// Signing in through an OpenID Connect provider (none: the local sign-in).
    oidc: Option<(assets::OidcSignIn, oidc::Verifier)>,
    plane: AwsControlPlane<TracingMetrics>,
    settings: ControlSettings,
    door: ConsoleSignIn,
    account: String,
    prefix: String,
    hosts: [String; 2],
    sign_ins: Mutex<HashMap<String, SignIn>>,
}

/// Serve the console on `127.0.0.1:port` until interrupted (port 0: any free port). Prints the
/// address it listens on.
pub async fn serve(
    clients: &AwsClients,
    names: &ResourceNames,
    port: u16,
    provider: Option<assets::OidcSignIn>,
) -> Result<()> {
    if matches!(clients.target, recon_aws::Target::Aws) {
        bail!(
            "dlqctl console serves the local stack: on AWS the console signs in through your identity provider (docs/deploying.md, console sign-in)"
        );
    }
    let (plane, settings) = crate::control::local_plane(clients, names).await?;
    let groups: Vec<String> = ROLES.iter().map(|r| format!("{r}:{r}")).collect();
    let door = ConsoleSignIn {
        groups: groups.join(",").parse().map_err(anyhow::Error::msg)?,
        groups_claim: "groups".into(),
        name_claim: "email".into(),
    };
    let oidc = match provider {
        Some(mut p) => {
            let verifier = oidc::Verifier::discover(&p.issuer, &p.client_id).await?;
            // The page exchanges its code there, wherever the provider puts it.
            p.sign_in_origin = p.sign_in_origin.or_else(|| verifier.token_endpoint.clone());
            Some((p, verifier))
        }
        None => None,
    };
    // Set once, before any answer.
    let _ = POLICY.set(assets::policy_for(oidc.as_ref().map(|(p, _)| p)));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{port} (in use? try --port)"))?;
    let port = listener.local_addr()?.port();
    let console = Arc::new(Console {
        oidc,
        plane,
        settings,
        door,
        account: names.account.clone(),
        prefix: names.prefix.clone(),
        hosts: [format!("127.0.0.1:{port}"), format!("localhost:{port}")],
        sign_ins: Mutex::default(),
    });
    println!(
        "The console of {}: http://127.0.0.1:{port}/console/ (Ctrl-C stops it)",
        names.prefix
    );
    // On this thread: the control plane's futures are not all `Send` for any lifetime.
    let local = tokio::task::LocalSet::new();
    local.run_until(accept(listener, console)).await
}

async fn accept(listener: tokio::net::TcpListener, console: Arc<Console>) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let console = console.clone();
        tokio::task::spawn_local(async move {
            let service = hyper::service::service_fn(move |req| {
                let console = console.clone();
                async move { Ok::<_, Infallible>(console.handle(req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "console connection ended");
            }
        });
    }
}

type Answer = Response<Full<Bytes>>;

fn answer(status: StatusCode, kind: &str, body: impl Into<Bytes>) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let headers = r.headers_mut();
    for (name, value) in assets::HEADERS {
        headers.insert(name, hyper::header::HeaderValue::from_static(value));
    }
    let policy = POLICY.get_or_init(|| assets::policy_for(None));
    if let Ok(policy) = hyper::header::HeaderValue::from_str(policy) {
        headers.insert("content-security-policy", policy);
    }
    if let Ok(kind) = hyper::header::HeaderValue::from_str(kind) {
        headers.insert(hyper::header::CONTENT_TYPE, kind);
    }
    r
}

fn error(status: StatusCode, message: &str) -> Answer {
    let body = json!({"error": status.as_str(), "message": message}).to_string();
    answer(status, "application/json", body)
}

impl Console {
    async fn handle(&self, req: Request<Incoming>) -> Answer {
        let host = req.headers().get(hyper::header::HOST).and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| self.hosts.iter().any(|own| own == h)) {
            return error(StatusCode::MISDIRECTED_REQUEST, "not addressed to this console");
        }
        let path = req.uri().path().to_owned();
        match (req.method(), path.as_str()) {
            (&Method::GET, "/") => {
                let mut r = answer(StatusCode::FOUND, "text/plain", "");
                r.headers_mut().insert(
                    hyper::header::LOCATION,
                    hyper::header::HeaderValue::from_static(assets::PREFIX),
                );
                r
            }
            (&Method::GET, "/console/config.json") => {
                let config = match &self.oidc {
                    Some((p, _)) => p.config(&ROLES, &self.prefix),
                    None => json!({"sign_in": "local", "roles": ROLES, "stack": self.prefix}),
                };
                answer(StatusCode::OK, "application/json", config.to_string())
            }
            (&Method::POST, "/console/local/sign-in" | "/console/local/sign-out") if self.oidc.is_some() => error(
                StatusCode::NOT_FOUND,
                "this console signs in through its identity provider",
            ),
            (&Method::POST, "/console/local/sign-in" | "/console/local/sign-out") => {
                // Only the console's own page signs in: a form another site posts (no JSON, or
                // a cross-site fetch) is refused before anything is kept.
                let json = req
                    .headers()
                    .get(hyper::header::CONTENT_TYPE)
                    .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
                let cross_site = req.headers().get("sec-fetch-site").is_some_and(|s| s != "same-origin");
                if !json || cross_site {
                    return error(StatusCode::FORBIDDEN, "sign in from the console's own page");
                }
                if path.ends_with("sign-out") {
                    if let Some(token) = bearer(&req) {
                        self.sign_ins().remove(&token);
                    }
                    return answer(StatusCode::OK, "application/json", "{}");
                }
                match body(req).await {
                    Ok(b) => self.sign_in(&b),
                    Err(e) => e,
                }
            }
            (&Method::POST, "/console/operations") => {
                let token = bearer(&req);
                let role = req
                    .headers()
                    .get("x-operator-role")
                    .and_then(|r| r.to_str().ok())
                    .map(str::to_owned);
                match body(req).await {
                    Ok(b) => self.operation(token.as_deref(), role.as_deref(), b).await,
                    Err(e) => e,
                }
            }
            (&Method::GET, _) => match assets::file(&path) {
                Some((kind, text)) => answer(StatusCode::OK, kind, text),
                None => error(StatusCode::NOT_FOUND, "no such page"),
            },
            _ => error(StatusCode::METHOD_NOT_ALLOWED, "not an operation of the console"),
        }
    }

    fn sign_ins(&self) -> std::sync::MutexGuard<'_, HashMap<String, SignIn>> {
        self.sign_ins.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A local sign-in: `{"person": NAME, "role": ROLE}` -> `{"token": ...}`.
    fn sign_in(&self, body: &Bytes) -> Answer {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Asked {
            person: String,
            role: OperatorRole,
        }
        let asked = match serde_json::from_slice::<Asked>(body) {
            Ok(a) => a,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("expected {{\"person\", \"role\"}}: {e}"),
                );
            }
        };
        let person = asked.person.trim().to_lowercase();
        let named = (1..=64).contains(&person.len())
            && person
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c));
        if !named {
            return error(
                StatusCode::BAD_REQUEST,
                "a person is 1-64 of A-Z a-z 0-9 + = , . @ _ - (what an IAM session may be named)",
            );
        }
        if !ROLES.contains(&asked.role) {
            return error(StatusCode::FORBIDDEN, "break-glass is no console role");
        }
        let mut bytes = [0u8; 32];
        if getrandom::fill(&mut bytes).is_err() {
            return error(StatusCode::SERVICE_UNAVAILABLE, "no randomness for a token");
        }
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let until = chrono::Utc::now() + chrono::Duration::hours(SIGN_IN_HOURS);
        tracing::info!(person, role = %asked.role, "console: local sign-in");
        let mut sign_ins = self.sign_ins();
        sign_ins.retain(|_, s| s.until > chrono::Utc::now());
        while sign_ins.len() >= MAX_SIGN_INS {
            let oldest = sign_ins.iter().min_by_key(|(_, s)| s.until).map(|(t, _)| t.clone());
            if let Some(t) = oldest {
                sign_ins.remove(&t);
            }
        }
        sign_ins.insert(
            token.clone(),
            SignIn {
                person,
                role: asked.role,
                until,
            },
        );
        answer(
            StatusCode::OK,
            "application/json",
            json!({ "token": token }).to_string(),
        )
    }

    /// A console request, answered by the control plane as on AWS: the event API Gateway would
    /// hand it, with the claims its JWT authorizer would have verified.
    async fn operation(&self, token: Option<&str>, role: Option<&str>, body: Bytes) -> Answer {
        let mut headers = json!({});
        let claims = if let Some((_, verifier)) = &self.oidc {
            // As API Gateway's JWT authorizer: verified, or refused before the control plane.
            let verified = token.map(|t| (t, verifier.verify(t, chrono::Utc::now().timestamp())));
            let Some((token, Ok(claims))) = verified else {
                let why = verified.map_or("no token".to_owned(), |(_, r)| r.err().unwrap_or_default());
                return error(StatusCode::UNAUTHORIZED, &format!("the token is refused: {why}"));
            };
            headers["authorization"] = json!(format!("Bearer {token}"));
            if let Some(role) = role {
                headers["x-operator-role"] = json!(role);
            }
            serde_json::Value::Object(oidc::as_gateway_claims(claims))
        } else {
            let sign_ins = self.sign_ins();
            let Some(s) = token
                .and_then(|t| sign_ins.get(t))
                .filter(|s| s.until > chrono::Utc::now())
            else {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "sign in first (the sign-in is unknown or has ended)",
                );
            };
            json!({
                "iss": ISSUER,
                "sub": s.person,
                "email": s.person,
                "groups": format!("[{}]", s.role),
                "exp": s.until.timestamp().to_string(),
            })
        };
        let Ok(text) = String::from_utf8(body.to_vec()) else {
            return error(StatusCode::BAD_REQUEST, "the body is not UTF-8 text");
        };
        let event = json!({
            "version": "2.0",
            "routeKey": CONSOLE_ROUTE,
            "body": text,
            "isBase64Encoded": false,
            "headers": headers,
            "requestContext": {"accountId": self.account, "authorizer": {"jwt": {"claims": claims, "scopes": null}}},
        });
        let id = crate::control::request_id();
        let deadline = crate::context::in_process_deadline();
        let roles = &self.settings.roles;
        let response = Box::pin(self.plane.answer(&event, roles, Some(&self.door), &id, deadline)).await;
        let status = response["statusCode"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let text = response["body"].as_str().unwrap_or_default().to_owned();
        answer(status, "application/json", text)
    }
}

fn bearer(req: &Request<Incoming>) -> Option<String> {
    let h = req.headers().get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    h.strip_prefix("Bearer ").map(str::to_owned)
}

/// The request's body, at most what a command can be.
async fn body(req: Request<Incoming>) -> Result<Bytes, Answer> {
    match Limited::new(req.into_body(), MAX_BODY_BYTES).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(_) => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the body is larger than a command can be",
        )),
    }
}
