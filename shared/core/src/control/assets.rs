//! The console's pages: three static files shipped inside the binary (no CDN, no build step),
//! served under [`PREFIX`] with [`HEADERS`]: a Content-Security-Policy that allows scripts,
//! styles and requests from the console's own origin only, and no framing.
//!
//! The pages hold no data and decide nothing: everything they show or do is a request to the
//! control plane, which answers it for the caller's role (or refuses it).

/// Where the console's files are served.
pub const PREFIX: &str = "/console/";

/// The headers every file is served with.
pub const HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
];

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
}
