//! Operators and what each may ask of the control plane: the operator roles of the template, a
//! caller as AWS verified them, and the one table of which role may ask which operation. Pure.
//!
//! A caller's role is read from the principal AWS verified for the request (the request
//! context's `userArn`: `arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`), never from the
//! payload. The template pins each operator role's session name to the person who assumed it
//! (`sts:RoleSessionName`), so the session names the person ([`Identity::person`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::identity::Identity;
use super::policy::Refused;

named! {
    /// An operator role of the template: what its holders may ask of the control plane. None of
    /// them may write the tables, the queues or the bucket, nor invoke the replay function.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum OperatorRole {
        /// Reads envelopes, triage and approval requests (the console's views, through the
        /// control plane; `dlqctl`, from the stores).
        Viewer = "viewer",
        /// Proposes replays, quarantines and edits (and withdraws their own proposals).
        Maker = "maker",
        /// Approves or rejects another person's proposal.
        Approver = "approver",
        /// Reads the audit trail and the postings: verify, reconcile, export evidence.
        Auditor = "auditor",
        /// Changes the approval policy, accounting periods and currency mappings.
        Admin = "admin",
        /// Writes the stores directly when the control plane cannot: alarmed, and audited by
        /// CloudTrail; the control plane itself grants it nothing.
        BreakGlass = "break-glass",
    }
}

named! {
    /// What an operator may ask of the control plane.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum Operation {
        /// Who the control plane takes the caller for, and their role.
        Whoami = "whoami",
        /// Replay envelopes: a dry run; a run, under the approval policy; above it, an approval
        /// request for exactly what its dry run would change.
        Replay = "replay",
        /// Quarantine envelopes (for a manual journal), as a replay: under the policy or asked.
        Quarantine = "quarantine",
        /// Propose an edited body for a dead letter: always an approval request.
        Edit = "edit",
        Approve = "approve",
        /// Reject a request (its maker may, to withdraw their own).
        Reject = "reject",
        /// Run an approved request, or resume a paused one.
        Execute = "execute",
        SetPolicy = "set-policy",
        ClosePeriod = "close-period",
        OpenPeriod = "open-period",
        SchedulePeriodClose = "schedule-period-close",
        PutCurrency = "put-currency",
        /// Read one segment of a period's postings (reconciliation).
        ReconcileSegment = "reconcile-segment",
        /// A period's reconciliation, whole (the console's evidence).
        Reconcile = "reconcile",
        /// Verify the audit trail against the bucket's seals, whole or from a seal (the
        /// console's evidence).
        VerifyAudit = "verify-audit",
        /// Seal the trail and keep a period's evidence bundle in the bucket, with an address to
        /// download it from (the console's evidence).
        ExportEvidence = "export-evidence",
        /// Seal the audit trail now (before an evidence export, or by hand): it decides nothing,
        /// but writes to the bucket, which no operator role may.
        Seal = "seal",
        /// The console's reads: the triage groups, a page of envelopes, one envelope, a page of
        /// approval requests, one request. Every operator role reads them.
        Triage = "triage",
        Envelopes = "envelopes",
        Envelope = "envelope",
        Requests = "requests",
        Request = "request",
    }
}

impl Operation {
    /// The roles that may ask for it.
    pub fn roles(self) -> &'static [OperatorRole] {
        use OperatorRole::*;
        match self {
            Operation::Whoami => &OperatorRole::ALL,
            Operation::Triage
            | Operation::Envelopes
            | Operation::Envelope
            | Operation::Requests
            | Operation::Request => &READERS,
            Operation::Replay | Operation::Quarantine | Operation::Edit => &[Maker],
            Operation::Approve => &[Approver],
            Operation::Reject => &[Approver, Maker],
            Operation::Execute => &[Maker, Approver],
            Operation::SetPolicy
            | Operation::ClosePeriod
            | Operation::OpenPeriod
            | Operation::SchedulePeriodClose
            | Operation::PutCurrency => &[Admin],
            Operation::ReconcileSegment | Operation::Reconcile | Operation::VerifyAudit | Operation::ExportEvidence => {
                &[Auditor]
            }
            Operation::Seal => &[Auditor, Admin],
        }
    }
}

