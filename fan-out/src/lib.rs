//! # fan-out: one search over shards that are functions of their own
//!
//! Past what one function can hold (about 300M references: its 10 GB image, its 10,240 MB of
//! memory) the set is split into shards (`index-pack split`), each served by the same
//! `bootstrap` in its `shard` role. [`Fanout`] sends every shard the query vector through the
//! Lambda Invoke API (`RequestResponse`) at once, merges their answers exactly
//! (`function::shard::merge`: the union of each shard's first 5, sorted in the labeller's order,
//! is the global first 5) and counts the frauds among them. It implements
//! [`function::handler::Remote`], so [`function::Scorer::remote`] gives the front the handler's
//! own routes and answers: the `front` Lambda binary and `local-runner serve --shards` are thin
//! adapters, as the single function's are.
//!
//! **Failure is never a partial answer.** Each shard has a timeout ([`Fanout::start`]); a shard
//! that errs, times out, answers something else than a shard's answer, or answers for another
//! shard or another set than the one it was named for, makes the request a 502 (504 for a
//! timeout) naming the shard: a merge without one shard would be a different vote.
//!
//! **Where the shards are.** A [`ShardTarget`] is a function name or ARN (the Invoke API of the
//! function's region), optionally behind an endpoint: `http://127.0.0.1:9001#function` is the
//! function `function` served by AWS's runtime interface emulator on that port (its Invoke API
//! path is the real one), `http://127.0.0.1:3001#fraud-shard-0` one of `sam local
//! start-lambda`'s. Credentials come from the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`: a Lambda function's own role's), the region from
//! `AWS_REGION` (`us-east-1` when unset, as for an emulator).
//!
//! **Threads.** The invocations run on a tokio runtime of their own, on a thread of their own:
//! [`Remote::frauds`] is called from synchronous code (the HTTP server's event loop) and from
//! inside another runtime (the front's Lambda loop), and hands each query to that thread and
//! waits. One query is fanned out at a time per [`Fanout`].

use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use function::handler::{Remote, Unavailable};
use function::shard::{self, NearestRequest, NearestResponse, ShardNeighbour};
use index_pack::format::DIMS;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where one shard is invoked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardTarget {
    /// An Invoke API endpoint other than AWS's (an emulator), or `None`.
    pub endpoint: Option<String>,
    /// The function's name or ARN (with a qualifier, `name:alias`, if wanted).
    pub function: String,
}

impl std::str::FromStr for ShardTarget {
    type Err = String;

    /// `FUNCTION` or `ENDPOINT#FUNCTION`.
    fn from_str(s: &str) -> Result<ShardTarget, String> {
        let (endpoint, function) = match s.rsplit_once('#') {
            Some((e, f)) => (Some(e.to_string()), f),
            None => (None, s),
        };
        if function.is_empty() || endpoint.as_deref() == Some("") {
            return Err(format!(
                "a shard is FUNCTION or ENDPOINT#FUNCTION (e.g. fraud-shard-0, or \
                 http://127.0.0.1:9001#function), not {s:?}"
            ));
        }
        Ok(ShardTarget {
            endpoint,
            function: function.to_string(),
        })
    }
}

impl std::fmt::Display for ShardTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.endpoint {
            Some(e) => write!(f, "{e}#{}", self.function),
            None => f.write_str(&self.function),
        }
    }
}

/// What one fan-out gave: the merged first 5, and each shard's search time and round trip.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub neighbours: Vec<ShardNeighbour>,
    /// Per shard, in order: the search's time inside the shard, and the whole invocation's.
    pub timings: Vec<(Duration, Duration)>,
}

struct Job {
    vector: [i16; DIMS],
    reply: mpsc::SyncSender<Result<Merged, Unavailable>>,
}

/// The shards of one set, invoked together.
pub struct Fanout {
    jobs: mpsc::Sender<Job>,
    shards: Vec<ShardTarget>,
}

