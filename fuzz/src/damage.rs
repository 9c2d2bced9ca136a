//! Damaged index artifacts, shared by the `index` and `index_open` targets: the fixture's valid
//! artifact edited by byte overwrites at chosen offsets and a cut, with the footer either kept
//! (the CRC32 then no longer matches) or recomputed over the damage with its true CRC32 (as a
//! packer bug would write it), plus queries to search it with.

use crate::fixture;
use arbitrary::Arbitrary;
use index_pack::format;

#[derive(Arbitrary, Debug)]
pub struct Edit {
    /// Where to write, as a fraction of the artifact length (u16 / 65536).
    pub at: u16,
    pub bytes: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    pub edits: Vec<Edit>,
    /// Bytes cut from the end (only the archive, the footer is rewritten when `fix_footer`).
    pub cut: u16,
    /// Recompute the footer (length, true CRC32) after the edits, as a packer bug would.
    pub fix_footer: bool,
    pub queries: Vec<[i16; 14]>,
}

impl Input {
    /// The damaged artifact, 32-byte aligned as `format::open` needs.
    pub fn artifact(&self) -> rkyv::util::AlignedVec<32> {
        let good = fixture().i16_artifact;
        let footer_len = format::FOOTER_LEN;
        let mut archive = good[..good.len() - footer_len].to_vec();
        for e in &self.edits {
            let at = (e.at as usize * archive.len()) >> 16;
            let end = (at + e.bytes.len()).min(archive.len());
            archive[at..end].copy_from_slice(&e.bytes[..end - at]);
        }
        archive.truncate(archive.len().saturating_sub(self.cut as usize));
        let mut artifact = archive.clone();
        if self.fix_footer {
            let footer = format::Footer {
                format_version: format::FORMAT_VERSION,
                archive_len: archive.len() as u64,
                crc32: crc32fast::hash(&archive),
                base_crc32: format::Footer::read(&good).map_or(0, |f| f.base_crc32),
            };
            artifact.extend_from_slice(&footer.to_bytes());
        } else {
            artifact.extend_from_slice(&good[good.len() - footer_len..]);
        }
        format::aligned_copy(&artifact)
    }

    /// The queries mapped into the vectorizer's domain ([0, 10000], dims 5 and 6 also -10000,
    /// binary dims 0 or 10000), plus the origin.
    pub fn domain_queries(&self) -> Vec<[i16; 14]> {
        let mut queries: Vec<[i16; 14]> = self
            .queries
            .iter()
            .map(|q| {
                let mut v = q.map(|x| x.rem_euclid(10_001));
                for d in [9, 10, 11] {
                    v[d] = if v[d] % 2 == 1 { 10_000 } else { 0 };
                }
                if q[5] < 0 {
                    v[5] = -10_000;
                    v[6] = -10_000;
                }
                v
            })
            .collect();
        queries.push([0; 14]);
        queries
    }
}
