//! The SAM side: template.yaml's parameter defaults (what the emulator runs with), `sam
//! validate --lint` (cfn-lint), `sam build` (BuildMethod makefile: the Makefile runs `cargo
//! xtask lambda build`, see [`super::package`]), and `sam local invoke` in Docker against a
//! stand-in for the Lambda base image built here from Debian's files (no registry).

use super::events::{self, Answer};
use super::package::{self, sha256_file};
use super::tools::{self, Tools};
use crate::cmd::{cmd, output, root, run};
use crate::report::verdict;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The function's logical id in template.yaml (and the Makefile's target).
pub const FUNCTION: &str = "FraudScoreFunction";

#[derive(Deserialize)]
struct Template {
    #[serde(rename = "Parameters")]
    parameters: BTreeMap<String, Parameter>,
}

#[derive(Deserialize)]
struct Parameter {
    #[serde(rename = "Default")]
    default: Option<serde_yaml::Value>,
}

/// The template's defaults that the emulator reproduces.
#[derive(Clone, Debug, Serialize)]
pub struct Defaults {
    pub memory_mb: u32,
    pub timeout_s: u32,
    pub prefault: bool,
}

/// Reads template.yaml's parameter defaults.
pub fn defaults() -> Result<Defaults> {
    let text = std::fs::read_to_string(root().join("template.yaml"))?;
    let t: Template = serde_yaml::from_str(&text).context("template.yaml")?;
    let get = |name: &str| -> Result<String> {
        let v = t
            .parameters
            .get(name)
            .and_then(|p| p.default.clone())
            .with_context(|| format!("template.yaml: no default for parameter {name}"))?;
        Ok(match v {
            serde_yaml::Value::String(s) => s,
            other => serde_yaml::to_string(&other)?.trim().to_string(),
        })
    };
    Ok(Defaults {
        memory_mb: get("FunctionMemoryMB")?.parse()?,
        timeout_s: get("FunctionTimeoutSeconds")?.parse()?,
        prefault: get("PrefaultIndex")? == "1",
    })
}

/// `sam validate --lint` (SAM's schema and cfn-lint); returns its output.
pub fn validate(tools: &Tools) -> Result<String> {
    let out = output(&mut tools.sam(["validate", "--lint", "--template", "template.yaml"]))?;
    Ok(out.trim().to_string())
}

/// `sam build`: what `sam deploy` uploads. Returns the built bootstrap.
pub fn build(tools: &Tools) -> Result<PathBuf> {
    run(&mut tools.sam(["build", "--template", "template.yaml"]))?;
    let built = root()
        .join(".aws-sam/build")
        .join(FUNCTION)
        .join("bootstrap");
    if !built.exists() {
        bail!("sam build left no {}", built.display());
    }
    Ok(built)
}

/// The image `sam local invoke` runs the function in.
fn base_image() -> String {
    std::env::var("LAMBDA_BASE_IMAGE")
        .unwrap_or_else(|_| "public.ecr.aws/lambda/provided:al2023-x86_64".into())
}

#[derive(clap::Args)]
pub struct LocalArgs {
    /// Events to invoke (paths below events/).
    #[arg(default_values_t = [
        "apigw-v2/legit.json".to_string(),
        "apigw-v2/fraud.json".to_string(),
        "function-url/malformed.json".to_string(),
        "alb/ready.json".to_string(),
    ])]
    events: Vec<String>,
    /// Rebuild the stand-in base image even if one exists.
    #[arg(long)]
    rebuild_image: bool,
}

#[derive(Serialize)]
struct Invoked {
    event: String,
    ok: bool,
    detail: String,
}

