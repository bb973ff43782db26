//! The control plane's HTTP face: an API Gateway HTTP API request (payload format 2.0) in, a JSON
//! response out. The caller is who API Gateway verified, through one of two doors:
//! - IAM authorization (`dlqctl`): the principal of the request's SigV4 signature
//!   (`requestContext.authorizer.iam.userArn`), an operator role's session;
//! - a JWT authorizer (the console): the claims of the token it verified
//!   (`requestContext.authorizer.jwt.claims`), read by [`ConsoleSignIn`] into a person and the
//!   roles their groups give, acting in the one the console names (header `x-operator-role`).
//!
//! A request through neither is refused before anything is read.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Asked, Command, ControlError, ControlPlane};
use crate::domain::console::{ConsoleSignIn, SignInRefused};
use crate::domain::operator::{Caller, RoleNames};
use crate::ports::{EnvelopesOfPeriod, LedgerReader, RecordsOfPeriod, Signer};
use crate::replay::ReplayPorts;

/// The largest body the control plane reads (a command is small; an edit's body at most SQS's).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// What an HTTP API request asks: the verified principal and the command (or why its body is
/// not one: refused, and audited as that caller's); or the response to give instead (no caller
/// is known, or the body is larger than any command: nothing was done, nothing is audited). The
/// audit records of what it does are named by the invocation's own id, which no caller chooses.
#[derive(Debug)]
pub struct SignedRequest {
    pub principal: Principal,
    pub command: Result<Command, String>,
}

/// Who a request comes from, as API Gateway verified them.
#[derive(Debug, PartialEq)]
pub enum Principal {
    /// The principal IAM verified from the request's SigV4 signature.
    Iam(String),
    /// A console sign-in: the claims API Gateway's JWT authorizer verified, the API's account,
    /// and the role the console asks to act in (`x-operator-role`).
    Console {
        claims: serde_json::Map<String, Value>,
        account: String,
        acting_as: Option<String>,
    },
}

impl<P: ReplayPorts, G: Signer> ControlPlane<P, G>
where
    P::Ledger: LedgerReader,
    P::Store: EnvelopesOfPeriod,
    P::Audit: RecordsOfPeriod,
{
    /// Answer one HTTP API request as the control function does: the caller the one API Gateway
    /// verified, holding the role `roles` says (a session of an operator role) or `console`
    /// reads from their token (none: no console sign-in is answered); `request_id` the
    /// invocation's own.
    pub async fn answer(
        &self,
        event: &Value,
        roles: &RoleNames,
        console: Option<&ConsoleSignIn>,
        request_id: &str,
        deadline: Option<DateTime<Utc>>,
    ) -> Value {
        let signed = match request(event) {
            Ok(signed) => signed,
            Err(response) => return response,
        };
        let caller = match signed.principal {
            Principal::Iam(arn) => Caller::verified(&arn, roles),
            Principal::Console {
                claims,
                account,
                acting_as,
            } => {
                let Some(console) = console else {
                    return reply(
                        401,
                        "unauthenticated",
                        "this deployment answers no console sign-in (DLQ_CONSOLE_GROUPS is unset)",
                    );
                };
                match console.caller(&claims, &account, acting_as.as_deref()) {
                    Ok(caller) => caller,
                    Err(SignInRefused::NoOne(why)) => {
                        // A token API Gateway verified that names no one: no identity to audit
                        // it as, so it is logged with what the token does say.
                        let said = |c: &str| claims.get(c).and_then(Value::as_str).unwrap_or("").to_owned();
                        let (issuer, subject) = (said("iss"), said("sub"));
                        tracing::warn!(
                            decision = "SIGN_IN_REFUSED",
                            issuer,
                            subject,
                            why,
                            "console sign-in names no one"
                        );
                        return reply(401, "unauthenticated", &why);
                    }
                    Err(SignInRefused::Role { person, why }) => {
                        let asked = Asked {
                            caller: &person,
                            request_id,
                            deadline,
                        };
                        return response(Box::pin(self.sign_in_refused(&asked, why)).await);
                    }
                }
            }
        };
        let asked = Asked {
            caller: &caller,
            request_id,
            deadline,
        };
        match signed.command {
            // Boxed: a replay's future is deep.
            Ok(command) => response(Box::pin(self.handle(&asked, command)).await),
            Err(why) => response(Box::pin(self.malformed(&asked, why)).await),
        }
    }
}

