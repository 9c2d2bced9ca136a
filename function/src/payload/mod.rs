//! Stage 1: the `POST /fraud-score` body as typed data.
//!
//! Strings borrow from the request body where JSON allows it (no escapes), and up to 8 known
//! merchants are kept inline, so parsing a typical body allocates nothing (tested in
//! `function/tests/no_alloc.rs`). Unknown fields are ignored; `id` is
//! optional because the decision does not use it; a missing `last_transaction` means the same as
//! `null`. Any other missing field, wrong type, or number JSON cannot hold (NaN, Infinity, 1e999)
//! is a [`PayloadError`] whose message names the field by its path.
//!
//! Two things serde_json would let through are refused: a body that is not UTF-8 anywhere (it
//! checks only the strings it keeps, RFC 8259 requires all of it), and an object written as an
//! array of its field values (`"terminal":[false,true,3.5]`, serde's positional form), which is
//! not the API's shape. Docs: docs/HOSTILE.md.

mod fast;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use smallvec::SmallVec;
use std::borrow::Cow;

/// A fraud-score request.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Payload<'a> {
    #[serde(borrow, default)]
    pub id: Option<BorrowedStr<'a>>,
    #[serde(borrow, deserialize_with = "object")]
    pub transaction: Transaction<'a>,
    #[serde(borrow, deserialize_with = "object")]
    pub customer: Customer<'a>,
    #[serde(borrow, deserialize_with = "object")]
    pub merchant: Merchant<'a>,
    #[serde(deserialize_with = "object")]
    pub terminal: Terminal,
    #[serde(borrow, default, deserialize_with = "object_or_null")]
    pub last_transaction: Option<LastTransaction<'a>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Transaction<'a> {
    pub amount: f64,
    pub installments: f64,
    #[serde(borrow)]
    pub requested_at: Cow<'a, str>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Customer<'a> {
    pub avg_amount: f64,
    pub tx_count_24h: f64,
    #[serde(borrow)]
    pub known_merchants: KnownMerchants<'a>,
}

/// The known merchants: up to 8 inline (a typical request has 2 to 5), each borrowed from the
/// body when it has no escapes. serde's own `Vec<Cow<str>>` would allocate the vector and copy
/// every element (its `Cow` impl borrows only as a field of its own, not inside a sequence).
pub type KnownMerchants<'a> = SmallVec<[BorrowedStr<'a>; 8]>;

/// A string borrowed from the body when JSON allows it (no escapes), owned otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BorrowedStr<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for BorrowedStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v))
            }
        }
        d.deserialize_str(V).map(BorrowedStr)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Merchant<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub mcc: Cow<'a, str>,
    pub avg_amount: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Terminal {
    pub is_online: bool,
    pub card_present: bool,
    pub km_from_home: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LastTransaction<'a> {
    #[serde(borrow)]
    pub timestamp: Cow<'a, str>,
    pub km_from_current: f64,
}

/// Why a body is not a valid request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Not JSON, or JSON of the wrong shape; `path` is where it went wrong (`.` for the root).
    #[error("{path}: {message}")]
    Json { path: String, message: String },
    /// Well-formed JSON with a value the scorer cannot use.
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl PayloadError {
    /// The field the error is about (`.` for the whole body).
    pub fn field(&self) -> &str {
        match self {
            PayloadError::Json { path, .. } => path,
            PayloadError::Invalid { field, .. } => field,
        }
    }
}

/// Parses a request body.
///
/// A body of the plain shape is read by [`fast`], which gives up on anything else; the rest
/// parses with plain serde_json, and only a failing body is parsed a second time through
/// `serde_path_to_error` to name the field. Tracking the path on every request cost
/// about 1 us of the ~3 us parse (measured with the `search_stats` example), for errors that
/// are rare. The fast path accepts only ASCII; before serde the whole body is checked as UTF-8,
/// which serde_json then trusts (it does not check strings again in text it knows is valid).
pub fn parse(body: &[u8]) -> Result<Payload<'_>, PayloadError> {
    // A body cold in cache is read a line at a time by the scan; its lines start loading now.
    crate::hint::prefetch(body);
    if let Some(p) = fast::parse(body) {
        return Ok(p);
    }
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(e) => return Err(not_utf8(e)),
    };
    with_serde(text)
}

/// The fast path alone: `Some` only for a body it reads itself, which is then ASCII (for the
/// fuzz target that holds it to agreeing with [`with_serde`]).
#[doc(hidden)]
pub fn fast_path(body: &[u8]) -> Option<Payload<'_>> {
    fast::parse(body)
}

/// The reference path: serde_json into the derived types, for every body the fast path gives
/// up on (and, in tests and fuzzing, to check that the two agree).
pub fn with_serde(text: &str) -> Result<Payload<'_>, PayloadError> {
    let mut de = serde_json::Deserializer::from_str(text);
    match Payload::deserialize(ObjectsOnly(&mut de)).and_then(|p| de.end().map(|()| p)) {
        Ok(p) => Ok(p),
        Err(_) => Err(explain(text)),
    }
}

