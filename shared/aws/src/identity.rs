//! Who the caller is, as AWS knows them (`sts:GetCallerIdentity`): the account a deployment's
//! names and bucket owner derive from, and the identity recorded as the actor of an operator's
//! change (never a name the local machine supplies).

use crate::client::{AwsClients, ClientTimeouts, Target, shared_config};
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

pub async fn caller(clients: &AwsClients) -> StoreResult<Caller> {
    let shared = shared_config(&clients.target, ClientTimeouts::INTERACTIVE).await;
    let mut sts = aws_sdk_sts::config::Builder::from(&shared);
    if let Target::Local { edge_url, .. } = &clients.target {
        sts = sts.endpoint_url(edge_url);
    }
    let out = aws_sdk_sts::Client::from_conf(sts.build())
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

/// The names a deployment with `prefix` has in the caller's account and the clients' region (the
/// template's rule, [`ResourceNames::derive`]).
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