pub fn request(event: &Value) -> Result<SignedRequest, Value> {
    let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
    let claims = event
        .pointer("/requestContext/authorizer/jwt/claims")
        .and_then(Value::as_object);
    // Each door on its own route: a token's claims count on the console's route only.
    let console_route = text("/routeKey").as_deref() == Some(CONSOLE_ROUTE);
    let principal = match (text("/requestContext/authorizer/iam/userArn"), claims) {
        (Some(arn), _) if !console_route => Principal::Iam(arn),
        (None, Some(claims)) if console_route => Principal::Console {
            claims: token_claims(text("/headers/authorization").as_deref(), claims),
            account: text("/requestContext/accountId").unwrap_or_default(),
            acting_as: text("/headers/x-operator-role"),
        },
        _ => {
            return Err(reply(
                401,
                "unauthenticated",
                "no caller verified: the control plane answers only signed (SigV4) requests on a route with AWS_IAM authorization, or a console sign-in's token its JWT authorizer verified",
            ));
        }
    };
    let body = text("/body").unwrap_or_default();
    if body.len() > MAX_BODY_BYTES * 4 / 3 + 4 {
        return Err(reply(
            413,
            "invalid",
            "the request body is larger than a command can be",
        ));
    }
    let body = if event.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) {
        let bytes = base64::engine::general_purpose::STANDARD.decode(body.as_bytes());
        bytes.ok().and_then(|b| String::from_utf8(b).ok())
    } else {
        Some(body)
    };
    let command = match body {
        Some(body) => serde_json::from_str::<Command>(&body).map_err(|e| format!("not a command: {e}")),
        None => Err("the body is not base64 of UTF-8 text".to_owned()),
    };
    Ok(SignedRequest { principal, command })
}

/// The console's route (`ConsoleOperationsRoute`): the only one whose caller is a token's.
pub const CONSOLE_ROUTE: &str = "POST /console/operations";

/// The claims of the console's token: as the token itself holds them (a list of groups as a list)
/// when the `Authorization` header API Gateway verified decodes to a token of the same issuer,
/// subject and expiry as its `verified` claims; else those claims as API Gateway wrote them
/// (every value text, a list as `[a b c]`).
fn token_claims(
    authorization: Option<&str>,
    verified: &serde_json::Map<String, Value>,
) -> serde_json::Map<String, Value> {
    let decoded = authorization.and_then(|h| {
        let token = h
            .strip_prefix("Bearer ")
            .or_else(|| h.strip_prefix("bearer "))
            .unwrap_or(h);
        let payload = token.split('.').nth(1)?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        serde_json::from_slice::<Value>(&bytes).ok()?.as_object().cloned()
    });
    let as_text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let same = |d: &serde_json::Map<String, Value>| {
        ["iss", "sub", "exp"]
            .iter()
            .all(|k| as_text(d.get(*k)).is_some_and(|v| Some(v) == as_text(verified.get(*k))))
    };
    match decoded {
        Some(d) if same(&d) => d,
        _ => verified.clone(),
    }
}

/// The response to a command's result: 200 with its result; 403 for a role that may not, 409
/// for a state that refuses, 400 for a malformed request, 503 when a store failed (nothing is
/// known to have changed; ask again); 413 for a result larger than Lambda can return (a
/// period's segment with very many exceptions: ask for more, smaller segments).
pub fn response(result: Result<Value, ControlError>) -> Value {
    use crate::resources::LAMBDA_MAX_RESPONSE_BYTES;
    match result {
        Ok(value) => {
            let body = value.to_string();
            if body.len() > LAMBDA_MAX_RESPONSE_BYTES {
                let why = format!(
                    "the answer is {} bytes, above what Lambda returns ({LAMBDA_MAX_RESPONSE_BYTES}): ask for less (a reconciliation: more segments)",
                    body.len()
                );
                return reply(413, "too-large", &why);
            }
            json!({
                "statusCode": 200,
                "headers": {"content-type": "application/json"},
                "body": body,
            })
        }
        Err(e) => {
            let (status, kind) = match &e {
                ControlError::Forbidden(_) => (403, "forbidden"),
                ControlError::Refused(_) => (409, "refused"),
                ControlError::Invalid(_) => (400, "invalid"),
                ControlError::Flow(_) => (503, "unavailable"),
            };
            reply(status, kind, &e.to_string())
        }
    }
}

