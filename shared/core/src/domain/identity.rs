//! Who acts: the identity AWS vouches for, through either door of the control plane.
//!
//! - `dlqctl` (and any SigV4 client): the principal API Gateway verified from the request's
//!   signature, a session of an operator role, `arn:PARTITION:sts::ACCOUNT:assumed-role/ROLE/SESSION`
//!   ([`AssumedRole`]); the template pins the session name to the person's user name.
//! - The console: a person signed in with the organisation's identity provider, whose token API
//!   Gateway's JWT authorizer verified, `console/ACCOUNT/ROLE/NAME/SUBJECT` ([`ConsoleSession`]):
//!   NAME the claim the deployment names, lower-cased; SUBJECT a digest of the token's issuer
//!   and `sub`, which no user can change (`crate::domain::console`).
//!
//! One person has one name through both: [`Identity::person`] is `ACCOUNT:NAME` for both shapes,
//! so when the console's name claim holds what sessions are named after, maker-checker holds
//! across the doors. Nothing a caller sends names an identity: both shapes are built from what
//! API Gateway verified, and no IAM ARN begins with `console/`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Who acts: the identity AWS vouches for, and the name they gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub arn: String,
    pub name: Option<String>,
}

/// A session of an assumed role, as STS names it: `arn:PARTITION:sts::ACCOUNT:assumed-role/ROLE/SESSION`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssumedRole<'a> {
    pub account: &'a str,
    pub role: &'a str,
    pub session: &'a str,
}

/// A person at the console: `console/ACCOUNT/ROLE/NAME`, ROLE the name of the operator role they
/// act in (`-`: none of their groups gives one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsoleSession<'a> {
    pub account: &'a str,
    pub role: &'a str,
    pub name: &'a str,
    pub subject: &'a str,
}

/// A console subject: 32 lower-case hex digits.
fn subject_digest(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An operator role's name as the console writes it (`maker`, `break-glass`), or `-` for none.
fn role_name(s: &str) -> bool {
    s == "-" || (!s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'))
}

/// The prefix of a console identity (no ARN has it).
const CONSOLE: &str = "console";

/// An account id: twelve digits.
pub fn account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

/// A name of IAM's characters (`A-Z a-z 0-9 + = , . @ _ -`), `min` to 64 long: a role's, a
/// session's, and so a console person's.
pub fn iam_name(s: &str, min: usize) -> bool {
    (min..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
}

impl Identity {
    /// A person at the console, acting in the operator role named `role` (none: `-`): `name` as
    /// [`iam_name`] allows a session's, lower-cased; `subject` who the identity provider says
    /// they are (its issuer and their `sub`, kept as a digest). `None` when the account or the
    /// name is not one.
    pub fn console(account: &str, role: Option<&str>, name: &str, subject: (&str, &str)) -> Option<Identity> {
        let name = name.to_ascii_lowercase();
        let role = role.unwrap_or("-");
        let (issuer, sub) = subject;
        let digest = super::hash::sha256_hex(format!("{issuer}#{sub}").as_bytes());
        let digest = digest.get(..32)?;
        (account_id(account) && role_name(role) && iam_name(&name, 2) && !sub.is_empty()).then(|| Identity {
            arn: format!("{CONSOLE}/{account}/{role}/{name}/{digest}"),
            name: None,
        })
    }

    /// The ARN read strictly as an assumed role's session: six fields, STS, no region, a 12-digit
    /// account, a role and a session name of IAM's characters; `None` for any other ARN (a user
    /// whose path reads like an assumed role is a user).
    pub fn assumed_role(&self) -> Option<AssumedRole<'_>> {
        let fields: Vec<&str> = self.arn.split(':').collect();
        let [arn, partition, service, region, account, resource] = fields[..] else {
            return None;
        };
        let parts: Vec<&str> = resource.split('/').collect();
        let ["assumed-role", role, session] = parts[..] else {
            return None;
        };
        let ok = arn == "arn"
            && partition.starts_with("aws")
            && service == "sts"
            && region.is_empty()
            && account_id(account)
            && iam_name(role, 1)
            && iam_name(session, 2);
        ok.then_some(AssumedRole { account, role, session })
    }

    /// The identity read strictly as a console session (as [`Identity::console`] builds it).
    pub fn console_session(&self) -> Option<ConsoleSession<'_>> {
        let parts: Vec<&str> = self.arn.split('/').collect();
        let [CONSOLE, account, role, name, subject] = parts[..] else {
            return None;
        };
        let ok = role_name(role)
            && account_id(account)
            && iam_name(name, 2)
            && !name.bytes().any(|b| b.is_ascii_uppercase())
            && subject_digest(subject);
        ok.then_some(ConsoleSession {
            account,
            role,
            name,
            subject,
        })
    }

    /// The principal without its session: `arn:aws:sts::A:assumed-role/ROLE/SESSION` is
    /// `arn:aws:sts::A:assumed-role/ROLE` (the caller chooses SESSION),
    /// `console/A/ROLE/NAME/SUBJECT` is `console/A/ROLE`; any other ARN as it is.
    pub fn principal(&self) -> &str {
        if self.assumed_role().is_some() {
            return self.arn.rsplit_once('/').map_or(&self.arn, |(p, _)| p);
        }
        match self.console_session() {
            Some(c) => &self.arn[..CONSOLE.len() + c.account.len() + c.role.len() + 2],
            None => &self.arn,
        }
    }

    /// Who the identity provider says a console caller is, whatever name they go by now.
    pub fn subject(&self) -> Option<&str> {
        self.console_session().map(|c| c.subject)
    }

    /// The person: an assumed role's session or a console name (`ACCOUNT:NAME`, in lower case as
    /// IAM compares names; the operator roles' trust policies pin the session name to who
    /// assumed the role), any other ARN as it is.
    pub fn person(&self) -> String {
        if let Some(a) = self.assumed_role() {
            return format!("{}:{}", a.account, a.session.to_ascii_lowercase());
        }
        match self.console_session() {
            Some(c) => format!("{}:{}", c.account, c.name),
            None => self.arn.clone(),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, "{} (as {n})", self.arn),
            None => f.write_str(&self.arn),
        }
    }
}
