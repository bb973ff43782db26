//! The console's sign-in: a person the organisation's OpenID Connect identity provider signed in,
//! whose token API Gateway's JWT authorizer verified (signature, issuer, audience, expiry) before
//! the control plane is asked. Who they are and which operator roles they hold come from the
//! token's claims as API Gateway hands them over, never from the payload; the console only says
//! which of their roles they act in.
//!
//! `DLQ_CONSOLE_GROUPS` (`viewer:GROUP,maker:GROUP,…`) maps the identity provider's groups to
//! operator roles; `break-glass` is never one (it is IAM's alone). The person is the claim
//! `DLQ_CONSOLE_NAME_CLAIM` names (`email` unless set), lower-cased: name the claim that holds
//! what your operators' role sessions are named after and one person has one name through
//! `dlqctl` and the console ([`super::identity`]), so maker-checker holds across them.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

use super::identity::Identity;
use super::operator::{Caller, OperatorRole, role_pairs, shown_pairs};

/// The groups claim unless `DLQ_CONSOLE_GROUPS_CLAIM` names another (Cognito's is `cognito:groups`).
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";

/// The name claim unless `DLQ_CONSOLE_NAME_CLAIM` names another.
pub const DEFAULT_NAME_CLAIM: &str = "email";

/// Which identity-provider group gives which operator role (`DLQ_CONSOLE_GROUPS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleGroups(BTreeMap<String, OperatorRole>);

impl std::str::FromStr for ConsoleGroups {
    type Err = String;

    /// `ROLE:GROUP` pairs, comma-separated: each group once (a group is one role), a group name
    /// without spaces, commas or brackets (API Gateway hands a list of groups over as
    /// `[a b c]`), no `break-glass`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut groups = BTreeMap::new();
        for (pair, role, group) in role_pairs(s, "GROUP")? {
            if role == OperatorRole::BreakGlass {
                return Err(format!(
                    "`{pair}`: break-glass is never a console role (it is an IAM role, assumed with MFA, paged on)"
                ));
            }
            if group.is_empty() || group.chars().any(|c| c.is_whitespace() || "[],".contains(c)) {
                return Err(format!("`{pair}`: a group name without spaces, commas or brackets"));
            }
            if groups.insert(group.to_owned(), role).is_some() {
                return Err(format!("`{pair}`: each group once"));
            }
        }
        if groups.is_empty() {
            return Err("no console group named".into());
        }
        Ok(ConsoleGroups(groups))
    }
}

impl std::fmt::Display for ConsoleGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&shown_pairs(&self.0))
    }
}

/// How the control plane reads a console caller from a verified token's claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleSignIn {
    pub groups: ConsoleGroups,
    pub groups_claim: String,
    pub name_claim: String,
}

/// A person at the console, as their token's claims make them: their name and the operator
/// roles their groups give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsolePerson {
    pub name: String,
    pub roles: BTreeSet<OperatorRole>,
    /// The token's `iss` and `sub`: who they are whatever name they go by.
    pub issuer: String,
    pub subject: String,
}

impl ConsoleSignIn {
    /// The person `claims` (API Gateway's `requestContext.authorizer.jwt.claims`) name, or why
    /// they name none: no name claim, one its provider says is not verified
    /// (`<claim>_verified`), or no `sub`.
    pub fn person(&self, claims: &Map<String, Value>) -> Result<ConsolePerson, String> {
        let name = claims.get(&self.name_claim).and_then(Value::as_str).ok_or_else(|| {
            format!(
                "the token has no `{}` claim: who signed in is not known",
                self.name_claim
            )
        })?;
        // API Gateway hands every claim over as text: `false`, or the JSON false.
        let verified = claims.get(&format!("{}_verified", self.name_claim));
        if verified.is_some_and(|v| v != &Value::Bool(true) && v.as_str() != Some("true")) {
            return Err(format!(
                "the token's `{}` is not verified by its identity provider: it names no one",
                self.name_claim
            ));
        }
        let text = |claim: &str| claims.get(claim).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (issuer, subject) = (text("iss"), text("sub"));
        if subject.is_empty() {
            return Err("the token has no `sub` claim: who signed in is not known".into());
        }
        let roles = claim_values(claims.get(&self.groups_claim))
            .iter()
            .filter_map(|g| self.groups.0.get(g.as_str()).copied())
            .collect();
        Ok(ConsolePerson {
            name: name.to_ascii_lowercase(),
            roles,
            issuer,
            subject,
        })
    }