/// Every operator role but break-glass (which the control plane grants nothing and the console
/// never admits): the roles that read what the console shows, and the roles a console sign-in
/// may act in.
pub const READERS: [OperatorRole; 5] = [
    OperatorRole::Viewer,
    OperatorRole::Maker,
    OperatorRole::Approver,
    OperatorRole::Auditor,
    OperatorRole::Admin,
];

/// The IAM names of the operator roles (`DLQ_OPERATOR_ROLES`: `viewer:NAME,maker:NAME,…`): at
/// least one, each role once, each name an IAM role name (1-64 of A-Z a-z 0-9 + . @ _ -; `=`
/// and `,` are IAM's too, but separate the pairs here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleNames(BTreeMap<String, OperatorRole>);

impl std::str::FromStr for RoleNames {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut names = BTreeMap::new();
        for (pair, role, name) in role_pairs(s, "IAM_ROLE_NAME")? {
            let iam_name = (1..=64).contains(&name.len())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "+.@_-".contains(c));
            if !iam_name {
                return Err(format!("`{pair}`: not an IAM role name"));
            }
            if names.values().any(|r| *r == role) || names.insert(name.to_owned(), role).is_some() {
                return Err(format!("`{pair}`: each role once, each to its own IAM role"));
            }
        }
        if names.is_empty() {
            return Err("no operator role named".into());
        }
        Ok(RoleNames(names))
    }
}

impl std::fmt::Display for RoleNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&shown_pairs(&self.0))
    }
}

/// `ROLE:NAME` pairs, comma-separated, blank ones skipped: each as written, its role and its
/// name (trimmed); `what` says what NAME is, in the error.
pub fn role_pairs<'a>(s: &'a str, what: &str) -> Result<Vec<(&'a str, OperatorRole, &'a str)>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (role, name) = pair
                .split_once(':')
                .ok_or_else(|| format!("`{pair}`: expected ROLE:{what}"))?;
            let role: OperatorRole = role.trim().parse().map_err(|e| format!("`{pair}`: {e}"))?;
            Ok((pair, role, name.trim()))
        })
        .collect()
}

/// Names and their roles as [`role_pairs`] reads them.
pub fn shown_pairs(roles: &BTreeMap<String, OperatorRole>) -> String {
    let pairs: Vec<String> = roles.iter().map(|(name, role)| format!("{role}:{name}")).collect();
    pairs.join(",")
}

/// A caller of the control plane as AWS verified them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    pub identity: Identity,
    /// The operator role of the session (none: the principal is no operator role's session).
    pub role: Option<OperatorRole>,
}

impl Caller {
    /// The caller whose verified principal is `arn`: a session of an operator role holds that
    /// role; any other principal holds none.
    pub fn verified(arn: &str, roles: &RoleNames) -> Caller {
        let identity = Identity {
            arn: arn.to_owned(),
            name: None,
        };
        let role = identity.assumed_role().and_then(|a| roles.0.get(a.role).copied());
        Caller { identity, role }
    }

