//! `cargo xtask shards` (docs/SCALING.md, "Past one function"): a reference set split into S
//! shards (`index-pack split`), each shard's `bootstrap` (role `shard`) under AWS's runtime
//! interface emulator (the Invoke API's real path), and `local-runner serve --shards` in front of
//! them, serving until stopped (`--check`: the public set through the front, then stop).

use crate::lambda::emulator::{Emulator, Settings};
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
}

/// The shards served and their front: stopped (every process killed) when dropped.
pub struct Running {
    pub shards: Vec<Emulator>,
    pub front: duct::Handle,
    pub listen: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.front.kill();
    }
}

/// Splits `references` into `count` shards and builds each one's bootstrap; returns the
/// directories the emulator serves them from, in shard order.
pub fn prepare(references: &Path, count: u32) -> Result<Vec<PathBuf>> {
    let dir = util::xtask_dir("shards")?.join(count.to_string());
    let index_pack = util::built("index-pack")?;
    log!("shards: {} split in {count}", references.display());
    let words = format!("split --count {count} --accept-any-references");
    let paths = [("--references", references), ("--output-dir", dir.as_path())];
    util::run(&util::command(&index_pack, &words, &paths))?;
    let each = (0..count).map(|k| {
        let shard = dir.join(format!("shard-{k}-of-{count}.idx"));
        log!("shards: bootstrap of shard {k} ({})", shard.display());
        let build = util::cargo_workspace("build", &["--bin", "bootstrap"]);
        util::run(&build.env("FRAUD_INDEX_ARTIFACT_IN", &shard))?;
        let served = dir.join(k.to_string());
        package::copy_bootstrap(
            &util::target_dir().join(util::PROFILE).join("bootstrap"),
            &served,
        )?;
        Ok(served)
    });
    each.collect()
}

/// Serves each prepared shard under the emulator (fresh environments: the first query initialises
/// them) with a front on `listen`; returns once the front answers `/ready`.
pub fn serve(shard_dirs: &[PathBuf], listen: &str) -> Result<Running> {
    let rie = Tools::ensure()?.rie;
    // The shards' settings in template-sharded.yaml: the index read at init when it fits.
    let env = vec![("FRAUD_LAMBDA_ROLE".to_string(), "shard".to_string())];
    let settings = Settings { memory_mb: 3072, timeout_s: 10, env, ..Settings::default() };
    let start = |d: &PathBuf| Emulator::start(&rie, d, &settings, &d.join("rie.log"));
    let shards = shard_dirs.iter().map(start).collect::<Result<Vec<_>>>()?;
    let targets: Vec<String> = shards
        .iter()
        .map(|s| format!("{}#function", s.url.split("/2015-03-31").next().unwrap_or(&s.url)))
        .collect();
    let local_runner = util::built("local-runner")?;
    let front = cmd!(&local_runner, "serve", "--listen", listen, "--shards", targets.join(","));
    let log = shard_dirs[0].with_file_name("front.log");
    let front = util::to_log(front.env("AWS_REGION", "us-east-1"), &log).start()?;
    let running = Running { shards, front, listen: listen.to_string() };
    let (agent, url) = (util::http_agent(Duration::from_secs(5)), format!("http://{listen}/ready"));
    util::poll("the front's /ready", Duration::from_secs(30), Duration::from_millis(100), || {
        Ok(match agent.get(&url).call() {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(r.status().to_string()),
            Err(e) => Err(e.to_string()),
        })
    })?;
    let n = shard_dirs.len();
    log!("shards: the front serves http://{listen} over {n} shards ({})", targets.join(", "));
    Ok(running)
}

pub fn run(a: Args) -> Result<()> {
    let t = Instant::now();
    let running = serve(&prepare(&a.references, a.count)?, &a.listen)?;
    if !a.check {
        log!("shards: serving until stopped (Ctrl-C)");
        let _ = running.front.wait();
        return Ok(());
    }
    let (agent, base) = (util::http_agent(Duration::from_secs(5)), format!("http://{}", a.listen));
    let entries = util::test_entries()?;
    let (mut wrong, mut first) = (0, None);
    for e in &entries {
        if let Err(why) = e.score(&agent, &base) {
            wrong += 1;
            first.get_or_insert(why);
        }
    }
    drop(running);
    let n = entries.len();
    let first = first.map_or(String::new(), |f| format!("; first wrong: {f}"));
    let figures = format!(
        "{}/{n} public payloads answered right by the front over {} shards{first}; {:.0} s",
        n - wrong,
        a.count,
        t.elapsed().as_secs_f64()
    );
    util::verdict("shards", wrong == 0, &figures, &serde_json::json!({"wrong": wrong}))
}
