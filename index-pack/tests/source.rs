//! Reading references: digest check, and bad records refused with their number.

use index_pack::source::{read_references, Expect, SourceError, CONTEST_REFERENCES_SHA256};
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
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = write(&format!("bad{i}.json"), text, false);
        let err = read_references(&p, &Expect::Any, &|_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "case {i}: {err}");
    }
}
