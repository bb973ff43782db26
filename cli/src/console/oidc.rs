//! `dlqctl console --issuer URL --client-id ID`: the console signing in through an OpenID Connect
//! provider, as on AWS. The page signs the person in itself (authorization code with PKCE); this
//! server stands in for API Gateway's JWT authorizer: it verifies each token's signature (RS256,
//! against the keys the provider publishes), issuer, audience and expiry, and hands the control
//! plane its claims. The provider's groups claim names operator roles (`maker`, …).

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use serde_json::{Map, Value};

/// A token's claims, once verified as API Gateway's JWT authorizer verifies them.
pub struct Verifier {
    /// Where the page exchanges its code (the discovery document's `token_endpoint`): the page
    /// may connect to its origin.
    pub token_endpoint: Option<String>,
    issuer: String,
    client_id: String,
    keys: Vec<Key>,
}

/// One of the provider's RSA signing keys.
struct Key {
    kid: Option<String>,
    n: Vec<u8>,
    e: Vec<u8>,
}

fn b64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|e| format!("not base64url: {e}"))
}

impl Verifier {
    /// The provider's keys, found through its discovery document.
    pub async fn discover(issuer: &str, client_id: &str) -> Result<Verifier> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()?;
        let get = |url: String, what: String| {
            let request = http.get(url);
            async move {
                let response = request
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .with_context(|| what.clone())?;
                response.json::<Value>().await.with_context(|| what)
            }
        };
        let base = issuer.trim_end_matches('/');
        let discovery = get(
            format!("{base}/.well-known/openid-configuration"),
            format!("the discovery document of {issuer}"),
        )
        .await?;
        if discovery["issuer"].as_str() != Some(issuer) {
            bail!(
                "{issuer}'s discovery document names another issuer: {}",
                discovery["issuer"]
            );
        }
        let Some(jwks_uri) = discovery["jwks_uri"].as_str() else {
            bail!("{issuer}'s discovery document has no jwks_uri");
        };
        let jwks = get(jwks_uri.to_owned(), format!("the keys of {issuer} ({jwks_uri})")).await?;
        let keys: Vec<Key> = jwks["keys"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|k| k["kty"] == "RSA")
            .filter_map(|k| {
                Some(Key {
                    kid: k["kid"].as_str().map(str::to_owned),
                    n: b64(k["n"].as_str()?).ok()?,
                    e: b64(k["e"].as_str()?).ok()?,
                })
            })
            .collect();
        if keys.is_empty() {
            bail!("{issuer} publishes no RSA signing key");
        }
        Ok(Verifier {
            token_endpoint: discovery["token_endpoint"].as_str().map(str::to_owned),
            issuer: issuer.to_owned(),
            client_id: client_id.to_owned(),
            keys,
        })
    }

    /// The claims of `token` (a JWT), or why it is refused: its signature (RS256 by one of the
    /// provider's keys), issuer, audience (the client id) and expiry, at `now` (Unix seconds).
    pub fn verify(&self, token: &str, now: i64) -> Result<Map<String, Value>, String> {
        let mut parts = token.split('.');
        let (Some(head), Some(body), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JWT".into());
        };
        let header: Value = serde_json::from_slice(&b64(head)?).map_err(|e| format!("its header: {e}"))?;
        if header["alg"] != "RS256" {
            return Err(format!("signed with {}, not RS256", header["alg"]));
        }
        let kid = header["kid"].as_str();
        let signed = format!("{head}.{body}");
        let signature = b64(signature)?;
        let good = self
            .keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .any(|k| {
                ring::signature::RsaPublicKeyComponents { n: &k.n, e: &k.e }
                    .verify(
                        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                        signed.as_bytes(),
                        &signature,
                    )
                    .is_ok()
            });
        if !good {
            return Err("its signature is not the provider's".into());
        }
        let claims: Map<String, Value> = serde_json::from_slice(&b64(body)?).map_err(|e| format!("its claims: {e}"))?;
        if claims.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return Err("issued by another issuer".into());
        }
        let audience = match claims.get("aud") {
            Some(Value::String(a)) => a == &self.client_id,
            Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(self.client_id.as_str())),
            _ => false,
        };
        if !audience {
            return Err("issued for another audience".into());
        }
        match claims.get("exp").and_then(Value::as_i64) {
            Some(exp) if exp > now => {}
            _ => return Err("expired".into()),
        }
        if claims.get("nbf").and_then(Value::as_i64).is_some_and(|nbf| nbf > now) {
            return Err("not valid yet".into());
        }
        Ok(claims)
    }
}

/// The claims as API Gateway hands them to the function: every value a string, a list as
/// `[a b]`.
pub fn as_gateway_claims(claims: Map<String, Value>) -> Map<String, Value> {
    claims
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s,
                Value::Array(items) => {
                    let items: Vec<String> = items
                        .iter()
                        .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                        .collect();
                    format!("[{}]", items.join(" "))
                }
                other => other.to_string(),
            };
            (k, Value::String(text))
        })
        .collect()
}
