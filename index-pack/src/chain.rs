//! A base and its deltas as one reference set: which row of which part holds each position's
//! live reference.
//!
//! The set a base and its deltas describe is defined once, here: the concatenation of their
//! references in position order, less the removed ones, with the relabelled ones carrying their
//! new label. A delta names the positions it changes in its `hides` (`format::Part::Delta`):
//! from then on the row an earlier part holds for such a position no longer counts; a removed
//! position has no row after it, a relabelled one has its row in the delta, with the same
//! vector and position and the new label. Positions never move, so ties break by position as
//! the labeller's over the corrected file would.
//!
//! [`hidden_rows`] resolves a chain once (at load, and when a delta or a compaction is packed)
//! and holds it to that definition: a delta may hide only a position that an earlier part holds
//! live (never one that was never in the set, nor one an earlier delta removed).

use crate::format::{
    ArchivedCodes, ArchivedIndex, ArchivedPart, Folded, FormatError, DIMS, GROUP_ROWS, KEY_DIMS,
    PAD_ID, ROW_DIMS, SCALE,
};
use crate::layout::Partitioned;
use std::collections::HashMap;

/// The delta files a list names (`FRAUD_DELTAS`'s form: files, or directories whose `*.idx`
/// files count, separated as the platform separates paths; empty ones and an empty list name
/// none), in the order listed, each directory's files by name.
pub fn files(list: &std::ffi::OsStr) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for root in std::env::split_paths(list).filter(|p| !p.as_os_str().is_empty()) {
        if !root.is_dir() {
            files.push(root);
            continue;
        }
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&root)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "idx") {
                found.push(path);
            }
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// Per part (the base first, then the deltas in order), a bitmap of its slots whose row a
/// later delta hides; empty for a part with none.
pub type Hidden = Vec<Vec<u64>>;

/// Whether slot `slot` of a part is set in its bitmap.
#[inline(always)]
pub fn is_hidden(bits: &[u64], slot: usize) -> bool {
    bits.get(slot / 64)
        .is_some_and(|w| w >> (slot % 64) & 1 == 1)
}

/// The positions `part` hides (a delta's; none for another part).
pub fn hides(part: &ArchivedIndex) -> impl Iterator<Item = u32> + '_ {
    let h: &[rkyv::rend::u32_le] = match &part.header.part {
        ArchivedPart::Delta { hides, .. } => hides,
        _ => &[],
    };
    h.iter().map(|p| p.to_native())
}

/// Resolves which rows of `parts` (a base, then its deltas in order, already held to
/// `format::check_composition`) the deltas hide. A delta that hides a position no earlier part
/// holds live is refused, naming both.
pub fn hidden_rows(parts: &[&ArchivedIndex]) -> Result<Hidden, FormatError> {
    let mut hidden: Hidden = vec![Vec::new(); parts.len()];
    let wanted: Vec<u32> = {
        let mut all: Vec<u32> = parts.iter().flat_map(|p| hides(p)).collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    if wanted.is_empty() {
        return Ok(hidden);
    }
    // Every row at a position some delta hides: (part, slot), by position.
    let end = parts
        .iter()
        .map(|p| p.header.end_position.to_native())
        .max()
        .unwrap_or(0);
    let mut is_wanted = vec![0u64; (end as usize).div_ceil(64)];
    for &p in &wanted {
        is_wanted[p as usize / 64] |= 1 << (p % 64);
    }
    let mut holders: HashMap<u32, Vec<(usize, usize)>> = HashMap::with_capacity(wanted.len());
    for (j, part) in parts.iter().enumerate() {
        for (slot, id) in part.ids.iter().enumerate() {
            let id = id.to_native();
            if id != PAD_ID && is_hidden(&is_wanted, (id >> 1) as usize) {
                holders.entry(id >> 1).or_default().push((j, slot));
            }
        }
    }
    let mut gone: std::collections::HashSet<(usize, usize)> = Default::default();
    for (k, delta) in parts.iter().enumerate().skip(1) {
        for p in hides(delta) {
            let live = holders
                .get(&p)
                .into_iter()
                .flatten()
                .filter(|&&(j, slot)| j < k && !gone.contains(&(j, slot)))
                .max_by_key(|&&(j, _)| j)
                .copied();
            let Some(row) = live else {
                return Err(FormatError::Composition(format!(
                    "delta {k} removes or relabels position {p}, which no part before it holds: \
                     it was never in the set, or an earlier delta removed it"
                )));
            };
            gone.insert(row);
        }
    }
    for (j, slot) in gone {
        let bits = &mut hidden[j];
        if bits.is_empty() {
            *bits = vec![0; parts[j].ids.len().div_ceil(64)];
        }
        bits[slot / 64] |= 1 << (slot % 64);
    }
    Ok(hidden)
}

/// A live reference of a chain: its position, label and vector (fixed point), as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    pub position: u32,
    pub fraud: bool,
    pub vector: [i16; DIMS],
}

/// Every live reference of `parts` with `hidden` resolved, part by part (not in position
/// order). Only the exact codec can be read back: an fp16 part is refused.
pub fn live<'a>(
    parts: &'a [&'a ArchivedIndex],
    hidden: &'a Hidden,
) -> Result<impl Iterator<Item = Live> + 'a, FormatError> {
    if parts
        .iter()
        .any(|p| matches!(p.codes, ArchivedCodes::F16(_)))
    {
        return Err(FormatError::Composition(
            "the fp16 codec is lossy: its rows cannot be packed again exactly; edit and compact \
             an i16 index"
                .into(),
        ));
    }
    Ok(parts.iter().enumerate().flat_map(move |(j, part)| {
        part.partitions.iter().flat_map(move |p| {
            let key = p.key.to_native();
            (p.first_slot.to_native() as usize..p.end_slot.to_native() as usize).filter_map(
                move |slot| {
                    let id = part.ids[slot].to_native();
                    if id == PAD_ID || is_hidden(&hidden[j], slot) {
                        return None;
                    }
                    Some(Live {
                        position: id >> 1,
                        fraud: id & 1 == 1,
                        vector: vector_at(part, slot, key),
                    })
                },
            )
        })
    }))
}

