//! The PreTraffic hook under the emulator: it invokes a scorer served by another emulator (the
//! Invoke API's real path) and reports to a CodeDeploy stand-in that records what it was sent.

use super::emulator::{Emulator, Settings, INVOKE};
use crate::prelude::*;
use serde_json::json;
use std::sync::{Arc, Mutex};

/// What the hook did: its answer, and the statuses CodeDeploy was sent.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Run {
    /// `{"status", "cases", "wrong", "first_wrong"}`.
    pub answer: serde_json::Value,
    pub reported: Vec<Reported>,
}

/// One `PutLifecycleEventHookExecutionStatus` as the stand-in received it.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reported {
    pub deployment_id: String,
    pub lifecycle_event_hook_execution_id: String,
    pub status: String,
}

const OPERATION: &str = "CodeDeploy_20141006.PutLifecycleEventHookExecutionStatus";

impl Run {
    /// The status the hook reported for the one deployment it was handed, if exactly that.
    pub fn status(&self) -> Option<&str> {
        let [r] = &self.reported[..] else { return None };
        let ours = r.deployment_id == DEPLOYMENT && r.lifecycle_event_hook_execution_id == HOOK;
        ours.then_some(&r.status)
    }
}

const DEPLOYMENT: &str = "d-XTASK0001";
const HOOK: &str = "xtask-pretraffic-1";

/// The scorer (as template.yaml configures it) and the hook under emulators, the hook handed a
/// lifecycle event as CodeDeploy would.
pub fn run(rie: &Path, scorer_dir: &Path, hook_dir: &Path, logs: &Path) -> Result<Run> {
    run_with(rie, (scorer_dir, &super::sam::defaults()?), hook_dir, logs)
}

/// [`run`] of any function under test (the front over shards too), with its settings.
pub fn run_with(
    rie: &Path,
    target: (&Path, &Settings),
    hook_dir: &Path,
    logs: &Path,
) -> Result<Run> {
    let scorer = Emulator::start(rie, target.0, target.1, &logs.join("scorer.log"))?;
    let (standin, reported) = standin()?;
    let env = [
        ("FRAUD_TARGET", "function".to_string()),
        ("FRAUD_TARGET_ENDPOINT", scorer.url.trim_end_matches(INVOKE).into()),
        ("FRAUD_CODEDEPLOY_ENDPOINT", format!("http://{standin}")),
        ("AWS_REGION", "us-east-1".into()),
    ];
    let env = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let settings = Settings { memory_mb: 256, timeout_s: 120, env, ..Settings::default() };
    let hook = Emulator::start(rie, hook_dir, &settings, &logs.join("hook.log"))?;
    let event = json!({"DeploymentId": DEPLOYMENT, "LifecycleEventHookExecutionId": HOOK});
    let answer = serde_json::from_slice(&hook.invoke(&serde_json::to_vec(&event)?)?)?;
    let reported = reported.lock().expect("the stand-in panicked").clone();
    Ok(Run { answer, reported })
}

/// A CodeDeploy stand-in on loopback: `PutLifecycleEventHookExecutionStatus` recorded, else 400.
fn standin() -> Result<(std::net::SocketAddr, Arc<Mutex<Vec<Reported>>>)> {
    let reported = Arc::new(Mutex::new(Vec::new()));
    let record = reported.clone();
    let addr = util::stand_in(move |(head, body): &util::Request| {
        let ours = util::header(head, "x-amz-target") == Some(OPERATION);
        let parsed = serde_json::from_slice::<Reported>(body).ok().filter(|_| ours);
        Some(match parsed {
            Some(r) => {
                let id = r.lifecycle_event_hook_execution_id.clone();
                record.lock().ok()?.push(r);
                ("200 OK".into(), json!({"lifecycleEventHookExecutionId": id}).to_string().into())
            }
            None => ("400 Bad Request".into(), br#"{"__type":"ValidationException"}"#.to_vec()),
        })
    })?;
    Ok((addr, reported))
}
