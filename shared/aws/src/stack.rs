//! A deployment's addresses as the functions and `dlqctl` find them: its queues' URLs and ARNs
//! beside the names of its resources. The resources are made by the template on AWS (`make
//! deploy`), and on the local stack by the developer's tool (`cargo xtask setup`).

use aws_sdk_sqs::types::QueueAttributeName;
use recon_core::ports::{StoreError, StoreResult};
use recon_core::resources::ResourceNames;

use crate::client::AwsClients;
use crate::error::store_error;
use crate::sqs::SqsQueue;

/// The resolved addresses of a deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    pub names: ResourceNames,
    pub main_queue_url: String,
    pub main_queue_arn: String,
    pub dlq_url: String,
    pub dlq_arn: String,
    /// Behind the DLQ: the dead letters the enricher kept failing on.
    pub parked_url: String,
}

impl Stack {
    /// The configuration variables the functions of this stack are given (as the template sets
    /// them): queue URLs and resource names.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        recon_core::config::environment(&self.names, &self.main_queue_url, &self.dlq_url, &self.parked_url)
    }

    /// A settings lookup for `recon_core::config`'s parsers: every name from this stack's
    /// [`Stack::env`] (a stale `DLQ_*_TABLE` or queue URL in the shell must never redirect a
    /// replay against `--stack prod`), every other setting from `other` (the process
    /// environment, or a test's own values).
    pub fn lookup(&self, other: impl Fn(&str) -> Option<String>) -> impl Fn(&str) -> Option<String> {
        let env = self.env();
        move |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
                .or_else(|| other(k))
        }
    }
}

/// Find an existing deployment's queues (fails with a hint when they do not exist).
pub async fn resolve_stack(clients: &AwsClients, names: &ResourceNames) -> StoreResult<Stack> {
    let missing = |q: &str| {
        StoreError::infra(format!(
            "queue {q} does not exist: deploy the stack (or `make local-up`) first"
        ))
    };
    // A deployment with FIFO queues is found by its prefix too.
    let (names, main_queue_url) = match queue_url(clients, &names.main_queue).await? {
        Some(url) => (names.clone(), url),
        None => {
            let fifo = names.clone().with_fifo_queues();
            match queue_url(clients, &fifo.main_queue).await? {
                Some(url) if !names.fifo() => (fifo, url),
                _ => return Err(missing(&names.main_queue)),
            }
        }
    };
    let dlq_url = queue_url(clients, &names.dead_letter_queue)
        .await?
        .ok_or_else(|| missing(&names.dead_letter_queue))?;
    let parked_url = queue_url(clients, &names.parking_queue)
        .await?
        .ok_or_else(|| missing(&names.parking_queue))?;
    Ok(Stack {
        parked_url,
        names,
        main_queue_arn: queue_arn(clients, &main_queue_url).await?,
        dlq_arn: queue_arn(clients, &dlq_url).await?,
        main_queue_url,
        dlq_url,
    })
}

pub async fn queue_url(clients: &AwsClients, name: &str) -> StoreResult<Option<String>> {
    match clients.sqs.get_queue_url().queue_name(name).send().await {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_queue_does_not_exist()) => Ok(None),
        Err(e) => Err(store_error("GetQueueUrl", e)),
    }
}

pub async fn queue_arn(clients: &AwsClients, url: &str) -> StoreResult<String> {
    SqsQueue::new(clients.sqs.clone(), url)
        .attribute(QueueAttributeName::QueueArn)
        .await?
        .ok_or_else(|| StoreError::infra(format!("queue {url} has no ARN")))
}
