//! The container-image form of the Lambda (docs/LAMBDA.md, "Packaging by size"): a zip package
//! holds at most 250 MB unzipped, so an index over about 7M references ships as an image
//! instead (up to 10 GB). `template-image.yaml` is `template.yaml` with the function as an image
//! built from `docker/lambda-image/Dockerfile` around the same shipped bootstrap; it is written
//! from `template.yaml` by `cargo xtask lambda image-template`, and a test holds the committed
//! file to that.

use crate::util::root;
use anyhow::{Context, Result};

/// The image form's template, beside `template.yaml`.
pub const TEMPLATE: &str = "template-image.yaml";

/// `template.yaml` with the function packaged as an image (its other resources, parameters,
/// defaults and comments unchanged): the function's build metadata and its zip-only properties
/// are replaced, line by line, so that the two files cannot drift apart.
pub fn from_zip_template(zip: &str) -> Result<String> {
    let lines: Vec<&str> = zip.lines().collect();
    let at = |line: &str, from: usize| {
        lines[from..].iter().position(|l| *l == line).map(|i| i + from).with_context(|| {
            format!("template.yaml has no line {line:?} (change {TEMPLATE}'s writer with it)")
        })
    };
    let function = at(&format!("  {}:", super::sam::FUNCTION), 0)?;
    let (metadata, properties) = (at("    Metadata:", function)?, at("    Properties:", function)?);
    let mut out = vec![
        "# Written by `cargo xtask lambda image-template` from template.yaml (do not edit): the same".to_string(),
        "# stack with the function as a container image, for an index too large for a zip package".into(),
        "# (docs/LAMBDA.md, \"Packaging by size\").".into(),
    ];
    out.extend(lines[..metadata].iter().map(|l| l.to_string()));
    out.extend([
        "    Metadata:",
        "      # `sam build --template template-image.yaml` builds the image from the Dockerfile and",
        "      # the bootstrap that `cargo xtask lambda build --image` put in target/lambda-package.",
        "      Dockerfile: Dockerfile",
        "      DockerContext: target/lambda-package",
        "      DockerTag: fraud-score",
        "    Properties:",
        "      PackageType: Image",
    ].map(String::from));
    let zip_only = ["      CodeUri:", "      Handler:", "      Runtime:"];
    let rest =
        lines[properties + 1..].iter().filter(|l| !zip_only.iter().any(|z| l.starts_with(z)));
    out.extend(rest.map(|l| l.to_string()));
    Ok(out.join("\n") + "\n")
}

/// Writes the image form's template from `template.yaml`.
pub fn write_template() -> Result<()> {
    let zip = std::fs::read_to_string(root().join("template.yaml"))?;
    std::fs::write(root().join(TEMPLATE), from_zip_template(&zip)?)?;
    Ok(())
}
