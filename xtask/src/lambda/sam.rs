//! AWS SAM CLI in a Python venv (`LAMBDA_VENV`, installed from PyPI when missing; it brings
//! cfn-lint and the emulator), template.yaml's defaults, `sam validate --lint` and `sam build`.

use super::emulator::Settings;
use crate::util::{self, cmd, log, root};
use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The version the emulator figures and the template checks were taken with.
const SAM_CLI: &str = "aws-sam-cli==1.170.0";

/// The function's logical id in template.yaml (and the Makefile's target).
pub const FUNCTION: &str = "FraudScoreFunction";

pub struct Tools {
    pub sam: PathBuf,
    pub rie: PathBuf,
}

impl Tools {
    /// Installs SAM CLI into the venv unless it is there, and finds the emulator inside it.
    pub fn ensure() -> Result<Tools> {
        let venv = util::venv("LAMBDA_VENV", "lambda-venv");
        let sam = venv.join("bin/sam");
        if !sam.exists() {
            log!("installing {SAM_CLI} into {}", venv.display());
            let _ = std::fs::remove_dir_all(&venv);
            let why =
                "python3 cannot create a venv: run scripts/setup.sh (it installs python3-venv)";
            util::run(&cmd!("python3", "-m", "venv", &venv)).context(why)?;
            let pip = "install -q --disable-pip-version-check".split(' ').chain([SAM_CLI]);
            util::run(&duct::cmd(venv.join("bin/pip"), pip).dir(root()))?;
        }
        let rie = find_rie(&venv)?;
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&rie)?.permissions().mode();
        if mode & 0o111 == 0 {
            std::fs::set_permissions(&rie, std::fs::Permissions::from_mode(mode | 0o755))?;
        }
        Ok(Tools { sam, rie })
    }

    /// A `sam` command in the project root, telemetry off (nothing here talks to AWS).
    pub fn sam(&self, args: &[&str]) -> duct::Expression {
        duct::cmd(&self.sam, args).dir(root()).env("SAM_CLI_TELEMETRY", "0")
    }

    /// `sam validate --lint` (SAM's schema and cfn-lint); returns its output.
    pub fn validate(&self) -> Result<String> {
        Ok(util::read(&self.sam(&["validate", "--lint", "--template", "template.yaml"]))?
            .trim()
            .into())
    }

    /// `sam build`: what `sam deploy` uploads. Returns the built bootstrap.
    pub fn build(&self) -> Result<PathBuf> {
        util::run(&self.sam(&["build", "--template", "template.yaml"]))?;
        let built = root().join(".aws-sam/build").join(FUNCTION).join("bootstrap");
        ensure!(built.exists(), "sam build left no {}", built.display());
        Ok(built)
    }
}

/// `<venv>/lib/python3.*/site-packages/samcli/local/rapid/aws-lambda-rie-x86_64`.
fn find_rie(venv: &Path) -> Result<PathBuf> {
    let lib = venv.join("lib");
    for entry in std::fs::read_dir(&lib).with_context(|| format!("no {}", lib.display()))? {
        let rie = entry?.path().join("site-packages/samcli/local/rapid/aws-lambda-rie-x86_64");
        if rie.exists() {
            return Ok(rie);
        }
    }
    bail!(
        "no aws-lambda-rie-x86_64 in the SAM CLI of {} (remove the venv to reinstall)",
        venv.display()
    )
}

