//! Edits to a reference set, applied the way the labeller would see the corrected file.
//!
//! An edits file names references by position (their index in the base's file followed by each
//! delta's, 0-based) or by the `id` their file gave them, and says which to remove and which to
//! relabel:
//!
//! ```json
//! {"remove": [1234, "tx-88012"], "relabel": [{"position": 7, "label": "fraud"},
//!                                           {"id": "tx-0042", "label": "legit"}]}
//! ```
//!
//! The corrected file is the original with the removed rows deleted and the relabelled ones
//! carrying their new label: the labeller scans it in file order, so among equal distances the
//! earlier row still wins. [`Edited`] holds that file and, for each of its rows, the position it
//! had before the edits, so that answers can be compared with a search that keeps positions.
//!
//! This reader is this crate's own (it shares nothing with `index-pack`'s), and it applies an
//! edit only to a row that is still in the set: a position past the end, or removed before,
//! is an error.

use crate::references::References;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::Path;

/// One edits file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Edits {
    pub remove: Vec<u32>,
    /// Position and new label (true: fraud).
    pub relabel: Vec<(u32, bool)>,
    /// SHA-256 (hex) of the file's bytes.
    pub sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    remove: Vec<serde_json::Value>,
    #[serde(default)]
    relabel: Vec<Relabel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Relabel {
    position: Option<u32>,
    id: Option<String>,
    label: String,
}

/// Each id of the set and its row ([`References::rows_by_id`]).
pub type Ids<'a> = std::collections::HashMap<&'a str, u32>;

impl Edits {
    /// Reads an edits file; its ids are looked up in `ids` (the set's, as read from its files).
    pub fn read(path: &Path, ids: &Ids) -> anyhow::Result<Edits> {
        use anyhow::Context;
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Edits::parse(&bytes, ids).with_context(|| format!("{}: not an edits file", path.display()))
    }

    pub fn parse(bytes: &[u8], ids: &Ids) -> anyhow::Result<Edits> {
        let file: File = serde_json::from_slice(bytes)?;
        let by_id = |id: &str| {
            ids.get(id)
                .copied()
                .ok_or_else(|| anyhow::anyhow!("no reference has id {id:?}"))
        };
        let remove = file
            .remove
            .iter()
            .map(|v| match v {
                serde_json::Value::String(id) => by_id(id),
                v => v
                    .as_u64()
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or_else(|| anyhow::anyhow!("{v} is neither a position nor an id")),
            })
            .collect::<anyhow::Result<_>>()?;
        let relabel = file
            .relabel
            .into_iter()
            .map(|r| {
                let p = match (r.position, &r.id) {
                    (Some(p), None) => p,
                    (None, Some(id)) => by_id(id)?,
                    _ => anyhow::bail!("a relabel names a position or an id, one of them"),
                };
                match r.label.as_str() {
                    "fraud" => Ok((p, true)),
                    "legit" => Ok((p, false)),
                    other => anyhow::bail!("label {other:?} is neither \"fraud\" nor \"legit\""),
                }
            })
            .collect::<anyhow::Result<_>>()?;
        let sha256 = Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Edits {
            remove,
            relabel,
            sha256,
        })
    }
}

/// A reference set after its edits: the corrected file, and each of its rows' position before.
#[derive(Clone, Debug, Default)]
pub struct Edited {
    pub refs: References,
    /// `positions[i]` is the position row i had; empty when nothing was removed (the identity).
    pub positions: Vec<u32>,
}

