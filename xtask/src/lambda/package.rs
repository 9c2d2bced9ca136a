//! The Lambda package: the shipped `bootstrap` in a zip within Lambda's limits; in the file form
//! (`index_pack::embed`, over 1,920 MiB) with its index beside it, which only an image ships.

use crate::prelude::*;
use crate::util::TRIPLE;

pub const LIMIT_ZIPPED_DIRECT: u64 = 50 << 20;
/// Lambda's limit for a zip package, unzipped (the API refuses more than 262,144,000 bytes).
pub const LIMIT_UNZIPPED: u64 = 262_144_000;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Package {
    /// What the emulator runs and the image copies: `bootstrap` (and in the file form its index).
    pub dir: PathBuf,
    pub bootstrap: PathBuf,
    pub zip: PathBuf,
    pub sha256: String,
    pub zipped_bytes: u64,
    pub unzipped_bytes: u64,
    /// The index artifact embedded in the binary.
    pub index_artifact: PathBuf,
    /// The file form: the artifact's copy beside the bootstrap (`index_pack::embed::FILE_NAME`).
    pub index_beside: Option<PathBuf>,
    /// The deltas shipped beside the bootstrap (`deltas/`, where it finds them), in order.
    pub deltas: Vec<PathBuf>,
}

impl Package {
    /// Copies the tested binary to `dir/bootstrap` (for `sam build`) and checks the copy.
    pub fn copy_to(&self, dir: &Path) -> Result<()> {
        let dest = copy_bootstrap(&self.bootstrap, dir)?;
        let copied = util::sha256_file(&dest)?;
        ensure!(copied == self.sha256, "{} differs from the tested bootstrap", dest.display());
        log!("copied the tested bootstrap to {}", dest.display());
        if self.index_beside.is_some() {
            let dest = util::ship_index(&self.index_artifact, dir)?;
            log!("copied the index beside it ({}), checked in full", dest.display());
        }
        ship_deltas(&self.deltas, dir)?;
        Ok(())
    }

    /// Refuses a package over Lambda's zip limit, naming the way that takes it.
    pub fn fits_a_zip(&self) -> Result<()> {
        let mib = self.unzipped_bytes as f64 / f64::from(1 << 20);
        ensure!(
            self.unzipped_bytes <= LIMIT_UNZIPPED,
            "the package is {mib:.1} MiB, over Lambda's 250 MiB ({LIMIT_UNZIPPED} bytes) limit \
             for a zip package (its index grew): ship it as a container image instead, `cargo \
             xtask lambda build --image` then `sam build --template template-image.yaml` \
             (docs/LAMBDA.md, \"Packaging by size\")"
        );
        Ok(())
    }
}

/// docs/LAMBDA.md's parameters for a package the defaults (512 MB, prefaulted) do not suit: the
/// index + 64 MB in 128 MB steps; past 1 GB lazy (its read would take much of the 10 s init).
pub fn parameters_for(bytes: u64) -> Option<String> {
    const MB: u64 = 1 << 20;
    let memory = (bytes / MB + 64).next_multiple_of(128).max(512);
    let prefault = if bytes > 1 << 30 { 0 } else { 1 };
    (memory > 512).then(|| format!("FunctionMemoryMB={memory} PrefaultIndex={prefault}"))
}

/// Builds (unless `skip_build`) and packages the shipped bootstrap.
pub fn build(skip_build: bool) -> Result<Package> {
    let built = if skip_build { util::Shipped::last()? } else { util::build_shipped()? };
    // Without a given or reused index, the shipped build's own build script packed it.
    let build = util::target_dir().join(TRIPLE).join(util::PROFILE).join("build");
    let packed_here = || util::newest_index_artifact(&build).context("no index artifact packed");
    let index_artifact = built.index.map_or_else(packed_here, Ok)?;
    util::check_static_x86_64(&built.bootstrap).context("the static flags did not apply")?;
    let package_dir = util::target_dir().join("lambda-package");
    let dir = package_dir.join("bootstrap");
    let _ = fs::remove_dir_all(&dir);
    let bootstrap = copy_bootstrap(&built.bootstrap, &dir)?;
    let len = |p: &Path| fs::metadata(p).map(|m| m.len());
    let zip = package_dir.join("bootstrap.zip");
    let _ = fs::remove_file(&zip);
    let deltas = ship_deltas(&deltas_to_ship(&index_artifact)?, &dir)?;
    let delta_bytes = deltas.iter().map(|d| len(d)).sum::<std::io::Result<u64>>()?;
    // A bootstrap smaller than its index does not hold it: the file form, the index beside.
    let (index_beside, zipped_bytes) = if len(&bootstrap)? < len(&index_artifact)? {
        let beside = util::ship_index(&index_artifact, &dir)?;
        log!("the bootstrap maps its index from {}, checked in full", beside.display());
        // Over any zip's limit by construction (embed::LINKER_MAX): no zip is made.
        (Some(beside), 0)
    } else {
        // `bootstrap` (mode 755) deflated at zlib's default level, as `sam deploy` packages it.
        let mut z = zip::ZipWriter::new(fs::File::create(&zip)?);
        let deflated = zip::write::SimpleFileOptions::default().unix_permissions(0o755);
        z.start_file("bootstrap", deflated.compression_method(zip::CompressionMethod::Deflated))?;
        z.write_all(&fs::read(&bootstrap)?)?;
        for d in &deltas {
            let name =
                format!("{DELTAS_DIR}/{}", d.file_name().unwrap_or_default().to_string_lossy());
            z.start_file(name, deflated.compression_method(zip::CompressionMethod::Deflated))?;
            z.write_all(&fs::read(d)?)?;
        }
        z.finish()?;
        (None, len(&zip)?)
    };
    Ok(Package {
        dir,
        zip,
        sha256: util::sha256_file(&bootstrap)?,
        zipped_bytes,
        unzipped_bytes: len(&bootstrap)?
            + index_beside.as_deref().map_or(Ok(0), len)?
            + delta_bytes,
        bootstrap,
        index_artifact,
        index_beside,
        deltas,
    })
}