    /// The caller's role if it may ask for `op`; else the refusal naming the roles that may.
    pub fn may(&self, op: Operation) -> Result<OperatorRole, Refused> {
        let allowed = op.roles();
        match self.role {
            Some(role) if allowed.contains(&role) => Ok(role),
            held => {
                let needed: Vec<&str> = allowed.iter().map(|r| r.as_str()).collect();
                let held = held.map_or_else(|| "no operator role".to_owned(), |r| format!("the {r} role"));
                Err(Refused(format!(
                    "`{op}` needs the {} role; {} holds {held}",
                    needed.join(" or "),
                    self.identity.arn
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles() -> RoleNames {
        "viewer:acme-viewer, maker:acme-maker,approver:acme-approver,auditor:acme-auditor,admin:acme-admin,break-glass:acme-break-glass"
            .parse()
            .unwrap()
    }

    fn session(role: &str, person: &str) -> Caller {
        Caller::verified(
            &format!("arn:aws:sts::123456789012:assumed-role/{role}/{person}"),
            &roles(),
        )
    }

    #[test]
    fn the_role_is_the_verified_sessions_and_nothing_else() {
        assert_eq!(session("acme-maker", "alice").role, Some(OperatorRole::Maker));
        assert_eq!(
            session("acme-break-glass", "alice").role,
            Some(OperatorRole::BreakGlass)
        );
        assert_eq!(session("other-maker", "alice").role, None);
        for arn in [
            "arn:aws:iam::123456789012:user/acme-maker",
            "arn:aws:iam::123456789012:role/acme-maker",
            "arn:aws:sts::123456789012:assumed-role/acme-maker",
            "acme-maker",
            // A user whose path reads like an assumed role is a user: it holds no role.
            "arn:aws:iam::123456789012:user/:assumed-role/acme-approver/bob",
            "arn:aws:sts::123456789012:assumed-role/acme-maker/alice/more",
            "arn:aws:sts:eu-west-1:123456789012:assumed-role/acme-maker/alice",
            "arn:aws:sts::12345:assumed-role/acme-maker/alice",
            "arn:aws:iam::123456789012:assumed-role/acme-maker/alice",
        ] {
            assert_eq!(Caller::verified(arn, &roles()).role, None, "{arn}");
        }
        assert_eq!(roles().to_string().parse::<RoleNames>(), Ok(roles()));
    }

    #[test]
    fn each_operation_is_refused_to_every_role_but_its_own_naming_the_role_needed() {
        let names = [
            "acme-viewer",
            "acme-maker",
            "acme-approver",
            "acme-auditor",
            "acme-admin",
            "acme-break-glass",
        ];
        let mut allowed = 0;
        for op in Operation::ALL {
            for name in names {
                let caller = session(name, "alice");
                let role = caller.role.unwrap();
                match caller.may(op) {
                    Ok(r) => {
                        assert_eq!(r, role);
                        assert!(op.roles().contains(&role));
                        allowed += 1;
                    }
                    Err(e) => {
                        assert!(!op.roles().contains(&role), "{op} {role}");
                        assert!(e.0.contains(op.roles()[0].as_str()) && e.0.contains(name), "{e}");
                    }
                }
            }
            let nobody = Caller::verified("arn:aws:iam::123456789012:user/mallory", &roles()).may(op);
            assert!(nobody.is_err_and(|e| e.0.contains("no operator role")));
        }
        assert!(allowed > Operation::ALL.len());
        // Break-glass writes the stores itself: it asks the control plane nothing but who it
        // is; every other role reads, and only the viewer does nothing else.
        let reads = [
            Operation::Whoami,
            Operation::Triage,
            Operation::Envelopes,
            Operation::Envelope,
            Operation::Requests,
            Operation::Request,
        ];
        for role in OperatorRole::ALL {
            let asks = |op: &&Operation| op.roles().contains(&role);
            let reading = reads.iter().filter(asks).count();
            let more = Operation::ALL
                .iter()
                .filter(|op| !reads.contains(op))
                .filter(asks)
                .count();
            let expected = match role {
                OperatorRole::BreakGlass => (1, 0),
                OperatorRole::Viewer => (reads.len(), 0),
                _ => (reads.len(), more.max(1)),
            };
            assert_eq!((reading, more), expected, "{role}");
        }
    }

    #[test]
    fn role_names_are_each_once() {
        for bad in [
            "maker",
            "maker:",
            "boss:acme-boss",
            "maker:a,maker:b",
            "maker:a,approver:a",
        ] {
            assert!(bad.parse::<RoleNames>().is_err(), "{bad}");
        }
    }
}
