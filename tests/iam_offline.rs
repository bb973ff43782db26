//! What IAM decides, evaluated offline: the local emulators enforce no IAM, so the template's
//! policies (each role's identity policies, the bucket's resource policy) are resolved for a
//! deployment and handed, with a table of requests, to an IAM policy simulator
//! (`@cloud-copilot/iam-simulate`, installed by `infra/tools.sh` into `.local-aws/iam-simulate`,
//! run by `infra/iam_simulate.cjs`). Each row says who asks what of which resource, under which
//! condition keys, and whether AWS must allow it; the table is the specification, written by
//! hand, never derived from the policies it checks.

use recon_harness::template::{Created, Deployment, Template};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const ACCOUNT: &str = "123456789012";
const REGION: &str = "eu-west-1";
const PREFIX: &str = "acme";
/// The deployment's one declared producer.
const PRODUCER: &str = "arn:aws:iam::123456789012:role/bank-feed";
/// Principals beside the template's roles: the declared producer (who may send anything
/// anywhere, by its own grants), EventBridge Scheduler's service principal, an administrator of
/// the account (who may do anything), and an IAM user whom the account lets assume any role
/// (which operator roles they get is the roles' trust policies).
const OTHERS: [(&str, &str, &str); 4] = [
    ("Producer", PRODUCER, "sqs:SendMessage"),
    ("Scheduler", "scheduler.amazonaws.com", "sts:AssumeRole"),
    ("Admin", "arn:aws:iam::123456789012:role/admin", "*"),
    ("Alice", "arn:aws:iam::123456789012:user/alice", "sts:AssumeRole"),
];