impl Edited {
    /// Applies `edits` in order to `refs` (the concatenated files). Each edit must name a row
    /// still in the set, and a relabel must change the label.
    pub fn apply(mut refs: References, edits: &[Edits]) -> anyhow::Result<Edited> {
        let n = refs.len();
        let mut removed = vec![
            false;
            if edits.iter().any(|e| !e.remove.is_empty()) {
                n
            } else {
                0
            }
        ];
        let live = |removed: &[bool], p: u32| {
            (p as usize) < n && !removed.get(p as usize).copied().unwrap_or(false)
        };
        for (k, e) in edits.iter().enumerate() {
            for &(p, fraud) in &e.relabel {
                anyhow::ensure!(
                    live(&removed, p),
                    "edits {k}: position {p} is not in the set"
                );
                anyhow::ensure!(
                    refs.fraud[p as usize] != fraud,
                    "edits {k}: position {p} already has that label"
                );
                refs.fraud[p as usize] = fraud;
            }
            for &p in &e.remove {
                anyhow::ensure!(
                    live(&removed, p),
                    "edits {k}: position {p} is not in the set"
                );
                removed[p as usize] = true;
            }
        }
        if removed.is_empty() {
            return Ok(Edited {
                refs,
                positions: Vec::new(),
            });
        }
        // In place: at 100M references the rows are 11.2 GB, and a copy beside them does not
        // fit a 24 GB machine with the index being checked.
        let positions: Vec<u32> = (0..n as u32).filter(|&p| !removed[p as usize]).collect();
        let mut kept = removed.iter().map(|r| !r);
        refs.rows.retain(|_| kept.next() == Some(true));
        let mut kept = removed.iter().map(|r| !r);
        refs.fraud.retain(|_| kept.next() == Some(true));
        // The corrected file's rows are compared by position, never named.
        refs.ids.clear();
        Ok(Edited { refs, positions })
    }

    /// The row of the corrected file that position `p` became (`None`: removed or absent).
    pub fn row(&self, p: u32) -> Option<u32> {
        if self.positions.is_empty() {
            return ((p as usize) < self.refs.len()).then_some(p);
        }
        self.positions.binary_search(&p).ok().map(|i| i as u32)
    }

    /// The position before the edits of row `i` of the corrected file.
    pub fn position(&self, i: u32) -> u32 {
        if self.positions.is_empty() {
            i
        } else {
            self.positions[i as usize]
        }
    }
}

/// The set a base and its deltas describe, as the labeller reads it: the base's references file
/// (with `contest`, it must be the contest's), the deltas' new references after it, the edits
/// files applied in order; and the edited references as adversarial targets.
pub fn read_set(
    base: &Path,
    contest: bool,
    added: &[std::path::PathBuf],
    edits: &[std::path::PathBuf],
) -> anyhow::Result<(Edited, Vec<crate::adversarial::Target>)> {
    let mut refs = crate::references::read(base, contest)?;
    for path in added {
        refs.append(crate::references::read(path, false)?);
    }
    let ids = refs.rows_by_id()?;
    let edits = edits
        .iter()
        .map(|p| Edits::read(p, &ids))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let changed = changed(&refs, &edits);
    let edited = Edited::apply(refs, &edits)?;
    let targets = edited.targets(&changed);
    Ok((edited, targets))
}

/// The references `edits` change, as they were in `refs` (before the edits): each one's
/// vector in units of 1e-4, when it has one, and whether it stays in the set (relabelled).
pub fn changed(refs: &References, edits: &[Edits]) -> Vec<(u32, Option<[i64; crate::DIMS]>, bool)> {
    let vector = |p: u32| {
        refs.rows
            .get(p as usize)
            .and_then(crate::adversarial::fixed)
    };
    edits
        .iter()
        .flat_map(|e| {
            let gone = e.remove.iter().map(|&p| (p, false));
            gone.chain(e.relabel.iter().map(|&(p, _)| (p, true)))
        })
        .map(|(p, kept)| (p, vector(p), kept))
        .collect()
}

impl Edited {
    /// The changed references (from [`changed`]) as adversarial targets over this set, removed
    /// and relabelled ones alternating (so that both are in reach whatever the count); the last
    /// edit of a position counts.
    pub fn targets(
        &self,
        changed: &[(u32, Option<[i64; crate::DIMS]>, bool)],
    ) -> Vec<crate::adversarial::Target> {
        let mut last: std::collections::BTreeMap<u32, ([i64; crate::DIMS], Option<u32>)> =
            Default::default();
        for &(p, v, _) in changed {
            if let Some(v) = v {
                last.insert(p, (v, self.row(p)));
            }
        }
        let (gone, kept): (Vec<_>, Vec<_>) = last.into_values().partition(|t| t.1.is_none());
        let mut out = Vec::with_capacity(gone.len() + kept.len());
        for i in 0..gone.len().max(kept.len()) {
            out.extend(gone.get(i).copied());
            out.extend(kept.get(i).copied());
        }
        out
    }
}

