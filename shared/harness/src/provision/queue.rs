//! A queue as the template declares it: every property but its name is a queue attribute of the
//! same name (SQS's and CloudFormation's spellings agree), set again on every run.

use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Map, Value};
use std::collections::HashMap;

use super::{CREATED_BY_TAG, template_error};
use crate::template::Created;
use recon_aws::client::AwsClients;
use recon_aws::error::store_error;
use recon_aws::stack::{queue_arn, queue_url};
use recon_core::ports::{StoreError, StoreResult};

/// Properties that are not queue attributes.
const NOT_ATTRIBUTES: [&str; 2] = ["QueueName", "Tags"];
/// Attributes SQS takes only when it creates the queue.
const ON_CREATE_ONLY: [&str; 1] = ["FifoQueue"];

/// A property's value as SQS wants it: text (a policy as its JSON).
fn attribute_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Create the queue `id` declares, or set its attributes again; what it gives the resources
/// after it (`Ref`: its URL; `Arn`, `QueueName`, `QueueUrl`).
pub(super) async fn ensure_queue(
    clients: &AwsClients,
    id: &str,
    properties: &Map<String, Value>,
) -> StoreResult<Created> {
    let name = properties
        .get("QueueName")
        .and_then(Value::as_str)
        .ok_or_else(|| template_error(format!("{id} has no QueueName")))?;
    let attributes: HashMap<QueueAttributeName, String> = properties
        .iter()
        .filter(|(k, _)| !NOT_ATTRIBUTES.contains(&k.as_str()))
        .map(|(k, v)| (QueueAttributeName::from(k.as_str()), attribute_text(v)))
        .collect();
    let url = match queue_url(clients, name).await? {
        Some(url) => {
            let changeable = attributes
                .into_iter()
                .filter(|(k, _)| !ON_CREATE_ONLY.contains(&k.as_str()))
                .collect();
            clients
                .sqs
                .set_queue_attributes()
                .queue_url(&url)
                .set_attributes(Some(changeable))
                .send()
                .await
                .map_err(|e| store_error("SetQueueAttributes", e))?;
            url
        }
        None => clients
            .sqs
            .create_queue()
            .queue_name(name)
            .set_attributes(Some(attributes))
            .tags(CREATED_BY_TAG.0, CREATED_BY_TAG.1)
            .send()
            .await
            .map_err(|e| store_error("CreateQueue", e))?
            .queue_url()
            .map(str::to_owned)
            .ok_or_else(|| StoreError::infra(format!("CreateQueue {name}: no URL returned")))?,
    };
    let arn = queue_arn(clients, &url).await?;
    Ok(Created {
        reference: url.clone(),
        attributes: [
            ("Arn".to_owned(), arn),
            ("QueueName".to_owned(), name.to_owned()),
            ("QueueUrl".to_owned(), url),
        ]
        .into(),
    })
}
