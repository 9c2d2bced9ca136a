//! An edits file: the references a delta removes and relabels, by position or by id.
//!
//! ```json
//! {"remove": [1234, "tx-88012"], "relabel": [{"position": 7, "label": "fraud"},
//!                                           {"id": "tx-0042", "label": "legit"}]}
//! ```
//!
//! Both lists are optional. A position is a reference's index in the whole set (the base's file
//! followed by each delta's new references: what `local-runner explain` and `verify
//! --neighbours` show); an id is the `id` the references file gave it, looked up in the maps
//! the packer keeps beside the chain's artifacts ([`crate::names`]). A chargeback is a relabel to `fraud`, a dispute won one to `legit`, an
//! erasure (LGPD, GDPR) or a mistaken row a removal. What each edit may name is checked against
//! the set when the delta is packed (`index-pack delta`): a position the set does not hold live
//! is refused, as is one named twice.

use crate::format::hex;
use crate::names::Names;
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
    remove: Vec<Name>,
    #[serde(default)]
    relabel: Vec<Relabel>,
}

/// A reference as an edit names it.
#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
enum Name {
    Position(u32),
    Id(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Relabel {
    #[serde(default)]
    position: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    label: Label,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Label {
    Fraud,
    Legit,
}

impl Edits {
    /// Reads an edits file, its ids looked up in `names`; a reference named twice (in one list
    /// or both, by position or id) is refused, as is an id `names` does not hold.
    pub fn read(path: &Path, names: &Names) -> anyhow::Result<Edits> {
        use anyhow::Context;
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Edits::parse(&bytes, names)
            .with_context(|| format!("{} is not an edits file of this set", path.display()))
    }

    pub fn parse(bytes: &[u8], names: &Names) -> anyhow::Result<Edits> {
        let file: File = serde_json::from_slice(bytes)?;
        let resolve = |name: Name| match name {
            Name::Position(p) => Ok(p),
            Name::Id(id) => names.position(&id).ok_or_else(|| {
                let kept = if names.is_empty() {
                    "the set keeps no ids (its references files gave none)"
                } else {
                    "no reference of the set has it (or a compaction dropped it with its row)"
                };
                anyhow::anyhow!("id {id:?} is not in the set: {kept}")
            }),
        };
        let relabel = file.relabel.into_iter().map(|r| {
            let fraud = matches!(r.label, Label::Fraud);
            match (r.position, r.id) {
                (Some(p), None) => Ok((p, fraud)),
                (None, Some(id)) => Ok((resolve(Name::Id(id))?, fraud)),
                _ => anyhow::bail!(
                    "a relabel names its reference by `position` or `id`, one of them"
                ),
            }
        });
        let edits = Edits {
            remove: file
                .remove
                .into_iter()
                .map(resolve)
                .collect::<anyhow::Result<_>>()?,
            relabel: relabel.collect::<anyhow::Result<_>>()?,
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
        let none = &Names::default();
        let e = Edits::parse(
            br#"{"remove":[3,9],"relabel":[{"position":4,"label":"fraud"}]}"#,
            none,
        )
        .unwrap();
        assert_eq!((e.remove, e.relabel), (vec![3, 9], vec![(4, true)]));
        let twice = Edits::parse(
            br#"{"remove":[3],"relabel":[{"position":3,"label":"legit"}]}"#,
            none,
        );
        assert!(twice
            .unwrap_err()
            .to_string()
            .contains("position 3 is named twice"));
        assert!(
            Edits::parse(br#"{"remove":[]}"#, none).is_err(),
            "names nothing"
        );
        assert!(
            Edits::parse(br#"{"remove":[1],"drop":[2]}"#, none).is_err(),
            "unknown field"
        );
        assert!(Edits::parse(br#"{"relabel":[{"position":1,"label":"maybe"}]}"#, none).is_err());
    }

    #[test]
    fn ids_are_looked_up_in_the_names_and_an_unknown_one_is_refused() {
        let names = Names::of_file(vec![(0, "tx-a".into()), (1, "tx-b".into())], 100).unwrap();
        let e = Edits::parse(
            br#"{"remove":["tx-a",7],"relabel":[{"id":"tx-b","label":"fraud"}]}"#,
            &names,
        )
        .unwrap();
        assert_eq!((e.remove, e.relabel), (vec![100, 7], vec![(101, true)]));
        let unknown = Edits::parse(br#"{"remove":["tx-z"]}"#, &names).unwrap_err();
        assert!(
            unknown.to_string().contains("\"tx-z\" is not in the set"),
            "{unknown}"
        );
        let none = Edits::parse(br#"{"remove":["tx-a"]}"#, &Names::default()).unwrap_err();
        assert!(none.to_string().contains("keeps no ids"), "{none}");
        let twice = Edits::parse(br#"{"remove":["tx-a",100]}"#, &names).unwrap_err();
        assert!(
            twice.to_string().contains("position 100 is named twice"),
            "{twice}"
        );
        let both = br#"{"relabel":[{"id":"tx-a","position":100,"label":"fraud"}]}"#;
        assert!(
            Edits::parse(both, &names).is_err(),
            "position and id at once"
        );
    }
}
