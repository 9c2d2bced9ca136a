//! The Lambda Invoke API as the front and the deployment hook call it: one client per function,
//! configured once ([`sdk_config`]).
//!
//! - **Credentials and region**: the SDK's standard chain (`aws-config`: environment variables,
//!   the container credentials endpoint that ECS and EKS Pod Identity set, web identity tokens,
//!   profiles, instance metadata), so a front signs on Lambda, ECS, EKS or EC2 alike. An
//!   explicit endpoint (an emulator, a stand-in) gets placeholder credentials instead: it
//!   checks no signature, and a machine without credentials must still reach it; its region is
//!   `AWS_REGION`, else `us-east-1`.
//! - **Retries**: the SDK's standard strategy, [`ATTEMPTS`] attempts with exponential backoff
//!   and full jitter from [`FIRST_BACKOFF`] up to [`LONGEST_BACKOFF`], on throttles
//!   (`TooManyRequestsException`, HTTP 429), 5xx answers of the service and transient I/O
//!   errors. An invocation is a pure read, so a retry is always safe; the caller's deadline
//!   bounds them all.
//! - **HTTPS**: rustls with ring, given explicitly: the SDK's default features would build a
//!   second TLS stack (aws-lc, C).

use crate::ShardTarget;
use aws_sdk_lambda::config::retry::RetryConfig;
use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use std::time::Duration;

/// Attempts of one invocation (the first and two retries).
pub const ATTEMPTS: u32 = 3;
/// The first retry waits up to this (full jitter), each later one up to twice the one before.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(25);
pub const LONGEST_BACKOFF: Duration = Duration::from_millis(250);

/// The SDK configuration of a caller of AWS's APIs (the front, the deployment hook): the
/// standard chain for AWS's own endpoints, placeholders for another `endpoint`, the retries
/// above.
pub async fn sdk_config(endpoint: Option<&str>) -> aws_types::SdkConfig {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let retries = RetryConfig::standard()
        .with_max_attempts(ATTEMPTS)
        .with_initial_backoff(FIRST_BACKOFF)
        .with_max_backoff(LONGEST_BACKOFF);
    let Some(endpoint) = endpoint else {
        let region = aws_config::meta::region::RegionProviderChain::default_provider()
            .or_else(Region::new("us-east-1"));
        return aws_config::defaults(BehaviorVersion::latest())
            .http_client(https)
            .region(region)
            .retry_config(retries)
            .load()
            .await;
    };
    let region = std::env::var("AWS_REGION")
        .ok()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "us-east-1".into());
    let placeholder = Credentials::new("local", "local", None, None, "emulator endpoint");
    aws_types::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(SharedCredentialsProvider::new(placeholder))
        .http_client(https)
        .retry_config(retries)
        .sleep_impl(aws_smithy_async::rt::sleep::default_async_sleep().expect("tokio's sleep"))
        .time_source(aws_smithy_async::time::SystemTimeSource::new())
        .endpoint_url(endpoint)
        .build()
}

/// A client of the Invoke API for one function.
#[derive(Clone)]
pub struct Client(aws_sdk_lambda::Client);

/// Why an invocation gave no payload.
#[derive(Debug)]
pub enum Failure {
    /// The Invoke API refused or could not be reached (after the retries).
    Invoke(String),
    /// The function ran and failed (`FunctionError`): its error payload.
    Function { kind: String, payload: String },
}

impl Failure {
    /// What went wrong, in the caller's words (no quote of the function or the service).
    pub fn what(&self) -> String {
        match self {
            Failure::Invoke(_) => "could not be invoked".into(),
            Failure::Function { kind, .. } => format!("failed ({kind})"),
        }
    }

    /// What the service or the function said: for the log.
    pub fn detail(&self) -> String {
        match self {
            Failure::Invoke(e) => e.clone(),
            Failure::Function { payload, .. } => payload.clone(),
        }
    }
}

impl Client {
    pub async fn new(target: &ShardTarget) -> Client {
        Client(aws_sdk_lambda::Client::new(
            &sdk_config(target.endpoint.as_deref()).await,
        ))
    }

    /// Invokes `target`'s function (`RequestResponse`) with `payload`; its answer's payload.
    pub async fn invoke(&self, target: &ShardTarget, payload: Vec<u8>) -> Result<Vec<u8>, Failure> {
        let out = self
            .0
            .invoke()
            .function_name(&target.function)
            .invocation_type(InvocationType::RequestResponse)
            .payload(Blob::new(payload))
            .send()
            .await
            .map_err(|e| {
                Failure::Invoke(aws_sdk_lambda::error::DisplayErrorContext(e).to_string())
            })?;
        let body = out
            .payload()
            .map(|b| b.as_ref().to_vec())
            .unwrap_or_default();
        if let Some(kind) = out.function_error() {
            let payload = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
            return Err(Failure::Function {
                kind: kind.to_string(),
                payload,
            });
        }
        Ok(body)
    }
}