/// The stored vector of `slot` (an i16 part), its key dimensions from the partition's key.
pub fn vector_at(part: &ArchivedIndex, slot: usize, key: u32) -> [i16; DIMS] {
    let ArchivedCodes::I16(groups) = &part.codes else {
        unreachable!("checked by `live`")
    };
    let (g, r) = (slot / GROUP_ROWS, slot % GROUP_ROWS);
    let mut v = [0i16; DIMS];
    for (l, &d) in ROW_DIMS.iter().enumerate() {
        v[d] = groups[g].pairs[l / 2][2 * r + l % 2].to_native();
    }
    for (i, &d) in KEY_DIMS.iter().enumerate() {
        v[d] = ((key >> i) & 1) as i16 * SCALE as i16;
    }
    v
}

/// What a delta holds, before its layout: its rows (new references at their indexes from
/// `first_position`, relabelled ones at theirs, wrapping below it), its positions and the
/// positions it hides, sorted.
#[derive(Debug)]
pub struct DeltaRows {
    pub rows: Partitioned,
    pub first_position: u32,
    pub end_position: u32,
    pub hides: Vec<u32>,
}

/// The rows of the delta that follows `parts` (a base and its deltas, resolved into `hidden`):
/// `added`, the new references in file order (their indexes from 0), and the edits, which
/// must each name a live reference of the set, once, and a relabel must change its label.
pub fn delta_rows(
    parts: &[&ArchivedIndex],
    hidden: &Hidden,
    mut added: Partitioned,
    remove: &[u32],
    relabel: &[(u32, bool)],
) -> Result<DeltaRows, FormatError> {
    let bad = |m: String| Err(FormatError::Composition(m));
    let first = parts
        .iter()
        .map(|p| p.header.end_position.to_native())
        .max()
        .unwrap_or(0);
    crate::format::check_positions(first.into(), added.len.into())?;
    let mut hides: Vec<u32> = remove
        .iter()
        .chain(relabel.iter().map(|r| &r.0))
        .copied()
        .collect();
    hides.sort_unstable();
    if let Some(w) = hides.windows(2).find(|w| w[0] == w[1]) {
        return bad(format!("position {} is edited twice", w[0]));
    }
    let mut found: HashMap<u32, Live> = HashMap::new();
    if !hides.is_empty() {
        let mut wanted = vec![0u64; (first as usize).div_ceil(64)];
        for &p in hides.iter().filter(|&&p| p < first) {
            wanted[p as usize / 64] |= 1 << (p % 64);
        }
        found = live(parts, hidden)?
            .filter(|r| is_hidden(&wanted, r.position as usize))
            .map(|r| (r.position, r))
            .collect();
    }
    if let Some(p) = hides.iter().find(|p| !found.contains_key(p)) {
        return bad(format!(
            "position {p} is not in the set: it was never added (the set ends at {first}), or \
             an earlier delta removed it"
        ));
    }
    for &(p, fraud) in relabel {
        let r = found[&p];
        if r.fraud == fraud {
            return bad(format!(
                "position {p} is already labelled {}: a relabel changes the label",
                if fraud { "fraud" } else { "legit" }
            ));
        }
        added.push_at(&r.vector, fraud, p.wrapping_sub(first));
    }
    Ok(DeltaRows {
        end_position: first + (added.len - relabel.len() as u32),
        rows: added,
        first_position: first,
        hides,
    })
}

/// The live references of `parts` (resolved into `hidden`) as one base's rows, by position
/// from the base's first (removed ones leave gaps), and what it folds: the base's own folded
/// deltas, then one entry per delta.
pub fn compacted_rows(
    parts: &[&ArchivedIndex],
    hidden: &Hidden,
) -> Result<(Partitioned, Vec<Folded>), FormatError> {
    let mut rows = Partitioned {
        source_sha256: parts[0].header.source_sha256,
        ..Partitioned::default()
    };
    let first = parts[0].header.first_position.to_native();
    for r in live(parts, hidden)? {
        rows.push_at(&r.vector, r.fraud, r.position - first);
    }
    rows.sort_by_index();
    let mut folded: Vec<Folded> = parts[0]
        .header
        .folded
        .iter()
        .map(|f| Folded {
            source_sha256: f.source_sha256,
            edits_sha256: f.edits_sha256,
        })
        .collect();
    folded.extend(parts[1..].iter().map(|d| Folded {
        source_sha256: d.header.source_sha256,
        edits_sha256: match &d.header.part {
            ArchivedPart::Delta { edits_sha256, .. } => *edits_sha256,
            _ => [0; 32],
        },
    }));
    Ok((rows, folded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_names_files_and_the_idx_files_of_directories() {
        let dir = std::env::temp_dir().join(format!("chain-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["b.idx", "a.idx", "notes.txt"] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let one = std::path::PathBuf::from("/elsewhere/day-1.idx");
        let list = std::env::join_paths([one.clone(), dir.clone()]).unwrap();
        let got = files(&list).unwrap();
        assert_eq!(got, vec![one, dir.join("a.idx"), dir.join("b.idx")]);
        assert!(files(std::ffi::OsStr::new("")).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
