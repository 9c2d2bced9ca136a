//! The PreTraffic hook under the emulator: it invokes a scorer served by another emulator (the
//! Invoke API's real path) and reports to a CodeDeploy stand-in that records what it was sent.

use super::emulator::{Emulator, Settings, INVOKE};
use crate::prelude::*;
use std::io::{BufRead, BufReader};
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

/// The scorer and the hook under emulators, the hook handed a lifecycle event as CodeDeploy would.
pub fn run(rie: &Path, scorer_dir: &Path, hook_dir: &Path, logs: &Path) -> Result<Run> {
    // The scorer as template.yaml configures it.
    let scorer =
        Emulator::start(rie, scorer_dir, &super::sam::defaults()?, &logs.join("scorer.log"))?;
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
    let event =
        serde_json::json!({"DeploymentId": DEPLOYMENT, "LifecycleEventHookExecutionId": HOOK});
    let answer = serde_json::from_slice(&hook.invoke(&serde_json::to_vec(&event)?)?)?;
    let reported = reported.lock().expect("the stand-in panicked").clone();
    Ok(Run { answer, reported })
}

/// A CodeDeploy stand-in on loopback: `PutLifecycleEventHookExecutionStatus` recorded, else 400.
fn standin() -> Result<(std::net::SocketAddr, Arc<Mutex<Vec<Reported>>>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let (addr, reported) = (listener.local_addr()?, Arc::new(Mutex::new(Vec::new())));
    let record = reported.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let record = record.clone();
            std::thread::spawn(move || serve(stream, &record));
        }
    });
    Ok((addr, reported))
}

/// The requests of one connection, kept alive, until the client closes it.
fn serve(stream: std::net::TcpStream, record: &Mutex<Vec<Reported>>) -> Option<()> {
    let (mut reader, mut writer) = (BufReader::new(stream.try_clone().ok()?), stream);
    loop {
        // The head's lines up to the blank one; none when the client closed the connection.
        let lines = reader.by_ref().lines().map_while(Result::ok);
        let request: Vec<String> = lines.take_while(|l| !l.is_empty()).collect();
        if request.is_empty() {
            return None;
        }
        let header = |name: &str| {
            let mut all = request.iter().filter_map(|l| l.split_once(':'));
            all.find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim())
        };
        let mut body = vec![0; header("content-length").map_or(Some(0), |l| l.parse().ok())?];
        reader.read_exact(&mut body).ok()?;
        let ours = header("x-amz-target") == Some(OPERATION);
        let parsed = serde_json::from_slice::<Reported>(&body).ok().filter(|_| ours);
        let (status, answer) = match parsed {
            Some(r) => {
                let id = r.lifecycle_event_hook_execution_id.clone();
                record.lock().ok()?.push(r);
                ("200 OK", serde_json::json!({"lifecycleEventHookExecutionId": id}).to_string())
            }
            None => ("400 Bad Request", r#"{"__type":"ValidationException"}"#.to_string()),
        };
        let head = format!("HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.1\r\ncontent-length: {}\r\n\r\n", answer.len());
        writer.write_all(format!("{head}{answer}").as_bytes()).ok()?;
    }
}
