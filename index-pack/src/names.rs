//! The names of references: where a references file gives each reference an `id`, the packer
//! keeps the map from id to position in a file beside the artifact (`<artifact>.names`), so that
//! an edits file can name a reference by its id (a chargeback names a transaction, an erasure
//! request a customer's rows) instead of its position.
//!
//! ```json
//! {"names_format": 1, "index_crc32": "e78d2cd3", "positions": {"tx-0001": 0, "tx-0002": 1}}
//! ```
//!
//! The map stays beside the artifact, never in it: the binaries that serve an index never see
//! an id, so an erased row's id leaves the deployed artifacts with its vector. The map names the
//! artifact it belongs to by its archive's CRC32 and is refused with any other; its positions
//! lie in that artifact's range. A compaction writes the map of the live references only.

use anyhow::{ensure, Context, Result};
use std::collections::hash_map::{Entry, HashMap};
use std::path::{Path, PathBuf};

/// The version of the names file this code reads and writes.
pub const NAMES_FORMAT: u32 = 1;

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    names_format: u32,
    index_crc32: String,
    positions: HashMap<String, u32>,
}

/// Ids and their positions, over one artifact or a chain of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    pub positions: HashMap<String, u32>,
}

/// Where the map of `artifact` is kept.
pub fn path_beside(artifact: &Path) -> PathBuf {
    let mut name = artifact.as_os_str().to_owned();
    name.push(".names");
    PathBuf::from(name)
}

impl Names {
    /// The names of references read from a file, in file order from `first_position` (`ids`
    /// as the reader gave them: `(index in the file, id)`); an id given twice is refused.
    pub fn of_file(ids: Vec<(u32, String)>, first_position: u32) -> Result<Names> {
        let mut positions = HashMap::with_capacity(ids.len());
        for (i, id) in ids {
            ensure!(!id.is_empty(), "reference {i} has an empty id");
            match positions.entry(id) {
                Entry::Occupied(o) => {
                    let first = o.get() - first_position;
                    anyhow::bail!("id {:?} names references {first} and {i}", o.key());
                }
                Entry::Vacant(v) => v.insert(first_position + i),
            };
        }
        Ok(Names { positions })
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The map beside `artifact`, if there is one, checked against the artifact's CRC32 and its
    /// positions `range`.
    pub fn read_beside(
        artifact: &Path,
        crc32: u32,
        range: std::ops::Range<u32>,
    ) -> Result<Option<Names>> {
        let path = path_beside(artifact);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let read = || -> Result<Names> {
            let f: File = serde_json::from_slice(&bytes)?;
            ensure!(
                f.names_format == NAMES_FORMAT,
                "names format {} (this program reads {NAMES_FORMAT})",
                f.names_format
            );
            let own = format!("{crc32:08x}");
            ensure!(
                f.index_crc32 == own,
                "it names the artifact of CRC32 {}, not {} (CRC32 {own})",
                f.index_crc32,
                artifact.display()
            );
            if let Some((id, p)) = f.positions.iter().find(|(_, p)| !range.contains(p)) {
                anyhow::bail!("id {id:?} at position {p}, outside the artifact's {range:?}");
            }
            Ok(Names {
                positions: f.positions,
            })
        };
        read()
            .with_context(|| format!("{} is not the names of its artifact", path.display()))
            .map(Some)
    }

    /// Writes the map beside `artifact` (of archive CRC32 `crc32`); nothing when it is empty
    /// (and an older map there is removed, so that none outlives its artifact).
    pub fn write_beside(&self, artifact: &Path, crc32: u32) -> Result<()> {
        let path = path_beside(artifact);
        if self.is_empty() {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("cannot remove {}", path.display()))
                }
                _ => return Ok(()),
            }
        }
        let f = File {
            names_format: NAMES_FORMAT,
            index_crc32: format!("{crc32:08x}"),
            positions: self.positions.clone(),
        };
        crate::write_atomically(&path, &serde_json::to_vec(&f)?)
    }

    /// An id both name: the id, its position here and in `other`.
    pub fn shared<'a>(&self, other: &'a Names) -> Option<(&'a str, u32, u32)> {
        let mut both = other
            .positions
            .iter()
            .filter_map(|(id, &p)| Some((id, self.position(id)?, p)));
        both.next()
            .map(|(id, here, there)| (id.as_str(), here, there))
    }

    /// Adds `more` (another part's names); an id already named is refused.
    pub fn extend(&mut self, more: Names) -> Result<()> {
        if let Some((id, q, p)) = self.shared(&more) {
            anyhow::bail!("id {id:?} names positions {q} and {p}");
        }
        self.positions.extend(more.positions);
        Ok(())
    }

    /// The position of `id`.
    pub fn position(&self, id: &str) -> Option<u32> {
        self.positions.get(id).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_is_kept_beside_its_artifact_and_refused_beside_another() {
        let dir = std::env::temp_dir().join(format!("names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let artifact = dir.join("base.idx");
        let names = Names::of_file(vec![(0, "tx-a".into()), (2, "tx-c".into())], 10).unwrap();
        assert_eq!(names.position("tx-c"), Some(12));
        names.write_beside(&artifact, 0xabc).unwrap();
        let back = Names::read_beside(&artifact, 0xabc, 10..13).unwrap();
        assert_eq!(back, Some(names.clone()));
        let other = Names::read_beside(&artifact, 0xabd, 10..13).unwrap_err();
        assert!(format!("{other:#}").contains("CRC32 00000abc"), "{other:#}");
        let outside = Names::read_beside(&artifact, 0xabc, 10..12).unwrap_err();
        assert!(format!("{outside:#}").contains("outside"), "{outside:#}");
        assert_eq!(
            Names::read_beside(&dir.join("none.idx"), 1, 0..1).unwrap(),
            None
        );
        Names::default().write_beside(&artifact, 0xabc).unwrap();
        assert!(
            !path_beside(&artifact).exists(),
            "an empty map leaves no file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_id_named_twice_is_refused() {
        let twice = Names::of_file(vec![(0, "x".into()), (1, "x".into())], 0).unwrap_err();
        assert!(
            twice.to_string().contains("names references 0 and 1"),
            "{twice}"
        );
        let mut a = Names::of_file(vec![(0, "x".into())], 0).unwrap();
        let b = Names::of_file(vec![(0, "x".into())], 5).unwrap();
        assert!(a
            .extend(b)
            .unwrap_err()
            .to_string()
            .contains("positions 0 and 5"));
    }
}
