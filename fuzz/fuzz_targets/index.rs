//! Index artifacts: `format::open` and `format::verify_deep` on damaged artifacts, then searches
//! on what they accept.
//!
//! `open` validates the rkyv archive and the table sizes "so the search can index them
//! without checks failing at query time"; `verify_deep` reads every row and box and holds them
//! to what the search relies on without checking it per query: values in their lanes' domain
//! (no distance can overflow), every real row in a block and no padding in one
//! (index-pack/src/format.rs). This target holds both to that: the input edits the fixture's
//! valid artifact (byte overwrites at chosen offsets, a length change, optionally a footer
//! recomputed over the damage with its true CRC32, as a packer bug would write it); an artifact
//! that `verify_deep` accepts must satisfy this target's own independent checks of those
//! invariants, and one that satisfies them must answer searches without a panic, with the
//! clamped kernels and, once `verify_deep` accepted it, the plain ones the request path takes
//! (the search of what only `open` accepted is the `index_open` target's). Run with
//! AddressSanitizer (cargo fuzz's default), it also watches the search's unsafe layout casts and
//! the AVX2 kernels on arbitrary row, bound and centroid values.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use fraud_fuzz::damage::Input;
use function::search::{SearchParams, Searcher};
use index_pack::format::{self, ArchivedCodes, ArchivedIndex, LANES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let aligned = input.artifact();
    let Ok(index) = format::open(&aligned) else {
        return;
    };
    let deep = format::verify_deep(&aligned);
    if std::env::var_os("INDEX_FUZZ_DEBUG").is_some() {
        eprintln!("{input:?}");
        for (i, p) in index.partitions.iter().enumerate() {
            eprintln!(
                "partition {i}: key {} fraud {} root {:#x} slots {}..{}",
                p.key, p.fraud, p.root, p.first_slot, p.end_slot
            );
        }
    }
    assert!(
        references_in_range(index),
        "open accepted a tree whose references leave its tables"
    );
    let searchable = values_in_domain(index) && rows_in_blocks(index);
    if deep.is_ok() {
        assert!(
            values_in_domain(index),
            "verify_deep accepted a value outside its lane's domain"
        );
        assert!(
            rows_in_blocks(index),
            "verify_deep accepted a real row outside every block, or padding inside one"
        );
    }
    if !searchable {
        return;
    }
    let queries = input.domain_queries();
    let mut searchers = vec![
        Searcher::new(index, SearchParams::default()),
        Searcher::scalar(index, SearchParams::default()),
    ];
    // What `verify_deep` accepted, the request path searches with the plain kernels.
    if let Ok(v) = deep {
        searchers.extend([
            Searcher::new(index, SearchParams::default()).trusting(v),
            Searcher::scalar(index, SearchParams::default()).trusting(v),
        ]);
    }
    for q in &queries {
        for s in searchers.iter() {
            let got = s.nearest(q);
            assert!(got.len() <= function::search::K);
            assert!(s.frauds(q) <= got.len());
        }
    }
});

/// The search's precondition on values, which `open` deliberately does not check (it reads no
/// rows) and `verify_deep` does: every lane within its dimension's range and padding lanes 0,
/// so that no distance can overflow `i32` (kernels.rs). Written here independently of
/// `verify_deep`, to check it.
fn values_in_domain(index: &ArchivedIndex) -> bool {
    // Row lanes 5 and 6 (dims 5 and 6) hold the -1 sentinel; lanes from 11 on are padding.
    let ok = |lane: usize, v: f32| match lane {
        5 | 6 => (-10_000.0..=10_000.0).contains(&v),
        l if l < LANES - 1 => (0.0..=10_000.0).contains(&v),
        _ => v == 0.0,
    };
    let pairs_ok = |pairs: &[[rkyv::rend::i16_le; 16]]| {
        pairs.iter().enumerate().all(|(p, pair)| {
            pair.iter()
                .enumerate()
                .all(|(i, x)| ok(2 * p + i % 2, x.to_native() as f32))
        })
    };
    let box_ok = |lo: &[rkyv::rend::i16_le; 16], hi: &[rkyv::rend::i16_le; 16]| {
        (0..16).all(|l| ok(l, lo[l].to_native() as f32) && ok(l, hi[l].to_native() as f32))
    };
    index
        .node_bounds
        .iter()
        .all(|g| pairs_ok(&g.lo) && pairs_ok(&g.hi))
        && index
            .partitions
            .iter()
            .all(|p| box_ok(&p.bounds.lo, &p.bounds.hi))
        && match &index.codes {
            ArchivedCodes::I16(groups) => groups.iter().all(|g| pairs_ok(&g.pairs)),
            ArchivedCodes::F16(groups) => groups.iter().all(|g| {
                g.lanes.iter().enumerate().all(|(l, lane)| {
                    lane.iter().all(|x| {
                        let v = half::f16::from_bits(x.to_native()).to_f32() * 10_000.0;
                        v.is_finite() && ok(l, v)
                    })
                })
            }),
        }
}

/// Whether every child reference of every tree names a node or block that exists and every
/// block's rows are slots, as `open` promises the search (whose indexing is bounds-checked: a
/// reference out of range would be a panic, which aborts the server). An earlier format's
/// `open` missed such a check: this target found a one-byte damage that passed `open` and made
/// the search index out of range (fuzz/artifacts-found/index/, docs/FUZZING.md).
fn references_in_range(index: &ArchivedIndex) -> bool {
    let ok = |c: u32| {
        if c & format::BLOCK_BIT != 0 {
            ((c & !format::BLOCK_BIT) as usize) < index.blocks.len()
        } else {
            (c as usize) < index.node_children.len()
        }
    };
    index.partitions.iter().all(|p| ok(p.root.to_native()))
        && index.node_children.iter().all(|cs| {
            cs.iter()
                .all(|c| c.to_native() == format::NO_CHILD || ok(c.to_native()))
        })
        && index.blocks.iter().all(|b| {
            (b.first_slot.to_native() + b.n_slots.to_native()) as usize <= index.ids.len()
        })
}

/// Every real row lies in a block, and no block holds a padding slot (the scan tells padding
/// from the slot number, without loading ids).
fn rows_in_blocks(index: &ArchivedIndex) -> bool {
    let mut in_block = vec![false; index.ids.len()];
    for b in index.blocks.iter() {
        let first = b.first_slot.to_native() as usize;
        for s in first..first + b.n_slots.to_native() as usize {
            if index.ids[s].to_native() == format::PAD_ID {
                return false;
            }
            in_block[s] = true;
        }
    }
    index
        .ids
        .iter()
        .zip(&in_block)
        .all(|(id, &inside)| inside || id.to_native() == format::PAD_ID)
}