#[cold]
fn not_utf8(e: std::str::Utf8Error) -> PayloadError {
    PayloadError::Json {
        path: ".".into(),
        message: format!(
            "the body is not UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ),
    }
}

/// `deserialize_with` for a nested object: refuses serde's positional (array) form.
fn object<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(ObjectsOnly(d))
}

/// [`object`] for an optional one (`null` is `None`).
fn object_or_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(ObjectsOnly(d))
}

/// A deserializer that reads a struct only from a JSON object: serde's derived `Deserialize`
/// asks for `deserialize_struct`, which serde_json also satisfies from an array; this asks for a
/// map instead. Everything else passes through unchanged (static dispatch, no cost).
struct ObjectsOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectsOnly<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_option(OptionOfObject(visitor))
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Carries [`ObjectsOnly`] into the `Some` of an `Option<struct>`.
struct OptionOfObject<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for OptionOfObject<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.expecting(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(ObjectsOnly(d))
    }
}

#[cold]
fn explain(text: &str) -> PayloadError {
    let mut de = serde_json::Deserializer::from_str(text);
    let result: Result<Payload, _> = serde_path_to_error::deserialize(ObjectsOnly(&mut de));
    match result {
        Err(e) => {
            // serde_path_to_error writes "?" when the error is not inside any field.
            let path = match e.path().to_string() {
                p if p == "?" || p.is_empty() => ".".to_string(),
                p => p,
            };
            PayloadError::Json {
                path,
                message: e.into_inner().to_string(),
            }
        }
        // Only trailing characters can fail after a successful deserialize.
        Ok(_) => match de.end() {
            Err(e) => PayloadError::Json {
                path: ".".into(),
                message: e.to_string(),
            },
            Ok(()) => PayloadError::Json {
                path: ".".into(),
                message: "invalid JSON".into(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":{"timestamp":"2026-03-11T14:58:35Z","km_from_current":18.8}}"#;

    fn err(body: &[u8]) -> String {
        parse(body).unwrap_err().to_string()
    }

    #[test]
    fn parses_and_borrows() {
        let p = parse(BODY.as_bytes()).unwrap();
        assert!(matches!(p.merchant.id, Cow::Borrowed("MERC-016")));
        assert!(!p.customer.known_merchants.spilled());
        for (m, want) in p
            .customer
            .known_merchants
            .iter()
            .zip(["MERC-003", "MERC-016"])
        {
            assert!(matches!(m.0, Cow::Borrowed(s) if s == want), "{m:?}");
        }
        assert_eq!(p.last_transaction.unwrap().km_from_current, 18.8);
        let null_last = BODY.replace(
            r#"{"timestamp":"2026-03-11T14:58:35Z","km_from_current":18.8}"#,
            "null",
        );
        assert_eq!(parse(null_last.as_bytes()).unwrap().last_transaction, None);
        // Escaped strings are unescaped (owned) and compare by value.
        let escaped = BODY.replace(r#""id":"MERC-016""#, r#""id":"MERC-\u0030\u00316""#);
        assert_eq!(parse(escaped.as_bytes()).unwrap().merchant.id, "MERC-016");
    }

    #[test]
    fn positional_arrays_are_not_objects() {
        for (body, field) in [
            (
                BODY.replace(
                    r#"{"is_online":false,"card_present":true,"km_from_home":29.23}"#,
                    "[false,true,29.23]",
                ),
                "terminal: invalid type: sequence, expected struct Terminal",
            ),
            (
                BODY.replace(
                    r#"{"timestamp":"2026-03-11T14:58:35Z","km_from_current":18.8}"#,
                    r#"["2026-03-11T14:58:35Z",18.8]"#,
                ),
                "last_transaction: invalid type: sequence",
            ),
            (
                r#"["tx",{},{},{},{},null]"#.to_string(),
                ".: invalid type: sequence",
            ),
        ] {
            let e = err(body.as_bytes());
            assert!(e.starts_with(field), "{e}");
        }
    }

    #[test]
    fn any_invalid_utf8_is_refused() {
        // Inside an ignored field, where serde_json alone would accept it.
        let mut body = br#"{"note":"?","#.to_vec();
        body[9] = 0xff;
        body.extend_from_slice(&BODY.as_bytes()[1..]);
        let e = err(&body);
        assert_eq!(
            e, ".: the body is not UTF-8 (invalid byte at offset 9)",
            "{e}"
        );
        // A truncated multi-byte sequence (a BOM cut short).
        assert!(err(b"\xef\xbb").starts_with(".: the body is not UTF-8 (invalid byte at offset 0)"));
    }

    /// The fast path's contract: whenever it answers, serde answers the same (compared through
    /// `Debug`, which tells -0.0 from 0.0 and prints every double exactly).
    #[test]
    fn fast_path_agrees_with_serde_or_gives_up() {
        let cases = [
            BODY.to_string(),
            BODY.replace(r#""id":"tx-1","#, ""),
            BODY.replace(r#""id":"tx-1""#, r#""id":null"#),
            BODY.replace("41.12", "-0"),
            BODY.replace("82.24", "-0.0e5"),
            BODY.replace("82.24", "2.2250738585072011e-308"),
            BODY.replace("82.24", "123456789012345678901234567890"),
            BODY.replace("82.24", "1e400"),
            BODY.replace("82.24", "01"),
            BODY.replace("82.24", "1."),
            BODY.replace("82.24", ".5"),
            BODY.replace("82.24", "+1"),
            BODY.replace("82.24", "1E-2"),
            BODY.replace("82.24", "1234567.12345678"),
            BODY.replace("82.24", "0.123456789012345678"),
            BODY.replace("82.24", "12345678901234567"),
            BODY.replace("82.24", "9999999999999999.5"),
            BODY.replace(":", " : ").replace(",", "\n,\t"),
            BODY.replace(r#""MERC-003","MERC-016""#, ""),
            BODY.replace(r#""MERC-016"}"#, r#""MERC-\u0030"}"#),
            BODY.replace(r#""amount""#, r#""\u0061mount""#),
            BODY.replace(r#""amount":41.12"#, r#""amount":41.12,"amount":1"#),
            BODY.replace(r#""installments":2"#, r#""installments":2,"amount":1"#),
            BODY.replace(r#""mcc":"5411","avg_amount":60.25"#, r#""avg_amount":60.25,"mcc":"5411","id":"x""#),
            BODY.replace(r#""amount":41.12"#, r#""note":"x","n":1,"b":true,"z":null,"amount":41.12"#),
            BODY.replace(r#""amount":41.12"#, r#""deep":{"a":[1]},"amount":41.12"#),
            BODY.replace("false", "0"),
            BODY.replace(r#"{"is_online":false,"card_present":true,"km_from_home":29.23}"#, "[false,true,29.23]"),
            BODY.replace(r#"{"timestamp":"2026-03-11T14:58:35Z","km_from_current":18.8}"#, "null"),
            BODY.replace(r#","last_transaction":{"timestamp":"2026-03-11T14:58:35Z","km_from_current":18.8}"#, ""),
            BODY.replace("MERC-003", "MERC\t003"),
            BODY.replace("MERC-003", "MERC\u{1}003"),
            BODY.replace("MERC-003", "MERC-\u{e9}03"),
            BODY.replace(r#""amount":41.12"#, r#""n\u{f1}":1,"amount":41.12"#),
            format!("{BODY} "),
            format!("{BODY}x"),
            format!(" \n{BODY}\r\n"),
            BODY[..BODY.len() - 1].to_string(),
            "{}".to_string(),
        ];
        let mut answered = 0;
        for text in &cases {
            if let Some(p) = fast::parse(text.as_bytes()) {
                assert!(
                    text.is_ascii(),
                    "{text}: the fast path answered outside ASCII"
                );
                answered += 1;
                let q = with_serde(text).unwrap_or_else(|e| panic!("{text}: serde refuses: {e}"));
                assert_eq!(format!("{p:?}"), format!("{q:?}"), "{text}");
            }
        }
        assert!(
            answered >= 10,
            "the fast path answered only {answered} cases"
        );
    }

    /// Keys in any order are the fast path's: sorted (as serde_json's `Value`, Go's maps and
    /// Python's `sort_keys` write them) and reversed, every object.
    #[test]
    fn the_fast_path_reads_keys_in_any_order() {
        let value: serde_json::Value = serde_json::from_str(BODY).unwrap();
        let sorted = value.to_string();
        assert!(sorted.starts_with(r#"{"customer":{"avg_amount":82.24,"known_merchants""#));
        let reversed = r#"{"last_transaction":{"km_from_current":18.8,"timestamp":"2026-03-11T14:58:35Z"},"terminal":{"km_from_home":29.23,"card_present":true,"is_online":false},"merchant":{"avg_amount":60.25,"mcc":"5411","id":"MERC-016"},"customer":{"known_merchants":["MERC-003","MERC-016"],"tx_count_24h":3,"avg_amount":82.24},"transaction":{"requested_at":"2026-03-11T18:45:53Z","installments":2,"amount":41.12},"id":"tx-1"}"#;
        let want = with_serde(BODY).unwrap();
        for text in [&sorted, reversed] {
            let p = fast::parse(text.as_bytes()).unwrap_or_else(|| panic!("gave up on {text}"));
            assert_eq!(format!("{p:?}"), format!("{want:?}"), "{text}");
        }
    }

    #[test]
    fn trailing_characters_and_duplicates() {
        assert!(err(format!("{BODY} x").as_bytes()).starts_with(".: trailing characters"));
        let dup = BODY.replace(r#""amount":41.12"#, r#""amount":41.12,"amount":1"#);
        assert!(err(dup.as_bytes()).starts_with("transaction: duplicate field `amount`"));
    }
}
