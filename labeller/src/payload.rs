//! A request body to the labeller's query: SPEC.md's 14 dimensions in IEEE double, each
//! rounded to 4 decimals with C `round` (half away from zero).
//!
//! JSON structure comes from serde_json, but every number is read from its own text with
//! Rust's correctly rounded `str::parse` (as C's `strtod` reads it), never through serde_json's
//! float parser. Objects must be JSON objects (not arrays), keys may not repeat, unknown keys
//! are ignored, `id` is not needed, and a missing `last_transaction` is `null`.
//!
//! Where SPEC.md's formula gives no number, the project's documented rule applies: the ratio
//! amount / avg_amount with both 0 counts as 0 (docs/HOSTILE.md).

use crate::{time, Query, DIMS};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// SPEC.md's MCC risk table; any other code is 0.5 (written out here on purpose: the oracle
/// shares no code, not even this table, with the scorer).
const MCC_RISK: [(&str, f64); 10] = [
    ("5411", 0.15),
    ("5812", 0.30),
    ("5912", 0.20),
    ("5944", 0.45),
    ("7801", 0.80),
    ("7802", 0.75),
    ("7995", 0.85),
    ("4511", 0.35),
    ("5311", 0.25),
    ("5999", 0.50),
];

/// A JSON object as its members' raw text, in order.
struct Object<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Object<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Object<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Object<'de>, M::Error> {
                let mut members = Vec::new();
                while let Some(k) = m.next_key::<Cow<'de, str>>()? {
                    members.push((k, m.next_value::<&'de RawValue>()?));
                }
                Ok(Object(members))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'a> Object<'a> {
    fn parse(raw: &'a str, path: &str) -> Result<Object<'a>, String> {
        let o: Object = serde_json::from_str(raw).map_err(|e| format!("{path}: {e}"))?;
        for (i, (k, _)) in o.0.iter().enumerate() {
            if o.0[..i].iter().any(|(j, _)| j == k) {
                return Err(format!("{path}: key {k:?} appears twice"));
            }
        }
        Ok(o)
    }

    fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    fn required(&self, key: &str, path: &str) -> Result<&'a str, String> {
        self.get(key)
            .map(RawValue::get)
            .ok_or_else(|| format!("{path}.{key}: missing"))
    }

    fn object(&self, key: &str, path: &str) -> Result<Object<'a>, String> {
        Object::parse(self.required(key, path)?, &format!("{path}.{key}"))
    }

    fn number(&self, key: &str, path: &str) -> Result<f64, String> {
        let text = self.required(key, path)?;
        if !crate::json_number(text) {
            return Err(format!("{path}.{key}: {text} is not a number"));
        }
        let v: f64 = text.parse().expect("a JSON number parses");
        if !v.is_finite() {
            return Err(format!("{path}.{key}: {text} does not fit a double"));
        }
        Ok(v)
    }

    fn string(&self, key: &str, path: &str) -> Result<String, String> {
        serde_json::from_str(self.required(key, path)?).map_err(|e| format!("{path}.{key}: {e}"))
    }

    fn boolean(&self, key: &str, path: &str) -> Result<bool, String> {
        match self.required(key, path)? {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(format!("{path}.{key}: {other} is not a boolean")),
        }
    }
}

// Written as the contest generator's C comparisons (`v < 0 ? 0 : v > 1 ? 1 : v`) on purpose.
#[allow(clippy::manual_clamp)]
fn clamp(v: f64) -> f64 {
    if v < 0.0 {
        0.0
    } else if v > 1.0 {
        1.0
    } else {
        v
    }
}

