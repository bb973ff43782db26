//! The decision key as the template declares it (`DecisionKey`, `DecisionKeyAlias`): an HMAC key
//! under the alias the control plane is given. Its key policy is left to AWS (LocalStack does not
//! evaluate key policies; `tests/iam_offline.rs` does, offline).

use aws_sdk_kms::types::{KeySpec, KeyUsageType, Tag};

use super::{CREATED_BY_TAG, refuse_unknown_properties, template_error};
use crate::template::{Deployment, TemplateError};
use recon_aws::client::AwsClients;
use recon_aws::error::store_error;
use recon_core::ports::{StoreError, StoreResult};

pub(super) const KEY: &str = "DecisionKey";
const ALIAS: &str = "DecisionKeyAlias";
const BUILT: [&str; 3] = ["Description", "KeySpec", "KeyUsage"];
const LEFT_TO_AWS: [&str; 1] = ["KeyPolicy"];

fn from_template(e: TemplateError) -> StoreError {
    StoreError::infra(e.to_string())
}

/// The alias the template gives the decision key in deployment `d`.
pub(super) fn alias(d: &Deployment<'_>) -> StoreResult<String> {
    d.text(ALIAS, "AliasName").map_err(from_template)
}

/// Create the decision key under its alias, or check the one there is the template's kind of key.
pub(super) async fn ensure_decision_key(clients: &AwsClients, d: &Deployment<'_>) -> StoreResult<()> {
    let declared = d.template().declaration(KEY).map_err(from_template)?;
    let properties = declared
        .get("Properties")
        .and_then(|p| p.as_object())
        .ok_or_else(|| template_error(format!("{KEY} has no properties")))?;
    refuse_unknown_properties(KEY, properties, &BUILT, &LEFT_TO_AWS, "key.rs")?;
    let spec = KeySpec::from(d.text(KEY, "KeySpec").map_err(from_template)?.as_str());
    let usage = KeyUsageType::from(d.text(KEY, "KeyUsage").map_err(from_template)?.as_str());
    let alias = alias(d)?;
    let kms = clients.kms();
    if let Ok(found) = kms.describe_key().key_id(&alias).send().await {
        let meta = found.key_metadata();
        let kind = meta.map(|m| (m.key_spec().cloned(), m.key_usage().cloned()));
        return match kind == Some((Some(spec.clone()), Some(usage.clone()))) {
            true => Ok(()),
            false => Err(template_error(format!(
                "{alias} names a key that is not {spec} for {usage}: not this stack's decision key"
            ))),
        };
    }
    let created = kms
        .create_key()
        .key_spec(spec)
        .key_usage(usage)
        .description(d.text(KEY, "Description").map_err(from_template)?)
        .tags(
            Tag::builder()
                .tag_key(CREATED_BY_TAG.0)
                .tag_value(CREATED_BY_TAG.1)
                .build()
                .map_err(|e| StoreError::infra(format!("CreateKey tag: {e}")))?,
        )
        .send()
        .await
        .map_err(|e| store_error("CreateKey", e))?;
    let id = created
        .key_metadata()
        .map(|m| m.key_id().to_owned())
        .ok_or_else(|| StoreError::infra("CreateKey: no key id returned"))?;
    kms.create_alias()
        .alias_name(&alias)
        .target_key_id(id)
        .send()
        .await
        .map_err(|e| store_error("CreateAlias", e))?;
    Ok(())
}

/// Remove the decision key of deployment `d` (test clean-up): its alias, and the key scheduled
/// for deletion (KMS keeps a key at least seven days).
pub(super) async fn delete_decision_key(clients: &AwsClients, d: &Deployment<'_>) {
    let Ok(alias) = alias(d) else { return };
    let kms = clients.kms();
    let key = kms.describe_key().key_id(&alias).send().await.ok();
    let _ = kms.delete_alias().alias_name(&alias).send().await;
    if let Some(id) = key
        .as_ref()
        .and_then(|k| k.key_metadata())
        .map(|m| m.key_id().to_owned())
    {
        let _ = kms
            .schedule_key_deletion()
            .key_id(id)
            .pending_window_in_days(7)
            .send()
            .await;
    }
}
