//! `cargo xtask shards` (docs/SCALING.md, "Past one function"): a set split into S shards, each
//! shard's `bootstrap` (role `shard`) under AWS's emulator (the Invoke API's real path), and
//! `front serve` in front, until stopped (`--check`: the public set, then stop); `--faults`, CI's
//! fault injection ([`faults`]).

pub mod faults;

use crate::lambda::emulator::{Emulator, Settings, INVOKE};
use crate::lambda::{package, sam::Tools};
use crate::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// The reference set (JSON, optionally .gz).
    #[arg(long, default_value = "resources/references.json.gz")]
    references: PathBuf,
    /// Shards.
    #[arg(long, default_value_t = 3)]
    count: u32,
    /// Where the front serves HTTP.
    #[arg(long, default_value = "127.0.0.1:9999")]
    listen: String,
    /// Replay the public set through the front, every answer against its label, then stop
    /// (the contest's references only).
    #[arg(long)]
    check: bool,
    /// Instead: a small synthetic set in `--count` shards, each behind a fault proxy, every fault
    /// made at shard 1 in turn, then the deployment hook through the front (CI).
    #[arg(long, conflicts_with = "check")]
    faults: bool,
    /// Emulators per shard, behind one HAProxy endpoint that gives each a single invocation at a
    /// time (the emulator runs one at once, as one Lambda execution environment does): the
    /// front's concurrent invocations as Lambda would take them, each in an environment of its
    /// own.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pool: u32,
    /// Milliseconds the pool's HAProxy holds each invocation before passing it on: a model of
    /// the Invoke API's round trip on AWS, which the emulator on loopback does not have.
    #[arg(long, default_value_t = 0)]
    invoke_ms: u32,
}

/// The shards served and their front: stopped (every process killed) when dropped, front first.
pub struct Running {
    pub front: util::Killed,
    /// The pool's HAProxy, with more than one emulator per shard or invocations held.
    pub pool: Option<util::Killed>,
    /// The first emulator of each shard, in order.
    pub shards: Vec<Emulator>,
    /// The other emulators of each shard's pool.
    pub spares: Vec<Emulator>,
}

/// Splits `references` into `count` shards under `dir`, each with its bootstrap; their
/// directories, in order.
pub fn prepare(references: &Path, count: u32, dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = dir.join(count.to_string());
    log!("shards: {} split in {count}", references.display());
    let words = format!("split --count {count} --accept-any-references");
    let paths = [("--references", references), ("--output-dir", dir.as_path())];
    util::run(&util::command(&util::built("index-pack")?, &words, &paths))?;
    let each = (0..count).map(|k| {
        let shard = dir.join(format!("shard-{k}-of-{count}.idx"));
        log!("shards: bootstrap of shard {k} ({})", shard.display());
        util::run(&util::build_around(&shard, &["--bin", "bootstrap"]))?;
        let (built, served) = (util::target_dir().join(util::PROFILE), dir.join(k.to_string()));
        package::copy_bootstrap(&built.join("bootstrap"), &served)?;
        Ok(served)
    });
    each.collect()
}

/// Each shard under `pool` emulators (fresh: queries initialise them), a front on `listen`, ready;
/// with a pool or `invoke_ms`, the shards behind [`pool_proxy`].
pub fn serve(
    shard_dirs: &[PathBuf],
    listen: &str,
    (pool, invoke_ms): (u32, u32),
) -> Result<Running> {
    let rie = Tools::ensure()?.rie;
    // The shards' settings in template-sharded.yaml: the index read at init when it fits.
    let env = vec![("FRAUD_LAMBDA_ROLE".to_string(), "shard".to_string())];
    let settings = Settings { memory_mb: 3072, timeout_s: 10, env, ..Settings::default() };
    let start = |d: &PathBuf, i: u32| {
        let log = d.join(if i == 0 { "rie.log".into() } else { format!("rie-{i}.log") });
        Emulator::start(&rie, d, &settings, &log)
    };
    let shards = shard_dirs.iter().map(|d| start(d, 0)).collect::<Result<Vec<_>>>()?;
    let spares = shard_dirs.iter().flat_map(|d| (1..pool).map(move |i| (d, i)));
    let spares = spares.map(|(d, i)| start(d, i)).collect::<Result<Vec<_>>>()?;
    let base = |s: &Emulator| s.url.trim_end_matches(INVOKE).to_string();
    let pooled = pool > 1 || invoke_ms > 0;
    let (pool_proxy, endpoints) = if pooled {
        let each = |k: usize| -> Vec<String> {
            let spares = spares.iter().skip(k * (pool as usize - 1)).take(pool as usize - 1);
            std::iter::once(&shards[k]).chain(spares).map(base).collect()
        };
        let members: Vec<Vec<String>> = (0..shards.len()).map(each).collect();
        let dir = shard_dirs[0].with_file_name("pool");
        let (proxy, endpoints) = pool_proxy(&dir, &members, invoke_ms)?;
        (Some(proxy), endpoints)
    } else {
        (None, shards.iter().map(base).collect())
    };
    let targets: Vec<String> = endpoints.iter().map(|e| format!("{e}#function")).collect();
    let front =
        cmd!(util::built("front")?, "serve", "--listen", listen, "--shards", targets.join(","));
    // Behind the pool, a request the front gives up on would free its emulator in HAProxy while
    // the emulator still runs it, and the next would crash it: the front waits instead.
    let front = if pooled { front.env("FRAUD_SHARD_TIMEOUT_MS", "60000") } else { front };
    let log = shard_dirs[0].with_file_name("front.log");
    let front = util::to_log(front.env("AWS_REGION", "us-east-1"), &log).start()?;
    let running = Running { front: util::Killed(front), pool: pool_proxy, shards, spares };
    let ready = format!("http://{listen}/ready");
    util::wait_200("the front's /ready", &ready, Duration::from_secs(30))?;
    let n = shard_dirs.len();
    log!("shards: the front serves http://{listen} over {n} shards ({})", targets.join(", "));
    Ok(running)
}

