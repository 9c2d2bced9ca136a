//! The fast path of [`super::parse`]: a scanner for the request's own shape that gives up
//! (returns `None`) on anything it does not handle, so that the serde path decides.
//!
//! Why it exists: through serde most of the parse is field matching through the derived
//! visitors, and the SIMD JSON crates that borrow (sonic-rs, simd-json) were no faster on
//! bodies this small; this scanner takes parse + vectorize from ~704 to ~630 ns at p50 (haswell
//! build, one core, the public set: docs/results/2026-12-01-search.md).
//!
//! It reads bytes and accepts only ASCII, so a body it answers is valid UTF-8 without the
//! separate UTF-8 pass [`super::parse`] makes before serde, which was a second walk over the
//! body and its first touch when cold (docs/results/2026-12-01-search-2.md).
//!
//! The contract, checked by the `payload` fuzz target and the tests below: whenever this
//! returns `Some(p)`, the body is ASCII and the serde path returns `Ok(p)` for the same text. It
//! therefore gives up on every case where the two could differ: a string with an escape, a
//! control character or a byte outside ASCII (serde unescapes, refuses or checks it), a key
//! written with an escape, a known key twice (serde refuses), an unknown field whose value is an
//! object or an array, a number outside JSON's grammar or not finite as a double, an object
//! written as an array, a missing field, trailing characters. A
//! number is converted by the standard library, which rounds correctly, like serde_json.

use super::{BorrowedStr, Customer, KnownMerchants, LastTransaction, Merchant, Payload};
use super::{Terminal, Transaction};
use std::borrow::Cow;

/// Parses `body` if it is ASCII and has the plain shape, else `None`.
pub(super) fn parse(body: &[u8]) -> Option<Payload<'_>> {
    let mut c = Cursor { b: body, i: 0 };
    let mut p = Payload::default();
    c.payload(&mut p)?;
    c.ws();
    (c.i == body.len()).then_some(p)
}

/// The first byte of `b` that ends a plain string: a quote, a backslash, a control character or
/// a byte outside ASCII. Eight bytes at a time: for each test the lowest flagged byte of a word
/// is exact (the usual has-zero-byte trick can only flag bytes above a true one wrongly), so the
/// lowest flag of their union is the first stop.
fn stop(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let mut i = 0;
    while let Some(chunk) = b.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap());
        let flags = zero(x ^ (LO * b'"' as u64))
            | zero(x ^ (LO * b'\\' as u64))
            | (x.wrapping_sub(LO * 0x20) & !x & HI)
            | (x & HI);
        if flags != 0 {
            return Some(i + flags.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    b[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c))
        .map(|p| i + p)
}