/// An edits file's text removing `remove` and relabelling `relabel` distinct references of
/// `refs` at positions in `range`, drawn at random (seeded), each relabel flipping the label;
/// positions ascending; with `by_id`, a reference its file gave an id is named by it. With
/// `among`, the relabels are drawn among those positions only (the removals still from the
/// whole range): chargebacks where they are likelier than a uniform draw, such as references
/// whose own 5 nearest hold both labels.
pub fn draw(
    refs: &References,
    range: std::ops::Range<u32>,
    (remove, relabel): (usize, usize),
    among: Option<&[u32]>,
    seed: u64,
    by_id: bool,
) -> anyhow::Result<String> {
    anyhow::ensure!(
        range.end as usize <= refs.len() && remove + relabel <= range.len(),
        "{} edits in positions {range:?} of {} references",
        remove + relabel,
        refs.len()
    );
    let mut rng = crate::generate::Rng::new(seed);
    let mut picked = std::collections::BTreeSet::new();
    let mut order = Vec::with_capacity(remove + relabel);
    let drawn = if among.is_some() {
        remove
    } else {
        remove + relabel
    };
    while order.len() < drawn {
        let p = rng.int(range.start.into(), range.end.into()) as u32;
        if picked.insert(p) {
            order.push(p);
        }
    }
    if let Some(among) = among {
        let mut free: Vec<u32> = among
            .iter()
            .copied()
            .filter(|p| range.contains(p) && !picked.contains(p))
            .collect();
        free.sort_unstable();
        free.dedup();
        anyhow::ensure!(
            relabel <= free.len(),
            "{relabel} relabels among {} positions in {range:?} that are not removed",
            free.len()
        );
        while order.len() < remove + relabel {
            let p = free[rng.int(0, free.len() as i64) as usize];
            if picked.insert(p) {
                order.push(p);
            }
        }
    }
    let (mut gone, mut flipped) = (order[..remove].to_vec(), order[remove..].to_vec());
    gone.sort_unstable();
    flipped.sort_unstable();
    let label = |p: u32| {
        if refs.fraud[p as usize] {
            "legit"
        } else {
            "fraud"
        }
    };
    let ids: std::collections::HashMap<u32, &str> = match by_id {
        true => refs.ids.iter().map(|(i, id)| (*i, id.as_str())).collect(),
        false => Default::default(),
    };
    let relabel: Vec<serde_json::Value> = flipped
        .iter()
        .map(|&p| match ids.get(&p) {
            Some(id) => serde_json::json!({"id": id, "label": label(p)}),
            None => serde_json::json!({"position": p, "label": label(p)}),
        })
        .collect();
    let gone: Vec<serde_json::Value> = gone
        .iter()
        .map(|&p| {
            ids.get(&p)
                .map_or(serde_json::json!(p), |id| serde_json::json!(id))
        })
        .collect();
    Ok(serde_json::to_string(&serde_json::json!({"remove": gone, "relabel": relabel}))? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(n: usize) -> References {
        let rows = (0..n).map(|i| [i as f64 / 10.0; crate::DIMS]).collect();
        References::from_rows(rows, vec![false; n])
    }

    #[test]
    fn the_corrected_file_keeps_order_and_positions() {
        let e = Edits::parse(
            br#"{"remove":[1,3],"relabel":[{"position":2,"label":"fraud"}]}"#,
            &Ids::new(),
        )
        .unwrap();
        let edited = Edited::apply(refs(5), &[e]).unwrap();
        assert_eq!(edited.refs.len(), 3);
        assert_eq!(edited.refs.fraud, vec![false, true, false]);
        assert_eq!(
            (0..3).map(|i| edited.position(i)).collect::<Vec<_>>(),
            vec![0, 2, 4]
        );
        // The labeller over the corrected file: the nearest to row 3's vector is row 2 or 4.
        let hits = crate::scan::nearest(&edited.refs, &[0.3; crate::DIMS]);
        assert!(hits.iter().all(|h| edited.position(h.index) != 3));
    }

    #[test]
    fn drawn_edits_apply() {
        let text = draw(&refs(50), 0..50, (5, 4), None, 1, false).unwrap();
        let e = Edits::parse(text.as_bytes(), &Ids::new()).unwrap();
        assert_eq!((e.remove.len(), e.relabel.len()), (5, 4));
        let edited = Edited::apply(refs(50), std::slice::from_ref(&e)).unwrap();
        assert_eq!(edited.refs.len(), 45);
        assert_eq!(edited.refs.fraud.iter().filter(|&&f| f).count(), 4);
        // The same draw by id: every row named by its id, the same rows edited.
        let mut named = refs(50);
        named.ids = (0..50).map(|i| (i, format!("tx-{i}"))).collect();
        let text = draw(&named, 0..50, (5, 4), None, 1, true).unwrap();
        assert!(
            !text.contains("position") && text.contains("\"tx-"),
            "{text}"
        );
        let by_id = Edits::parse(text.as_bytes(), &named.rows_by_id().unwrap()).unwrap();
        assert_eq!((by_id.remove, by_id.relabel), (e.remove, e.relabel));
    }

    #[test]
    fn relabels_drawn_among_given_positions() {
        let among = [3, 7, 7, 11, 40, 60];
        let text = draw(&refs(50), 0..50, (10, 3), Some(&among), 2, false).unwrap();
        let e = Edits::parse(text.as_bytes(), &Ids::new()).unwrap();
        assert_eq!((e.remove.len(), e.relabel.len()), (10, 3));
        // Only the candidates in the range, none of them removed too.
        for (p, _) in &e.relabel {
            assert!([3, 7, 11, 40].contains(p), "{p}");
            assert!(!e.remove.contains(p), "{p}");
        }
        // More relabels than candidates left: a sentence, not a hang.
        let err = draw(&refs(50), 0..50, (0, 5), Some(&among), 2, false).unwrap_err();
        assert!(
            err.to_string().contains("5 relabels among 4 positions"),
            "{err}"
        );
    }

    #[test]
    fn an_edit_of_a_row_not_in_the_set_is_an_error() {
        let gone = Edits::parse(br#"{"remove":[1]}"#, &Ids::new()).unwrap();
        let again = Edits::parse(
            br#"{"relabel":[{"position":1,"label":"fraud"}]}"#,
            &Ids::new(),
        )
        .unwrap();
        assert!(Edited::apply(refs(3), &[gone.clone(), again]).is_err());
        let past = Edits::parse(br#"{"remove":[3]}"#, &Ids::new()).unwrap();
        assert!(Edited::apply(refs(3), &[past]).is_err());
        let same = Edits::parse(
            br#"{"relabel":[{"position":0,"label":"legit"}]}"#,
            &Ids::new(),
        )
        .unwrap();
        assert!(Edited::apply(refs(3), &[same]).is_err());
        assert!(Edits::parse(
            br#"{"relabel":[{"position":0,"label":"maybe"}]}"#,
            &Ids::new()
        )
        .is_err());
    }

    #[test]
    fn ids_name_rows_of_the_set() {
        let ids: Ids = [("tx-a", 4), ("tx-b", 9)].into_iter().collect();
        let e = Edits::parse(
            br#"{"remove":["tx-a",2],"relabel":[{"id":"tx-b","label":"fraud"}]}"#,
            &ids,
        )
        .unwrap();
        assert_eq!((e.remove, e.relabel), (vec![4, 2], vec![(9, true)]));
        let unknown = Edits::parse(br#"{"remove":["tx-c"]}"#, &ids).unwrap_err();
        assert!(unknown.to_string().contains("no reference has id \"tx-c\""));
        assert!(Edits::parse(br#"{"remove":[-1]}"#, &ids).is_err());
    }
}
