//! `pretraffic`: the PreTraffic hook as an AWS Lambda function (custom runtime
//! `provided.al2023`). CodeDeploy invokes it with `{"DeploymentId", "LifecycleEventHookExecutionId"}`
//! before it shifts any traffic to the new version; it invokes that version with every case of
//! its sample ([`deploy_hook::check`]) and reports `Succeeded` or `Failed` with
//! `PutLifecycleEventHookExecutionStatus`. Its log names the first wrong answer.
//!
//! Environment: `FRAUD_TARGET`, the version under test (its ARN with the version, as the
//! template passes it); `FRAUD_SAMPLE`, the sample (default `sample.json` beside this binary);
//! `FRAUD_TARGET_ENDPOINT` and `FRAUD_CODEDEPLOY_ENDPOINT`, other endpoints for the two APIs (an
//! emulator and a stand-in, in tests). Credentials and region are the function's own.

use aws_sdk_codedeploy::types::LifecycleEventStatus;
use aws_sdk_lambda::primitives::Blob;
use deploy_hook::{check, Invoke};
use fan_out::aws_config;
use labeller::sample::SampleCase;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use serde::Deserialize;
use std::path::PathBuf;

/// What CodeDeploy sends a lifecycle hook.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HookEvent {
    deployment_id: String,
    lifecycle_event_hook_execution_id: String,
}

/// The version under test, through the Invoke API.
struct Target {
    client: aws_sdk_lambda::Client,
    function: String,
    runtime: tokio::runtime::Handle,
}

impl Invoke for Target {
    fn invoke(&mut self, event: &[u8]) -> Result<Vec<u8>, String> {
        let call = self
            .client
            .invoke()
            .function_name(&self.function)
            .payload(Blob::new(event.to_vec()))
            .send();
        let out = self
            .runtime
            .block_on(call)
            .map_err(|e| aws_sdk_lambda::error::DisplayErrorContext(e).to_string())?;
        if let Some(error) = out.function_error() {
            return Err(format!("the function failed ({error})"));
        }
        Ok(out
            .payload()
            .map(|b| b.as_ref().to_vec())
            .unwrap_or_default())
    }
}

fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let target = env("FRAUD_TARGET").ok_or("FRAUD_TARGET names no function version")?;
    let sample_path = env("FRAUD_SAMPLE").map(PathBuf::from).unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        exe.with_file_name("sample.json")
    });
    let sample: Vec<SampleCase> = serde_json::from_slice(
        &std::fs::read(&sample_path)
            .map_err(|e| format!("cannot read the sample {}: {e}", sample_path.display()))?,
    )?;
    let lambda = aws_sdk_lambda::Client::new(&aws_config(env("FRAUD_TARGET_ENDPOINT").as_deref()));
    let codedeploy =
        aws_sdk_codedeploy::Client::new(&aws_config(env("FRAUD_CODEDEPLOY_ENDPOINT").as_deref()));
    tracing::info!(target = %target, cases = sample.len(), sample = %sample_path.display(), "pretraffic hook ready");
    // Multi-threaded: the check blocks in place on the invocations it makes.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (sample, target, lambda, codedeploy) = (&sample, &target, &lambda, &codedeploy);
    runtime.block_on(lambda_runtime::run(service_fn(
        move |event: LambdaEvent<HookEvent>| {
            let handle = handle.clone();
            async move {
                let mut version = Target {
                    client: lambda.clone(),
                    function: target.clone(),
                    runtime: handle,
                };
                let verdict = tokio::task::block_in_place(|| check(sample, &mut version));
                let status = if verdict.passed() {
                    tracing::info!(
                        cases = verdict.cases,
                        "every answer right: the deployment may go on"
                    );
                    LifecycleEventStatus::Succeeded
                } else {
                    tracing::error!(
                        cases = verdict.cases,
                        wrong = verdict.wrong,
                        first_wrong = verdict.first_wrong.as_deref().unwrap_or("no case"),
                        "wrong answers: the deployment fails"
                    );
                    LifecycleEventStatus::Failed
                };
                codedeploy
                    .put_lifecycle_event_hook_execution_status()
                    .deployment_id(&event.payload.deployment_id)
                    .lifecycle_event_hook_execution_id(
                        &event.payload.lifecycle_event_hook_execution_id,
                    )
                    .status(status.clone())
                    .send()
                    .await
                    .map_err(|e| aws_sdk_codedeploy::error::DisplayErrorContext(e).to_string())?;
                Ok::<_, Error>(serde_json::json!({
                    "status": status.as_str(),
                    "cases": verdict.cases,
                    "wrong": verdict.wrong,
                    "first_wrong": verdict.first_wrong,
                }))
            }
        },
    )))
}
