//! Who the caller is, as AWS knows them (`sts:GetCallerIdentity`): the account a deployment's
//! names and bucket owner derive from, and the identity recorded as the actor of an operator's
//! change (never a name the local machine supplies).

use crate::client::{AwsClients, Target};
use crate::error::store_error;
use recon_core::domain::TransientKind;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources::ResourceNames;

/// The caller's account and identity (ARN).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub account: String,
    pub arn: String,
}

/// STS with the clients' own credentials.
fn sts(clients: &AwsClients) -> aws_sdk_sts::Client {
    let mut sts = aws_sdk_sts::config::Builder::from(&clients.config);
    if let Target::Local { edge_url, .. } = &clients.target {
        sts = sts.endpoint_url(edge_url);
    }
    aws_sdk_sts::Client::from_conf(sts.build())
}

/// Who the clients act as (their own credentials, not the environment's).
pub async fn caller(clients: &AwsClients) -> StoreResult<Caller> {
    let out = sts(clients)
        .get_caller_identity()
        .send()
        .await
        .map_err(|e| store_error("GetCallerIdentity", e))?;
    match (out.account(), out.arn()) {
        (Some(account), Some(arn)) if !account.is_empty() && !arn.is_empty() => Ok(Caller {
            account: account.to_owned(),
            arn: arn.to_owned(),
        }),
        _ => Err(StoreError::new(
            TransientKind::Infrastructure,
            "sts:GetCallerIdentity named no account or identity",
        )),
    }
}

/// The credentials of role `role_arn` (`sts:AssumeRole`, session `session`): a second identity,
/// such as an approver's.
pub async fn assume_role_credentials(
    clients: &AwsClients,
    role_arn: &str,
    session: &str,
) -> StoreResult<aws_sdk_dynamodb::config::Credentials> {
    let out = sts(clients)
        .assume_role()
        .role_arn(role_arn)
        .role_session_name(session)
        .send()
        .await
        .map_err(|e| store_error("AssumeRole", e))?;
    let c = out
        .credentials()
        .ok_or_else(|| StoreError::new(TransientKind::Infrastructure, "sts:AssumeRole returned no credentials"))?;
    Ok(aws_sdk_dynamodb::config::Credentials::new(
        c.access_key_id(),
        c.secret_access_key(),
        Some(c.session_token().to_owned()),
        None,
        "assume-role",
    ))
}

/// The clients acting as role `role_arn` (see [`assume_role_credentials`]).
pub async fn assume_role(clients: &AwsClients, role_arn: &str, session: &str) -> StoreResult<AwsClients> {
    Ok(clients.with_credentials(assume_role_credentials(clients, role_arn, session).await?))
}

/// The names the template gives a deployment with `prefix` in the caller's account and the
/// clients' region ([`ResourceNames::derive`], which a test holds to the template).
pub async fn derived_names(clients: &AwsClients, prefix: &str) -> StoreResult<ResourceNames> {
    let account = caller(clients).await?.account;
    Ok(ResourceNames::derive(prefix, &account, &region(clients)))
}

/// The region the clients use.
pub fn region(clients: &AwsClients) -> String {
    clients
        .sqs
        .config()
        .region()
        .map_or_else(|| "us-east-1".to_owned(), |r| r.to_string())
}
