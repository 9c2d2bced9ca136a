//! `cargo xtask lambda` (docs/LAMBDA.md): one build, tested by the gate, shipped by `sam build`.

pub mod emulator;
pub mod events;
pub mod gate;
pub mod hook;
pub mod image;
pub mod logs;
pub mod package;
pub mod preflight;
pub mod sam;

use crate::prelude::*;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    ci: gate::CiArgs,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Build the bootstrap (the shipped build: static, x86_64) and its zip; the same build the
    /// emulator tests. Refuses a bootstrap over Lambda's zip limit (the image path takes it).
    Build {
        /// Also copy the binary here as `bootstrap` (SAM's ARTIFACTS_DIR, from the Makefile).
        #[arg(long, conflicts_with = "image")]
        artifacts_dir: Option<PathBuf>,
        /// Package for the container image instead (template-image.yaml): no zip limit; the
        /// image's Dockerfile goes beside the bootstrap in target/lambda-package.
        #[arg(long)]
        image: bool,
        /// With --image: embed this shard of a split set (`index-pack split`) instead, and put
        /// the image's context in target/shards/<its number> (template-sharded.yaml).
        #[arg(long, requires = "image")]
        shard: Option<PathBuf>,
        /// The PreTraffic hook instead (template.yaml's PreTrafficHook): `pretraffic` and the
        /// sample labelled over the references of the scorer's index (`FRAUD_REFERENCES`,
        /// default resources/references.json.gz; their digest must be the index's).
        #[arg(long, conflicts_with_all = ["image", "front"])]
        hook: bool,
        /// The front over shards instead (template-sharded.yaml's Front).
        #[arg(long, conflicts_with = "image")]
        front: bool,
    },
    /// Write template-image.yaml from template.yaml (the function as a container image).
    ImageTemplate,
    /// Before `sam deploy`: the account's concurrency and the ReservedConcurrency it allows.
    Preflight,
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        None => gate::run(args.ci),
        Some(Command::ImageTemplate) => {
            let zip = fs::read_to_string(root().join("template.yaml"))?;
            fs::write(root().join(image::TEMPLATE), image::from_zip_template(&zip)?)?;
            util::verdict("lambda image-template", true, image::TEMPLATE, &image::TEMPLATE)
        }
        Some(Command::Build { artifacts_dir, hook: true, .. }) => {
            let dir = artifacts_dir.unwrap_or_else(|| util::target_dir().join("lambda-hook"));
            let bin = util::build_static_bin("deploy-hook", "pretraffic", None)?;
            util::verdict("lambda build", true, &package::hook(&dir, &bin)?, &dir)
        }
        Some(Command::Build { artifacts_dir, front: true, .. }) => {
            let dir = artifacts_dir.unwrap_or_else(|| util::target_dir().join("lambda-front"));
            let bin = util::build_static_bin("fan-out", "front", None)?;
            package::copy_bootstrap(&bin, &dir)?;
            util::verdict("lambda build", true, &format!("front in {}", dir.display()), &dir)
        }
        Some(Command::Build { artifacts_dir, image, shard, .. }) => {
            let t = Instant::now();
            if let Some(shard) = &shard {
                // The shipped build embeds what this names (util::Shipped::last).
                std::env::set_var("FRAUD_INDEX_ARTIFACT_IN", shard);
            }
            let pkg = package::build(false)?;
            if image {
                let dockerfile = root().join("docker/lambda-image/Dockerfile");
                let context = match &shard {
                    Some(shard) => package::shard_context(&pkg, shard)?,
                    None => pkg.dir.parent().unwrap_or(&pkg.dir).to_path_buf(),
                };
                fs::copy(dockerfile, context.join("Dockerfile"))?;
                if let Some(hint) = package::parameters_for(pkg.unzipped_bytes) {
                    log!("for this index deploy with --parameter-overrides {hint} (docs/LAMBDA.md, \"Packaging by size\")");
                }
            } else {
                // `sam build` of the zip package comes this way (the Makefile).
                pkg.fits_a_zip()?;
            }
            artifacts_dir.map(|dir| pkg.copy_to(&dir)).transpose()?;
            let (sha, mb) = (&pkg.sha256, util::mb(pkg.unzipped_bytes));
            let figures =
                format!("bootstrap sha256 {sha}, {mb:.1} MB, {:.0} s", t.elapsed().as_secs_f64());
            util::verdict("lambda build", true, &figures, &pkg)
        }
        Some(Command::Preflight) => preflight::run(),
    }
}
