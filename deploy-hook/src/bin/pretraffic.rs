//! `pretraffic`: the PreTraffic hook as an AWS Lambda function (custom runtime
//! `provided.al2023`). CodeDeploy invokes it with `{"DeploymentId", "LifecycleEventHookExecutionId"}`
//! before it shifts any traffic to the new version; it invokes that version with every case of
//! its sample ([`deploy_hook::check`]) and reports `Succeeded` or `Failed` with
//! `PutLifecycleEventHookExecutionStatus`. Its log names the first wrong answer.
//!
//! Environment: `FRAUD_TARGET`, the version under test (its ARN with the version, as the
//! template passes it); `FRAUD_SAMPLE`, the sample (default `sample.json` beside this binary);
//! `FRAUD_TARGET_ENDPOINT` and `FRAUD_CODEDEPLOY_ENDPOINT`, other endpoints for the two APIs (an
//! emulator and a stand-in, in tests). Credentials and region are the function's own (the
//! SDK's standard chain, `fan_out::invoke`). Each case waits at most its share of the hook's
//! remaining time ([`deploy_hook::case_timeout`]), so the hook reports before its own timeout.

use aws_sdk_codedeploy::types::LifecycleEventStatus;
use deploy_hook::{case_timeout, check, Invoke};
use fan_out::invoke::{sdk_config, Client};
use fan_out::ShardTarget;
use labeller::sample::SampleCase;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What CodeDeploy sends a lifecycle hook.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HookEvent {
    deployment_id: String,
    lifecycle_event_hook_execution_id: String,
}

/// The version under test, through the Invoke API, within the hook's time.
struct Target {
    client: Client,
    function: ShardTarget,
    runtime: tokio::runtime::Handle,
    /// When the hook's own time ends, and the cases still to run.
    deadline: Instant,
    cases: usize,
}

impl Invoke for Target {
    fn invoke(&mut self, event: &[u8]) -> Result<Vec<u8>, String> {
        let wait = case_timeout(
            self.deadline.saturating_duration_since(Instant::now()),
            self.cases,
        );
        self.cases = self.cases.saturating_sub(1);
        let call = self.client.invoke(&self.function, event.to_vec());
        match self.runtime.block_on(tokio::time::timeout(wait, call)) {
            Err(_) => Err(format!("no answer within {} ms", wait.as_millis())),
            Ok(Err(e)) => Err(format!("{}: {}", e.what(), e.detail())),
            Ok(Ok(payload)) => Ok(payload),
        }
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
    // Multi-threaded: the check blocks in place on the invocations it makes.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let function = ShardTarget {
        endpoint: env("FRAUD_TARGET_ENDPOINT"),
        function: target.clone(),
    };
    let lambda = runtime.block_on(Client::new(&function));
    let codedeploy = aws_sdk_codedeploy::Client::new(
        &runtime.block_on(sdk_config(env("FRAUD_CODEDEPLOY_ENDPOINT").as_deref())),
    );
    tracing::info!(target = %target, cases = sample.len(), sample = %sample_path.display(), "pretraffic hook ready");
    let handle = runtime.handle().clone();
    let (sample, function, lambda, codedeploy) = (&sample, &function, &lambda, &codedeploy);
    runtime.block_on(lambda_runtime::run(service_fn(
        move |event: LambdaEvent<HookEvent>| {
            let handle = handle.clone();
            async move {
                // The hook's own deadline, as Lambda gives it (milliseconds since the epoch).
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                let left = Duration::from_millis(event.context.deadline.saturating_sub(now_ms));
                let mut version = Target {
                    client: lambda.clone(),
                    function: function.clone(),
                    runtime: handle,
                    deadline: Instant::now() + left,
                    cases: sample.len(),
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