/// Where a bootstrap finds its deltas (`function::index::deltas`): beside it.
pub const DELTAS_DIR: &str = "deltas";

/// The deltas `FRAUD_DELTAS` names (files or directories of `*.idx`, `:`-separated; none when
/// unset), each checked in full, in the order they were packed, and held to extend `index`
/// as one set (what the bootstrap checks at start, refused here before anything ships).
pub fn deltas_to_ship(index: &Path) -> Result<Vec<PathBuf>> {
    use index_pack::format;
    let Some(list) = std::env::var_os("FRAUD_DELTAS").filter(|l| !l.is_empty()) else {
        return Ok(Vec::new());
    };
    let files = index_pack::chain::files(&list)?;
    let read = |p: &Path| {
        let bytes = format::aligned_copy(
            &fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
        );
        format::verify_deep(&bytes)
            .with_context(|| format!("{} is not a valid index", p.display()))?;
        anyhow::Ok(bytes)
    };
    let base = read(index)?;
    let bytes = files.iter().map(|p| read(p)).collect::<Result<Vec<_>>>()?;
    let mut opened: Vec<(format::Opened, &PathBuf)> = bytes
        .iter()
        .zip(&files)
        .map(|(b, p)| Ok((format::open_with_footer(b)?, p)))
        .collect::<Result<_>>()?;
    opened.sort_by_key(|(o, _)| o.chain_order());
    let parts: Vec<_> = std::iter::once(format::open_with_footer(&base)?)
        .chain(opened.iter().map(|(o, _)| *o))
        .map(|o| (o.index, o.footer))
        .collect();
    format::check_composition(&parts, format::Serving::WholeSet)
        .context("the deltas do not extend the shipped index as one set")?;
    let indexes: Vec<_> = parts.iter().map(|(i, _)| *i).collect();
    index_pack::chain::hidden_rows(&indexes).context("the deltas' edits do not apply")?;
    Ok(opened.into_iter().map(|(_, p)| p.clone()).collect())
}

/// Copies `deltas` into `dir/deltas` (emptied first), named by their order; the copies.
pub fn ship_deltas(deltas: &[PathBuf], dir: &Path) -> Result<Vec<PathBuf>> {
    let to = dir.join(DELTAS_DIR);
    let _ = fs::remove_dir_all(&to);
    if deltas.is_empty() {
        return Ok(Vec::new());
    }
    fs::create_dir_all(&to)?;
    let mut out = Vec::new();
    for (k, d) in deltas.iter().enumerate() {
        let dest = to.join(format!("delta-{k:03}.idx"));
        fs::copy(d, &dest)
            .with_context(|| format!("cannot copy {} to {}", d.display(), dest.display()))?;
        log!("shipped {} as {}", d.display(), dest.display());
        out.push(dest);
    }
    Ok(out)
}

/// Copies a built binary to `dir/bootstrap` (what a custom runtime starts) and checks the copy.
pub fn copy_bootstrap(bin: &Path, dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let dest = dir.join("bootstrap");
    fs::copy(bin, &dest).with_context(|| format!("cannot copy to {}", dest.display()))?;
    ensure!(util::sha256_file(&dest)? == util::sha256_file(bin)?, "{} differs", dest.display());
    Ok(dest)
}

/// A shard's image context, target/shards/<number>/ (template-sharded.yaml's Shard<number>).
pub fn shard_context(pkg: &Package, shard: &Path) -> Result<PathBuf> {
    let part = super::logs::identity(shard)?.part;
    let index_pack::format::SetPart::Shard { number, .. } = part else {
        bail!("{} is {part}, not a shard", shard.display());
    };
    let context = util::target_dir().join("shards").join(number.to_string());
    let _ = fs::remove_dir_all(&context);
    pkg.copy_to(&context.join("bootstrap"))?;
    log!("shard {number}'s image context in {}", context.display());
    Ok(context)
}

