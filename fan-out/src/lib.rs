//! # fan-out: one search over shards that are functions of their own
//!
//! Past what one function can hold (about 300M references: its 10 GB image, its 10,240 MB of
//! memory) the set is split into shards (`index-pack split`), each served by the same
//! `bootstrap` in its `shard` role. [`Fanout`] sends every shard the query vector through the
//! Lambda Invoke API (`RequestResponse`) at once, checks each answer against the tiling it
//! proved at start (`function::shard::Tiling`), merges them exactly (`function::shard::merge`:
//! the union of each shard's first 5, sorted in the labeller's order, is the global first 5)
//! and counts the frauds among them. The `front` binary serves it: over HTTP in a container
//! ([`front::FrontApp`] on the `http-server` event loop) and as a Lambda function.
//!
//! **Failure is never a partial answer, nor a wrong one.** Until the shards are proven to tile
//! one set, the front answers nothing but 503. Each shard has a deadline ([`Fanout::new`]); a
//! shard that errs, times out, or answers anything but a right shard's answer makes the request
//! a 502 (504 for a timeout) naming the shard, at once: the other shards' invocations are
//! dropped, not awaited. What the shard or the SDK said goes to the log, not to the caller.
//!
//! **Faults the invocations meet** ([`invoke`]): throttles and other retryable errors are retried
//! by the SDK's standard strategy (exponential backoff with jitter) within the request's
//! deadline; credentials and region come from the SDK's standard chain (the environment, the
//! container credentials endpoint of ECS and EKS, web identity, a profile, instance metadata),
//! except for an emulator's endpoint, which checks no signature.
//!
//! **Where the shards are.** A [`ShardTarget`] is a function name or ARN (with a version or
//! alias qualifier: the template pins versions), optionally behind an endpoint:
//! `http://127.0.0.1:9001#function` is the function `function` served by AWS's runtime
//! interface emulator on that port (its Invoke API path is the real one).

pub mod front;
pub mod invoke;

use function::handler::Unavailable;
use function::shard::{self, NearestRequest, NearestResponse, ShardNeighbour, Tiling};
use index_pack::format::{Identity, DIMS};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where one shard is invoked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardTarget {
    /// An Invoke API endpoint other than AWS's (an emulator), or `None`.
    pub endpoint: Option<String>,
    /// The function's name or ARN (with a qualifier, `name:version`, if wanted).
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
                "a shard is FUNCTION or ENDPOINT#FUNCTION (e.g. fraud-shard-0:7, or \
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

/// The shards of one set, invoked together.
pub struct Fanout {
    shards: Vec<(ShardTarget, invoke::Client)>,
    timeout: Duration,
    tiling: OnceLock<Tiling>,
}

impl Fanout {
    /// The shards, in shard order (shard k must answer as shard k of `targets.len()`), each
    /// invocation bounded by `timeout` (retries included). Nothing is invoked yet.
    pub async fn new(targets: Vec<ShardTarget>, timeout: Duration) -> anyhow::Result<Fanout> {
        anyhow::ensure!(!targets.is_empty(), "a front needs at least one shard");
        let mut shards = Vec::new();
        for t in targets {
            let client = invoke::Client::new(&t).await;
            shards.push((t, client));
        }
        Ok(Fanout {
            shards,
            timeout,
            tiling: OnceLock::new(),
        })
    }

    pub fn targets(&self) -> impl Iterator<Item = &ShardTarget> {
        self.shards.iter().map(|(t, _)| t)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The tiling, once proven.
    pub fn tiling(&self) -> Option<&Tiling> {
        self.tiling.get()
    }

    /// Invokes every shard once (which also starts an execution environment of each) and
    /// proves that they tile one set (`Tiling::prove`), then every answer is held to it. Done
    /// once per process; a later call returns the proof.
    pub async fn prove(&self) -> Result<&Tiling, String> {
        if let Some(t) = self.tiling.get() {
            return Ok(t);
        }
        let probe = [0; DIMS];
        let calls = self
            .shards
            .iter()
            .enumerate()
            .map(|(k, _)| self.invoke(k, &probe));
        let answers = futures_util::future::try_join_all(calls)
            .await
            .map_err(|u| format!("{}: {}", u.summary(), u.detail))?;
        let ids: Vec<Identity> = answers.iter().map(|(a, _)| a.index.clone()).collect();
        let tiling = Tiling::prove(ids)?;
        for (k, (a, _)) in answers.iter().enumerate() {
            tiling.check(k, a).map_err(|e| format!("shard {k} {e}"))?;
        }
        Ok(self.tiling.get_or_init(|| tiling))
    }

    /// The merged first 5 of the whole set, or the first shard that failed (the others'
    /// invocations are dropped at once). Needs the proof ([`Fanout::prove`]).
    pub async fn nearest(&self, vector: &[i16; DIMS]) -> Result<Merged, Unavailable> {
        let Some(tiling) = self.tiling.get() else {
            return Err(Unavailable {
                timed_out: false,
                shard: "the shards".into(),
                what: "are not proven to tile one set yet".into(),
                detail: String::new(),
            });
        };
        let calls = (0..self.shards.len()).map(|k| async move {
            let (answer, rtt) = self.invoke(k, vector).await?;
            tiling
                .check(k, &answer)
                .map_err(|what| self.failed(k, false, what, String::new()))?;
            Ok::<_, Unavailable>((answer, rtt))
        });
        let answers = futures_util::future::try_join_all(calls).await?;
        let mut timings = Vec::with_capacity(answers.len());
        let mut all = Vec::with_capacity(answers.len() * function::search::K);
        for (a, rtt) in answers {
            timings.push((Duration::from_nanos(a.search_ns), rtt));
            all.extend(a.neighbours);
        }
        Ok(Merged {
            neighbours: shard::merge(all),
            timings,
        })
    }

    /// Frauds among the merged first 5: the vote.
    pub async fn frauds(&self, vector: &[i16; DIMS]) -> Result<usize, Unavailable> {
        Ok(shard::frauds(&self.nearest(vector).await?.neighbours))
    }

    fn failed(&self, k: usize, timed_out: bool, what: String, detail: String) -> Unavailable {
        Unavailable {
            timed_out,
            shard: format!("shard {k} ({})", self.shards[k].0),
            what,
            detail,
        }
    }

    /// One invocation of shard `k` within the deadline, its answer read (not yet checked).
    async fn invoke(
        &self,
        k: usize,
        vector: &[i16; DIMS],
    ) -> Result<(NearestResponse, Duration), Unavailable> {
        let (target, client) = &self.shards[k];
        let t = Instant::now();
        let request =
            serde_json::to_vec(&NearestRequest { vector: *vector }).expect("a query serializes");
        let payload = match tokio::time::timeout(self.timeout, client.invoke(target, request)).await
        {
            Err(_) => {
                let what = format!("did not answer within {} ms", self.timeout.as_millis());
                return Err(self.failed(k, true, what, String::new()));
            }
            Ok(Err(e)) => return Err(self.failed(k, false, e.what(), e.detail())),
            Ok(Ok(payload)) => payload,
        };
        let answer: NearestResponse = serde_json::from_slice(&payload).map_err(|e| {
            let what = "answered something else than a shard's answer".to_string();
            self.failed(k, false, what, e.to_string())
        })?;
        Ok((answer, t.elapsed()))
    }
}
