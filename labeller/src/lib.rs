//! # labeller: the contest's brute-force labeller, transcribed from SPEC.md
//!
//! An oracle for the scorer. It answers the question the contest's own labeller answers (which
//! 5 references are nearest to a request, and so which decision is right) the way that
//! labeller does: IEEE double arithmetic throughout, every query component rounded to 4
//! decimals with C `round`, squared Euclidean distance summed in dimension order, and a scan of
//! all references in file order that takes a candidate only when it is strictly closer.
//!
//! It shares no code with `function` (the scorer) or `index-pack` (the index): its own payload
//! transcription ([`payload`]) with its own calendar arithmetic ([`time`]), its own reader of
//! `references.json.gz` ([`references`]), and no fixed-point arithmetic in any answer. Whatever
//! the scorer gets wrong, this crate cannot get wrong the same way by sharing it.
//!
//! - [`scan`]: the labeller for one query ([`scan::nearest`], written out literally) and for
//!   many ([`scan::nearest_many`]: batched, threaded, and skipping only references that provably
//!   cannot enter; tested equal to the literal one).
//! - [`generate`]: request bodies drawn from the contest data generator's distributions.
//! - [`adversarial`]: queries built from the references to hit the tie rules.
//! - [`csv`]: the contest's CSV test-set layout, written from bodies and answers.
//! - [`edits`]: removals and relabels applied to the references (the corrected file).
//! - [`invert`]: a request body for a given vector (to send an adversarial query over HTTP).
//! - [`sample`]: the labelled sample a deployment is checked with before it takes traffic.
//!
//! The `labeller` binary relabels a file of cases (see `src/main.rs`).

pub mod adversarial;
pub mod csv;
pub mod edits;
pub mod generate;
pub mod invert;
pub mod payload;
pub mod references;
pub mod sample;
pub mod scan;
pub mod time;

pub use references::References;
pub use scan::Hit;

/// Components of a vector.
pub const DIMS: usize = 14;

/// A query or reference vector as the labeller holds it.
pub type Query = [f64; DIMS];

/// Whether `text` is a JSON number (RFC 8259: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`).
pub fn json_number(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::json_number;

    #[test]
    fn json_numbers() {
        for ok in [
            "0", "-0", "1", "441.59", "4.4159e2", "1E+3", "-1e-5", "0.0001",
        ] {
            assert!(json_number(ok), "{ok}");
        }
        for bad in [
            "", "-", "01", ".5", "5.", "1e", "+1", "NaN", "inf", "1x", "\"1\"", "0x10",
        ] {
            assert!(!json_number(bad), "{bad}");
        }
    }
}
