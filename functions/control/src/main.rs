//! The control plane Lambda: wiring only. The authority lives in `recon_core::control`.
//!
//! Input: an API Gateway HTTP API request (payload format 2.0) on a route with IAM authorization:
//! the caller is the principal API Gateway verified (`requestContext.authorizer.iam.userArn`),
//! their operator role the one whose session they hold; or on a route with a JWT authorizer (the
//! console): the person its token's claims name, in a role their groups give
//! (`DLQ_CONSOLE_GROUPS`); the body is one command
//! (`{"operation": "...", ...}`, unknown fields refused). Output: the HTTP response, 200 with the
//! result, or 400/401/403/409/503 with what was wrong.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use recon_aws::{AwsClients, ClientTimeouts, Target, telemetry, wiring};
use recon_core::config::ControlSettings;
use recon_core::control::assets;
use recon_core::ports::lambda_deadline;
use recon_core::resources::CONTROL_TIMEOUT;
use std::sync::Arc;

// One thread, as the consumer's runtime (why, and what it measured: functions/consumer/src/main.rs).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init_json("control");
    let settings = telemetry::settings_or_exit(ControlSettings::from_env());
    // Every request gives up well inside the invocation (see ClientTimeouts::within).
    let clients = AwsClients::connect_with(
        Target::Aws,
        ClientTimeouts::within(CONTROL_TIMEOUT, settings.replay.deadline_margin),
    )
    .await;
    let name = wiring::function_name("control");
    wiring::log_configuration(&clients, &settings.replay.audit_table, &name, &settings.audited).await;
    let metrics = wiring::emf(&settings.replay.metrics_namespace, &settings.replay.stack);
    let control = Arc::new(wiring::control_plane(&clients, &settings, &name, metrics));
    let page = Arc::new((settings.console_page, settings.replay.stack.clone()));
    let doors = Arc::new((settings.roles, settings.console));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let (control, doors, page) = (control.clone(), doors.clone(), page.clone());
        async move {
            // The console's files, on their own route (no sign-in; they hold no data).
            if let Some(file) = assets::page_response(
                &event.payload,
                page.0.as_ref(),
                &recon_core::domain::operator::READERS,
                &page.1,
            ) {
                return Ok(file);
            }
            let deadline = lambda_deadline(event.context.deadline);
            let id = &event.context.request_id;
            let (roles, console) = (&doors.0, doors.1.as_ref());
            Ok::<serde_json::Value, Error>(control.answer(&event.payload, roles, console, id, deadline).await)
        }
    }))
    .await
}
