//! The harness builds single binaries (`cargo build --workspace --bin NAME`) after CI's
//! all-targets build; they reuse its units only if cargo resolves every shared crate's features
//! alike with and without the dev-dependencies (resolver 2 drops them for a bins-only build).
//! xtask's feature pins (its Cargo.toml) make it so; this test fails when a new dev-dependency
//! turns on a feature the pins lack (a split once cost the verify step a 47 s rebuild).

use std::collections::{BTreeMap, BTreeSet};

/// Every package of the workspace's resolution with the features it is built with.
fn resolved(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let args = ["tree", "--offline", "--workspace", "--all-features", "--prefix", "none"];
    let out = std::process::Command::new(env!("CARGO"))
        .args(args)
        .args(["-e", edges, "-f", "{p}|{f}"])
        .current_dir(root)
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let Some((package, features)) = line.trim_end_matches(" (*)").split_once('|') else {
            continue;
        };
        packages.entry(package.to_string()).or_default().insert(features.to_string());
    }
    packages
}

#[test]
fn bins_only_builds_resolve_features_as_the_all_targets_build() {
    let (all, bins) = (resolved("normal,build,dev"), resolved("normal,build"));
    assert!(bins.len() > 100, "{} packages", bins.len());
    let split: Vec<String> = bins
        .iter()
        .filter(|(p, f)| all.get(*p).is_some_and(|g| g != *f))
        .map(|(p, f)| format!("{p}: {f:?} without dev-dependencies, {:?} with", all[p]))
        .collect();
    assert!(split.is_empty(), "pin these features in xtask/Cargo.toml:\n{}", split.join("\n"));
}
