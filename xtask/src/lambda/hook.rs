//! The PreTraffic hook under the emulator: it invokes a scorer served by another emulator (the
//! Invoke API's real path) and reports to a CodeDeploy stand-in that records what it was sent.

use super::emulator::{Emulator, Settings};
use crate::prelude::*;
use std::io::{BufRead, BufReader, Read, Write};
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
        match &self.reported[..] {
            [r] if r.deployment_id == DEPLOYMENT && r.lifecycle_event_hook_execution_id == HOOK => {
                Some(&r.status)
            }
            _ => None,
        }
    }
}

const DEPLOYMENT: &str = "d-XTASK0001";
const HOOK: &str = "xtask-pretraffic-1";

/// Serves `scorer_dir`'s bootstrap and `hook_dir`'s (with its sample) each under the emulator,
/// and hands the hook one lifecycle event, as CodeDeploy would before shifting traffic.
pub fn run(rie: &Path, scorer_dir: &Path, hook_dir: &Path, logs: &Path) -> Result<Run> {
    // The scorer as template.yaml configures it.
    let settings = super::sam::defaults()?;
    let scorer = Emulator::start(rie, scorer_dir, &settings, &logs.join("scorer.log"))?;
    let (standin, reported) = standin()?;
    let endpoint = |url: &str| url.split("/2015-03-31").next().unwrap_or(url).to_string();
    let env = [
        ("FRAUD_TARGET", "function".to_string()),
        ("FRAUD_TARGET_ENDPOINT", endpoint(&scorer.url)),
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

/// A CodeDeploy stand-in on a free loopback port: answers every
/// `PutLifecycleEventHookExecutionStatus` (AWS JSON 1.1) as CodeDeploy does and records it;
/// anything else is a 400.
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
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut writer = stream;
    loop {
        let (mut target, mut length) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            match name.to_ascii_lowercase().as_str() {
                "x-amz-target" => target = value.trim().to_string(),
                "content-length" => length = value.trim().parse().ok()?,
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        let parsed = serde_json::from_slice::<Reported>(&body).ok().filter(|_| target == OPERATION);
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