    /// The caller `claims` make in the API's `account`, acting in the role named `acting_as`
    /// (one of theirs; without it, their only one). A person holding no role is a caller without
    /// one: the control plane refuses them everything, `whoami` included, and audits it.
    pub fn caller(
        &self,
        claims: &Map<String, Value>,
        account: &str,
        acting_as: Option<&str>,
    ) -> Result<Caller, SignInRefused> {
        let person = self.person(claims).map_err(SignInRefused::NoOne)?;
        let as_person = |role: Option<OperatorRole>| {
            Identity::console(
                account,
                role.map(OperatorRole::as_str),
                &person.name,
                (&person.issuer, &person.subject),
            )
            .ok_or_else(|| {
                SignInRefused::NoOne(format!(
                    "`{}` of account `{account}` names no person (2 to 64 of A-Z a-z 0-9 + = , . @ _ -, as a role session's name)",
                    person.name
                ))
            })
        };
        let refused = |why: String| -> SignInRefused {
            match as_person(None) {
                Ok(identity) => SignInRefused::Role {
                    person: Caller { identity, role: None },
                    why,
                },
                Err(no_one) => no_one,
            }
        };
        let asked: Option<OperatorRole> = match acting_as.map(str::parse) {
            None => None,
            Some(Ok(role)) => Some(role),
            Some(Err(_)) => {
                let named = acting_as.unwrap_or_default().chars().take(40).collect::<String>();
                return Err(refused(format!("`{}` is no operator role", named.escape_default())));
            }
        };
        let role = match (asked, person.roles.len()) {
            (Some(role), _) if person.roles.contains(&role) => Some(role),
            (Some(role), _) => {
                return Err(refused(format!(
                    "{} does not hold the {role} role (their groups give {})",
                    person.name,
                    listed(&person.roles)
                )));
            }
            // No role: refused everything, and audited.
            (None, 0) => None,
            (None, 1) => person.roles.first().copied(),
            (None, _) => {
                return Err(refused(format!(
                    "{} holds several roles ({}): say which one to act in",
                    person.name,
                    listed(&person.roles)
                )));
            }
        };
        Ok(Caller {
            identity: as_person(role)?,
            role,
        })
    }
}

/// Why a console sign-in is not a caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignInRefused {
    /// The token names no person (no name claim, or one no session could be named): there is no
    /// one to audit the refusal as.
    NoOne(String),
    /// The person asked to act in a role they do not hold, or in none of several: refused as
    /// `person` (without a role), and audited as theirs.
    Role { person: Caller, why: String },
}

impl SignInRefused {
    pub fn why(&self) -> &str {
        match self {
            SignInRefused::NoOne(why) | SignInRefused::Role { why, .. } => why,
        }
    }
}

fn listed(roles: &BTreeSet<OperatorRole>) -> String {
    if roles.is_empty() {
        return "none".into();
    }
    roles.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")
}

/// A claim's values: a JSON list of strings (the token's own claims); or a string, which API
/// Gateway's JWT authorizer makes of a list as `[a b c]`, else one value (a provider that sends
/// one group as a string). A group with a space cannot be told apart in API Gateway's form: the
/// mapping refuses such names.
fn claim_values(claim: Option<&Value>) -> Vec<String> {
    match claim {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Some(Value::String(s)) => match s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(list) => list.split_whitespace().map(str::to_owned).collect(),
            None => vec![s.clone()],
        },
        _ => Vec::new(),
    }
}

/// The console's sign-in through your OpenID Connect identity provider, where the control plane
/// serves the page (on AWS): authorization code with PKCE, a public client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcSignIn {
    /// Its tokens' `iss` (the discovery document is under it).
    pub issuer: String,
    /// The console's client id, its tokens' audience.
    pub client_id: String,
    /// Where its authorization and token endpoints are, when not at the issuer's origin.
    pub sign_in_origin: Option<String>,
}

impl OidcSignIn {
    /// The origins the page may connect to beside its own: the issuer's (discovery, keys) and the
    /// sign-in's.
    pub fn origins(&self) -> Vec<String> {
        let mut out = vec![origin(&self.issuer)];
        out.extend(self.sign_in_origin.as_deref().map(origin));
        out.dedup();
        out
    }

    /// What the page reads to sign in (`config.json`).
    pub fn config(&self, roles: &[super::operator::OperatorRole], stack: &str) -> serde_json::Value {
        serde_json::json!({
            "sign_in": "oidc",
            "issuer": self.issuer,
            "client_id": self.client_id,
            "roles": roles,
            "stack": stack,
        })
    }
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let host = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ACCOUNT: &str = "123456789012";

