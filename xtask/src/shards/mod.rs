//! `cargo xtask shards` (docs/SCALING.md, "Past one function"): a set split into S shards, each
//! shard's `bootstrap` (role `shard`) under AWS's emulator (the Invoke API's real path), and
//! `front serve` in front, until stopped (`--check`: the public set, then stop); `--faults`, CI's
//! fault injection ([`faults`]).

pub mod faults;

use crate::lambda::emulator::{Emulator, Settings, INVOKE};
use crate::lambda::{package, sam::Tools};
use crate::prelude::*;

/// The sharded set and where its front serves (this command's and `cargo measure pool`'s).
#[derive(clap::Args)]
pub struct SetArgs {
    /// The reference set (JSON, optionally .gz).
    #[arg(long, default_value = "resources/references.json.gz")]
    pub references: PathBuf,
    /// Shards.
    #[arg(long, default_value_t = 3)]
    pub count: u32,
    /// Where the front serves HTTP.
    #[arg(long, default_value = "127.0.0.1:9999")]
    pub listen: String,
}

impl SetArgs {
    /// The set split into its shards under the harness's `shards` directory ([`prepare`]).
    pub fn prepare(&self) -> Result<Vec<PathBuf>> {
        prepare(&self.references, self.count, &util::xtask_dir("shards")?)
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    set: SetArgs,
    /// Replay the public set through the front, every answer against its label, then stop
    /// (the contest's references only).
    #[arg(long)]
    check: bool,
    /// Instead: a small synthetic set in `--count` shards, each behind a fault proxy, every fault
    /// made at shard 1 in turn, then the deployment hook through the front (CI).
    #[arg(long, conflicts_with = "check")]
    faults: bool,
}

/// The shards served and their front: stopped (every process killed) when dropped, front first.
pub struct Running {
    pub front: util::Killed,
    pub shards: Vec<Emulator>,
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

/// Each shard under the emulator (fresh: queries initialise them), a front on `listen`, ready.
pub fn serve(shard_dirs: &[PathBuf], listen: &str) -> Result<Running> {
    let shards = start_emulators(shard_dirs, 1)?.into_iter().flatten().collect::<Vec<_>>();
    let front =
        start_front(shard_dirs, listen, &shards.iter().map(base_url).collect::<Vec<_>>(), &[])?;
    Ok(Running { front, shards })
}

/// `per_shard` emulators of each shard's bootstrap, in the shards' order (the logs `rie.log`,
/// then `rie-1.log`...).
pub fn start_emulators(shard_dirs: &[PathBuf], per_shard: u32) -> Result<Vec<Vec<Emulator>>> {
    let rie = Tools::ensure()?.rie;
    // The shards' settings in template-sharded.yaml: the index read at init when it fits.
    let env = vec![("FRAUD_LAMBDA_ROLE".to_string(), "shard".to_string())];
    let settings = Settings { memory_mb: 3072, timeout_s: 10, env, ..Settings::default() };
    let start = |d: &PathBuf, i: u32| {
        let log = d.join(if i == 0 { "rie.log".into() } else { format!("rie-{i}.log") });
        Emulator::start(&rie, d, &settings, &log)
    };
    let each = |d: &PathBuf| (0..per_shard).map(|i| start(d, i)).collect::<Result<Vec<_>>>();
    shard_dirs.iter().map(each).collect()
}

/// An emulator's address without the Invoke API's path (what the front is given).
pub fn base_url(e: &Emulator) -> String {
    e.url.trim_end_matches(INVOKE).to_string()
}

/// `front serve` on `listen` over the shards' endpoints (with `env` beside), once ready.
pub fn start_front(
    shard_dirs: &[PathBuf],
    listen: &str,
    endpoints: &[String],
    env: &[(&str, &str)],
) -> Result<util::Killed> {
    let targets: Vec<String> = endpoints.iter().map(|e| format!("{e}#function")).collect();
    let front =
        cmd!(util::built("front")?, "serve", "--listen", listen, "--shards", targets.join(","));
    let front = env.iter().fold(front.env("AWS_REGION", "us-east-1"), |f, (k, v)| f.env(k, v));
    let log = shard_dirs[0].with_file_name("front.log");
    let front = util::Killed(util::to_log(front, &log).start()?);
    let ready = format!("http://{listen}/ready");
    util::wait_200("the front's /ready", &ready, Duration::from_secs(30))?;
    let n = shard_dirs.len();
    log!("shards: the front serves http://{listen} over {n} shards ({})", targets.join(", "));
    Ok(front)
}

pub fn run(a: Args) -> Result<()> {
    if a.faults {
        return faults::run(a.set.count);
    }
    let (check, a, dirs) = (a.check, &a.set, a.set.prepare()?);
    let (t, running) = (Instant::now(), serve(&dirs, &a.listen)?);
    if !check {
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
