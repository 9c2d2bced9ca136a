//! The artifact format: round trip, determinism, and a clear error for every kind of damage.

use index_pack::format::{self, CodecKind, FormatError, FOOTER_LEN, FORMAT_VERSION};
use index_pack::layout::{self, LayoutParams, References};

fn refs(n: usize) -> References {
    let mut r = References::default();
    let mut x: u64 = 7;
    for i in 0..n {
        let mut v = [0i16; 14];
        for (d, c) in v.iter_mut().enumerate() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *c = match d {
                9..=11 => ((x >> 40) % 2) as i16 * 10_000,
                5 | 6 if i % 5 == 0 => -10_000,
                _ => ((x >> 33) % 10_001) as i16,
            };
        }
        r.vectors.push(v);
        r.fraud.push(i % 3 == 0);
    }
    r
}

fn artifact(codec: CodecKind) -> Vec<u8> {
    format::to_artifact(&index(codec))
}

fn index(codec: CodecKind) -> format::Index {
    let r = refs(500);
    let centroids: Vec<[f32; 14]> = r
        .vectors
        .iter()
        .step_by(50)
        .map(|v| v.map(|k| k as f32 / 1e4))
        .collect();
    let assignment: Vec<u32> = (0..r.vectors.len() as u32)
        .map(|i| i % centroids.len() as u32)
        .collect();
    let params = LayoutParams {
        codec,
        block_rows: 16,
        ..LayoutParams::default()
    };
    layout::build(&r, &centroids, &assignment, &params)
}

fn open(bytes: &[u8]) -> Result<(), FormatError> {
    let aligned = format::aligned_copy(bytes);
    format::verify_deep(&aligned)?;
    format::open(&aligned).map(|_| ())
}

#[test]
fn round_trip_both_codecs() {
    for codec in [CodecKind::I16, CodecKind::F16] {
        let bytes = artifact(codec);
        let aligned = format::aligned_copy(&bytes);
        format::verify_deep(&aligned).unwrap();
        let idx = format::open(&aligned).unwrap();
        assert_eq!(idx.header.codec.native(), codec);
        assert_eq!(idx.header.n_refs, 500);
        assert_eq!(idx.header.format_version, FORMAT_VERSION);
        // Every reference is stored exactly once, with its label.
        let mut seen: Vec<u32> = idx
            .ids
            .iter()
            .map(|i| i.to_native())
            .filter(|&i| i != format::PAD_ID)
            .collect();
        seen.sort_unstable();
        let want: Vec<u32> = (0..500u32)
            .map(|i| (i << 1) | (i % 3 == 0) as u32)
            .collect();
        assert_eq!(seen, want);
    }
}

#[test]
fn packing_is_deterministic() {
    assert_eq!(artifact(CodecKind::I16), artifact(CodecKind::I16));
}

#[test]
fn truncated_file() {
    let bytes = artifact(CodecKind::I16);
    assert_eq!(open(&bytes[..10]), Err(FormatError::TooShort(10)));
    let err = open(&bytes[..bytes.len() - 1]).unwrap_err();
    assert_eq!(err, FormatError::BadMagic);
    assert!(err
        .to_string()
        .contains("not a fraud index or it was truncated; rebuild it with index-pack"));
    // Footer intact but archive cut: the declared length disagrees.
    let mut cut = bytes[..100].to_vec();
    cut.extend_from_slice(&bytes[bytes.len() - FOOTER_LEN..]);
    assert!(matches!(
        open(&cut),
        Err(FormatError::Length { actual: 100, .. })
    ));
}