/// template.yaml's parameter defaults that the emulator reproduces (memory, timeout, prefault).
pub fn defaults() -> Result<Settings> {
    #[derive(Deserialize)]
    struct Template {
        #[serde(rename = "Parameters")]
        parameters: BTreeMap<String, Parameter>,
    }
    #[derive(Deserialize)]
    struct Parameter {
        #[serde(rename = "Default")]
        default: Option<yaml_serde::Value>,
    }
    let t: Template = yaml_serde::from_str(&std::fs::read_to_string(root().join("template.yaml"))?)
        .context("template.yaml")?;
    let get = |name: &str| -> Result<String> {
        let v = t.parameters.get(name).and_then(|p| p.default.clone());
        Ok(match v.with_context(|| format!("template.yaml: no default for parameter {name}"))? {
            yaml_serde::Value::String(s) => s,
            other => yaml_serde::to_string(&other)?.trim().to_string(),
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
    use yaml_serde::Value;

    fn template() -> Value {
        yaml_serde::from_str(&std::fs::read_to_string(root().join("template.yaml")).unwrap())
            .unwrap()
    }

    fn text(v: &Value) -> String {
        yaml_serde::to_string(v).unwrap()
    }

    #[test]
    fn template_defaults_are_read_despite_intrinsic_tags() {
        let d = defaults().unwrap();
        assert!(d.memory_mb >= 128 && d.timeout_s >= 1 && d.cpus.is_none(), "{d:?}");
    }

    #[test]
    fn the_role_may_only_write_its_own_log_streams() {
        let t = template();
        let r = t["Resources"].as_mapping().unwrap();
        let roles: Vec<_> = r.iter().filter(|(_, v)| v["Type"] == "AWS::IAM::Role").collect();
        assert_eq!(roles.len(), 1);
        let role = &roles[0].1["Properties"];
        assert!(role.get("ManagedPolicyArns").is_none());
        let policies = role["Policies"].as_sequence().unwrap();
        let statements = policies[0]["PolicyDocument"]["Statement"].as_sequence().unwrap();
        assert_eq!((policies.len(), statements.len()), (1, 1));
        let s = &statements[0];
        assert_eq!(s["Effect"], "Allow");
        let actions: Vec<&str> =
            s["Action"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert_eq!(actions, ["logs:CreateLogStream", "logs:PutLogEvents"]);
        // !GetAtt FraudScoreLogGroup.Arn: the group's streams, nothing else.
        assert!(text(&s["Resource"]).contains("FraudScoreLogGroup.Arn"), "{:?}", s["Resource"]);
        // The function uses this role (SAM would otherwise make its own, with a managed policy).
        let function = &r[FUNCTION]["Properties"];
        assert!(text(&function["Role"]).contains("FraudScoreRole.Arn"));
        assert!(text(&function["LoggingConfig"]).contains("FraudScoreLogGroup"));
        assert_eq!(function["LoggingConfig"]["LogFormat"], "JSON");
    }

    /// `v` with template.yaml's intrinsics (!Ref, !If, !Not, !Equals) resolved for `params`
    /// over the defaults; `None` is AWS::NoValue (the property is left out).
    fn resolve(t: &Value, v: &Value, params: &[(&str, i64)]) -> Option<Value> {
        let Value::Tagged(tv) = v else { return Some(v.clone()) };
        let arg = |i: usize| resolve(t, &tv.value[i], params);
        let (tag, name) = (tv.tag.to_string(), tv.value.as_str().unwrap_or_default());
        let given = params.iter().find(|(p, _)| *p == name).map(|(_, v)| Value::from(*v));
        match tag.trim_start_matches('!') {
            "Ref" if name == "AWS::NoValue" => None,
            "Ref" => Some(given.unwrap_or_else(|| t["Parameters"][name]["Default"].clone())),
            "If" => {
                let condition = resolve(t, &t["Conditions"][tv.value[0].as_str()?], params)?;
                arg(if condition == Value::Bool(true) { 1 } else { 2 })
            }
            "Not" => Some(Value::Bool(arg(0)? != Value::Bool(true))),
            "Equals" => Some(Value::Bool(arg(0)? == arg(1)?)),
            _ => Some(v.clone()),
        }
    }

    #[test]
    fn the_default_deploys_on_an_account_with_a_limit_of_10() {
        use super::super::preflight::{advice, Limit};
        let t = template();
        let reserved = &t["Resources"][FUNCTION]["Properties"]["ReservedConcurrentExecutions"];
        assert_eq!(t["Parameters"]["ReservedConcurrency"]["Default"], Value::from(-1));
        // -1 resolves to AWS::NoValue: no reservation, nothing the account must leave free.
        assert_eq!(resolve(&t, reserved, &[]), None);
        assert_eq!(resolve(&t, reserved, &[("ReservedConcurrency", 5)]), Some(Value::from(5)));
        let ten = Limit { concurrent_executions: 10, unreserved_concurrent_executions: 10 };
        assert_eq!(advice(&ten).0, None, "an account of 10 allows no reservation: only -1 deploys");
    }

    #[test]
    fn one_bounded_public_endpoint_by_default() {
        let t = template();
        let (params, r) = (&t["Parameters"], t["Resources"].as_mapping().unwrap());
        assert!(
            params["EnableHttpApi"]["Default"] == "false"
                && params["EnableAlarms"]["Default"] == "false"
        );
        let conditional = |cond: &str| r.iter().filter(|(_, v)| v["Condition"] == cond).count();
        // Everything that makes a second endpoint or invokes the function from elsewhere is
        // behind a condition; the Function URL is the only unconditional endpoint.
        for (_, v) in r.iter() {
            let kind = v["Type"].as_str().unwrap();
            if kind.starts_with("AWS::ApiGateway") || kind == "AWS::Lambda::Permission" {
                assert!(v.get("Condition").is_some(), "{v:?}");
            }
        }
        assert_eq!(
            [conditional("WithHttpApi"), conditional("WithAlarms"), conditional("PublicUrl")],
            [6, 3, 2]
        );
        let urls: Vec<_> = r.iter().filter(|(_, v)| v["Type"] == "AWS::Lambda::Url").collect();
        assert_eq!(urls.len(), 1);
        assert!(text(&urls[0].1["Properties"]["AuthType"]).contains("FunctionUrlAuthType"));
        let function = &r[FUNCTION]["Properties"];
        assert!(function.get("Events").is_none() && function.get("FunctionUrlConfig").is_none());
        assert!(text(&function["ReservedConcurrentExecutions"]).contains("ReservedConcurrency"));
        let stage = &r["FraudScoreHttpApiStage"]["Properties"]["DefaultRouteSettings"];
        assert!(text(&stage["ThrottlingBurstLimit"]).contains("HttpApiThrottlingBurstLimit"));
        assert!(text(&stage["ThrottlingRateLimit"]).contains("HttpApiThrottlingRateLimit"));
    }
}