/// round(v * 10000) / 10000 with C `round` (half away from zero: Rust's `f64::round`).
pub fn round4(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

/// The query of a request body, or why it is not a valid request.
pub fn query(body: &[u8]) -> Result<Query, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("body: not UTF-8 ({e})"))?;
    let root = Object::parse(text, "body")?;
    let tx = root.object("transaction", "")?;
    let customer = root.object("customer", "")?;
    let merchant = root.object("merchant", "")?;
    let terminal = root.object("terminal", "")?;
    let last = match root.get("last_transaction").map(RawValue::get) {
        None | Some("null") => None,
        Some(_) => Some(root.object("last_transaction", "")?),
    };

    let amount = tx.number("amount", ".transaction")?;
    let installments = tx.number("installments", ".transaction")?;
    let requested_text = tx.string("requested_at", ".transaction")?;
    let requested = time::parse(&requested_text)
        .ok_or_else(|| format!(".transaction.requested_at: {requested_text:?} is not RFC 3339"))?;
    let avg_amount = customer.number("avg_amount", ".customer")?;
    let tx_count = customer.number("tx_count_24h", ".customer")?;
    let known: Vec<String> =
        serde_json::from_str(customer.required("known_merchants", ".customer")?)
            .map_err(|e| format!(".customer.known_merchants: {e}"))?;
    let merchant_id = merchant.string("id", ".merchant")?;
    let mcc = merchant.string("mcc", ".merchant")?;
    let merchant_avg = merchant.number("avg_amount", ".merchant")?;
    let online = terminal.boolean("is_online", ".terminal")?;
    let card_present = terminal.boolean("card_present", ".terminal")?;
    let km_home = terminal.number("km_from_home", ".terminal")?;

    let mut v = [0.0; DIMS];
    v[0] = clamp(amount / 10_000.0);
    v[1] = clamp(installments / 12.0);
    let amount_vs_avg = if amount == 0.0 && avg_amount == 0.0 {
        0.0
    } else {
        amount / avg_amount
    };
    v[2] = clamp(amount_vs_avg / 10.0);
    v[3] = f64::from(requested.hour) / 23.0;
    v[4] = f64::from(requested.weekday) / 6.0;
    match last {
        None => {
            v[5] = -1.0;
            v[6] = -1.0;
        }
        Some(l) => {
            let at_text = l.string("timestamp", ".last_transaction")?;
            let at = time::parse(&at_text).ok_or_else(|| {
                format!(".last_transaction.timestamp: {at_text:?} is not RFC 3339")
            })?;
            let km = l.number("km_from_current", ".last_transaction")?;
            let minutes = (requested.seconds - at.seconds) / 60.0;
            v[5] = clamp(minutes / 1440.0);
            v[6] = clamp(km / 1000.0);
        }
    }
    v[7] = clamp(km_home / 1000.0);
    v[8] = clamp(tx_count / 20.0);
    v[9] = if online { 1.0 } else { 0.0 };
    v[10] = if card_present { 1.0 } else { 0.0 };
    v[11] = if known.contains(&merchant_id) {
        0.0
    } else {
        1.0
    };
    v[12] = MCC_RISK
        .iter()
        .find(|(code, _)| *code == mcc)
        .map_or(0.5, |&(_, risk)| risk);
    v[13] = clamp(merchant_avg / 10_000.0);
    Ok(v.map(round4))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#;
    const FRAUD: &str = r#"{"id":"tx-2","transaction":{"amount":9505.97,"installments":10,"requested_at":"2026-03-14T05:15:12Z"},"customer":{"avg_amount":81.28,"tx_count_24h":20,"known_merchants":["MERC-008","MERC-007","MERC-005"]},"merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},"terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}"#;

    #[test]
    fn contest_worked_examples() {
        assert_eq!(
            query(DOC.as_bytes()).unwrap(),
            [
                0.0041, 0.1667, 0.05, 0.7826, 0.3333, -1.0, -1.0, 0.0292, 0.15, 0.0, 1.0, 0.0,
                0.15, 0.006
            ]
        );
        assert_eq!(
            query(FRAUD.as_bytes()).unwrap(),
            [
                0.9506, 0.8333, 1.0, 0.2174, 0.8333, -1.0, -1.0, 0.9523, 1.0, 0.0, 1.0, 1.0, 0.75,
                0.0055
            ]
        );
    }

    #[test]
    fn last_transaction_minutes_are_fractional() {
        // 90.5 minutes: 90.5 / 1440 = 0.0628472... -> 0.0628; km 1500 clamps to 1.
        let b = DOC.replace(
            r#""last_transaction":null"#,
            r#""last_transaction":{"timestamp":"2026-03-11T17:15:23Z","km_from_current":1500}"#,
        );
        let q = query(b.as_bytes()).unwrap();
        assert_eq!((q[5], q[6]), (0.0628, 1.0));
        assert_eq!(
            query(DOC.replace(r#","last_transaction":null"#, "").as_bytes()).unwrap()[5],
            -1.0
        );
    }

    #[test]
    fn odd_values_follow_the_formulas() {
        let q = |from: &str, to: &str| query(DOC.replacen(from, to, 1).as_bytes()).unwrap();
        assert_eq!(q(r#""avg_amount":82.24"#, r#""avg_amount":0"#)[2], 1.0);
        assert_eq!(
            query(DOC.replace("82.24", "0").replace("41.12", "0").as_bytes()).unwrap()[2],
            0.0
        );
        assert_eq!(q("41.12", "-5")[0], 0.0);
        assert_eq!(q("41.12", "1e300")[2], 1.0);
        assert_eq!(q(r#""installments":2"#, r#""installments":2.5"#)[1], 0.2083);
        assert_eq!(q(r#""mcc":"5411""#, r#""mcc":"0000""#)[12], 0.5);
        assert_eq!(q(r#""id":"MERC-016""#, r#""id":"merc-016""#)[11], 1.0);
        assert_eq!(
            q(r#""id":"MERC-016""#, r#""id":"MERC-\u0030\u00316""#)[11],
            0.0
        );
        assert_eq!(q("41.12", "4.112e1"), query(DOC.as_bytes()).unwrap());
    }

    #[test]
    fn invalid_bodies_are_refused() {
        for (from, to) in [
            ("41.12", "\"41.12\""),
            ("41.12", "1e999"),
            ("41.12", "NaN"),
            (r#""mcc":"5411","#, ""),
            (r#""is_online":false"#, r#""is_online":0"#),
            ("2026-03-11T18:45:53Z", "yesterday"),
            (
                r#"{"is_online":false,"card_present":true,"km_from_home":29.23}"#,
                "[false,true,29.23]",
            ),
            (r#""amount":41.12"#, r#""amount":41.12,"amount":1"#),
            (
                r#""last_transaction":null"#,
                r#""last_transaction":{"timestamp":"2026-03-11T17:15:23Z"}"#,
            ),
        ] {
            let b = DOC.replacen(from, to, 1);
            assert!(query(b.as_bytes()).is_err(), "{b}");
        }
        assert!(query(format!("{DOC} x").as_bytes()).is_err());
        assert!(query(b"{\"id\":\"\xff\"}").is_err());
    }
}