#[test]
fn wrong_version() {
    let mut bytes = artifact(CodecKind::I16);
    let at = bytes.len() - FOOTER_LEN + 8;
    bytes[at..at + 4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let err = open(&bytes).unwrap_err();
    assert_eq!(
        err,
        FormatError::Version {
            found: FORMAT_VERSION + 1,
            expected: FORMAT_VERSION
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "index artifact has format version {}, this program reads version {FORMAT_VERSION}: rebuild the index with this version of index-pack",
            FORMAT_VERSION + 1
        )
    );
}

#[test]
fn corrupted_byte_is_caught_by_the_checksum() {
    let bytes = artifact(CodecKind::I16);
    for at in [0, bytes.len() / 3, bytes.len() - FOOTER_LEN - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x40;
        let err = open(&bad).unwrap_err();
        assert!(
            matches!(err, FormatError::Checksum { .. }),
            "byte {at}: {err}"
        );
        assert!(err
            .to_string()
            .ends_with("the file is corrupted; rebuild it"));
    }
}

#[test]
fn misaligned_buffer_is_refused() {
    let bytes = artifact(CodecKind::I16);
    let mut buf = rkyv::util::AlignedVec::<32>::new();
    buf.push(0);
    buf.extend_from_slice(&bytes);
    assert_eq!(
        format::open(&buf[1..]).err(),
        Some(FormatError::Misaligned(1))
    );
}

#[test]
fn reference_domain_is_enforced() {
    let mut v = [0.5f64; 14];
    (v[9], v[10], v[11]) = (1.0, 0.0, 1.0);
    assert!(layout::to_fixed(&v).is_ok());
    v[9] = 0.5;
    assert!(layout::to_fixed(&v)
        .unwrap_err()
        .to_string()
        .contains("binary"));
    v[9] = 0.0;
    v[0] = -1.0;
    assert!(layout::to_fixed(&v)
        .unwrap_err()
        .to_string()
        .contains("outside [0, 1]"));
    v[0] = 0.12345;
    assert!(layout::to_fixed(&v)
        .unwrap_err()
        .to_string()
        .contains("more than 4 decimals"));
    v[0] = 0.1;
    v[5] = -1.0;
    assert_eq!(layout::to_fixed(&v).unwrap()[5], -10_000);
}

/// Tables that disagree with each other are refused at open (the search follows child
/// references and slot ranges unchecked), even when the checksum is valid.
#[test]
fn inconsistent_tables_are_refused() {
    let good = index(CodecKind::I16);
    assert!(good.partitions.len() > 2 && good.node_children.len() > 2);
    type Damage = fn(&mut format::Index);
    let damage: [(&str, Damage); 7] = [
        ("partition order", |i| i.partitions.swap(0, 1)),
        ("partition slots", |i| i.partitions[1].first_slot += 8),
        ("node boxes", |i| {
            i.node_bounds.pop();
        }),
        ("a child past the end", |i| i.node_children[0][0] = 1 << 20),
        ("a node reached twice", |i| {
            let c = i.node_children[0][0];
            i.node_children[0][1] = c;
        }),
        ("a gap between children", |i| {
            i.node_children[0][0] = format::NO_CHILD
        }),
        ("a list outside its partition", |i| {
            i.lists[0].end_slot = i.ids.len() as u32 + 8
        }),
    ];
    for (what, damage) in damage {
        let mut bad = good.clone();
        damage(&mut bad);
        let err = open(&format::to_artifact(&bad)).unwrap_err();
        assert!(
            matches!(err, FormatError::Inconsistent(_)),
            "{what}: {err:?}"
        );
    }
}

/// Damage only a full read can see is refused by `verify_deep`: a row of the other label in a
/// partition, and a box that misses what lies below it.
#[test]
fn deep_checks_find_labels_and_boxes() {
    let good = index(CodecKind::I16);
    let artifact = format::to_artifact(&good);
    format::verify_deep(&format::aligned_copy(&artifact)).unwrap();
    type Damage = fn(&mut format::Index);
    let damage: [(&str, Damage); 3] = [
        ("a row of the other label", |i| i.ids[0] ^= 1),
        ("a node box too small", |i| {
            i.node_bounds[0].hi[0][0] = i.node_bounds[0].lo[0][0] - 1
        }),
        ("a partition box too small", |i| {
            i.partitions[0].bounds.hi[0] = i.partitions[0].bounds.lo[0] - 1
        }),
    ];
    for (what, damage) in damage {
        let mut bad = good.clone();
        damage(&mut bad);
        let bytes = format::aligned_copy(&format::to_artifact(&bad));
        format::open(&bytes).unwrap_or_else(|e| panic!("{what}: open should pass: {e}"));
        let err = format::verify_deep(&bytes).unwrap_err();
        assert!(
            matches!(err, FormatError::Inconsistent(_)),
            "{what}: {err:?}"
        );
    }
}

fn i16_rows(i: &mut format::Index) -> &mut Vec<format::I16Group> {
    match &mut i.codes {
        format::Codes::I16(g) => g,
        format::Codes::F16(_) => panic!("an i16 index"),
    }
}

fn f16_rows(i: &mut format::Index) -> &mut Vec<format::F16Group> {
    match &mut i.codes {
        format::Codes::F16(g) => g,
        format::Codes::I16(_) => panic!("an fp16 index"),
    }
}

/// A padding slot (an id of `PAD_ID`) and a block of at least two rows.
fn padding_slot(i: &format::Index) -> usize {
    i.ids
        .iter()
        .position(|&id| id == format::PAD_ID)
        .expect("a padding slot")
}

/// What the search relies on without checking it per query is refused by `verify_deep`, one
/// invariant at a time, with a sentence naming it (the artifact's tables stay consistent, so
/// `open` alone accepts each of them).
#[test]
fn deep_checks_find_every_invariant_the_search_relies_on() {
    type Damage = fn(&mut format::Index);
    let i16_damage: [(&str, &str, Damage); 9] = [
        ("a row value over 1", "outside 0..=10000", |i| {
            i16_rows(i)[0].pairs[0][0] = 10_001
        }),
        (
            "a negative value outside dims 5 and 6",
            "outside 0..=10000",
            |i| i16_rows(i)[0].pairs[0][0] = -1,
        ),
        ("a sentinel lane below -1", "outside -10000..=10000", |i| {
            i16_rows(i)[0].pairs[2][1] = -10_001
        }),
        ("the padding lane not 0", "lane 11, outside 0..=0", |i| {
            i16_rows(i)[0].pairs[5][1] = 1
        }),
        (
            "a box lane past the row lanes not 0",
            "partition box 0 holds 1 in lane 12",
            |i| i.partitions[0].bounds.hi[12] = 1,
        ),
        (
            "a node box outside the domain",
            "node 0 holds -20000",
            |i| i.node_bounds[0].lo[0][0] = -20_000,
        ),
        (
            "a real row outside every block",
            "outside every block",
            |i| {
                let b = i.blocks.iter_mut().find(|b| b.n_slots >= 2).unwrap();
                b.n_slots -= 1;
            },
        ),
        (
            "a padding slot inside a block",
            "holds the padding slot",
            |i| {
                let first = i.blocks[0].first_slot as usize;
                i.ids[first] = format::PAD_ID;
                i.header.n_refs -= 1;
            },
        ),
        ("a padding row that is not 0", "padding slot", |i| {
            let s = padding_slot(i);
            i16_rows(i)[s / 8].pairs[0][2 * (s % 8)] = 5;
        }),
    ];
    let f16_damage: [(&str, &str, Damage); 3] = [
        ("an fp16 NaN", "the fp16 value NaN", |i| {
            f16_rows(i)[0].lanes[0][0] = 0x7e00
        }),
        ("an fp16 infinity", "the fp16 value inf", |i| {
            f16_rows(i)[0].lanes[0][0] = 0x7c00
        }),
        ("an fp16 value over 1", "the fp16 value 1.5", |i| {
            f16_rows(i)[0].lanes[0][0] = 0x3e00
        }),
    ];
    let cases = i16_damage
        .iter()
        .map(|d| (CodecKind::I16, d))
        .chain(f16_damage.iter().map(|d| (CodecKind::F16, d)));
    for (codec, (what, says, damage)) in cases {
        let mut bad = index(codec);
        damage(&mut bad);
        let bytes = format::aligned_copy(&format::to_artifact(&bad));
        format::open(&bytes).unwrap_or_else(|e| panic!("{what}: open should pass: {e}"));
        let err = format::verify_deep(&bytes).unwrap_err();
        assert!(
            matches!(&err, FormatError::Inconsistent(m) if m.contains(says)),
            "{what}: {err}"
        );
    }
}

/// The packer writes as it serializes: the file holds the bytes of [`format::to_artifact`],
/// and the digest it reports is theirs.
#[test]
fn an_index_written_to_a_file_is_its_artifact() {
    let index = index(CodecKind::I16);
    let path = std::env::temp_dir().join(format!("index-pack-written-{}.idx", std::process::id()));
    let written = index_pack::write_index(&path, &index).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(bytes, format::to_artifact(&index));
    assert_eq!(written.bytes, bytes.len() as u64);
    assert_eq!(written.sha256, index_pack::sha256_hex(&bytes));
    assert_eq!(written.footer, format::Footer::read(&bytes).unwrap());
}

/// Shards of a split keep their rows' positions: laid out from [`layout::Partitioned::split_at_positions`]
/// at `first_position`, each holds the ids the whole set's index holds for those positions.
#[test]
fn split_shards_hold_the_positions_of_the_whole() {
    let r = refs(700);
    let whole = layout::Partitioned::from_references(&r);
    let bounds = [0, 233, 466, 700];
    let shards = whole.clone().split_at_positions(&bounds);
    for (k, shard) in shards.into_iter().enumerate() {
        assert_eq!(shard.len, bounds[k + 1] - bounds[k]);
        let lo = bounds[k] as usize;
        for (p, rows) in shard.parts.iter().enumerate() {
            for row in rows {
                let i = lo + row.index as usize;
                assert_eq!(layout::Partitioned::vector(p, row), r.vectors[i]);
                assert_eq!(p & 1 == 1, r.fraud[i]);
            }
        }
    }
}

/// A set holds at most 2^31 positions (an id keeps one in 31 bits): the packer, the splitter
/// and a delta past it are refused with a sentence, not wrapped.
#[test]
fn positions_past_two_to_the_31_are_refused() {
    use index_pack::format::{check_positions, MAX_POSITIONS};
    assert!(check_positions(0, MAX_POSITIONS).is_ok());
    assert!(check_positions(MAX_POSITIONS - 10, 10).is_ok());
    let e = check_positions(MAX_POSITIONS - 10, 11)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pass the 2147483648 positions an index holds"),
        "{e}"
    );
    assert!(check_positions(0, MAX_POSITIONS + 1).is_err());
}
