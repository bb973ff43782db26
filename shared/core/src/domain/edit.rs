//! Edit-and-retry: when the fix is in the data (a mistyped currency code, a wrong entity), an
//! operator proposes an edited body for one dead letter. The edit is a field diff over the
//! original's JSON; the edited body gets the `source_hash` of its own content (the transaction
//! it now is), keeps the producer's `message_id` (so reconciliation still finds the message the
//! producer sent), and must decode (stages 1-4) before it can be proposed at all. Pure.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

use super::hash::sha256_hex;
use super::message::{content_hash, decode};
use super::policy::Refused;
use super::tx_key::TxKey;

/// The fields an edit may change. Not `message_id` (the producer's identity of the message:
/// reconciliation matches by it), `source_hash` (computed from the edited content) or
/// `schema_version`.
pub const EDITABLE: [&str; 8] = [
    "ledger_entity",
    "currency",
    "amount",
    "value_date",
    "external_ref",
    "counterparty",
    "match_decision",
    "trace_id",
];

/// The largest edited body: it travels inside an approval request (one DynamoDB item).
pub const MAX_EDITED_BODY_BYTES: usize = 64 * 1024;

/// The replay id under which an approved edit claims its envelope: `edit_<request id>`. A sweep
/// never takes such a claim over (the request's own resumption does).
pub const EDIT_CLAIM_PREFIX: &str = "edit_";

pub fn edit_claim(request_id: &str) -> String {
    format!("{EDIT_CLAIM_PREFIX}{request_id}")
}

/// One changed field: its value before and after (`None`: absent), as JSON text for a
/// non-string.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDiff {
    pub field: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

impl std::fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.as_deref().map_or_else(|| "(absent)".to_owned(), |v| format!("{v:?}"));
        write!(f, "{}: {} -> {}", self.field, show(&self.before), show(&self.after))
    }
}

/// An edited body for one envelope, as proposed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    pub envelope_id: String,
    /// The body to post, exactly.
    pub body: String,
    pub body_sha256: String,
    /// What changed, field by field (`source_hash` included when the transaction changed).
    pub diff: Vec<FieldDiff>,
    /// The envelope's transaction before the edit (its `source_hash`).
    pub source_hash_before: String,
    /// The edited body's transaction.
    pub source_hash: String,
}

impl Edit {
    /// Did the edit change the transaction (its economic content, hence its `source_hash`)?
    pub fn economic(&self) -> bool {
        self.source_hash != self.source_hash_before
    }

    /// The diff, one line.
    pub fn diff_line(&self) -> String {
        self.diff.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    }

    /// Where a ledger finds the edited transaction (the period of the edited body's value date;
    /// `None` only for a stored edit whose body does not decode, which [`Self::check`] refuses).
    pub fn key(&self) -> TxKey {
        TxKey::new(&self.source_hash, decode(&self.body).ok().map(|m| m.period()))
    }

    /// The body decodes to the transaction the edit names, and its digest is the body's (a
    /// stored edit whose fields were changed apart from its body is refused).
    pub fn check(&self) -> Result<(), Refused> {
        let decoded = decode(&self.body).map_err(|e| Refused(format!("the edited body does not decode: {e}")))?;
        if decoded.source_hash != self.source_hash || sha256_hex(self.body.as_bytes()) != self.body_sha256 {
            return Err(Refused("the edit's hashes are not those of its body".into()));
        }
        Ok(())
    }

    /// Everything an approver approves of the edit, as text for the request's digest.
    pub fn digest_text(&self) -> String {
        let diff: String = self
            .diff
            .iter()
            .map(|d| format!("{}\t{:?}\t{:?}\n", d.field, d.before, d.after))
            .collect();
        format!(
            "{} {} {} {} {}\n{diff}",
            self.envelope_id,
            sha256_hex(self.body.as_bytes()),
            self.body_sha256,
            self.source_hash_before,
            self.source_hash
        )
    }
}

/// The longest value a diff shows (the body itself is kept whole).
const MAX_DIFF_VALUE: usize = 512;

