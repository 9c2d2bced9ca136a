//! `cargo xtask scale` (docs/SCALING.md, CI-sized): a synthetic set packed, embedded, held exact
//! (alone; in 3 shards, one edited by a delta of its own; with a delta of new references and one
//! of removals and relabels; that chain compacted), shipped beside the binary (which refuses
//! other files), served; CI runs it last (it rebuilds).

use crate::lambda::{hook, package, sam};
use crate::prelude::*;
use crate::util::Served;
use index_pack::report::{Neighbours, Packed};

#[derive(clap::Args)]
pub struct Args {
    /// References in the synthetic set.
    #[arg(long, default_value_t = 300_000)]
    references: usize,
    /// Labelled payloads served over HTTP.
    #[arg(long, default_value_t = 2_000)]
    served: usize,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// The queries [`neighbours`] compares: generated payloads and adversarial queries.
pub const GENERATED: u64 = 2_000;
pub const ADVERSARIAL: u64 = 500;

/// `count` references drawn from `seed` the way the contest's generator draws its own (with
/// `ids`, each named `<ids><index>`).
pub fn draw(labeller: &Path, count: usize, seed: u64, ids: Option<&str>, out: &Path) -> Result<()> {
    let ids = ids.map_or(String::new(), |prefix| format!(" --ids {prefix}"));
    let words = format!("generate-references --count {count} --seed {seed}{ids}");
    util::run(&util::command(labeller, &words, &[("--out", out)]))
}

/// `index-pack build` of any references (`words`: more options).
pub fn pack(index_pack: &Path, refs: &Path, out: &Path, words: &str) -> Result<Packed> {
    let paths = [("--references", refs), ("--output", out)];
    let words = format!("build --accept-any-references {words}");
    let out = util::read(&util::command(index_pack, words.trim_end(), &paths))?;
    util::last_json(&out, "index-pack build")
}

/// `local-runner verify --neighbours` over `refs` (of `index`, else the embedded one) from `seed`.
pub fn neighbours(bin: &Path, refs: &Path, index: Option<&Path>, seed: u64) -> Result<Neighbours> {
    let paths: Vec<_> =
        [("--references", refs)].into_iter().chain(index.map(|i| ("--index", i))).collect();
    neighbours_of(bin, &paths, seed)
}

/// [`neighbours`] of any parts `local-runner verify` takes (`--shard`, `--delta`, `--references`).
pub fn neighbours_of(bin: &Path, paths: &[(&str, &Path)], seed: u64) -> Result<Neighbours> {
    let words = format!("verify {} --neighbours --sample 0 --generated {GENERATED} --adversarial {ADVERSARIAL} --seed {seed}", util::TEST_SET);
    let out = util::read(&util::command(bin, &words, paths))?;
    util::last_json(&out, "local-runner verify --neighbours")
}

/// Every query compared (edits add adversarial queries around the edited references), and no
/// difference.
pub fn exact(n: &Neighbours) -> bool {
    n.generated == GENERATED
        && n.adversarial >= ADVERSARIAL
        && n.compared == n.generated + n.adversarial
        && n.differences() == 0
}

/// [`exact`], with queries on edited references and ties across 5th place with one in reach.
fn exact_around_edits(n: &Neighbours) -> bool {
    let kind = |k: &str| n.adversarial_kinds.get(k).copied().unwrap_or(0);
    exact(n) && kind("on_edited") > 0 && kind("tie_on_edited") > 0
}

#[derive(Serialize, Default)]
struct Report {
    references: usize,
    pack: Packed,
    build_s: f64,
    neighbours: Neighbours,
    file_build_s: f64,
    /// What the file form said of a file of another length, then of another footer (refusals).
    file_form_refusals: Vec<String>,
    served: usize,
    served_wrong: usize,
    first_wrong: Option<String>,
    /// The set split into 3 shards, merged as a front merges them, shard 1 with an edit delta.
    shards: Neighbours,
    /// The index with a delta of [`DELTA`] new references and one of [`EDITS`] removals and as
    /// many relabels over the base and the first delta.
    delta: Neighbours,
    /// That chain compacted into one base (`index-pack compact`).
    compacted: Neighbours,
    /// The hook (its sample the contest's) against this set's bootstrap: its report, first wrong.
    hook_status: Option<String>,
    hook_first_wrong: Option<String>,
}

/// References in the CI-sized delta, and removals (and relabels) in the edit deltas.
const DELTA: usize = 30_000;
const EDITS: usize = 300;

pub fn run(a: Args) -> Result<()> {
    let (t, dir) = (Instant::now(), util::xtask_dir("scale")?);
    let (refs, index, tests) =
        (dir.join("references.json.gz"), dir.join("index.idx"), dir.join("tests.json.gz"));
    let (labeller, index_pack) = (util::built("labeller")?, util::built("index-pack")?);
    log!("scale: {} synthetic references (seed {}), packed", a.references, a.seed);
    draw(&labeller, a.references, a.seed, None, &refs)?;
    // Few k-means iterations: the answers do not depend on them (the work per query does).
    let pack = pack(&index_pack, &refs, &index, "--kmeans-iters 4")?;
    let mut r = Report { references: a.references, pack, ..Report::default() };
    log!("scale: {} payloads labelled by brute force over the synthetic set", a.served);
    let words = format!("generate-csv --count {} --seed {} --any-references", a.served, a.seed);
    let paths = [("--references", refs.as_path()), ("--out", &tests)];
    util::run(&util::command(&labeller, &words, &paths))?;
    // The hook's sample is the shipped index's: labelled before this set's index is built.
    let hook_dir = package::workspace_hook()?;
    log!("scale: local-runner and bootstrap with the synthetic index embedded");
    // Embedded the way large indexes are (`.incbin` in a section of its own), so that CI
    // exercises that form too; the contest's index takes `include_bytes_aligned!`.
    r.build_s = build_local_runner(&index, "linker")?;
    let local_runner = util::target_dir().join(util::PROFILE).join("local-runner");
    r.neighbours = neighbours(&local_runner, &refs, None, a.seed)?;
    log!("scale: the PreTraffic hook against a bootstrap of another index than its sample's");
    let scorer = dir.join("scorer");
    package::copy_bootstrap(&util::target_dir().join(util::PROFILE).join("bootstrap"), &scorer)?;
    let run = hook::run(&sam::Tools::ensure()?.rie, &scorer, &hook_dir, &dir)?;
    r.hook_status = run.status().map(String::from);
    r.hook_first_wrong = run.answer["first_wrong"].as_str().map(String::from);
    log!("scale: 3 shards of the set, shard 1 edited; a delta of {DELTA} references, one of edits");
    let shards = dir.join("shards");
    let paths = [("--references", refs.as_path()), ("--output-dir", &shards)];
    util::run(&util::command(&index_pack, "split --count 3 --accept-any-references", &paths))?;
    let shard = |k| shards.join(format!("shard-{k}-of-3.idx"));
    let (s0, s1, s2) = (shard(0), shard(1), shard(2));
    // Edits that fall in shard 1 only: its own delta.
    let (third, s1_edits, s1_delta) =
        (a.references / 3, dir.join("shard-1-edits.json"), dir.join("shard-1-edits.idx"));
    let words = format!(
        "generate-edits --from {third} --to {} --remove {EDITS} --relabel {EDITS} --seed {}",
        2 * third,
        a.seed
    );
    util::run(&util::command(&labeller, &words, &[("--references", &refs), ("--out", &s1_edits)]))?;
    let paths = [("--base", s1.as_path()), ("--edits", &s1_edits), ("--output", &s1_delta)];
    util::run(&util::command(&index_pack, "delta", &paths))?;
    let paths = [
        ("--references", refs.as_path()),
        ("--shard", &s0),
        ("--shard", &s1),
        ("--shard", &s2),
        ("--delta", &s1_delta),
        ("--edits", &s1_edits),
    ];
    r.shards = neighbours_of(&local_runner, &paths, a.seed)?;
    let (new, delta) = (dir.join("delta.json.gz"), dir.join("delta.idx"));
    // The new references carry ids, and the edits name those by id (the maps the packer keeps
    // beside the artifacts; the labeller reads the ids from the files on its own).
    draw(&labeller, DELTA, a.seed + 1, Some("tx-"), &new)?;
    let paths = [("--base", index.as_path()), ("--references", &new), ("--output", &delta)];
    util::run(&util::command(&index_pack, "delta", &paths))?;
    let (edits, edit_delta) = (dir.join("edits.json"), dir.join("edits.idx"));
    let words =
        format!("generate-edits --remove {EDITS} --relabel {EDITS} --seed {} --by-id", a.seed + 2);
    let paths = [("--references", refs.as_path()), ("--references", &new), ("--out", &edits)];
    util::run(&util::command(&labeller, &words, &paths))?;
    let by_id = fs::read_to_string(&edits)?.matches("\"tx-").count();
    ensure!(by_id > 0, "{}: no edit names a reference by id", edits.display());
    let paths = [
        ("--base", index.as_path()),
        ("--after", &delta),
        ("--edits", &edits),
        ("--output", &edit_delta),
    ];
    util::run(&util::command(&index_pack, "delta", &paths))?;
    let oracle = [("--references", refs.as_path()), ("--references", &new), ("--edits", &edits)];
    let chain = [("--index", index.as_path()), ("--delta", &delta), ("--delta", &edit_delta)];
    r.delta = neighbours_of(&local_runner, &[&chain[..], &oracle[..]].concat(), a.seed)?;
    let compacted = dir.join("compacted.idx");
    let paths = [
        ("--base", index.as_path()),
        ("--delta", &delta),
        ("--delta", &edit_delta),
        ("--output", &compacted),
    ];
    util::run(&util::command(&index_pack, "compact", &paths))?;
    let paths = [&[("--index", compacted.as_path())][..], &oracle[..]].concat();
    r.compacted = neighbours_of(&local_runner, &paths, a.seed)?;
    let beside = ship_beside(&index, &refs, &mut r)?;
    let served = Served::start(&beside, &dir.join("serve.log"))?;
    let entries = util::entries_of(&tests)?;
    (r.served_wrong, r.first_wrong) = util::score_all(&entries, &served.url(""));
    r.served = entries.len();
    drop(served);
    let nb = &r.neighbours;
    let refused = matches!(&r.file_form_refusals[..], [length, footer]
        if length.contains("built with an index of") && footer.contains("its footer"));
    let hook_failed = r.hook_status.as_deref() == Some("Failed") && r.hook_first_wrong.is_some();
    let searched = exact(nb)
        && exact_around_edits(&r.shards)
        && exact_around_edits(&r.delta)
        && exact_around_edits(&r.compacted);
    let answered = r.served == a.served && r.served_wrong == 0;
    let hook = match (&r.hook_status, &r.hook_first_wrong) {
        (Some(s), Some(w)) => format!("{s}, first wrong {w}"),
        (s, _) => format!("{s:?} WITHOUT A WRONG ANSWER NAMED"),
    };
    let figures = format!(
        "{} references, {} bytes packed in {:.1} s, embedded in {:.0} s; {} queries against the labeller, {} differences; beside the binary (built in {:.0} s) {}; {}/{} served answers right; 3 shards, one edited: {} differences; a delta of {DELTA} and one of {EDITS} removals and relabels: {} differences, compacted: {} differences; the hook of the contest's sample against this index: {hook}; {:.0} s",
        r.references, r.pack.bytes, r.pack.total_s, r.build_s, nb.compared, nb.differences(), r.file_build_s,
        if refused { "other files refused" } else { "OTHER FILES NOT REFUSED" },
        r.served - r.served_wrong, r.served, r.shards.differences(), r.delta.differences(), r.compacted.differences(), t.elapsed().as_secs_f64()
    );
    util::verdict("scale", searched && refused && answered && hook_failed, &figures, &r)
}

/// Builds the workspace's `local-runner` and `bootstrap` around `index` in `form`; the seconds.
fn build_local_runner(index: &Path, form: &str) -> Result<f64> {
    let t = Instant::now();
    let build = util::build_around(index, &["--bin", "local-runner", "--bin", "bootstrap"]);
    util::run(&build.env("FRAUD_INDEX_EMBED", form))?;
    Ok(t.elapsed().as_secs_f64())
}

/// `local-runner` shipped with `index` beside it; it must refuse `other` and a changed footer.
fn ship_beside(index: &Path, other: &Path, r: &mut Report) -> Result<PathBuf> {
    log!("scale: the same index shipped beside local-runner (FRAUD_INDEX_EMBED=file)");
    r.file_build_s = build_local_runner(index, "file")?;
    let dir = util::xtask_dir("scale")?.join("beside");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let binary = dir.join("local-runner");
    fs::copy(util::target_dir().join(util::PROFILE).join("local-runner"), &binary)?;
    util::ship_index(index, &dir)?;
    // The same length with the first byte of the footer's CRC32 changed: only the footer tells.
    let mut altered = fs::read(index)?;
    let at = altered.len() - index_pack::format::FOOTER_LEN + 12;
    altered[at] ^= 1;
    let altered_path = dir.join("altered.idx");
    fs::write(&altered_path, altered)?;
    for other in [other, altered_path.as_path()] {
        let e = cmd!(&binary, "selftest").env("FRAUD_INDEX_FILE", other).stderr_to_stdout();
        let out = e.stdout_capture().unchecked().run()?;
        let first = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").to_string();
        let said = if out.status.success() { "answered".to_string() } else { first };
        log!("scale: handed {}, it says: {said}", other.display());
        r.file_form_refusals.push(said);
    }
    Ok(binary)
}