/// `b[..len]` as text, for a `len` that [`stop`] returned: every byte before a stop is ASCII.
fn ascii(b: &[u8], len: usize) -> &str {
    let b = &b[..len];
    debug_assert!(b.is_ascii());
    // SAFETY: `stop` flags every byte >= 0x80 and `len` is the first flagged one, so `b` is
    // ASCII, which is valid UTF-8.
    unsafe { std::str::from_utf8_unchecked(b) }
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// Skips whitespace, then takes `c`.
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// An ASCII string without escapes or control characters, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let rest = &self.b[start..];
        let len = stop(rest)?;
        if rest[len] != b'"' {
            return None;
        }
        self.i = start + len + 1;
        Some(ascii(rest, len))
    }

    /// A number in JSON's grammar, `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`, finite.
    /// One pass gathers the digits: with at most 15 of them and no exponent the value is one
    /// correctly rounded division (Clinger's fast path: the digits are an exact integer below
    /// 2^53, and 10^k for k <= 15 is exact too), the same double the standard library gives;
    /// anything else goes through the standard library.
    fn number(&mut self) -> Option<f64> {
        const POW10: [f64; 16] = [
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
        ];
        self.ws();
        let b = self.b;
        let start = self.i;
        let mut i = start;
        let negative = b.get(i) == Some(&b'-');
        i += negative as usize;
        // The digits so far (the first 15 in `m`) and how many.
        let (mut m, mut n) = (0u64, 0usize);
        let digits = |i: &mut usize, m: &mut u64, n: &mut usize| {
            let from = *i;
            while let Some(&c) = b.get(*i).filter(|c| c.is_ascii_digit()) {
                if *n < 15 {
                    *m = *m * 10 + (c - b'0') as u64;
                }
                *n += 1;
                *i += 1;
            }
            *i - from
        };
        match b.get(i)? {
            b'0' => {
                i += 1;
                n = 1;
            }
            b'1'..=b'9' => {
                digits(&mut i, &mut m, &mut n);
            }
            _ => return None,
        }
        let mut frac = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            frac = digits(&mut i, &mut m, &mut n);
            if frac == 0 {
                return None;
            }
        }
        let mut exponent = false;
        if matches!(b.get(i), Some(b'e' | b'E')) {
            exponent = true;
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            // Exponent digits are not the mantissa's: the standard library reads this one.
            if digits(&mut i, &mut 0, &mut 0) == 0 {
                return None;
            }
        }
        self.i = i;
        if !exponent && n <= 15 {
            // m < 10^15 fits i64, whose conversion is one instruction (u64's is several).
            let v = m as i64 as f64 / POW10[frac];
            return Some(if negative { -v } else { v });
        }
        // The grammar above let only ASCII digits, signs, '.' and 'e' through.
        let v: f64 = std::str::from_utf8(&b[start..i]).ok()?.parse().ok()?;
        v.is_finite().then_some(v)
    }

    fn literal(&mut self, word: &str) -> bool {
        self.ws();
        let hit = self.b[self.i..].starts_with(word.as_bytes());
        if hit {
            self.i += word.len();
        }
        hit
    }

    fn boolean(&mut self) -> Option<bool> {
        if self.literal("true") {
            Some(true)
        } else if self.literal("false") {
            Some(false)
        } else {
            None
        }
    }

    /// The value of an unknown field: a scalar only.
    fn skip(&mut self) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'"' => self.string().map(drop),
            b't' | b'f' => self.boolean().map(drop),
            b'n' => self.literal("null").then_some(()),
            _ => self.number().map(drop),
        }
    }

    /// An object whose known keys are `keys`, of which the first `required` must be present:
    /// `field(cursor, k)` reads the value of key `keys[k]` (an unknown key's value must be a
    /// scalar). Each key not yet seen is tried against the text in place, the one after the
    /// last key first (the order of `keys`, which is the contest's), then the others, so any
    /// order costs a few byte comparisons (sorted keys, as Go's and Python's `sort_keys` write
    /// them, are the benchmark's order). Only a key that matches none is read as a string: an
    /// unknown one, or a known one seen twice (which gives up, as does a required one missing).
    fn object(
        &mut self,
        keys: &[&str],
        required: usize,
        mut field: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return (required == 0).then_some(());
        }
        let (mut next, mut seen) = (0, 0u32);
        loop {
            self.ws();
            let mut unseen = (next..keys.len())
                .chain(0..next)
                .filter(|&k| seen & (1 << k) == 0);
            let k = unseen.find(|&k| self.quoted(keys[k]));
            if k.is_none() && keys.contains(&self.string()?) {
                // Every key not yet seen failed in place: a known key here is a repeat.
                return None;
            }
            self.eat(b':')?;
            match k {
                Some(k) => {
                    seen |= 1 << k;
                    next = k + 1;
                    field(self, k)?;
                }
                None => self.skip()?,
            }
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    let all = (1 << required) - 1;
                    return (seen & all == all).then_some(());
                }
                _ => return None,
            }
        }
    }

    /// Takes `"key"` if the text continues with exactly that.
    fn quoted(&mut self, key: &str) -> bool {
        let n = key.len();
        let hit = match self.b.get(self.i..self.i + n + 2) {
            Some([b'"', body @ .., b'"']) => body.iter().zip(key.as_bytes()).all(|(a, b)| a == b),
            _ => false,
        };
        if hit {
            self.i += n + 2;
        }
        hit
    }

    /// The request, written into `p` field by field (no moves of the large parts). `id` and
    /// `last_transaction` (the keys after the 4 required ones) may be missing, as in serde.
    fn payload(&mut self, p: &mut Payload<'a>) -> Option<()> {
        const KEYS: [&str; 6] = [
            "transaction",
            "customer",
            "merchant",
            "terminal",
            "id",
            "last_transaction",
        ];
        self.object(&KEYS, 4, |c, k| match k {
            0 => c.transaction(&mut p.transaction),
            1 => c.customer(&mut p.customer),
            2 => c.merchant(&mut p.merchant),
            3 => c.terminal(&mut p.terminal),
            4 => {
                p.id = if c.literal("null") {
                    None
                } else {
                    Some(BorrowedStr(Cow::Borrowed(c.string()?)))
                };
                Some(())
            }
            _ => {
                if !c.literal("null") {
                    c.last_transaction(p.last_transaction.insert(Default::default()))?;
                }
                Some(())
            }
        })
    }

    fn transaction(&mut self, t: &mut Transaction<'a>) -> Option<()> {
        self.object(&["amount", "installments", "requested_at"], 3, |c, k| {
            match k {
                0 => t.amount = c.number()?,
                1 => t.installments = c.number()?,
                _ => t.requested_at = Cow::Borrowed(c.string()?),
            }
            Some(())
        })
    }

    fn customer(&mut self, cu: &mut Customer<'a>) -> Option<()> {
        self.object(
            &["avg_amount", "tx_count_24h", "known_merchants"],
            3,
            |c, k| {
                match k {
                    0 => cu.avg_amount = c.number()?,
                    1 => cu.tx_count_24h = c.number()?,
                    _ => c.merchants(&mut cu.known_merchants)?,
                }
                Some(())
            },
        )
    }

    fn merchants(&mut self, out: &mut KnownMerchants<'a>) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            out.push(BorrowedStr(Cow::Borrowed(self.string()?)));
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn merchant(&mut self, m: &mut Merchant<'a>) -> Option<()> {
        self.object(&["id", "mcc", "avg_amount"], 3, |c, k| {
            match k {
                0 => m.id = Cow::Borrowed(c.string()?),
                1 => m.mcc = Cow::Borrowed(c.string()?),
                _ => m.avg_amount = c.number()?,
            }
            Some(())
        })
    }

    fn terminal(&mut self, t: &mut Terminal) -> Option<()> {
        self.object(&["is_online", "card_present", "km_from_home"], 3, |c, k| {
            match k {
                0 => t.is_online = c.boolean()?,
                1 => t.card_present = c.boolean()?,
                _ => t.km_from_home = c.number()?,
            }
            Some(())
        })
    }

    fn last_transaction(&mut self, l: &mut LastTransaction<'a>) -> Option<()> {
        self.object(&["timestamp", "km_from_current"], 2, |c, k| {
            match k {
                0 => l.timestamp = Cow::Borrowed(c.string()?),
                _ => l.km_from_current = c.number()?,
            }
            Some(())
        })
    }
}