/// One HAProxy (mode http) in `dir` with a frontend per shard over its emulators, each server
/// given one request at a time (`maxconn 1`; the others queue), each request held `invoke_ms`
/// first (a Lua action that yields: other requests go on meanwhile); the frontends' URLs.
/// A request whose client went away (the front drops a request's invocations when its own
/// client leaves) frees its emulator in HAProxy while the emulator still runs it: a second
/// invocation then would crash the emulator, so queued ones of gone clients are dropped
/// (`abortonclose`), and a load must leave the pool a moment between runs. The emulator still
/// crashes now and then on invocations back to back; the health check takes it out of the pool.
fn pool_proxy(
    dir: &Path,
    members: &[Vec<String>],
    invoke_ms: u32,
) -> Result<(util::Killed, Vec<String>)> {
    fs::create_dir_all(dir)?;
    let lua = dir.join("invoke.lua");
    let action = "core.register_action('invoke', {'http-req'}, function(txn) core.msleep(";
    fs::write(&lua, format!("{action}{invoke_ms}) end)\n"))?;
    let mut cfg = format!(
        "global\n    maxconn 4096\n    lua-load {}\ndefaults\n    mode http\n    option abortonclose\n    timeout connect 1s\n    timeout client 60s\n    timeout server 60s\n    timeout queue 60s\n",
        lua.display()
    );
    let mut endpoints = Vec::new();
    for (k, urls) in members.iter().enumerate() {
        let bind = util::free_port()?;
        let hold = if invoke_ms > 0 { "    http-request lua.invoke\n" } else { "" };
        cfg += &format!("frontend shard{k}\n    bind {bind}\n{hold}    default_backend shard{k}\n");
        cfg += &format!("backend shard{k}\n    balance leastconn\n");
        for (i, url) in urls.iter().enumerate() {
            let url = url.trim_start_matches("http://");
            cfg += &format!("    server e{i} {url} maxconn 1 check inter 1s\n");
        }
        endpoints.push(format!("http://{bind}"));
    }
    let path = dir.join("haproxy.cfg");
    fs::write(&path, cfg)?;
    let haproxy = cmd!("haproxy", "-db", "-f", &path);
    let proxy = util::Killed(util::to_log(haproxy, &dir.join("haproxy.log")).start()?);
    for e in &endpoints {
        let addr: std::net::SocketAddr = e.trim_start_matches("http://").parse()?;
        util::poll(
            "the pool's HAProxy",
            Duration::from_secs(10),
            Duration::from_millis(5),
            || Ok(std::net::TcpStream::connect(addr).map_err(|e| e.to_string())),
        )?;
    }
    log!("shards: {} emulators per shard behind HAProxy ({})", members[0].len(), path.display());
    Ok((proxy, endpoints))
}

pub fn run(a: Args) -> Result<()> {
    if a.faults {
        return faults::run(a.count);
    }
    let dirs = prepare(&a.references, a.count, &util::xtask_dir("shards")?)?;
    let (t, running) = (Instant::now(), serve(&dirs, &a.listen, (a.pool, a.invoke_ms))?);
    if !a.check {
        log!("shards: serving until stopped (Ctrl-C)");
        let _ = running.front.0.wait();
        return Ok(());
    }
    let entries = util::test_entries()?;
    let (wrong, first) = util::score_all(&entries, &format!("http://{}", a.listen));
    drop(running);
    let (n, shards, s) = (entries.len(), a.count, t.elapsed().as_secs_f64());
    let first = first.map_or(String::new(), |f| format!("; first wrong: {f}"));
    let figures = format!(
        "{}/{n} public payloads answered right by the front over {shards} shards{first}; {s:.0} s",
        n - wrong
    );
    util::verdict("shards", wrong == 0, &figures, &serde_json::json!({"wrong": wrong}))
}
