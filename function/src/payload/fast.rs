//! The fast path of [`super::parse`]: a scanner for the request's own shape that gives up
//! (returns `None`) on anything it does not handle, so that the serde path decides.
//!
//! Why it exists: through serde, parsing a typical 430-byte body takes ~1.3 us with
//! serde_json, ~1.27 us with sonic-rs and ~1.75 us with simd-json (haswell build, one core,
//! the public set; the numbers of docs/results/2026-12-01-search.md), most of it field
//! matching through the derived visitors; this scanner takes a fraction of that.
//!
//! The contract, checked by the `payload` fuzz target and the tests below: whenever this
//! returns `Some(p)`, the serde path returns `Ok(p)` for the same text. It therefore gives up on
//! every case where the two could differ: a string with an escape or a control character (serde
//! unescapes or refuses), a key written with an escape, a known key twice (serde refuses), an
//! unknown field whose value is an object or an array, a number outside JSON's grammar or not
//! finite as a double, an object written as an array, a missing field, trailing characters. A
//! number is converted by the standard library, which rounds correctly, like serde_json.

use super::{BorrowedStr, Customer, KnownMerchants, LastTransaction, Merchant, Payload};
use super::{Terminal, Transaction};
use std::borrow::Cow;

/// Parses `text` if it has the plain shape, else `None`.
pub(super) fn parse(text: &str) -> Option<Payload<'_>> {
    let mut c = Cursor { s: text, i: 0 };
    let p = c.payload()?;
    c.ws();
    (c.i == text.len()).then_some(p)
}

