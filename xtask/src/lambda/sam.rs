//! AWS SAM CLI in a venv (`LAMBDA_VENV`; it brings cfn-lint and the emulator), template.yaml.

use super::emulator::Settings;
use crate::prelude::*;
use yaml_serde::Value;

/// The version the emulator figures and the template checks were taken with (scripts/setup.sh's).
const SAM_CLI_VERSION: &str = "1.170.0";

/// The function's logical id in template.yaml (and the Makefile's target).
pub const FUNCTION: &str = "FraudScoreFunction";

/// The variable MetricsFlushSeconds sets (how often the function writes its EMF documents).
pub const METRICS_FLUSH: &str = "FRAUD_METRICS_FLUSH_SECONDS";

/// The template of a set split across functions: S shards and their front.
pub const SHARDED: &str = "template-sharded.yaml";

pub struct Tools {
    pub sam: PathBuf,
    pub rie: PathBuf,
}

impl Tools {
    /// Finds SAM CLI in its venv (scripts/setup.sh installs it) and the emulator inside it.
    pub fn ensure() -> Result<Tools> {
        let venv = util::venv("LAMBDA_VENV", "lambda-venv");
        let sam = venv.join("bin/sam");
        let version = util::read(&duct::cmd!(&sam, "--version")).unwrap_or_default();
        let why = format!("{SAM_CLI_VERSION} is needed in {}", sam.display());
        ensure!(version.contains(SAM_CLI_VERSION), "{why}: run scripts/setup.sh (it installs it)");
        // <venv>/lib/python3.*/site-packages/samcli/local/rapid/aws-lambda-rie-x86_64
        let lib = venv.join("lib");
        let dirs = fs::read_dir(&lib).with_context(|| format!("no {}", lib.display()))?;
        let rapid = "site-packages/samcli/local/rapid/aws-lambda-rie-x86_64";
        let rie = dirs.flatten().map(|d| d.path().join(rapid)).find(|p| p.exists());
        let why = format!("no RIE in the SAM CLI of {} (remove it to reinstall)", venv.display());
        let rie = rie.context(why)?;
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&rie)?.permissions().mode();
        fs::set_permissions(&rie, fs::Permissions::from_mode(mode | 0o755))?;
        Ok(Tools { sam, rie })
    }

    pub fn sam(&self, args: &[&str]) -> duct::Expression {
        duct::cmd(&self.sam, args).dir(root()).env("SAM_CLI_TELEMETRY", "0")
    }

    /// `sam validate --lint` of every template: zip, container image, shards and their front.
    pub fn validate(&self) -> Result<String> {
        let said = ["template.yaml", super::image::TEMPLATE, SHARDED].map(|t| {
            Ok(util::read(&self.sam(&["validate", "--lint", "--template", t]))?.trim().to_string())
        });
        Ok(said.into_iter().collect::<Result<Vec<String>>>()?.join("; "))
    }

    /// `sam build` of the scorer (what `sam deploy` uploads); the built bootstrap. Not the hook's
    /// static build: its fat-LTO link takes 76 s of CI, and the gate runs the same source.
    pub fn build(&self) -> Result<PathBuf> {
        util::run(&self.sam(&["build", FUNCTION, "--template", "template.yaml"]))?;
        let built = root().join(".aws-sam/build").join(FUNCTION).join("bootstrap");
        ensure!(built.exists(), "sam build left no {}", built.display());
        Ok(built)
    }
}

/// template.yaml's defaults the emulator reproduces: memory, timeout, prefault, metrics flush.
pub fn defaults() -> Result<Settings> {
    let text = fs::read_to_string(root().join("template.yaml"))?;
    let t: Value = yaml_serde::from_str(&text).context("template.yaml")?;
    let get = |name: &str| -> Result<String> {
        Ok(match &t["Parameters"][name]["Default"] {
            Value::Null => bail!("template.yaml: no default for parameter {name}"),
            Value::String(s) => s.clone(),
            other => yaml_serde::to_string(other)?.trim().to_string(),
        })
    };
    Ok(Settings {
        memory_mb: get("FunctionMemoryMB")?.parse()?,
        timeout_s: get("FunctionTimeoutSeconds")?.parse()?,
        prefault: Some(get("PrefaultIndex")?).filter(|p| p != "auto").map(|p| p == "1"),
        cpus: None,
        env: vec![(METRICS_FLUSH.into(), get("MetricsFlushSeconds")?)],
    })
}