fn reply(status: u16, kind: &str, message: &str) -> Value {
    json!({
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": json!({"error": kind, "message": message}).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::approval::Refused;

    fn event(body: &str, principal: Option<&str>) -> Value {
        let mut e = json!({
            "version": "2.0",
            "routeKey": "POST /control",
            "body": body,
            "isBase64Encoded": false,
            "requestContext": {"requestId": "abc=", "authorizer": {}},
        });
        if let Some(p) = principal {
            e["requestContext"]["authorizer"]["iam"] = json!({"userArn": p, "accountId": "1"});
        }
        e
    }

    #[test]
    fn the_caller_is_the_verified_principal_and_an_unsigned_request_is_turned_away() {
        let arn = "arn:aws:sts::1:assumed-role/acme-maker/alice";
        let asked = request(&event(r#"{"operation":"whoami"}"#, Some(arn))).unwrap();
        assert_eq!(asked.principal, Principal::Iam(arn.into()));
        assert_eq!(asked.command, Ok(Command::Whoami));
        assert_eq!(
            request(&event(r#"{"operation":"whoami"}"#, None)).unwrap_err()["statusCode"],
            401
        );
        // Not a command, but from a verified caller: theirs to be refused (and audited).
        let malformed = request(&event(r#"{"operation":"x"}"#, Some(arn))).unwrap();
        assert!(malformed.command.is_err_and(|e| e.contains("not a command")));
        let mut encoded = event("eyJvcGVyYXRpb24iOiJ3aG9hbWkifQ==", Some(arn));
        encoded["isBase64Encoded"] = json!(true);
        assert_eq!(request(&encoded).unwrap().command, Ok(Command::Whoami));
        encoded["body"] = json!("%%%");
        assert!(request(&encoded).unwrap().command.is_err_and(|e| e.contains("base64")));
    }

    #[test]
    fn a_console_request_carries_the_verified_claims_the_account_and_the_role_asked() {
        let mut e = event(r#"{"operation":"whoami"}"#, None);
        e["routeKey"] = json!(CONSOLE_ROUTE);
        e["requestContext"]["accountId"] = json!("123456789012");
        let verified = json!({"email": "a@example.com", "groups": "[g1 g2]", "iss": "https://idp", "sub": "u1", "exp": "1900000000"});
        e["requestContext"]["authorizer"]["jwt"] = json!({"claims": verified, "scopes": null});
        e["headers"] = json!({"x-operator-role": "maker"});
        let console_claims = |e: &Value| match request(e).unwrap().principal {
            Principal::Console {
                claims,
                account,
                acting_as,
            } => (claims, account, acting_as),
            Principal::Iam(_) => panic!("a console principal"),
        };
        let (claims, account, acting_as) = console_claims(&e);
        assert_eq!(
            (claims["email"].clone(), claims["groups"].clone()),
            (json!("a@example.com"), json!("[g1 g2]"))
        );
        assert_eq!(
            (account.as_str(), acting_as.as_deref()),
            ("123456789012", Some("maker"))
        );
        // The token in the header API Gateway verified: its own claims (the groups a list), when
        // it is the verified one; another token's are not taken.
        let token = |payload: Value| {
            let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
            format!("Bearer {}.{}.sig", b64(&json!({"alg": "RS256"})), b64(&payload))
        };
        let own = json!({"email": "a@example.com", "groups": ["g1", "g2"], "iss": "https://idp", "sub": "u1", "exp": 1900000000});
        e["headers"]["authorization"] = json!(token(own));
        assert_eq!(console_claims(&e).0["groups"], json!(["g1", "g2"]));
        let other = json!({"email": "a@example.com", "groups": ["admins"], "iss": "https://idp", "sub": "u2", "exp": 1900000000});
        e["headers"]["authorization"] = json!(token(other));
        assert_eq!(console_claims(&e).0["groups"], json!("[g1 g2]"));
        // Each door on its own route: a signature on the console's route, or a token's claims on
        // another, is no one.
        e["requestContext"]["authorizer"]["iam"] = json!({"userArn": "arn:aws:sts::1:assumed-role/r/s"});
        assert_eq!(request(&e).unwrap_err()["statusCode"], 401);
        e["routeKey"] = json!("POST /operations");
        assert!(matches!(request(&e).unwrap().principal, Principal::Iam(_)));
        e["requestContext"]["authorizer"] = json!({"jwt": {"claims": verified}});
        assert_eq!(request(&e).unwrap_err()["statusCode"], 401);
    }

    #[test]
    fn each_error_has_its_status() {
        let refused = || Refused("no".into());
        for (e, status) in [
            (ControlError::Forbidden(refused()), 403),
            (ControlError::Refused(refused()), 409),
            (ControlError::Invalid("bad".into()), 400),
            (ControlError::Flow(crate::ports::StoreError::infra("down").into()), 503),
        ] {
            assert_eq!(response(Err(e))["statusCode"], status);
        }
        let ok = response(Ok(json!({"a": 1})));
        assert_eq!(
            (ok["statusCode"].clone(), ok["body"].clone()),
            (json!(200), json!(r#"{"a":1}"#))
        );
        // Lambda could not return it: refused with the remedy, not cut.
        let huge = "x".repeat(crate::resources::LAMBDA_MAX_RESPONSE_BYTES);
        let too_large = response(Ok(json!({ "segment": huge })));
        assert_eq!(too_large["statusCode"], 413);
        assert!(too_large["body"].as_str().unwrap().contains("more segments"));
    }
}
