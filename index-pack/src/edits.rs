//! An edits file: the references a delta removes and relabels, by position.
//!
//! ```json
//! {"remove": [1234, 88012], "relabel": [{"position": 7, "label": "fraud"}]}
//! ```
//!
//! Both lists are optional. A position is a reference's index in the whole set (the base's file
//! followed by each delta's new references: what `local-runner explain` and `verify
//! --neighbours` show). A chargeback is a relabel to `fraud`, a dispute won one to `legit`, an
//! erasure (LGPD, GDPR) or a mistaken row a removal. What each edit may name is checked against
//! the set when the delta is packed (`index-pack delta`): a position the set does not hold live
//! is refused, as is one named twice.

use crate::format::hex;
use serde::Deserialize;
use sha2::Digest;
use std::path::Path;

/// The edits of one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Edits {
    pub remove: Vec<u32>,
    /// Position and new label (true: fraud).
    pub relabel: Vec<(u32, bool)>,
    /// SHA-256 of the file's bytes.
    pub sha256: [u8; 32],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    remove: Vec<u32>,
    #[serde(default)]
    relabel: Vec<Relabel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Relabel {
    position: u32,
    label: Label,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Label {
    Fraud,
    Legit,
}

impl Edits {
    /// Reads an edits file; a position named twice (in one list or both) is refused.
    pub fn read(path: &Path) -> anyhow::Result<Edits> {
        use anyhow::Context;
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Edits::parse(&bytes).with_context(|| format!("{} is not an edits file", path.display()))
    }

    pub fn parse(bytes: &[u8]) -> anyhow::Result<Edits> {
        let file: File = serde_json::from_slice(bytes)?;
        let edits = Edits {
            remove: file.remove,
            relabel: file
                .relabel
                .into_iter()
                .map(|r| (r.position, matches!(r.label, Label::Fraud)))
                .collect(),
            sha256: sha2::Sha256::digest(bytes).into(),
        };
        let mut named: Vec<u32> = edits.positions().collect();
        named.sort_unstable();
        if let Some(w) = named.windows(2).find(|w| w[0] == w[1]) {
            anyhow::bail!("position {} is named twice", w[0]);
        }
        anyhow::ensure!(!named.is_empty(), "it names no position");
        Ok(edits)
    }

    /// Every position named, removed or relabelled.
    pub fn positions(&self) -> impl Iterator<Item = u32> + '_ {
        self.remove
            .iter()
            .copied()
            .chain(self.relabel.iter().map(|r| r.0))
    }

    pub fn sha256_hex(&self) -> String {
        hex(&self.sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_are_read_and_a_position_named_twice_is_refused() {
        let e = Edits::parse(br#"{"remove":[3,9],"relabel":[{"position":4,"label":"fraud"}]}"#)
            .unwrap();
        assert_eq!((e.remove, e.relabel), (vec![3, 9], vec![(4, true)]));
        let twice = Edits::parse(br#"{"remove":[3],"relabel":[{"position":3,"label":"legit"}]}"#);
        assert!(twice
            .unwrap_err()
            .to_string()
            .contains("position 3 is named twice"));
        assert!(Edits::parse(br#"{"remove":[]}"#).is_err(), "names nothing");
        assert!(
            Edits::parse(br#"{"remove":[1],"drop":[2]}"#).is_err(),
            "unknown field"
        );
        assert!(Edits::parse(br#"{"relabel":[{"position":1,"label":"maybe"}]}"#).is_err());
    }
}