    fn sign_in() -> ConsoleSignIn {
        ConsoleSignIn {
            groups: "viewer:fin-viewers,maker:fin-makers,approver:fin-controllers"
                .parse()
                .unwrap(),
            groups_claim: DEFAULT_GROUPS_CLAIM.into(),
            name_claim: DEFAULT_NAME_CLAIM.into(),
        }
    }

    /// `v`, with the issuer and a `sub` of the e-mail's name unless given.
    fn claims(v: Value) -> Map<String, Value> {
        let mut c = v.as_object().unwrap().clone();
        let sub = c
            .get("email")
            .and_then(Value::as_str)
            .map(|e| format!("sub-{}", e.to_lowercase()));
        c.entry("iss").or_insert_with(|| json!("https://idp.example.com"));
        if let Some(sub) = sub {
            c.entry("sub").or_insert_with(|| json!(sub));
        }
        c
    }

    #[test]
    fn roles_come_from_the_groups_claim_in_each_shape_it_arrives_in() {
        let s = sign_in();
        for groups in [
            json!("[fin-makers other]"),
            json!(["fin-makers", "other"]),
            json!("fin-makers"),
        ] {
            let c = s
                .caller(
                    &claims(json!({"email": "Alice@Example.com", "groups": groups})),
                    ACCOUNT,
                    None,
                )
                .unwrap();
            assert_eq!(c.role, Some(OperatorRole::Maker), "{groups}");
            assert!(
                c.identity
                    .arn
                    .starts_with("console/123456789012/maker/alice@example.com/"),
                "{}",
                c.identity.arn
            );
        }
        // A group of no role, no groups claim, or a string of one group (not a list by commas):
        // a caller without a role.
        for groups in [json!("[other]"), json!(null), json!(7), json!("other, fin-makers")] {
            let c = s
                .caller(
                    &claims(json!({"email": "a@example.com", "groups": groups})),
                    ACCOUNT,
                    None,
                )
                .unwrap();
            assert_eq!(c.role, None, "{groups}");
            assert!(c.identity.arn.starts_with("console/123456789012/-/a@example.com/"));
            assert!(c.may(crate::domain::operator::Operation::Replay).is_err());
        }
    }

    #[test]
    fn a_person_of_several_roles_acts_in_the_one_they_name_and_only_one_of_theirs() {
        let s = sign_in();
        let both = claims(json!({"email": "bob@example.com", "groups": "[fin-makers fin-controllers]"}));
        assert!(
            s.caller(&both, ACCOUNT, None)
                .unwrap_err()
                .why()
                .contains("say which one")
        );
        let approver = s.caller(&both, ACCOUNT, Some("approver")).unwrap();
        assert_eq!(approver.role, Some(OperatorRole::Approver));
        // Refused as the person, without a role (the refusal is theirs, audited).
        let SignInRefused::Role { person, why } = s.caller(&both, ACCOUNT, Some("admin")).unwrap_err() else {
            panic!("a role refusal");
        };
        assert!(why.contains("does not hold the admin role"), "{why}");
        assert_eq!(
            (person.role, person.identity.person()),
            (None, "123456789012:bob@example.com".to_owned())
        );
        let SignInRefused::Role { why, .. } = s.caller(&both, ACCOUNT, Some("chief\n")).unwrap_err() else {
            panic!("a role refusal");
        };
        assert!(why.contains("no operator role") && !why.contains('\n'), "{why}");
    }

    #[test]
    fn one_person_is_one_person_through_either_door() {
        let s = sign_in();
        let at_console = s
            .caller(
                &claims(json!({"email": "Alice@Example.com", "groups": "fin-controllers"})),
                ACCOUNT,
                None,
            )
            .unwrap();
        let through_iam = Identity {
            arn: format!("arn:aws:sts::{ACCOUNT}:assumed-role/acme-maker/alice@example.com"),
            name: None,
        };
        assert_eq!(at_console.identity.person(), through_iam.person());
        assert_eq!(at_console.identity.person(), "123456789012:alice@example.com");
        // Another person, and the role's principal without the person.
        let other = s
            .caller(
                &claims(json!({"email": "carol@example.com", "groups": "fin-controllers"})),
                ACCOUNT,
                None,
            )
            .unwrap();
        assert_ne!(other.identity.person(), at_console.identity.person());
        assert_eq!(other.identity.principal(), "console/123456789012/approver");
    }