/// `cargo xtask lambda sam-local`: `sam build`, then `sam local invoke` of each event in Docker.
pub fn local(a: LocalArgs) -> Result<()> {
    let t = Instant::now();
    let tools = tools::ensure()?;
    output(&mut cmd(
        "docker",
        ["info", "--format", "{{.ServerVersion}}"],
    ))
    .context("sam local invoke needs a usable Docker engine")?;
    stand_in_image(a.rebuild_image)?;
    let built = build(&tools)?;
    let sha = sha256_file(&built)?;
    let cases = events::cases()?;
    let log = super::work_dir()?.join("sam-local.log");
    let mut results = Vec::new();
    for event in &a.events {
        let case = cases
            .iter()
            .find(|c| &c.event == event)
            .with_context(|| format!("{event} is not in events/expected.tsv"))?;
        let path = events::events_dir().join(event);
        let mut c = tools.sam([
            "local",
            "invoke",
            FUNCTION,
            "--event",
            path.to_str().context("event path is not UTF-8")?,
            "--skip-pull-image",
            "--template",
            ".aws-sam/build/template.yaml",
        ]);
        c.stderr(std::fs::File::create(&log)?);
        let detail = match output(&mut c).map(|out| Answer::parse(out.trim().as_bytes())) {
            Ok(Ok(answer)) => match answer.mismatch(case) {
                None => Ok(format!("{} {}", answer.status, answer.body)),
                Some(why) => Err(why),
            },
            Ok(Err(e)) | Err(e) => Err(format!(
                "{e:#}; sam's log: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )),
        };
        let ok = detail.is_ok();
        let detail = detail.unwrap_or_else(|e| e);
        crate::log!("{}: {event}: {detail}", if ok { "ok" } else { "FAILED" });
        results.push(Invoked {
            event: event.clone(),
            ok,
            detail,
        });
    }
    let passed = results.iter().filter(|r| r.ok).count();
    let figures = format!(
        "{passed}/{} events answered as expected by sam local invoke (bootstrap sha256 {sha}), {:.0} s",
        results.len(),
        t.elapsed().as_secs_f64()
    );
    verdict(
        "lambda sam-local",
        passed == results.len(),
        &figures,
        &results,
    )
}

/// Builds the stand-in for the Lambda base image (docker/lambda-base/) unless it exists: `FROM
/// scratch` with busybox-static (the `sh`, `mv` and `chmod` that SAM's derived image runs) and
/// the glibc runtime libraries (for a dynamically linked bootstrap; ours is static).
fn stand_in_image(rebuild: bool) -> Result<()> {
    let image = base_image();
    let exists = cmd("docker", ["image", "inspect", &image])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?
        .success();
    if exists && !rebuild {
        crate::log!("base image {image} exists (--rebuild-image to rebuild)");
        return Ok(());
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .context("busybox is missing: run scripts/setup.sh (it installs busybox-static)")?;
    package::check_static_x86_64(busybox).context(
        "the stand-in needs a static busybox: run scripts/setup.sh (it installs busybox-static)",
    )?;

    let ctx = super::target_dir().join("lambda-base");
    let _ = std::fs::remove_dir_all(&ctx);
    let rootfs = ctx.join("rootfs");
    for d in [
        "bin",
        "usr/bin",
        "usr/local/bin",
        "lib64",
        "etc",
        "var/task",
        "var/runtime",
        "var/rapid",
        "opt",
        "tmp",
        "dev",
        "proc",
        "sys",
    ] {
        std::fs::create_dir_all(rootfs.join(d))?;
    }
    std::fs::set_permissions(rootfs.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
    std::fs::copy(busybox, rootfs.join("bin/busybox"))?;
    for tool in [
        "sh", "ash", "mv", "cp", "chmod", "rm", "ls", "cat", "mkdir", "ln", "env", "echo", "sleep",
        "ps", "kill",
    ] {
        symlink("busybox", rootfs.join("bin").join(tool))?;
    }
    // glibc runtime (AL2023 keeps it in /lib64 = /usr/lib64).
    for lib in [
        "ld-linux-x86-64.so.2",
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
    ] {
        let found = ["/lib/x86_64-linux-gnu", "/lib64"]
            .iter()
            .map(|d| Path::new(d).join(lib))
            .find(|p| p.exists());
        if let Some(src) = found {
            std::fs::copy(src, rootfs.join("lib64").join(lib))?;
        }
    }
    symlink("../lib64", rootfs.join("usr/lib64"))?;
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nsbx_user1051:x:993:990::/home/sbx_user1051:/sbin/nologin\n",
    )?;
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\nsbx_user1051:x:990:\n")?;
    std::fs::write(
        rootfs.join("etc/os-release"),
        "NAME=\"Amazon Linux (local stand-in)\"\nVERSION=\"2023\"\nID=\"amzn\"\n",
    )?;
    let base = root().join("docker/lambda-base");
    let entry = rootfs.join("lambda-entrypoint.sh");
    std::fs::copy(base.join("lambda-entrypoint.sh"), &entry)?;
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755))?;
    std::fs::copy(base.join("Dockerfile"), ctx.join("Dockerfile"))?;
    run(&mut cmd(
        "docker",
        [
            "build",
            "-q",
            "-t",
            &image,
            ctx.to_str().context("target dir is not UTF-8")?,
        ],
    ))?;
    crate::log!("built the stand-in base image {image}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_yaml::Value;

    #[test]
    fn template_defaults_are_read_despite_intrinsic_tags() {
        let d = defaults().unwrap();
        assert!(d.memory_mb >= 128 && d.timeout_s >= 1, "{d:?}");
    }

    fn resources() -> serde_yaml::Mapping {
        let text = std::fs::read_to_string(root().join("template.yaml")).unwrap();
        let t: Value = serde_yaml::from_str(&text).unwrap();
        t["Resources"].as_mapping().unwrap().clone()
    }

    fn text(v: &Value) -> String {
        serde_yaml::to_string(v).unwrap()
    }

    #[test]
    fn the_role_may_only_write_its_own_log_streams() {
        let r = resources();
        let roles: Vec<_> = r
            .iter()
            .filter(|(_, v)| v["Type"] == "AWS::IAM::Role")
            .collect();
        assert_eq!(roles.len(), 1);
        let role = &roles[0].1["Properties"];
        assert!(role.get("ManagedPolicyArns").is_none());
        let policies = role["Policies"].as_sequence().unwrap();
        assert_eq!(policies.len(), 1);
        let statements = policies[0]["PolicyDocument"]["Statement"]
            .as_sequence()
            .unwrap();
        assert_eq!(statements.len(), 1);
        let s = &statements[0];
        assert_eq!(s["Effect"], "Allow");
        let actions: Vec<&str> = s["Action"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(actions, ["logs:CreateLogStream", "logs:PutLogEvents"]);
        // !GetAtt FraudScoreLogGroup.Arn: the group's streams, nothing else.
        assert!(
            text(&s["Resource"]).contains("FraudScoreLogGroup.Arn"),
            "{:?}",
            s["Resource"]
        );
        // The function uses this role (SAM would otherwise make its own, with a managed policy).
        let function = &r[FUNCTION]["Properties"];
        assert!(text(&function["Role"]).contains("FraudScoreRole.Arn"));
        assert!(text(&function["LoggingConfig"]).contains("FraudScoreLogGroup"));
        assert_eq!(function["LoggingConfig"]["LogFormat"], "JSON");
    }

    #[test]
    fn one_bounded_public_endpoint_by_default() {
        let text_of = |v: &Value| text(v);
        let template: Value =
            serde_yaml::from_str(&std::fs::read_to_string(root().join("template.yaml")).unwrap())
                .unwrap();
        let params = &template["Parameters"];
        assert_eq!(params["EnableHttpApi"]["Default"], "false");
        assert_eq!(params["EnableAlarms"]["Default"], "false");
        let reserved = params["ReservedConcurrency"]["Default"].as_u64().unwrap();
        assert!((1..=10).contains(&reserved), "{reserved}");
        let r = resources();
        let conditional = |cond: &str| {
            r.iter()
                .filter(|(_, v)| v["Condition"] == cond)
                .map(|(k, _)| k.as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        // Everything that makes a second endpoint or invokes the function from elsewhere is
        // behind a condition; the Function URL is the only unconditional endpoint.
        for (_, v) in r.iter() {
            let kind = v["Type"].as_str().unwrap();
            if kind.starts_with("AWS::ApiGateway") || kind == "AWS::Lambda::Permission" {
                assert!(v.get("Condition").is_some(), "{v:?}");
            }
        }
        assert_eq!(conditional("WithHttpApi").len(), 6);
        assert_eq!(conditional("WithAlarms").len(), 3);
        assert_eq!(conditional("PublicUrl").len(), 2);
        let urls: Vec<_> = r
            .iter()
            .filter(|(_, v)| v["Type"] == "AWS::Lambda::Url")
            .collect();
        assert_eq!(urls.len(), 1);
        assert!(text_of(&urls[0].1["Properties"]["AuthType"]).contains("FunctionUrlAuthType"));
        let function = &r[FUNCTION]["Properties"];
        assert!(function.get("Events").is_none() && function.get("FunctionUrlConfig").is_none());
        assert!(text_of(&function["ReservedConcurrentExecutions"]).contains("ReservedConcurrency"));
        let stage = &r["FraudScoreHttpApiStage"]["Properties"]["DefaultRouteSettings"];
        assert!(text_of(&stage["ThrottlingBurstLimit"]).contains("HttpApiThrottlingBurstLimit"));
        assert!(text_of(&stage["ThrottlingRateLimit"]).contains("HttpApiThrottlingRateLimit"));
    }
}