fn clip(v: String) -> String {
    if v.len() <= MAX_DIFF_VALUE {
        return v;
    }
    format!("{}… ({} bytes)", &v[..v.floor_char_boundary(MAX_DIFF_VALUE)], v.len())
}

/// How the operator gives the edit: `{"set": [["amount", "12.50"]]}` or `{"body": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proposal {
    /// `field=value` pairs over the original (values are strings, as the schema has them).
    Set(Vec<(String, String)>),
    /// A whole body; its `source_hash` is computed, whatever it says.
    Body(String),
}

fn not_editable(field: &str) -> Refused {
    Refused(format!(
        "`{field}` cannot be edited; the fields an edit may change: {}",
        EDITABLE.join(", ")
    ))
}

fn object(body: &str, what: &str) -> Result<Map<String, Value>, Refused> {
    match serde_json::from_str::<Value>(body.strip_prefix('\u{feff}').unwrap_or(body)) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Refused(format!("{what} is JSON but not an object"))),
        Err(e) => Err(Refused(format!("{what} is not JSON ({e})"))),
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    v.map(|v| clip(v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
}

/// The edit of `original` (the envelope's verbatim body) that `proposal` describes, with its
/// `source_hash` computed; refused unless the edited body decodes (stages 1-4: the reference
/// data's checks are the replay's gate 1, asked when the edit is proposed and again when it runs).
pub fn propose(
    envelope_id: &str,
    source_hash_before: &str,
    original: &str,
    proposal: &Proposal,
) -> Result<Edit, Refused> {
    let before = object(original, "the original body")?;
    let mut after = match proposal {
        Proposal::Body(b) => object(b, "the proposed body")?,
        Proposal::Set(pairs) => {
            if pairs.is_empty() {
                return Err(Refused(
                    "nothing to change: give --set FIELD=VALUE or --body-file".into(),
                ));
            }
            let mut m = before.clone();
            for (field, value) in pairs {
                if !EDITABLE.contains(&field.as_str()) {
                    return Err(not_editable(field));
                }
                m.insert(field.clone(), Value::String(value.clone()));
            }
            m
        }
    };
    let id_before = before
        .get("message_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let Some(message_id) = id_before else {
        return Err(Refused(
            "the original has no message_id: an edit could not be matched to what the producer sent (quarantine it instead)"
                .into(),
        ));
    };
    if after.get("message_id").and_then(Value::as_str) != Some(message_id) {
        return Err(Refused(format!(
            "an edit keeps the producer's message_id ({message_id}): reconciliation matches the message by it"
        )));
    }
    // A well-formed stand-in, so the content can be hashed; then the content's own hash.
    after.insert("source_hash".into(), Value::String("0".repeat(64)));
    let placeholder = Value::Object(after.clone()).to_string();
    let source_hash =
        content_hash(&placeholder).map_err(|e| Refused(format!("the edited body would not decode: {e}")))?;
    after.insert("source_hash".into(), Value::String(source_hash.clone()));
    let body = Value::Object(after.clone()).to_string();
    if body.len() > MAX_EDITED_BODY_BYTES {
        return Err(Refused(format!(
            "the edited body has {} bytes; at most {MAX_EDITED_BODY_BYTES}",
            body.len()
        )));
    }
    decode(&body).map_err(|e| Refused(format!("the edited body would not decode: {e}")))?;
    let fields: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let diff: Vec<FieldDiff> = fields
        .into_iter()
        .filter(|f| before.get(*f) != after.get(*f))
        .map(|f| FieldDiff {
            field: f.clone(),
            before: text(before.get(f)),
            after: text(after.get(f)),
        })
        .collect();
    if let Some(d) = diff
        .iter()
        .find(|d| d.field != "source_hash" && !EDITABLE.contains(&d.field.as_str()))
    {
        return Err(not_editable(&d.field));
    }
    if diff.iter().all(|d| d.field == "source_hash") {
        return Err(Refused(
            "the edit changes nothing but the hash: replay the envelope instead".into(),
        ));
    }
    Ok(Edit {
        envelope_id: envelope_id.to_owned(),
        body_sha256: sha256_hex(body.as_bytes()),
        body,
        diff,
        source_hash_before: source_hash_before.to_owned(),
        source_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::message::{MatchDecision, NewMessage};

    fn original(currency: &str) -> String {
        NewMessage {
            message_id: "m-1".into(),
            ledger_entity: "ACME-US".into(),
            currency: currency.into(),
            amount: "100.00".into(),
            match_decision: MatchDecision::Matched,
            trace_id: "t-1".into(),
            value_date: "2026-11-30".into(),
            external_ref: "INV-1".into(),
            counterparty: "Bank".into(),
        }
        .to_body()
        .unwrap()
    }

    fn set(pairs: &[(&str, &str)]) -> Proposal {
        Proposal::Set(pairs.iter().map(|(f, v)| ((*f).to_owned(), (*v).to_owned())).collect())
    }

    #[test]
    fn a_currency_fix_is_a_new_transaction_with_its_own_hash_and_a_diff() {
        let body = original("USX");
        let before = decode(&body).unwrap().source_hash;
        let e = propose("env_1", &before, &body, &set(&[("currency", "USD")])).unwrap();
        assert!(e.economic());
        assert_eq!(decode(&e.body).unwrap().source_hash, e.source_hash);
        assert_eq!(e.source_hash, decode(&original("USD")).unwrap().source_hash);
        let fields: Vec<&str> = e.diff.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(fields, ["currency", "source_hash"]);
        assert_eq!(e.diff[0].to_string(), "currency: \"USX\" -> \"USD\"");
        assert_eq!(e.body_sha256, sha256_hex(e.body.as_bytes()));
        assert!(e.check().is_ok());
        // A stored edit whose transaction was changed apart from its body is refused.
        let forged = Edit {
            source_hash: e.source_hash_before.clone(),
            ..e.clone()
        };
        assert!(forged.check().is_err());
        assert_ne!(forged.digest_text(), e.digest_text());
    }

    #[test]
    fn a_trace_id_fix_keeps_the_transaction() {
        let body = original("USD");
        let before = decode(&body).unwrap().source_hash;
        let e = propose("env_1", &before, &body, &set(&[("trace_id", "t-2")])).unwrap();
        assert!(!e.economic());
        assert_eq!(e.diff_line(), "trace_id: \"t-1\" -> \"t-2\"");
    }

    #[test]
    fn identity_fields_an_invalid_result_and_an_empty_edit_are_refused() {
        let body = original("USX");
        let h = decode(&body).unwrap().source_hash;
        for (pairs, why) in [
            (vec![("message_id", "m-2")], "cannot be edited"),
            (vec![("source_hash", "ab")], "cannot be edited"),
            (vec![("amount", "12.x")], "would not decode"),
            (vec![("value_date", "2026-13-01")], "would not decode"),
            (vec![("currency", "USX")], "changes nothing"),
            (vec![], "nothing to change"),
        ] {
            let err = propose("env_1", &h, &body, &set(&pairs)).unwrap_err();
            assert!(err.0.contains(why), "{pairs:?}: {err}");
        }
        let other_id = body.replace("\"m-1\"", "\"m-9\"");
        let err = propose("env_1", &h, &body, &Proposal::Body(other_id)).unwrap_err();
        assert!(err.0.contains("keeps the producer's message_id"), "{err}");
        let extra = body.replacen('{', "{\"note\":\"x\",", 1);
        let err = propose("env_1", &h, &body, &Proposal::Body(extra)).unwrap_err();
        assert!(err.0.contains("`note` cannot be edited"), "{err}");
        let err = propose("env_1", &h, "not json", &set(&[("currency", "USD")])).unwrap_err();
        assert!(err.0.contains("not JSON"), "{err}");
    }

    #[test]
    fn a_whole_body_gets_its_hash_computed_whatever_it_claims() {
        let body = original("USX");
        let h = decode(&body).unwrap().source_hash;
        let proposed = original("EUR").replace(&decode(&original("EUR")).unwrap().source_hash, &"f".repeat(64));
        let e = propose("env_1", &h, &body, &Proposal::Body(proposed)).unwrap();
        assert_eq!(e.source_hash, decode(&original("EUR")).unwrap().source_hash);
        assert!(decode(&e.body).is_ok());
    }
}
