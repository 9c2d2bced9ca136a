//! AWS SAM CLI in a venv (`LAMBDA_VENV`; it brings cfn-lint and the emulator), template.yaml.

use super::emulator::Settings;
use crate::util::{self, root};
use anyhow::{bail, ensure, Context, Result};
use std::path::PathBuf;
use yaml_serde::Value;

/// The version the emulator figures and the template checks were taken with (scripts/setup.sh
/// installs it).
const SAM_CLI_VERSION: &str = "1.170.0";

/// The function's logical id in template.yaml (and the Makefile's target).
pub const FUNCTION: &str = "FraudScoreFunction";

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
        let dirs = std::fs::read_dir(&lib).with_context(|| format!("no {}", lib.display()))?;
        let rapid = "site-packages/samcli/local/rapid/aws-lambda-rie-x86_64";
        let rie = dirs.flatten().map(|d| d.path().join(rapid)).find(|p| p.exists());
        let why =
            || format!("no RIE in the SAM CLI of {} (remove it to reinstall)", venv.display());
        let rie = rie.with_context(why)?;
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&rie)?.permissions().mode();
        std::fs::set_permissions(&rie, std::fs::Permissions::from_mode(mode | 0o755))?;
        Ok(Tools { sam, rie })
    }

    pub fn sam(&self, args: &[&str]) -> duct::Expression {
        duct::cmd(&self.sam, args).dir(root()).env("SAM_CLI_TELEMETRY", "0")
    }

    /// `sam validate --lint` of both forms (zip and container image).
    pub fn validate(&self) -> Result<String> {
        let said = ["template.yaml", super::image::TEMPLATE].map(|t| {
            Ok(util::read(&self.sam(&["validate", "--lint", "--template", t]))?.trim().to_string())
        });
        Ok(said.into_iter().collect::<Result<Vec<String>>>()?.join("; "))
    }

    /// `sam build`: what `sam deploy` uploads. Returns the built bootstrap.
    pub fn build(&self) -> Result<PathBuf> {
        util::run(&self.sam(&["build", "--template", "template.yaml"]))?;
        let built = root().join(".aws-sam/build").join(FUNCTION).join("bootstrap");
        ensure!(built.exists(), "sam build left no {}", built.display());
        Ok(built)
    }
}

fn template() -> Result<Value> {
    let text = std::fs::read_to_string(root().join("template.yaml"))?;
    yaml_serde::from_str(&text).context("template.yaml")
}

/// template.yaml's parameter defaults that the emulator reproduces (memory, timeout, prefault).
pub fn defaults() -> Result<Settings> {
    let t = template()?;
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
        prefault: get("PrefaultIndex")? == "1",
        cpus: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value at a dotted path (a number indexes a sequence), as YAML text.
    fn at(t: &Value, path: &str) -> String {
        let v = path.split('.').fold(t, |v, k| k.parse::<usize>().map_or(&v[k], |i| &v[i]));
        yaml_serde::to_string(v).unwrap()
    }

    #[test]
    fn the_template_keeps_its_defaults_role_and_one_bounded_endpoint() {
        let d = defaults().unwrap();
        assert!(d.memory_mb >= 128 && d.timeout_s >= 1 && d.cpus.is_none(), "{d:?}");
        let t = template().unwrap();
        let r = t["Resources"].as_mapping().unwrap();
        let of_type = |kind: &str| r.iter().filter(|(_, v)| v["Type"] == kind).count();
        let conditional = |cond: &str| r.iter().filter(|(_, v)| v["Condition"] == cond).count();
        assert_eq!((of_type("AWS::IAM::Role"), of_type("AWS::Lambda::Url")), (1, 1));
        assert_eq!(["WithHttpApi", "WithAlarms", "PublicUrl"].map(conditional), [6, 3, 2]);
        // Everything that makes a second endpoint or invokes the function from elsewhere is
        // behind a condition; the Function URL is the only unconditional endpoint.
        for (_, v) in r.iter() {
            let kind = v["Type"].as_str().unwrap();
            let gated = kind.starts_with("AWS::ApiGateway") || kind == "AWS::Lambda::Permission";
            assert!(!gated || v.get("Condition").is_some(), "{v:?}");
        }
        let (f, role, stage) = (
            "Resources.FraudScoreFunction.Properties",
            "Resources.FraudScoreRole.Properties",
            "Resources.FraudScoreHttpApiStage.Properties.DefaultRouteSettings",
        );
        let statement = format!("{role}.Policies.0.PolicyDocument.Statement");
        // (path, what its YAML text holds): the role may only write its own log streams (no
        // managed policy; !GetAtt FraudScoreLogGroup.Arn), the function uses it (SAM would
        // otherwise make its own) and has no event of its own.
        let holds = [
            (format!("{f}.Role"), "FraudScoreRole.Arn"),
            (format!("{f}.LoggingConfig.LogGroup"), "FraudScoreLogGroup"),
            (format!("{f}.LoggingConfig.LogFormat"), "JSON"),
            // Deployed with its defaults, the function is never public and uncapped at once: a
            // flood of an unauthenticated URL could otherwise take every unreserved execution
            // environment of the account (docs/LAMBDA.md, "What a flood costs"). Its
            // ReservedConcurrency default -1 is AWS::NoValue: no reservation (an account of 10
            // allows none), nothing the account must leave free.
            ("Parameters.FunctionUrlAuthType.Default".into(), "AWS_IAM"),
            ("Parameters.ReservedConcurrency.Default".into(), "-1"),
            (
                "Conditions.HasReservedConcurrency".into(),
                "!Not\n- !Equals\n  - !Ref ReservedConcurrency\n  - -1\n",
            ),
            (
                format!("{f}.ReservedConcurrentExecutions"),
                "!If\n- HasReservedConcurrency\n- !Ref ReservedConcurrency\n- !Ref AWS::NoValue\n",
            ),
            (format!("{f}.Events"), "null"),
            (format!("{f}.FunctionUrlConfig"), "null"),
            (format!("{role}.ManagedPolicyArns"), "null"),
            (format!("{role}.Policies.1"), "null"),
            (format!("{statement}.1"), "null"),
            (format!("{statement}.0.Effect"), "Allow"),
            (format!("{statement}.0.Action"), "- logs:CreateLogStream\n- logs:PutLogEvents\n"),
            (format!("{statement}.0.Resource"), "FraudScoreLogGroup.Arn"),
            (format!("{stage}.ThrottlingBurstLimit"), "HttpApiThrottlingBurstLimit"),
            (format!("{stage}.ThrottlingRateLimit"), "HttpApiThrottlingRateLimit"),
            ("Resources.FraudScoreUrl.Properties.AuthType".into(), "FunctionUrlAuthType"),
            ("Parameters.FunctionUrlAuthType.AllowedValues".into(), "- NONE\n"),
            ("Parameters.EnableHttpApi.Default".into(), "false"),
            ("Parameters.EnableAlarms.Default".into(), "false"),
        ];
        for (path, want) in holds {
            assert!(at(&t, &path).contains(want), "{path}: {}", at(&t, &path));
        }
    }
}
