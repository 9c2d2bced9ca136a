//! Reading references: digest check, and bad records refused with their number.

use index_pack::layout::Partitioned;
use index_pack::source::{
    read_partitioned, read_references, Expect, SourceError, CONTEST_REFERENCES_SHA256,
};
use std::io::Write;

fn write(name: &str, text: &str, gz: bool) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("index-pack-source-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).unwrap();
    if gz {
        let mut e = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap();
    } else {
        f.write_all(text.as_bytes()).unwrap();
    }
    path
}

const TWO: &str = r#"[{"vector":[0.01,0.0833,0.05,0.8261,0.1667,-1,-1,0.0432,0.25,0,1,0,0.2,0.0416],"label":"legit"},
{"vector":[0.5796,0.9167,1,0.0435,0,0.0056,0.4394,0.4598,0.4,1,0,1,0.85,0.0032],"label":"fraud"}]
"#;

#[test]
fn reads_plain_and_gzip_and_records_the_digest() {
    for gz in [false, true] {
        let p = write(if gz { "two.json.gz" } else { "two.json" }, TWO, gz);
        let r = read_references(&p, &Expect::Any, &|_| {}).unwrap();
        assert_eq!(r.vectors.len(), 2);
        assert_eq!(r.fraud, vec![false, true]);
        assert_eq!(r.vectors[0][1], 833);
        assert_eq!(r.vectors[1][12], 8500);
        use sha2::Digest;
        assert_eq!(
            r.source_sha256,
            <[u8; 32]>::from(sha2::Sha256::digest(TWO.as_bytes()))
        );
    }
}

#[test]
fn contest_digest_is_required_by_default() {
    let p = write("two-check.json", TWO, false);
    let err = read_references(&p, &Expect::Contest, &|_| {}).unwrap_err();
    assert!(
        matches!(&err, SourceError::Checksum { expected, .. } if expected == CONTEST_REFERENCES_SHA256)
    );
    assert!(err.to_string().contains("--accept-any-references"));
}

#[test]
fn bad_records_name_their_number() {
    let cases = [
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,0,0,0,0,0],"label":"legit"},{"vector":[0,0,0],"label":"legit"}]"#,
            "record 1",
        ),
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,0,0,0,0,0],"label":"maybe"}]"#,
            "record 0",
        ),
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,2,0,0,0,0],"label":"fraud"}]"#,
            "record 0: dimension 9",
        ),
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,0,0,0,0,0],"label":"fraud"}"#,
            "EOF",
        ),
        ("[]", "no references"),
        ("", "EOF"),
        (r#"{"vector":[]}"#, "not a JSON array"),
        ("[1]", "record 0: not an object"),
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,0,0,0,0,0],"label":"fraud"},]"#,
            "record 1: not an object",
        ),
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,0,0,0,0,0],"label":"fraud"}] x"#,
            "trailing characters",
        ),
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,0,0,0,0,0],"label":"fraud"} {"vector":[]}]"#,
            "after record 1: trailing characters",
        ),
        (
            r#"[{"vector":[0,0,0,0,0,0,0,0,0,0,0,0,0,0],"label":"fraud","note":"}]"}]"#,
            "record 0",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = write(&format!("bad{i}.json"), text, false);
        let err = read_references(&p, &Expect::Any, &|_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "case {i}: {err}");
    }
}

/// A file of many chunks (the reader hands records over 4 MiB at a time): every record comes
/// out once, in order, in both forms, with braces and brackets inside strings left alone.
#[test]
fn a_large_file_reads_whole_and_in_order() {
    let n = 120_000;
    let mut text = String::from("[\n");
    for i in 0..n {
        let label = if i % 7 == 0 { "fraud" } else { "legit" };
        let v = (i % 10_000) as f64 / 1e4;
        let key = (i % 2) as f64;
        let sep = if i + 1 < n { "," } else { "" };
        text.push_str(&format!(
            "  {{ \"vector\": [{v},0,0,0,0,-1,{v},0,0,{key},0,1,0,0.5], \"label\" : \"{label}\" }}{sep}\n"
        ));
    }
    text.push_str("]\n");
    assert!(text.len() > 2 * (4 << 20), "more than two chunks");
    let p = write("many.json.gz", &text, true);
    let r = read_references(&p, &Expect::Any, &|_| {}).unwrap();
    assert_eq!(r.vectors.len(), n);
    for (i, (v, &fraud)) in r.vectors.iter().zip(&r.fraud).enumerate() {
        assert_eq!(
            (v[0], v[6], v[9]),
            (
                (i % 10_000) as i16,
                (i % 10_000) as i16,
                (i % 2) as i16 * 10_000
            )
        );
        assert_eq!(fraud, i % 7 == 0);
    }
    let parts = read_partitioned(&p, &Expect::Any, &|_| {}).unwrap();
    assert_eq!(parts, Partitioned::from_references(&r));
}
