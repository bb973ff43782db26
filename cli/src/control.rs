//! `dlqctl` as the control plane's client: every command that changes state is a request to the
//! control plane, decided there for the caller AWS verified. What `dlqctl` itself checks (a
//! confirmation, a readable summary) is a convenience; the control plane's answer is the control.
//!
//! - On AWS: a SigV4-signed `POST` to the stack's `ControlApiUrl` output, with the caller's own
//!   credentials (their operator role's session). API Gateway verifies the signature and hands
//!   the control plane the principal; nothing `dlqctl` sends can name another.
//! - On the local stack (LocalStack's community edition has no API Gateway): the same handler in
//!   this process, given the principal LocalStack's STS returns for the caller, as API Gateway
//!   would give it. `--as ROLE:PERSON` first assumes the stack's operator role `ROLE` under the
//!   session name `PERSON` (what the template's trust policy requires of a person on AWS).

use anyhow::{Context, Result, bail};
use recon_aws::AwsClients;
use recon_aws::telemetry::TracingMetrics;
use recon_aws::wiring::AwsControlPlane;
use recon_core::config::ControlSettings;
use recon_core::control::{Asked, Command, http};
use recon_core::domain::operator::Caller;
use recon_core::resources::ResourceNames;
use serde_json::Value;

/// Where the control plane answers.
pub enum ControlPlane {
    Api(Box<Api>),
    InProcess(Box<InProcess>),
}

pub struct Api {
    url: String,
    region: String,
    config: aws_config::SdkConfig,
    http: reqwest::Client,
}

pub struct InProcess {
    plane: AwsControlPlane<TracingMetrics>,
    settings: ControlSettings,
    principal: String,
}

/// The command line's `--stack` and `--as`, for [`connect_as_cli`].
static CLI: std::sync::OnceLock<(Option<String>, Option<String>)> = std::sync::OnceLock::new();

pub fn configure(stack: Option<String>, operator: Option<String>) {
    let _ = CLI.set((stack, operator));
}

/// [`connect`] with the command line's `--stack` and `--as`.
pub async fn connect_as_cli(clients: &AwsClients, names: &ResourceNames) -> Result<ControlPlane> {
    let (stack, operator) = CLI.get().cloned().unwrap_or_default();
    connect(clients, names, stack.as_deref(), operator.as_deref()).await
}

/// The control plane of the deployment `names` names, asked as this caller. `operator`
/// (`--as ROLE:PERSON`) is for the local stack only: on AWS, the credentials are the identity.
pub async fn connect(
    clients: &AwsClients,
    names: &ResourceNames,
    stack: Option<&str>,
    operator: Option<&str>,
) -> Result<ControlPlane> {
    if matches!(clients.target, recon_aws::Target::Aws) {
        if operator.is_some() {
            bail!(
                "--as is for the local stack: on AWS your credentials are who you are (a profile that assumes your operator role, with MFA, session named after your user name)"
            );
        }
        let Some(stack) = stack else {
            bail!("name the stack (--stack NAME): its ControlApiUrl output is where the control plane answers");
        };
        let url = recon_aws::deployment::control_api_url(clients, stack)
            .await
            .map_err(anyhow::Error::msg)?;
        return Ok(ControlPlane::Api(Box::new(Api {
            url,
            region: crate::context::region(clients),
            config: clients.config.clone(),
            http: reqwest::Client::builder()
                .timeout(recon_core::resources::CONTROL_TIMEOUT + std::time::Duration::from_secs(5))
                .build()?,
        })));
    }
    let caller = match operator {
        Some(spec) => {
            let (role, person) = spec
                .split_once(':')
                .with_context(|| format!("--as {spec}: expected ROLE:PERSON, e.g. maker:alice"))?;
            let role_arn = format!("arn:aws:iam::{}:role/{}-{role}", names.account, names.prefix);
            let assumed = recon_aws::identity::assume_role(clients, &role_arn, person).await?;
            recon_aws::identity::caller(&assumed).await?
        }
        None => recon_aws::identity::caller(clients).await?,
    };
    let (plane, settings) = local_plane(clients, names).await?;
    Ok(ControlPlane::InProcess(Box::new(InProcess {
        plane,
        settings,
        principal: caller.arn,
    })))
}