/// The deployment with every resource a policy names "created" under the ARN AWS would give it.
fn deployment() -> Deployment<'static> {
    let template = Template::ours().unwrap();
    let given = [
        ("StackPrefix", json!(PREFIX)),
        ("ProducerPrincipalArns", json!(PRODUCER)),
    ];
    let mut d = template.deploy(ACCOUNT, REGION, &given).unwrap();
    let kinds = [
        "AWS::DynamoDB::Table",
        "AWS::SQS::Queue",
        "AWS::S3::Bucket",
        "AWS::Logs::LogGroup",
        "AWS::IAM::Role",
        "AWS::KMS::Key",
        "AWS::SNS::Topic",
        "AWS::Serverless::HttpApi",
        "AWS::Serverless::Function",
        "AWS::Events::Rule",
        "AWS::Scheduler::ScheduleGroup",
    ];
    for id in d.resources_of(&kinds).unwrap() {
        let kind = template.resource_type(&id).unwrap().to_owned();
        let name = |property: &str| d.text(&id, property).unwrap_or_else(|_| format!("{PREFIX}-{id}"));
        let (reference, arn) = match kind.as_str() {
            "AWS::DynamoDB::Table" => {
                let n = name("TableName");
                (n.clone(), format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{n}"))
            }
            "AWS::SQS::Queue" => {
                let n = name("QueueName");
                let url = format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{n}");
                (url, format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{n}"))
            }
            "AWS::S3::Bucket" => {
                let n = name("BucketName");
                (n.clone(), format!("arn:aws:s3:::{n}"))
            }
            "AWS::Logs::LogGroup" => {
                let n = name("LogGroupName");
                (n.clone(), format!("arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{n}:*"))
            }
            "AWS::IAM::Role" => {
                let n = name("RoleName");
                (n.clone(), format!("arn:aws:iam::{ACCOUNT}:role/{n}"))
            }
            "AWS::KMS::Key" => (id.clone(), format!("arn:aws:kms:{REGION}:{ACCOUNT}:key/{id}")),
            "AWS::Serverless::HttpApi" => ("a1b2c3d4e5".into(), String::new()),
            "AWS::Serverless::Function" => {
                let n = format!("{PREFIX}-{id}");
                (n.clone(), format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{n}"))
            }
            "AWS::Scheduler::ScheduleGroup" => {
                let n = name("Name");
                (
                    n.clone(),
                    format!("arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule-group/{n}"),
                )
            }
            "AWS::Events::Rule" => (
                id.clone(),
                format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{PREFIX}-{id}"),
            ),
            _ => (id.clone(), format!("arn:aws:sns:{REGION}:{ACCOUNT}:{PREFIX}-{id}")),
        };
        let mut attributes = BTreeMap::from([("Arn".to_owned(), arn.clone())]);
        if kind == "AWS::DynamoDB::Table" {
            attributes.insert("StreamArn".into(), format!("{arn}/stream/2026-01-01T00:00:00.000"));
        }
        d.created(&id, Created { reference, attributes });
    }
    d
}

/// The identity policies of `role`: its own and those attached to it in this deployment.
fn identity_policies(d: &Deployment, role: &str) -> Vec<Value> {
    let own = d.properties(role).unwrap();
    let mut out: Vec<Value> = own
        .get("Policies")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|p| p["PolicyDocument"].clone())
        .collect();
    let name = d.reference_of(role).unwrap().to_owned();
    for id in d.resources_of(&["AWS::IAM::Policy"]).unwrap() {
        let p = d.properties(&id).unwrap();
        if p["Roles"].as_array().unwrap().iter().any(|r| r == &json!(name)) {
            out.push(p["PolicyDocument"].clone());
        }
    }
    out
}

/// The table: every function role against the tables, queues and bucket it must and must not
/// touch, and the bucket's own refusals (they hold for every principal, whatever its grants).
/// Each row: (role, action, what, condition keys, allowed, why). What: `table:ID`, `index:ID`,
/// `stream:ID`, `queue:ID`, `bucket`, `object:KEY`. Condition keys, `;`-separated:
/// `lead=K` (`dynamodb:LeadingKeys`), `attrs=A,B` (`dynamodb:Attributes`), `put` (a put as every
/// writer of this system makes it: If-None-Match, COMPLIANCE, 3000 days), `overwrite` (the same
/// without If-None-Match), `mode=M`, `days=N`, `insecure` (no TLS), `session=S` (the role
/// session name asked for), `user=U` (`aws:username`), `mfa` (signed in with MFA), `from=G` (on
/// behalf of schedule group G of the account; `ScheduleGroup`: the stack's), `via=S` (a KMS
/// request made by service S: `kms:ViaService`). Targets also
/// `api:METHOD/PATH` (the control plane's API), `function:ID`, `key:ID` (under its key policy),
/// `role:ID` (assumed, under its trust policy).
#[rustfmt::skip]
const TABLE: &[(&str, &str, &str, &str, bool, &str)] = &[
    // The consumer: commits, dead-letters, appends to the trail; nothing else.
    ("ConsumerRole", "dynamodb:PutItem", "table:LedgerTable", "", true, "commit"),
    ("ConsumerRole", "dynamodb:DeleteItem", "table:LedgerTable", "", false, "a posting is never deleted"),
    ("ConsumerRole", "dynamodb:UpdateItem", "table:LedgerTable", "", false, "a posting is never changed"),
    ("ConsumerRole", "dynamodb:Query", "table:LedgerTable", "", false, "the consumer reads no period"),
    ("ConsumerRole", "dynamodb:Scan", "table:LedgerTable", "", false, "nor searches the ledger"),
    ("ConsumerRole", "sqs:SendMessage", "queue:DeadLetterQueue", "", true, "dead-letter"),
    ("ConsumerRole", "sqs:SendMessage", "queue:MainQueue", "", false, "only the replay re-injects"),
    ("ConsumerRole", "sqs:ChangeMessageVisibility", "queue:MainQueue", "", true, "back off"),
    ("ConsumerRole", "sqs:PurgeQueue", "queue:MainQueue", "", false, "nothing is dropped"),
    ("ConsumerRole", "sqs:PurgeQueue", "queue:DeadLetterQueue", "", false, "nothing is dropped"),
    ("ConsumerRole", "dynamodb:Scan", "table:ReferenceTable", "", true, "reference data"),
    ("ConsumerRole", "dynamodb:PutItem", "table:ReferenceTable", "", false, "periods are not the consumer's"),
    ("ConsumerRole", "dynamodb:PutItem", "table:EnvelopeTable", "", false, "envelopes are the enricher's"),
    ("ConsumerRole", "dynamodb:PutItem", "table:AuditTable", "lead=c3#000000000001", true, "an audit record"),
    ("ConsumerRole", "dynamodb:PutItem", "table:AuditTable", "lead=#head#c3", false, "a head is never put"),
    ("ConsumerRole", "dynamodb:UpdateItem", "table:AuditTable", "lead=#head#c3;attrs=audit_id,hash,seq", true, "a head moves by seq and hash"),
    ("ConsumerRole", "dynamodb:UpdateItem", "table:AuditTable", "lead=#head#c3;attrs=seq,detail", false, "a head carries nothing else"),
    ("ConsumerRole", "dynamodb:UpdateItem", "table:AuditTable", "lead=c3#000000000001;attrs=detail", false, "a record is never rewritten"),
    ("ConsumerRole", "dynamodb:DeleteItem", "table:AuditTable", "lead=c3#000000000001", false, "a record is never deleted"),
    ("ConsumerRole", "s3:PutObject", "object:audit-seals/c3/000001.json", "put", true, "a seal"),
    ("ConsumerRole", "s3:DeleteObjectVersion", "object:audit-seals/c3/000001.json", "", false, "WORM"),
    ("ConsumerRole", "s3:PutObjectRetention", "object:audit-seals/c3/000001.json", "", false, "a retention is never changed"),
    // The enricher: envelopes and their WORM copies; no ledger, no queue to send to.
    ("EnricherRole", "dynamodb:PutItem", "table:EnvelopeTable", "", true, "an envelope"),
    ("EnricherRole", "dynamodb:UpdateItem", "table:EnvelopeTable", "", true, "an envelope's status"),
    ("EnricherRole", "dynamodb:PutItem", "table:LedgerTable", "", false, "the enricher posts nothing"),
    ("EnricherRole", "dynamodb:GetItem", "table:LedgerTable", "", false, "nor reads the ledger"),
    ("EnricherRole", "sqs:SendMessage", "queue:MainQueue", "", false, "the enricher re-injects nothing"),
    ("EnricherRole", "sqs:ReceiveMessage", "queue:DeadLetterQueue", "", true, "its event source"),
    ("EnricherRole", "sqs:ReceiveMessage", "queue:MainQueue", "", false, "not the consumer's queue"),
    ("EnricherRole", "dynamodb:Scan", "table:ReferenceTable", "", false, "no reference data"),
    ("EnricherRole", "s3:PutObject", "object:envelopes/env_1/original", "put", true, "a WORM copy"),
    ("EnricherRole", "s3:GetObject", "object:envelopes/env_1/original", "", false, "it reads seals by version only"),
    ("EnricherRole", "dynamodb:PutItem", "table:AuditTable", "lead=#head#c0", false, "a head is never put"),
    // The replay: re-injects, settles envelopes, reads the ledger; changes no reference data.
    ("ReplayRole", "sqs:SendMessage", "queue:MainQueue", "", true, "re-inject"),
    ("ReplayRole", "sqs:SendMessage", "queue:DeadLetterQueue", "", false, "only the consumer dead-letters"),
    ("ReplayRole", "dynamodb:GetItem", "table:LedgerTable", "", true, "gate 2"),
    ("ReplayRole", "dynamodb:Query", "table:LedgerTable", "", false, "a period's postings are read by the control plane"),
    ("ReplayRole", "dynamodb:Scan", "table:LedgerTable", "", false, "a schedule asks the ledger by the transactions it decoded"),
    ("ReplayRole", "dynamodb:PutItem", "table:LedgerTable", "attrs=period_shard,source_hash,manual_journal,replay_id,committed_at", true, "a hand-off"),
    ("ReplayRole", "dynamodb:PutItem", "table:LedgerTable", "attrs=source_hash,amount", false, "the replay posts no amount"),
    ("ReplayRole", "dynamodb:PutItem", "table:ReferenceTable", "", false, "no period is opened by a replay"),
    ("ReplayRole", "dynamodb:UpdateItem", "table:EnvelopeTable", "", true, "settle an envelope"),
    ("ReplayRole", "dynamodb:Query", "index:EnvelopeTable", "", true, "the backlog"),
    ("ReplayRole", "s3:GetObject", "object:envelopes/env_1/original", "", true, "a large original"),
    ("ReplayRole", "s3:PutObject", "object:quarantine/env_1.json", "put", true, "a quarantine record"),
    ("ReplayRole", "dynamodb:DeleteTable", "table:AuditTable", "", false, "no table is dropped"),
    // The reference auditor: reads the stream, appends; changes nothing it records.
    ("ReferenceAuditRole", "dynamodb:GetRecords", "stream:ReferenceTable", "", true, "its event source"),
    ("ReferenceAuditRole", "dynamodb:PutItem", "table:ReferenceTable", "", false, "it records changes, never makes them"),
    ("ReferenceAuditRole", "dynamodb:PutItem", "table:AuditTable", "lead=c1#000000000009", true, "an audit record"),
    ("ReferenceAuditRole", "sqs:SendMessage", "queue:MainQueue", "", false, "nothing to send"),
    ("ReferenceAuditRole", "dynamodb:GetItem", "table:EnvelopeTable", "", false, "no envelopes"),
    ("ReferenceAuditRole", "s3:PutObject", "object:audit-seals/c1/000001.json", "put", true, "a seal"),
    // The queues take messages only from their senders, whatever anyone's own grants say.
    ("Producer", "sqs:SendMessage", "queue:MainQueue", "", true, "a declared producer"),
    ("Producer", "sqs:SendMessage", "queue:DeadLetterQueue", "", false, "a producer cannot forge a dead letter"),
    ("Admin", "sqs:SendMessage", "queue:MainQueue", "", false, "an administrator is no producer"),
    ("Admin", "sqs:SendMessage", "queue:DeadLetterQueue", "", false, "nor the consumer"),
    ("EnricherRole", "sqs:SendMessage", "queue:DeadLetterQueue", "", false, "only the consumer dead-letters"),
    ("ReferenceAuditRole", "sqs:SendMessage", "queue:DeadLetterQueue", "", false, "only the consumer dead-letters"),
    // The bucket refuses these to everyone, whatever their grants.
    ("Admin", "s3:DeleteObject", "object:audit-seals/c3/000001.json", "", false, "a delete marker, even by an administrator"),
    ("Admin", "s3:PutObject", "object:audit-seals/c3/000001.json", "overwrite", false, "an overwrite, even by an administrator"),
    ("ReplayRole", "s3:PutObject", "object:quarantine/env_1.json", "overwrite", false, "an overwrite (no If-None-Match)"),
    ("ReplayRole", "s3:PutObject", "object:quarantine/env_1.json", "put;mode=GOVERNANCE", false, "GOVERNANCE can be bypassed"),
    ("ReplayRole", "s3:PutObject", "object:quarantine/env_1.json", "put;days=30", false, "retained too briefly"),
    ("ConsumerRole", "s3:DeleteObject", "object:audit-seals/c3/000001.json", "", false, "a delete marker hides a seal"),
    ("ReplayRole", "s3:DeleteObject", "object:quarantine/env_1.json", "", false, "a delete marker hides a quarantine"),
    ("ReplayRole", "s3:PutObject", "object:audit-trails/t1/retired.json", "put", false, "a retirement is an operator's act"),
    ("EnricherRole", "s3:PutObject", "object:audit-trails/t1/retired.json", "put", false, "a retirement is an operator's act"),
    ("ConsumerRole", "s3:PutObject", "object:audit-seals/c3/000001.json", "put;insecure", false, "no TLS"),
    ("ReplayRole", "s3:ListBucketVersions", "bucket", "", true, "seals by version"),
    ("ReplayRole", "s3:PutBucketPolicy", "bucket", "", false, "no function changes the bucket's rules"),
    ("ConsumerRole", "s3:PutBucketObjectLockConfiguration", "bucket", "", false, "nor its lock"),
    ("EnricherRole", "s3:PutLifecycleConfiguration", "bucket", "", false, "nor its lifecycle"),
    // The control plane: what a manual replay does, the reference data, the seal on decisions.
    ("ControlRole", "sqs:SendMessage", "queue:MainQueue", "", true, "a manual replay re-injects"),
    ("ControlRole", "sqs:SendMessage", "queue:DeadLetterQueue", "", false, "only the consumer dead-letters"),
    ("ControlRole", "dynamodb:PutItem", "table:ReferenceTable", "", true, "the policy, periods, currencies"),
    ("ControlRole", "dynamodb:UpdateItem", "table:EnvelopeTable", "", true, "a request's state, an envelope's"),
    ("ControlRole", "dynamodb:PutItem", "table:LedgerTable", "attrs=period_shard,source_hash,manual_journal,replay_id,committed_at", true, "a hand-off"),
    ("ControlRole", "dynamodb:PutItem", "table:LedgerTable", "attrs=source_hash,amount", false, "the control plane posts no amount"),
    ("ControlRole", "dynamodb:PutItem", "table:AuditTable", "lead=#head#c2", false, "a head is never put"),
    ("ControlRole", "kms:GenerateMac", "key:DecisionKey", "", true, "it seals its decisions"),
    ("ControlRole", "lambda:InvokeFunction", "function:ReplayFunction", "", false, "it runs replays itself"),
    ("ControlRole", "dynamodb:Query", "table:LedgerTable", "", true, "an auditor's segment of a period"),
    ("ControlRole", "dynamodb:Scan", "table:LedgerTable", "", true, "a hash claimed without a readable value date, quarantined"),
    ("ControlRole", "s3:PutObject", "object:audit-seals/t1/00000000000000000002.json", "put", true, "a seal an auditor asks for"),
    ("ReplayRole", "kms:GenerateMac", "key:DecisionKey", "", false, "the replay cannot seal an approval"),
    // Operators ask the control plane, read the stores, and write nothing themselves.
    ("MakerRole", "execute-api:Invoke", "api:POST/operations", "", true, "proposes through the control plane"),
    ("ViewerRole", "execute-api:Invoke", "api:POST/operations", "", true, "whoami (the control plane decides by role)"),
    ("MakerRole", "execute-api:Invoke", "api:DELETE/operations", "", false, "one route only"),
    ("ViewerRole", "dynamodb:Query", "index:EnvelopeTable", "", true, "triage"),
    ("ApproverRole", "dynamodb:GetItem", "table:EnvelopeTable", "", true, "reads a request"),
    ("MakerRole", "dynamodb:PutItem", "table:EnvelopeTable", "", false, "no request written around the control plane"),
    ("ApproverRole", "dynamodb:UpdateItem", "table:EnvelopeTable", "", false, "no approval by a table write"),
    ("AdminRole", "dynamodb:PutItem", "table:ReferenceTable", "", false, "the policy changes only through the control plane"),
    ("AdminRole", "dynamodb:UpdateItem", "table:ReferenceTable", "", false, "nor a period"),
    ("MakerRole", "sqs:SendMessage", "queue:MainQueue", "", false, "no replay around approval"),
    ("AdminRole", "sqs:SendMessage", "queue:MainQueue", "", false, "nor by an administrator"),
    ("MakerRole", "lambda:InvokeFunction", "function:ReplayFunction", "", false, "nor by invoking the replay"),
    ("AuditorRole", "lambda:InvokeFunction", "function:ReplayFunction", "", false, "segments through the control plane"),
    ("AuditorRole", "dynamodb:Query", "table:LedgerTable", "", true, "reconcile"),
    ("AuditorRole", "dynamodb:Scan", "table:LedgerTable", "", true, "reconcile: a transaction named without its period"),
    ("MakerRole", "dynamodb:Query", "table:LedgerTable", "", false, "postings are the auditors'"),
    ("AuditorRole", "dynamodb:Query", "table:AuditTable", "", true, "the trail"),
    ("AuditorRole", "dynamodb:PutItem", "table:AuditTable", "lead=c3#000000000001", false, "an auditor writes no record"),
    ("AuditorRole", "kms:VerifyMac", "key:DecisionKey", "", true, "checks a decision's seal"),
    ("AuditorRole", "kms:GenerateMac", "key:DecisionKey", "", false, "but cannot make one"),
    ("MakerRole", "kms:GenerateMac", "key:DecisionKey", "", false, "a maker cannot seal an approval"),
    ("ApproverRole", "kms:GenerateMac", "key:DecisionKey", "", false, "nor an approver outside the control plane"),
    ("Admin", "kms:GenerateMac", "key:DecisionKey", "", false, "nor the account's administrator"),
    ("ViewerRole", "s3:PutObject", "object:quarantine/env_1.json", "put", false, "operators write no evidence"),
    ("ViewerRole", "s3:GetObject", "object:envelopes/env_1/original", "", true, "reads an original"),
    ("ViewerRole", "sqs:GetQueueAttributes", "queue:DeadLetterQueue", "", true, "the DLQ's depth"),
    ("ViewerRole", "sqs:ReceiveMessage", "queue:DeadLetterQueue", "", false, "never a dead letter itself"),
    ("AuditorRole", "sqs:DeleteMessage", "queue:MainQueue", "", false, "nor a transaction"),
    // Break-glass: envelopes and reference data by hand (paged); never the queues, the ledger, the trail.
    ("BreakGlassRole", "dynamodb:UpdateItem", "table:EnvelopeTable", "lead=env_1", true, "by hand, paged"),
    ("BreakGlassRole", "dynamodb:PutItem", "table:EnvelopeTable", "lead=#outbox#a1", false, "a record into the trail's outbox"),
    ("BreakGlassRole", "dynamodb:UpdateItem", "table:EnvelopeTable", "lead=#request#apr_1", false, "an approval request"),
    ("Admin", "kms:CreateGrant", "key:DecisionKey", "", false, "a grant to seal"),
    ("BreakGlassRole", "dynamodb:PutItem", "table:ReferenceTable", "lead=CURRENCY#XAU", true, "by hand, recorded by the stream"),
    ("BreakGlassRole", "sqs:SendMessage", "queue:MainQueue", "", false, "the queue's policy"),
    ("BreakGlassRole", "dynamodb:PutItem", "table:AuditTable", "lead=c3#000000000001", false, "the trail is the functions'"),
    ("BreakGlassRole", "dynamodb:PutItem", "table:LedgerTable", "", false, "no posting by hand"),
    ("BreakGlassRole", "execute-api:Invoke", "api:POST/operations", "", false, "the control plane grants it nothing"),
    ("BreakGlassRole", "kms:GenerateMac", "key:DecisionKey", "", false, "nor a seal"),
    // The bucket's lock, versioning, lifecycle, replication and policy: break-glass only, even against an administrator.
    ("Admin", "s3:PutBucketPolicy", "bucket", "", false, "the bucket's policy, even by an administrator"),
    ("Admin", "s3:DeleteBucketPolicy", "bucket", "", false, "nor removed"),
    ("Admin", "s3:PutBucketObjectLockConfiguration", "bucket", "", false, "nor its lock"),
    ("Admin", "s3:PutLifecycleConfiguration", "bucket", "", false, "nor its lifecycle"),
    ("Admin", "s3:PutBucketVersioning", "bucket", "", false, "nor its versioning"),
    ("Admin", "s3:PutReplicationConfiguration", "bucket", "", false, "nor its copy in another region"),
    ("BreakGlassRole", "s3:PutReplicationConfiguration", "bucket", "", true, "by break-glass, paged"),
    ("BreakGlassRole", "s3:PutBucketPolicy", "bucket", "", true, "by break-glass, paged"),
    ("BreakGlassRole", "s3:PutLifecycleConfiguration", "bucket", "", true, "by break-glass, paged"),
    ("AdminRole", "s3:PutBucketPolicy", "bucket", "", false, "the operators' admin is not break-glass"),
    // Who may become an operator: an IAM user, with MFA, under their own name.
    ("Alice", "sts:AssumeRole", "role:MakerRole", "session=alice;user=alice;mfa", true, "as herself"),
    ("Alice", "sts:AssumeRole", "role:ApproverRole", "session=bob;user=alice;mfa", false, "a session named as someone else"),
    ("Alice", "sts:AssumeRole", "role:ApproverRole", "session=alice;user=alice", false, "without MFA"),
    ("Producer", "sts:AssumeRole", "role:AdminRole", "session=bank-feed;mfa", false, "a role has no user name to match"),
    ("Alice", "sts:AssumeRole", "role:ControlRole", "session=alice;user=alice;mfa", false, "only Lambda runs as the control plane"),
    // The audit chains read by their index: by a sealer writing a seal's records, by the auditor verifying.
    ("ConsumerRole", "dynamodb:Query", "index:AuditTable", "", true, "an append-path seal reads the records it covers"),
    ("AuditorRole", "dynamodb:Query", "index:AuditTable", "", true, "audit verify reads each chain by its index"),
    ("ViewerRole", "dynamodb:Query", "index:AuditTable", "", true, "audit show reads a transaction's records"),
    ("AuditorRole", "dynamodb:PutItem", "table:AuditTable", "", false, "but writes no record"),
    // The stores' key (CustomerManagedKeys): used through the stores only, by who writes or reads them.
    ("ConsumerRole", "kms:GenerateDataKey", "key:DataKey", "via=sqs", true, "sends to an encrypted queue"),
    ("ConsumerRole", "kms:Decrypt", "key:DataKey", "via=dynamodb", true, "reads an encrypted table"),
    ("ConsumerRole", "kms:Decrypt", "key:DataKey", "", false, "decrypts nothing outside the stores"),
    ("ReferenceAuditRole", "kms:Decrypt", "key:DataKey", "via=dynamodb", true, "reads the reference table's stream"),
    ("SchedulerRole", "kms:GenerateDataKey", "key:DataKey", "via=sqs", true, "its undelivered events"),
    ("SchedulerRole", "kms:Decrypt", "key:DataKey", "via=s3", true, "through a store, as every writer"),
    ("AuditorRole", "kms:Decrypt", "key:DataKey", "via=s3", true, "reads the WORM bucket"),
    ("AuditorRole", "kms:Decrypt", "key:DataKey", "via=dynamodb", true, "reads the audit trail"),
    ("AuditorRole", "kms:Decrypt", "key:DataKey", "via=logs", true, "reads the functions' logs"),
    ("AuditorRole", "kms:Decrypt", "key:DataKey", "", false, "not outside the stores"),
    ("ViewerRole", "kms:GenerateDataKey", "key:DataKey", "via=s3", false, "operators encrypt nothing"),
    ("MakerRole", "kms:Decrypt", "key:DataKey", "via=sqs", false, "operators read no queue's messages"),
    ("Producer", "kms:GenerateDataKey", "key:DataKey", "via=sqs", true, "sends to the main queue"),
    ("Producer", "kms:Decrypt", "key:DataKey", "via=s3", false, "only through SQS"),
    ("Admin", "kms:ScheduleKeyDeletion", "key:DataKey", "", false, "the evidence's key, even by an administrator"),
    ("Admin", "kms:DisableKey", "key:DataKey", "", false, "nor disabled"),
    ("AdminRole", "kms:ScheduleKeyDeletion", "key:DataKey", "", false, "nor by the operators' admin"),
    // Who may invoke the replay: the scheduler, for the stack's own schedule group only.
    ("Scheduler", "sts:AssumeRole", "role:SchedulerRole", "from=ScheduleGroup", true, "the stack's schedules"),
    ("Scheduler", "sts:AssumeRole", "role:SchedulerRole", "from=default", false, "another schedule group of the account"),
    ("Scheduler", "sts:AssumeRole", "role:SchedulerRole", "", false, "no source named"),
    ("Alice", "sts:AssumeRole", "role:SchedulerRole", "session=alice;user=alice;mfa", false, "only the scheduler"),
    ("SchedulerRole", "lambda:InvokeFunction", "function:ReplayFunction", "", true, "its schedules"),
    ("SchedulerRole", "lambda:InvokeFunction", "function:ControlFunction", "", false, "only the replay"),
];

/// The policy of queue `id` (`null`: it has none).
fn queue_policy(d: &Deployment, id: &str) -> Value {
    let url = json!(d.reference_of(id).unwrap());
    d.resources_of(&["AWS::SQS::QueuePolicy"])
        .unwrap()
        .iter()
        .map(|p| d.properties(p).unwrap())
        .find(|p| p["Queues"].as_array().unwrap().contains(&url))
        .map_or(Value::Null, |p| p["PolicyDocument"].clone())
}

/// A row's condition keys as the simulator takes them (see [`TABLE`]).
fn context(spec: &str) -> Value {
    let mut c = json!({});
    for token in spec.split(';').filter(|t| !t.is_empty()) {
        let (key, value) = token.split_once('=').unwrap_or((token, ""));
        let list = |v: &str| json!(v.split(',').collect::<Vec<_>>());
        match key {
            "lead" => c["dynamodb:LeadingKeys"] = json!([value]),
            "attrs" => c["dynamodb:Attributes"] = list(value),
            "put" | "overwrite" => {
                c["s3:object-lock-mode"] = json!("COMPLIANCE");
                c["s3:object-lock-remaining-retention-days"] = json!("3000");
                if key == "put" {
                    c["s3:if-none-match"] = json!("*");
                }
            }
            "mode" => c["s3:object-lock-mode"] = json!(value),
            "days" => c["s3:object-lock-remaining-retention-days"] = json!(value),
            "insecure" => c["aws:SecureTransport"] = json!("false"),
            "via" => c["kms:ViaService"] = json!(format!("{value}.{REGION}.amazonaws.com")),
            "session" => c["sts:RoleSessionName"] = json!(value),
            "user" => c["aws:username"] = json!(value),
            "mfa" => c["aws:MultiFactorAuthPresent"] = json!("true"),
            "from" => {
                // A schedule group of this account (`ScheduleGroup`: the stack's own).
                let group = if value == "ScheduleGroup" { PREFIX } else { value };
                c["aws:SourceAccount"] = json!(ACCOUNT);
                c["aws:SourceArn"] = json!(format!("arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule-group/{group}"));
            }
            other => panic!("unknown condition spec {other}"),
        }
    }
    c
}

#[test]
fn iam_allows_exactly_what_the_table_says_for_every_role_and_resource() {
    let d = deployment();
    let bucket_policy = d.properties("QuarantineBucketPolicy").unwrap()["PolicyDocument"].clone();
    let arn = |id: &str| d.attribute_of(id, "Arn").unwrap().to_owned();
    let cases: Vec<Value> = TABLE
        .iter()
        .enumerate()
        .map(|(i, (role, action, what, spec, _, _))| {
            let other = OTHERS.iter().find(|(name, _, _)| name == role);
            let principal = other.map_or_else(|| arn(role), |(_, arn, _)| (*arn).to_owned());
            let identity = match other {
                Some((_, _, action)) => vec![json!({
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}],
                })],
                None => identity_policies(&d, role),
            };
            let bucket = arn("QuarantineBucket");
            let (kind, id) = what.split_once(':').unwrap_or((what, ""));
            let (resource, policy) = match kind {
                "table" => (arn(id), Value::Null),
                "queue" => (arn(id), queue_policy(&d, id)),
                "index" => (format!("{}/index/by_period", arn(id)), Value::Null),
                "stream" => (d.attribute_of(id, "StreamArn").unwrap().to_owned(), Value::Null),
                "bucket" => (bucket, bucket_policy.clone()),
                "object" => (format!("{bucket}/{id}"), bucket_policy.clone()),
                "api" => {
                    let api = d.reference_of("ControlApi").unwrap();
                    (
                        format!("arn:aws:execute-api:{REGION}:{ACCOUNT}:{api}/$default/{id}"),
                        Value::Null,
                    )
                }
                "function" => (arn(id), Value::Null),
                "key" => (arn(id), d.properties(id).unwrap()["KeyPolicy"].clone()),
                "role" => (arn(id), d.properties(id).unwrap()["AssumeRolePolicyDocument"].clone()),
                other => panic!("unknown target {other}"),
            };
            let mut context_keys = json!({ "aws:PrincipalArn": principal });
            if action.starts_with("s3:") {
                context_keys["aws:SecureTransport"] = json!("true");
            }
            for (k, v) in context(spec).as_object().unwrap() {
                context_keys[k] = v.clone();
            }
            json!({
                "name": format!("{i}"),
                "principal": principal,
                "action": action,
                "resource": resource,
                "account": ACCOUNT,
                "identityPolicies": identity,
                "resourcePolicy": policy,
                "context": context_keys,
            })
        })
        .collect();
    let results = simulate(&json!({ "cases": cases }));
    assert_eq!(results.len(), TABLE.len());
    let mut wrong = Vec::new();
    for ((role, action, what, spec, allowed, why), out) in TABLE.iter().zip(&results) {
        let result = out["result"].as_str().unwrap_or("Error");
        let ignored = out["ignored"].as_array().map_or(0, Vec::len);
        if result == "Error" || ignored > 0 || (result == "Allowed") != *allowed {
            let want = if *allowed { "allowed" } else { "denied" };
            wrong.push(format!(
                "{role} {action} {what} [{spec}]: {result}, want {want} ({why}): {out}"
            ));
        }
    }
    let denied = TABLE.iter().filter(|r| !r.4).count();
    println!(
        "IAM offline: {} rows ({denied} must be denied), {} wrong",
        TABLE.len(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Run the simulator on `input`: its answers, one per case.
fn simulate(input: &Value) -> Vec<Value> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let script = format!("{root}/infra/iam_simulate.cjs");
    let mut child = Command::new("node")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs the IAM simulator (infra/tools.sh install puts it in .local-aws/iam-simulate)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the IAM simulator failed (run `infra/tools.sh install`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