/// The hook in `dir`: `bin` as `bootstrap` and `sample.json` labelled over the references of the
/// scorer's index, their digest the index's (a sample of others would fail a right index).
pub fn hook(dir: &Path, bin: &Path) -> Result<String> {
    copy_bootstrap(bin, dir)?;
    let refs = std::env::var_os("FRAUD_REFERENCES")
        .filter(|r| !r.is_empty())
        .map_or_else(|| root().join("resources/references.json.gz"), PathBuf::from);
    let index = util::Shipped::last()?.index.context("no index built: build the scorer first")?;
    let want = super::logs::identity(&index)?.references_sha256;
    let (got, r, i) = (decompressed_sha256(&refs)?, refs.display(), index.display());
    ensure!(got == want, "{r} (SHA-256 {got}) are not the references of the index {i} ({want}): set FRAUD_REFERENCES");
    // The deltas the scorer ships: their new references and edits, each the file it was
    // packed from, label the sample over the edited set.
    let listed = |var: &str| -> Vec<PathBuf> {
        std::env::var_os(var).map(|l| std::env::split_paths(&l).collect()).unwrap_or_default()
    };
    let (added, edits) = (listed("FRAUD_DELTA_REFERENCES"), listed("FRAUD_EDITS"));
    check_delta_sources(&deltas_to_ship(&index)?, &added, &edits)?;
    let (labeller, sample) = (util::built("labeller")?, dir.join("sample.json"));
    write_sample(&labeller, [&refs, &sample], &added, &edits)?;
    Ok(format!(
        "hook and {} labelled over {} and {} edits files",
        sample.display(),
        refs.display(),
        edits.len()
    ))
}

/// `labeller deploy-sample` over `refs` (the base's references), `added` (the deltas' new
/// references) and `edits`, into `sample`.
pub fn write_sample(
    labeller: &Path,
    [refs, sample]: [&Path; 2],
    added: &[PathBuf],
    edits: &[PathBuf],
) -> Result<()> {
    let mut paths = vec![("--references", refs), ("--out", sample)];
    paths.extend(added.iter().map(|p| ("--delta-references", p.as_path())));
    paths.extend(edits.iter().map(|p| ("--edits", p.as_path())));
    util::run(&util::command(labeller, "deploy-sample --any-references", &paths))
}

/// The files a sample is labelled over must be those the shipped deltas were packed from:
/// their digests, in order.
fn check_delta_sources(deltas: &[PathBuf], added: &[PathBuf], edits: &[PathBuf]) -> Result<()> {
    use index_pack::format::SetPart;
    let ids = deltas.iter().map(|d| super::logs::identity(d)).collect::<Result<Vec<_>>>()?;
    let want_added: Vec<&str> = ids
        .iter()
        .filter(|i| i.end_position > i.first_position)
        .map(|i| i.references_sha256.as_str())
        .collect();
    let want_edits: Vec<&str> = ids
        .iter()
        .filter_map(|i| match &i.part {
            SetPart::Delta { edits_sha256: Some(e), .. } => Some(e.as_str()),
            _ => None,
        })
        .collect();
    let got_added = added.iter().map(|p| decompressed_sha256(p)).collect::<Result<Vec<_>>>()?;
    let got_edits = edits.iter().map(|p| util::sha256_file(p)).collect::<Result<Vec<_>>>()?;
    ensure!(
        got_added == want_added && got_edits == want_edits,
        "the shipped deltas were packed from new references {want_added:?} and edits \
         {want_edits:?}; FRAUD_DELTA_REFERENCES and FRAUD_EDITS give {got_added:?} and \
         {got_edits:?}: name those files, in order"
    );
    Ok(())
}

/// SHA-256 of a references file's JSON (decompressed when it ends in .gz), as the index records it.
fn decompressed_sha256(path: &Path) -> Result<String> {
    use sha2::Digest;
    let file = fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut reader: Box<dyn std::io::Read> = match path.extension() {
        Some(e) if e == "gz" => Box::new(flate2::read::MultiGzDecoder::new(file)),
        _ => Box::new(file),
    };
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut reader, &mut hasher)?;
    Ok(index_pack::format::hex(&hasher.finalize()))
}

/// The hook of the workspace build and its sample in `<target>/xtask/lambda/hook`, which the gates
/// run under the emulator (`sam build` ships the static build of the same source).
pub fn workspace_hook() -> Result<PathBuf> {
    let dir = util::xtask_dir("lambda")?.join("hook");
    let bin = util::target_dir().join(util::PROFILE).join("pretraffic");
    ensure!(bin.exists(), "no {}: run `cargo xtask build` first", bin.display());
    log!("{}", hook(&dir, &bin)?);
    Ok(dir)
}
