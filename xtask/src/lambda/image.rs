//! The Lambda as a container image, for an index past a zip's 250 MB (docs/LAMBDA.md, "Packaging
//! by size"): `template-image.yaml`, written from `template.yaml` (a test holds it to that).

use crate::prelude::*;

/// The image form's template, beside `template.yaml`.
pub const TEMPLATE: &str = "template-image.yaml";

/// `template.yaml` with the function packaged as an image: its build metadata and zip-only
/// properties replaced line by line, all else unchanged, so that the two cannot drift apart.
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
    // The function's block ends at the next resource (or section); only its zip-only properties go.
    let starts = |l: &str| !l.is_empty() && !l.starts_with("   ") && !l.starts_with("  #");
    let end = (properties + 1..lines.len()).find(|&i| starts(lines[i])).unwrap_or(lines.len());
    let gone = ["      CodeUri:", "      Handler:", "      Runtime:"];
    let own = lines[properties + 1..end].iter().filter(|l| !gone.iter().any(|z| l.starts_with(z)));
    out.extend(own.chain(&lines[end..]).map(|l| l.to_string()));
    Ok(out.join("\n") + "\n")
}