impl Fanout {
    /// Starts the invoking thread for `shards` (in shard order: shard k must answer as shard k
    /// of `shards.len()`), each invocation bounded by `timeout`.
    pub fn start(shards: Vec<ShardTarget>, timeout: Duration) -> anyhow::Result<Fanout> {
        anyhow::ensure!(!shards.is_empty(), "a front needs at least one shard");
        let clients: Vec<aws_sdk_lambda::Client> = shards.iter().map(client).collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let names = shards.clone();
        std::thread::Builder::new()
            .name("fan-out".into())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    let merged = runtime.block_on(fan(&clients, &names, &job.vector, timeout));
                    let _ = job.reply.send(merged);
                }
            })?;
        Ok(Fanout { jobs, shards })
    }

    pub fn shards(&self) -> &[ShardTarget] {
        &self.shards
    }

    /// The merged first 5 of the whole set, or the first shard that failed.
    pub fn nearest(&self, vector: &[i16; DIMS]) -> Result<Merged, Unavailable> {
        let (reply, answer) = mpsc::sync_channel(1);
        let gone = || Unavailable {
            timed_out: false,
            message: "the fan-out thread is gone".into(),
        };
        self.jobs
            .send(Job {
                vector: *vector,
                reply,
            })
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

impl Remote for Fanout {
    fn frauds(&self, q: &[i16; DIMS]) -> Result<usize, Unavailable> {
        Ok(shard::frauds(&self.nearest(q)?.neighbours))
    }
}

/// The AWS SDK configuration of a caller inside a Lambda function (the front, the deployment
/// hook): credentials and region from the environment (the function's role; placeholders for an
/// emulator, which checks no signature; `us-east-1` when no region is set), HTTPS by rustls,
/// no retries (a retry would double a slow call's time; the caller's caller retries if it
/// wants), and `endpoint` for another endpoint than AWS's (an emulator, a stand-in).
pub fn aws_config(endpoint: Option<&str>) -> aws_types::SdkConfig {
    use aws_sdk_lambda::config::{retry::RetryConfig, SharedCredentialsProvider};
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let credentials = Credentials::new(
        env("AWS_ACCESS_KEY_ID").unwrap_or_else(|| "local".into()),
        env("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|| "local".into()),
        env("AWS_SESSION_TOKEN"),
        None,
        "environment",
    );
    let region = env("AWS_REGION")
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".into());
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let mut b = aws_types::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .http_client(https)
        .retry_config(RetryConfig::disabled());
    if let Some(e) = endpoint {
        b = b.endpoint_url(e);
    }
    b.build()
}

/// A client of the Invoke API for one shard.
fn client(target: &ShardTarget) -> aws_sdk_lambda::Client {
    aws_sdk_lambda::Client::new(&aws_config(target.endpoint.as_deref()))
}

/// Invokes every shard at once with the query and merges their answers; the first failure (in
/// shard order) is the answer if any shard failed.
async fn fan(
    clients: &[aws_sdk_lambda::Client],
    shards: &[ShardTarget],
    vector: &[i16; DIMS],
    timeout: Duration,
) -> Result<Merged, Unavailable> {
    let request =
        serde_json::to_vec(&NearestRequest { vector: *vector }).expect("a query serializes");
    let count = shards.len() as u32;
    let calls = clients
        .iter()
        .zip(shards)
        .enumerate()
        .map(|(k, (client, target))| {
            let payload = Blob::new(request.clone());
            async move {
                let t = Instant::now();
                let call = client
                    .invoke()
                    .function_name(&target.function)
                    .invocation_type(InvocationType::RequestResponse)
                    .payload(payload)
                    .send();
                let failed = |timed_out, what: String| Unavailable {
                    timed_out,
                    message: format!("shard {k} ({target}) {what}"),
                };
                let out = match tokio::time::timeout(timeout, call).await {
                    Err(_) => {
                        let ms = timeout.as_millis();
                        return Err(failed(true, format!("did not answer within {ms} ms")));
                    }
                    Ok(Err(e)) => {
                        let e = aws_sdk_lambda::error::DisplayErrorContext(e);
                        return Err(failed(false, format!("could not be invoked: {e}")));
                    }
                    Ok(Ok(out)) => out,
                };
                let body = out.payload().map(|b| b.as_ref()).unwrap_or_default();
                if let Some(error) = out.function_error() {
                    let said = String::from_utf8_lossy(&body[..body.len().min(200)]);
                    return Err(failed(false, format!("failed ({error}): {said}")));
                }
                let answer: NearestResponse = serde_json::from_slice(body).map_err(|e| {
                    failed(
                        false,
                        format!("answered something else than a shard's answer: {e}"),
                    )
                })?;
                let want = format!("shard {k} of {count}");
                if answer.index.part != want {
                    return Err(failed(
                        false,
                        format!(
                            "answered as {} where {want} was expected",
                            answer.index.part
                        ),
                    ));
                }
                Ok((answer, t.elapsed()))
            }
        });
    let answers = futures_util::future::join_all(calls).await;
    let mut sets = std::collections::BTreeSet::new();
    let (mut all, mut timings) = (Vec::new(), Vec::new());
    for answer in answers {
        let (a, rtt) = answer?;
        sets.insert(a.index.references_sha256.clone());
        timings.push((Duration::from_nanos(a.search_ns), rtt));
        all.extend(a.neighbours);
    }
    if sets.len() > 1 {
        return Err(Unavailable {
            timed_out: false,
            message: format!("the shards were packed from different sets: {sets:?}"),
        });
    }
    Ok(Merged {
        neighbours: shard::merge(all),
        timings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_targets_parse() {
        let t: ShardTarget = "http://127.0.0.1:9001#function".parse().unwrap();
        assert_eq!(t.endpoint.as_deref(), Some("http://127.0.0.1:9001"));
        assert_eq!(t.function, "function");
        assert_eq!(t.to_string(), "http://127.0.0.1:9001#function");
        let t: ShardTarget = "arn:aws:lambda:us-east-1:1:function:fraud-shard-0:live"
            .parse()
            .unwrap();
        assert_eq!(t.endpoint, None);
        assert!("http://x#".parse::<ShardTarget>().is_err());
        assert!("#f".parse::<ShardTarget>().is_err());
    }

    /// A shard that cannot be reached makes the answer a 502 naming it, never a partial merge.
    #[test]
    fn an_unreachable_shard_is_named() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let shard: ShardTarget = format!("http://127.0.0.1:{port}#function").parse().unwrap();
        let f = Fanout::start(vec![shard], Duration::from_secs(2)).unwrap();
        let e = f.frauds(&[0; DIMS]).unwrap_err();
        assert!(!e.timed_out, "{e:?}");
        assert!(
            e.message.starts_with(&format!(
                "shard 0 (http://127.0.0.1:{port}#function) could not be invoked"
            )),
            "{e:?}"
        );
    }

    /// A shard that does not answer in time: 504, naming it.
    #[test]
    fn a_silent_shard_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _hold = std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().take(1).collect();
            std::thread::sleep(Duration::from_secs(3));
            drop(held);
        });
        let shard: ShardTarget = format!("http://127.0.0.1:{port}#function").parse().unwrap();
        let f = Fanout::start(vec![shard], Duration::from_millis(300)).unwrap();
        let t = Instant::now();
        let e = f.frauds(&[0; DIMS]).unwrap_err();
        assert!(
            e.timed_out && e.message.contains("did not answer within 300 ms"),
            "{e:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