/// The first byte of `b` that ends a plain string: a quote, a backslash or a control character.
/// Eight bytes at a time: for each test the lowest flagged byte of a word is exact (the usual
/// has-zero-byte trick can only flag bytes above a true one wrongly), so the lowest flag of
/// their union is the first stop.
fn stop(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let mut i = 0;
    while let Some(chunk) = b.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap());
        let flags = zero(x ^ (LO * b'"' as u64))
            | zero(x ^ (LO * b'\\' as u64))
            | (x.wrapping_sub(LO * 0x20) & !x & HI);
        if flags != 0 {
            return Some(i + flags.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    b[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| i + p)
}

/// `-?digits[.digits]` with at most 15 digits in all and no exponent, as the double nearest to
/// it: the digits are an exact integer m < 2^53 and 10^k (k <= 15) is exact too, so m / 10^k is
/// one correctly rounded division (Clinger's fast path), the same double the standard library
/// gives. `None` for anything else (the caller then uses the standard library).
fn exact_decimal(b: &[u8]) -> Option<f64> {
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let (negative, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let (mut m, mut n, mut frac) = (0u64, 0usize, None);
    for (i, &c) in digits.iter().enumerate() {
        match c {
            b'0'..=b'9' if n < 15 => {
                m = m * 10 + (c - b'0') as u64;
                n += 1;
            }
            b'.' => frac = Some(digits.len() - i - 1),
            _ => return None, // another character, or a 16th digit
        }
    }
    let v = m as f64 / POW10[frac.unwrap_or(0)];
    Some(if negative { -v } else { v })
}

struct Cursor<'a> {
    s: &'a str,
    i: usize,
}

/// Which fields of an object were seen, one bit each (a second time means give up).
struct Seen(u32);

impl Seen {
    fn first(&mut self, bit: u32) -> Option<()> {
        let fresh = self.0 & (1 << bit) == 0;
        self.0 |= 1 << bit;
        fresh.then_some(())
    }
}

impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.s.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.i).copied()
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

    /// A string without escapes or control characters, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let rest = &self.bytes()[start..];
        let len = stop(rest)?;
        if rest[len] != b'"' {
            return None;
        }
        self.i = start + len + 1;
        // The body is valid UTF-8 and a quote is never inside a multi-byte sequence.
        Some(&self.s[start..start + len])
    }

    /// A number in JSON's grammar, `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`, finite.
    fn number(&mut self) -> Option<f64> {
        self.ws();
        let b = self.bytes();
        let start = self.i;
        let mut i = start;
        let digits = |i: &mut usize| {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                digits(&mut i);
            }
            _ => return None,
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        self.i = i;
        if let Some(v) = exact_decimal(&b[start..i]) {
            return Some(v);
        }
        let v: f64 = self.s[start..i].parse().ok()?;
        v.is_finite().then_some(v)
    }

    fn literal(&mut self, word: &str) -> bool {
        self.ws();
        let hit = self.bytes()[self.i..].starts_with(word.as_bytes());
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

    /// An object: `field(cursor, key)` reads the value of each key.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn payload(&mut self) -> Option<Payload<'a>> {
        let (mut id, mut last) = (None, None);
        let (mut tx, mut customer, mut merchant, mut terminal) = (None, None, None, None);
        let mut seen = Seen(0);
        self.object(|c, key| {
            match key {
                "id" => {
                    seen.first(0)?;
                    id = if c.literal("null") {
                        None
                    } else {
                        Some(BorrowedStr(Cow::Borrowed(c.string()?)))
                    };
                }
                "transaction" => {
                    seen.first(1)?;
                    tx = Some(c.transaction()?);
                }
                "customer" => {
                    seen.first(2)?;
                    customer = Some(c.customer()?);
                }
                "merchant" => {
                    seen.first(3)?;
                    merchant = Some(c.merchant()?);
                }
                "terminal" => {
                    seen.first(4)?;
                    terminal = Some(c.terminal()?);
                }
                "last_transaction" => {
                    seen.first(5)?;
                    last = if c.literal("null") {
                        None
                    } else {
                        Some(c.last_transaction()?)
                    };
                }
                _ => c.skip()?,
            }
            Some(())
        })?;
        Some(Payload {
            id,
            transaction: tx?,
            customer: customer?,
            merchant: merchant?,
            terminal: terminal?,
            last_transaction: last,
        })
    }

    fn transaction(&mut self) -> Option<Transaction<'a>> {
        let (mut amount, mut installments, mut at) = (None, None, None);
        let mut seen = Seen(0);
        self.object(|c, key| {
            match key {
                "amount" => {
                    seen.first(0)?;
                    amount = Some(c.number()?);
                }
                "installments" => {
                    seen.first(1)?;
                    installments = Some(c.number()?);
                }
                "requested_at" => {
                    seen.first(2)?;
                    at = Some(c.string()?);
                }
                _ => c.skip()?,
            };
            Some(())
        })?;
        Some(Transaction {
            amount: amount?,
            installments: installments?,
            requested_at: Cow::Borrowed(at?),
        })
    }

    fn customer(&mut self) -> Option<Customer<'a>> {
        let (mut avg, mut count, mut known) = (None, None, None);
        let mut seen = Seen(0);
        self.object(|c, key| {
            match key {
                "avg_amount" => {
                    seen.first(0)?;
                    avg = Some(c.number()?);
                }
                "tx_count_24h" => {
                    seen.first(1)?;
                    count = Some(c.number()?);
                }
                "known_merchants" => {
                    seen.first(2)?;
                    known = Some(c.merchants()?);
                }
                _ => c.skip()?,
            };
            Some(())
        })?;
        Some(Customer {
            avg_amount: avg?,
            tx_count_24h: count?,
            known_merchants: known?,
        })
    }

    fn merchants(&mut self) -> Option<KnownMerchants<'a>> {
        let mut out = KnownMerchants::new();
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(out);
        }
        loop {
            out.push(BorrowedStr(Cow::Borrowed(self.string()?)));
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    fn merchant(&mut self) -> Option<Merchant<'a>> {
        let (mut id, mut mcc, mut avg) = (None, None, None);
        let mut seen = Seen(0);
        self.object(|c, key| {
            match key {
                "id" => {
                    seen.first(0)?;
                    id = Some(c.string()?);
                }
                "mcc" => {
                    seen.first(1)?;
                    mcc = Some(c.string()?);
                }
                "avg_amount" => {
                    seen.first(2)?;
                    avg = Some(c.number()?);
                }
                _ => c.skip()?,
            };
            Some(())
        })?;
        Some(Merchant {
            id: Cow::Borrowed(id?),
            mcc: Cow::Borrowed(mcc?),
            avg_amount: avg?,
        })
    }

    fn terminal(&mut self) -> Option<Terminal> {
        let (mut online, mut present, mut km) = (None, None, None);
        let mut seen = Seen(0);
        self.object(|c, key| {
            match key {
                "is_online" => {
                    seen.first(0)?;
                    online = Some(c.boolean()?);
                }
                "card_present" => {
                    seen.first(1)?;
                    present = Some(c.boolean()?);
                }
                "km_from_home" => {
                    seen.first(2)?;
                    km = Some(c.number()?);
                }
                _ => c.skip()?,
            };
            Some(())
        })?;
        Some(Terminal {
            is_online: online?,
            card_present: present?,
            km_from_home: km?,
        })
    }

    fn last_transaction(&mut self) -> Option<LastTransaction<'a>> {
        let (mut at, mut km) = (None, None);
        let mut seen = Seen(0);
        self.object(|c, key| {
            match key {
                "timestamp" => {
                    seen.first(0)?;
                    at = Some(c.string()?);
                }
                "km_from_current" => {
                    seen.first(1)?;
                    km = Some(c.number()?);
                }
                _ => c.skip()?,
            };
            Some(())
        })?;
        Some(LastTransaction {
            timestamp: Cow::Borrowed(at?),
            km_from_current: km?,
        })
    }
}
