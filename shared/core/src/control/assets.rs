//! The console's pages: three static files shipped inside the binary (no CDN, no build step),
//! served under [`PREFIX`] with [`HEADERS`]: a Content-Security-Policy that allows scripts,
//! styles and requests from the console's own origin only, and no framing.
//!
//! The pages hold no data and decide nothing: everything they show or do is a request to the
//! control plane, which answers it for the caller's role (or refuses it).

use crate::domain::operator::OperatorRole;
use serde_json::{Value, json};

/// Where the console's files are served.
pub const PREFIX: &str = "/console/";

/// The route the control function serves the console's files on, without a sign-in (they hold
/// no data; every operation is on [`super::http::CONSOLE_ROUTE`], behind the JWT authorizer).
pub const ASSETS_ROUTE: &str = "GET /console/{proxy+}";

/// The headers every file is served with, but the policy: [`policy`].
pub const HEADERS: [(&str, &str); 4] = [
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
];

/// The Content-Security-Policy: scripts, styles and images from the console's own origin only;
/// requests to it and to `origins` (the identity provider's, for the sign-in) only; no framing.
pub fn policy(origins: &[&str]) -> String {
    let connect: String = origins.iter().map(|o| format!(" {o}")).collect();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'{connect}; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

pub use crate::domain::console::OidcSignIn;

/// [`policy`] for a page that signs in through `sign_in` (none: the local sign-in), its origins
/// allowed.
pub fn policy_for(sign_in: Option<&OidcSignIn>) -> String {
    let origins = sign_in.map(OidcSignIn::origins).unwrap_or_default();
    policy(&origins.iter().map(String::as_str).collect::<Vec<_>>())
}

/// An API Gateway request (payload format 2.0) on [`ASSETS_ROUTE`] answered: the file its path
/// names, or `config.json` from `sign_in`; `None` for any other route. With no sign-in
/// configured the page is not served (404): the console is off.
pub fn page_response(
    event: &Value,
    sign_in: Option<&OidcSignIn>,
    roles: &[OperatorRole],
    stack: &str,
) -> Option<Value> {
    if event.get("routeKey").and_then(Value::as_str) != Some(ASSETS_ROUTE) {
        return None;
    }
    let path = event.get("rawPath").and_then(Value::as_str).unwrap_or_default();
    let Some(sign_in) = sign_in else {
        return Some(respond(
            404,
            "text/plain; charset=utf-8",
            "this deployment serves no console page",
            &policy_for(None),
        ));
    };
    let policy = policy_for(Some(sign_in));
    let answer = if path == "/console/config.json" {
        respond(
            200,
            "application/json",
            &sign_in.config(roles, stack).to_string(),
            &policy,
        )
    } else {
        match file(path) {
            Some((kind, text)) => respond(200, kind, text, &policy),
            None => respond(404, "text/plain; charset=utf-8", "no such page", &policy),
        }
    };
    Some(answer)
}

fn respond(status: u16, kind: &str, body: &str, policy: &str) -> Value {
    let mut headers: serde_json::Map<String, Value> =
        HEADERS.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    headers.insert("content-security-policy".into(), json!(policy));
    headers.insert("content-type".into(), json!(kind));
    json!({"statusCode": status, "headers": headers, "body": body, "isBase64Encoded": false})
}

const FILES: [(&str, &str, &str); 4] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../console/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../console/style.css"),
    ),
    // None: asked for by every browser, so answered (empty) rather than a 404 in its log.
    ("favicon.ico", "image/x-icon", ""),
];

/// The file at `path` (under [`PREFIX`]; the prefix alone is the index): its content type and
/// text. Nothing else is served.
pub fn file(path: &str) -> Option<(&'static str, &'static str)> {
    let name = path.strip_prefix(PREFIX)?;
    let name = if name.is_empty() { "index.html" } else { name };
    FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, text)| (*kind, *text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn only_the_consoles_own_files_are_served() {
        assert_eq!(file("/console/").map(|f| f.0), Some("text/html; charset=utf-8"));
        assert!(file("/console/app.js").is_some_and(|f| f.1.contains("operations")));
        for other in [
            "/console/../Cargo.toml",
            "/console/x.js",
            "/app.js",
            "/console",
            "/console//app.js",
        ] {
            assert!(file(other).is_none(), "{other}");
        }
        // No file reaches outside the console's origin for a script, style or font.
        for (name, _, text) in FILES {
            assert!(!text.contains("http://") && !text.contains("https://"), "{name}");
        }
    }

    fn get(path: &str) -> Value {
        json!({"routeKey": ASSETS_ROUTE, "rawPath": path, "requestContext": {"http": {"method": "GET"}}})
    }

    #[test]
    fn the_control_function_serves_the_page_and_its_sign_in_on_its_route_only() {
        let sign_in = OidcSignIn {
            issuer: "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Pool".into(),
            client_id: "console-client".into(),
            sign_in_origin: Some("https://acme.auth.eu-west-1.amazoncognito.com".into()),
        };
        let page = page_response(&get("/console/"), Some(&sign_in), &[OperatorRole::Viewer], "prod").unwrap();
        assert_eq!(page["statusCode"], 200);
        let csp = page["headers"]["content-security-policy"].as_str().unwrap();
        assert!(
            csp.contains("connect-src 'self' https://cognito-idp.eu-west-1.amazonaws.com https://acme.auth.eu-west-1.amazoncognito.com;"),
            "{csp}"
        );
        let config = page_response(
            &get("/console/config.json"),
            Some(&sign_in),
            &[OperatorRole::Viewer],
            "prod",
        )
        .unwrap();
        let config: Value = serde_json::from_str(config["body"].as_str().unwrap()).unwrap();
        assert_eq!(
            (config["sign_in"].as_str(), config["client_id"].as_str()),
            (Some("oidc"), Some("console-client"))
        );
        assert_eq!(
            page_response(&get("/console/x.js"), Some(&sign_in), &[], "prod").unwrap()["statusCode"],
            404
        );
        // Off without a sign-in; another route is not the page's.
        assert_eq!(
            page_response(&get("/console/"), None, &[], "prod").unwrap()["statusCode"],
            404
        );
        let mut post = get("/console/operations");
        post["routeKey"] = json!(super::super::http::CONSOLE_ROUTE);
        assert_eq!(page_response(&post, Some(&sign_in), &[], "prod"), None);
    }
}