    #[test]
    fn a_token_without_a_usable_name_signs_no_one_in() {
        let s = sign_in();
        let no_name = claims(json!({"sub": "x", "groups": "fin-makers"}));
        let no_one = s.caller(&no_name, ACCOUNT, None).unwrap_err();
        assert!(
            matches!(&no_one, SignInRefused::NoOne(w) if w.contains("no `email` claim")),
            "{no_one:?}"
        );
        for bad in ["a", "has space@example.com", "slash/alice", &"x".repeat(65)] {
            let c = claims(json!({"email": bad, "groups": "fin-makers"}));
            assert!(
                matches!(s.caller(&c, ACCOUNT, None), Err(SignInRefused::NoOne(_))),
                "{bad}"
            );
        }
        // A name that would read as another shape is refused, not parsed.
        let c = claims(json!({"email": "alice/maker", "groups": "fin-makers"}));
        assert!(s.caller(&c, ACCOUNT, None).is_err());
        assert!(
            s.caller(&claims(json!({"email": "ok@example.com"})), "12", None)
                .is_err()
        );
        // Without a role, still one person.
        let none = s
            .caller(&claims(json!({"email": "OK@example.com"})), ACCOUNT, None)
            .unwrap();
        assert_eq!(
            (none.role, none.identity.person()),
            (None, "123456789012:ok@example.com".to_owned())
        );
    }

    #[test]
    fn a_name_its_provider_has_not_verified_or_no_subject_signs_no_one_in() {
        let s = sign_in();
        for verified in [json!("false"), json!(false), json!("no")] {
            let c = claims(json!({"email": "bob@example.com", "email_verified": verified, "groups": "fin-makers"}));
            assert!(matches!(s.caller(&c, ACCOUNT, None), Err(SignInRefused::NoOne(w)) if w.contains("not verified")));
        }
        for verified in [json!("true"), json!(true)] {
            let c = claims(json!({"email": "bob@example.com", "email_verified": verified, "groups": "fin-makers"}));
            assert!(s.caller(&c, ACCOUNT, None).is_ok());
        }
        let mut no_sub = claims(json!({"email": "bob@example.com", "groups": "fin-makers"}));
        no_sub.remove("sub");
        assert!(matches!(s.caller(&no_sub, ACCOUNT, None), Err(SignInRefused::NoOne(w)) if w.contains("`sub`")));
    }

    /// A person who changes the address they sign in with is still who their provider says they
    /// are (the same `sub`); another provider's `sub` of the same text is someone else.
    #[test]
    fn the_subject_stays_when_the_name_changes() {
        let s = sign_in();
        let before = s
            .caller(
                &claims(json!({"email": "alice@example.com", "sub": "u-1", "groups": "fin-makers"})),
                ACCOUNT,
                None,
            )
            .unwrap();
        let renamed = s
            .caller(
                &claims(json!({"email": "alice2@example.com", "sub": "u-1", "groups": "fin-controllers"})),
                ACCOUNT,
                None,
            )
            .unwrap();
        assert_ne!(before.identity.person(), renamed.identity.person());
        assert_eq!(before.identity.subject(), renamed.identity.subject());
        let elsewhere = s
            .caller(
                &claims(json!({"email": "alice@example.com", "sub": "u-1", "iss": "https://other.example.com", "groups": "fin-makers"})),
                ACCOUNT,
                None,
            )
            .unwrap();
        assert_ne!(before.identity.subject(), elsewhere.identity.subject());
    }

    #[test]
    fn the_mapping_is_checked() {
        assert!(
            "break-glass:ops"
                .parse::<ConsoleGroups>()
                .unwrap_err()
                .contains("never a console role")
        );
        assert!("maker:a b".parse::<ConsoleGroups>().is_err());
        assert!("maker:[a]".parse::<ConsoleGroups>().is_err());
        assert!(
            "maker:a,viewer:a"
                .parse::<ConsoleGroups>()
                .unwrap_err()
                .contains("each group once")
        );
        assert!("".parse::<ConsoleGroups>().is_err());
        assert!("chief:a".parse::<ConsoleGroups>().is_err());
        // Two groups may give one role.
        let g: ConsoleGroups = "maker:a,maker:b".parse().unwrap();
        assert_eq!(g.to_string().parse::<ConsoleGroups>(), Ok(g));
    }
}