/// The control plane of the local stack `names` names, in this process, and its settings (as
/// the stack configures its control function).
pub async fn local_plane(
    clients: &AwsClients,
    names: &ResourceNames,
) -> Result<(AwsControlPlane<TracingMetrics>, ControlSettings)> {
    let stack = recon_aws::stack::resolve_stack(clients, names).await?;
    let settings = ControlSettings::from_lookup(stack.lookup(crate::context::given))?;
    let plane = recon_aws::wiring::control_plane(clients, &settings, "dlqctl", TracingMetrics);
    Ok((plane, settings))
}

/// A refusal of the control plane (403, 409) or of the request (400): what it said.
#[derive(Debug)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (HTTP {} from the control plane)", self.message, self.status)
    }
}

impl std::error::Error for Refusal {}

impl ControlPlane {
    /// Seal the trail now (the auditor's or the admin's to ask: no operator role writes the
    /// bucket).
    pub async fn seal(&self) -> Result<Sealed> {
        Ok(serde_json::from_value(self.ask(&Command::Seal).await?)?)
    }

    /// Ask `command`: the control plane's result, or its refusal as an error.
    pub async fn ask(&self, command: &Command) -> Result<Value> {
        let (status, body) = match self {
            ControlPlane::Api(api) => api.post(command).await?,
            ControlPlane::InProcess(local) => local.ask(command).await?,
        };
        let body: Value = serde_json::from_str(&body)
            .with_context(|| format!("the control plane answered {status} with no JSON: {body}"))?;
        match status {
            200 => Ok(body),
            400 | 401 | 403 | 409 | 413 => Err(Refusal {
                status,
                message: body["message"].as_str().unwrap_or_default().to_owned(),
            }
            .into()),
            _ => bail!(
                "the control plane failed ({status}): {}; nothing is known to have changed, ask again",
                body["message"].as_str().unwrap_or_default()
            ),
        }
    }
}

impl InProcess {
    /// The handler as the Lambda function runs it, given what API Gateway would give it.
    async fn ask(&self, command: &Command) -> Result<(u16, String)> {
        let caller = Caller::verified(&self.principal, &self.settings.roles);
        let request_id = request_id();
        let asked = Asked {
            caller: &caller,
            request_id: &request_id,
            deadline: crate::context::in_process_deadline(),
        };
        let response = http::response(Box::pin(self.plane.handle(&asked, command.clone())).await);
        let status = response["statusCode"].as_u64().unwrap_or(500);
        let body = response["body"].as_str().unwrap_or_default().to_owned();
        Ok((u16::try_from(status).unwrap_or(500), body))
    }
}

/// An id for one local request, as API Gateway's would be: unique, chosen by no caller.
pub fn request_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("dlqctl-{now:x}-{}", std::process::id())
}

impl Api {
    /// `command` signed with the caller's credentials (SigV4, service `execute-api`).
    async fn post(&self, command: &Command) -> Result<(u16, String)> {
        use aws_credential_types::provider::ProvideCredentials;
        use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
        let body = serde_json::to_vec(command)?;
        let provider = self
            .config
            .credentials_provider()
            .context("no AWS credentials: sign in with your operator role's profile")?;
        let credentials = provider.provide_credentials().await?;
        let identity = credentials.into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("execute-api")
            .time(std::time::SystemTime::now())
            .settings(SigningSettings::default())
            .build()?
            .into();
        let headers = [("content-type", "application/json")];
        let signable = SignableRequest::new("POST", &self.url, headers.into_iter(), SignableBody::Bytes(&body))?;
        let (instructions, _) = sign(signable, &params)?.into_parts();
        let mut request = self.http.post(&self.url).header("content-type", "application/json");
        for (name, value) in instructions.headers() {
            request = request.header(name, value);
        }
        let response = request
            .body(body)
            .send()
            .await
            .with_context(|| format!("cannot reach the control plane at {}", self.url))?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }
}

/// A seal the control plane wrote: its key in the bucket, its trail, number, chains and root.
#[derive(serde::Deserialize)]
pub struct Sealed {
    pub key: String,
    pub trail: String,
    pub seq: u64,
    pub chains: usize,
    pub root: String,
}
