//! References named by id: the map `index-pack` keeps beside each artifact, edits that name ids,
//! and what a compaction keeps of the map (the binary, as a user runs it).

use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("index-pack-names-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `count` references in the index's domain, every third a fraud, with ids `<prefix><i>` (none without a prefix).
fn references(path: &Path, count: usize, seed: u64, prefix: Option<&str>) {
    let mut x = seed;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 40) as f64 / (1u64 << 24) as f64
    };
    let records: Vec<String> = (0..count)
        .map(|i| {
            // Dimensions 9 to 11 are binary (the index's key).
            let v: Vec<String> = (0..14)
                .map(|d| match d {
                    9..=11 => format!("{}", (next() < 0.5) as u8),
                    _ => format!("{:.4}", next()),
                })
                .collect();
            let id = prefix.map_or(String::new(), |p| format!(r#""id":"{p}{i}","#));
            let label = if i % 3 == 0 { "fraud" } else { "legit" };
            format!(r#"{{{id}"vector":[{}],"label":"{label}"}}"#, v.join(","))
        })
        .collect();
    std::fs::write(path, format!("[{}]", records.join(","))).unwrap();
}

fn index_pack<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_index-pack"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) {
    let out = index_pack(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "index-pack {args:?}: {stderr}");
}

/// `index-pack args` fails and says `says`.
fn refused(args: &[String], says: &str) {
    let out = index_pack(args);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains(says),
        "{args:?}: {said}"
    );
}

fn names(artifact: &Path) -> serde_json::Value {
    let text = std::fs::read(index_pack::names::path_beside(artifact)).unwrap();
    serde_json::from_slice::<serde_json::Value>(&text).unwrap()["positions"].clone()
}

#[test]
fn edits_name_references_by_id_and_compaction_drops_the_removed_ids() {
    let d = dir();
    let p = |name: &str| d.join(name).to_str().unwrap().to_string();
    references(&d.join("base.json"), 600, 1, Some("b-"));
    references(&d.join("new.json"), 60, 2, Some("n-"));
    let any = "--accept-any-references";
    ok(&[
        "build",
        any,
        "--cells",
        "4",
        "--references",
        &p("base.json"),
        "-o",
        &p("base.idx"),
    ]);
    assert_eq!(names(&d.join("base.idx"))["b-7"], 7);
    // New references at positions 600.., by id in the delta's map.
    ok(&[
        "delta",
        "--base",
        &p("base.idx"),
        "--references",
        &p("new.json"),
        "-o",
        &p("d0.idx"),
    ]);
    assert_eq!(names(&d.join("d0.idx"))["n-5"], 605);
    // Edits by id across the chain: a base reference removed, a new one relabelled (n-1 is legit).
    let edits = r#"{"remove":["b-3", 10],"relabel":[{"id":"n-1","label":"fraud"}]}"#;
    std::fs::write(d.join("e.json"), edits).unwrap();
    let chain = ["--base", &p("base.idx"), "--after", &p("d0.idx")];
    ok(&[
        &["delta"][..],
        &chain,
        &["--edits", &p("e.json"), "-o", &p("d1.idx")],
    ]
    .concat());
    assert!(
        !index_pack::names::path_beside(&d.join("d1.idx")).exists(),
        "adds no id"
    );
    // An id the set does not hold, and a new reference that takes an id the set holds.
    std::fs::write(d.join("bad.json"), r#"{"remove":["b-999"]}"#).unwrap();
    let x = p("x");
    let after_chain = |more: &[&str]| -> Vec<String> {
        let all = [&["delta"][..], &chain, more, &["-o", &x]].concat();
        all.into_iter().map(String::from).collect()
    };
    refused(
        &after_chain(&["--edits", &p("bad.json")]),
        "\"b-999\" is not in the set",
    );
    references(&d.join("again.json"), 5, 3, Some("b-"));
    let again = after_chain(&["--references", &p("again.json")]);
    refused(&again, "which the set already names");
    // A map beside another artifact than its own is refused.
    let beside = |name: &str| index_pack::names::path_beside(&d.join(name));
    std::fs::copy(beside("d0.idx"), beside("base.idx")).unwrap();
    let edits = after_chain(&["--edits", &p("e.json")]);
    refused(&edits, "not the names of its artifact");
    ok(&[
        "build",
        any,
        "--cells",
        "4",
        "--references",
        &p("base.json"),
        "-o",
        &p("base.idx"),
    ]);
    // Compaction keeps the live references' ids, at their positions, and drops the removed.
    let compact = [
        "compact",
        "--base",
        &p("base.idx"),
        "--delta",
        &p("d0.idx"),
        "--delta",
    ];
    ok(&[&compact[..], &[&p("d1.idx"), "-o", &p("c.idx")]].concat());
    let kept = names(&d.join("c.idx"));
    assert_eq!(
        (kept["b-4"].clone(), kept["n-1"].clone()),
        (4.into(), 601.into())
    );
    assert!(
        kept.get("b-3").is_none() && kept.get("b-10").is_none(),
        "removed ids dropped"
    );
    assert_eq!(kept.as_object().unwrap().len(), 660 - 2);
    std::fs::remove_dir_all(&d).unwrap();
}
