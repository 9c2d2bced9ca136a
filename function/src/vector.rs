//! Stage 2: a payload becomes the 14-dimension query vector, exactly as the contest labeller
//! computes it.
//!
//! Every step follows the labeller's C code: IEEE double arithmetic in the same order,
//! fractional minutes `(requested_at - last.timestamp) seconds / 60.0`, Monday = 0, clamp to
//! [0, 1], then `round(v * 10000)` with C `round` (half away from zero, which is Rust's
//! `f64::round`). The result is kept in that fixed point (value x 10000 as i16), which is also
//! how the index stores references, so the search compares integers.
//!
//! Inputs the generator never produces get the answer the formula implies, with one rule where
//! it implies nothing: a ratio of 0 / 0 (amount 0 and avg_amount 0) is 0. So avg_amount 0 with
//! a positive amount gives amount_vs_avg 1, negative numbers clamp to 0, huge ones to 1, a last
//! transaction later than the current one gives 0 minutes, an unknown MCC gives 0.5.

use crate::payload::{Payload, PayloadError};
use index_pack::format::{DIMS, SCALE};

/// A query in fixed point: component i is round(v_i * 10000).
pub type Query = [i16; DIMS];

/// MCC risk table from the contest; any other code is 0.5.
pub const MCC_RISK: [(&str, f64); 10] = [
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

/// Risk of an MCC.
pub fn mcc_risk(mcc: &str) -> f64 {
    MCC_RISK
        .iter()
        .find(|(code, _)| *code == mcc)
        .map_or(0.5, |&(_, r)| r)
}

fn clamp01(v: f64) -> f64 {
    // The labeller's `v < 0 ? 0 : v > 1 ? 1 : v`; NaN cannot reach here (see `ratio`).
    v.clamp(0.0, 1.0)
}

fn ratio(num: f64, den: f64) -> f64 {
    let r = num / den;
    if r.is_nan() {
        0.0
    } else {
        r
    }
}

/// round(v * 10000) as the fixed-point component. `v` is in [-1, 1] here.
fn fixed(v: f64) -> i16 {
    (v * SCALE).round() as i16
}

/// Builds the query vector of a payload.
pub fn vectorize(p: &Payload) -> Result<Query, PayloadError> {
    let requested =
        Timestamp::parse(&p.transaction.requested_at).map_err(|reason| PayloadError::Invalid {
            field: "transaction.requested_at",
            reason,
        })?;
    let last = match &p.last_transaction {
        None => None,
        Some(l) => {
            let ts = Timestamp::parse(&l.timestamp).map_err(|reason| PayloadError::Invalid {
                field: "last_transaction.timestamp",
                reason,
            })?;
            Some((ts, l.km_from_current))
        }
    };
    let t = &p.transaction;
    let mut v = [0f64; DIMS];
    v[0] = clamp01(ratio(t.amount, 10_000.0));
    v[1] = clamp01(ratio(t.installments, 12.0));
    v[2] = clamp01(ratio(ratio(t.amount, p.customer.avg_amount), 10.0));
    v[3] = requested.hour as f64 / 23.0;
    v[4] = requested.weekday as f64 / 6.0;
    match last {
        None => {
            v[5] = -1.0;
            v[6] = -1.0;
        }
        Some((ts, km)) => {
            let minutes = (requested.seconds - ts.seconds) / 60.0;
            v[5] = clamp01(ratio(minutes, 1440.0));
            v[6] = clamp01(ratio(km, 1000.0));
        }
    }
    v[7] = clamp01(ratio(p.terminal.km_from_home, 1000.0));
    v[8] = clamp01(ratio(p.customer.tx_count_24h, 20.0));
    v[9] = if p.terminal.is_online { 1.0 } else { 0.0 };
    v[10] = if p.terminal.card_present { 1.0 } else { 0.0 };
    let known = p
        .customer
        .known_merchants
        .iter()
        .any(|m| m.0 == p.merchant.id);
    v[11] = if known { 0.0 } else { 1.0 };
    v[12] = mcc_risk(&p.merchant.mcc);
    v[13] = clamp01(ratio(p.merchant.avg_amount, 10_000.0));
    Ok(v.map(fixed))
}

/// The parts of an RFC 3339 timestamp the vector needs, in UTC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timestamp {
    /// Seconds since 1970-01-01T00:00:00Z (fractional seconds kept).
    pub seconds: f64,
    pub hour: u32,
    /// Monday = 0 ... Sunday = 6.
    pub weekday: u32,
}

impl Timestamp {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|+HH:MM|-HH:MM)`; `t`/`z` and a space for `T` are
    /// accepted as RFC 3339 allows. Hour and weekday are those of the instant in UTC.
    pub fn parse(s: &str) -> Result<Timestamp, String> {
        if let Some(t) = Timestamp::plain(s.as_bytes()) {
            return Ok(t);
        }
        Timestamp::general(s)
    }

    /// The form every contest payload uses, `YYYY-MM-DDTHH:MM:SSZ` with a valid date and time,
    /// read at fixed offsets; `None` for anything else (then [`Timestamp::general`] decides).
    fn plain(b: &[u8]) -> Option<Timestamp> {
        let b: &[u8; 20] = b.try_into().ok()?;
        if b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
            || b[19] != b'Z'
        {
            return None;
        }
        let d = |i: usize| b[i].is_ascii_digit().then(|| (b[i] - b'0') as i64);
        let two = |i: usize| Some(d(i)? * 10 + d(i + 1)?);
        let year = two(0)? * 100 + two(2)?;
        let (month, day) = (two(5)?, two(8)?);
        let (hour, minute, second) = (two(11)?, two(14)?, two(17)?);
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        let days = days_from_civil(year, month, day);
        let whole = days * 86_400 + hour * 3600 + minute * 60 + second;
        Some(Timestamp {
            seconds: whole as f64,
            hour: hour as u32,
            weekday: (days + 3).rem_euclid(7) as u32,
        })
    }

    /// Every RFC 3339 form [`Timestamp::parse`] accepts, with the error message for the rest.
    fn general(s: &str) -> Result<Timestamp, String> {
        let b = s.as_bytes();
        let bad = || format!("{s:?} is not an RFC 3339 timestamp like 2026-03-11T20:23:35Z");
        let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
            let d = b.get(r).ok_or_else(bad)?;
            if d.iter().all(u8::is_ascii_digit) {
                Ok(d.iter().fold(0i64, |acc, &c| acc * 10 + (c - b'0') as i64))
            } else {
                Err(bad())
            }
        };
        if b.len() < 20
            || b[4] != b'-'
            || b[7] != b'-'
            || !matches!(b[10], b'T' | b't' | b' ')
            || b[13] != b':'
            || b[16] != b':'
        {
            return Err(bad());
        }
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return Err(format!("{s:?} has no such date"));
        }
        // RFC 3339 allows second 60 (leap second); it counts as the next second.
        if hour > 23 || minute > 59 || second > 60 {
            return Err(format!("{s:?} has no such time of day"));
        }
        let mut i = 19;
        let mut fraction = 0.0;
        if b.get(i) == Some(&b'.') {
            let start = i + 1;
            i = start;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return Err(bad());
            }
            fraction = format!("0.{}", &s[start..i])
                .parse::<f64>()
                .map_err(|_| bad())?;
        }
        let offset = match b.get(i..) {
            Some([b'Z' | b'z']) => 0,
            Some([sign @ (b'+' | b'-'), _, _, b':', _, _]) => {
                let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
                if oh > 23 || om > 59 {
                    return Err(bad());
                }
                let o = oh * 3600 + om * 60;
                if *sign == b'+' {
                    o
                } else {
                    -o
                }
            }
            _ => return Err(bad()),
        };
        let days = days_from_civil(year, month, day);
        let whole = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
        let utc_day = whole.div_euclid(86_400);
        Ok(Timestamp {
            seconds: whole as f64 + fraction,
            hour: (whole.rem_euclid(86_400) / 3600) as u32,
            // 1970-01-01 was a Thursday (Monday = 0 makes it 3).
            weekday: (utc_day + 3).rem_euclid(7) as u32,
        })
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::parse;

    #[test]
    fn the_plain_timestamp_path_agrees_with_the_general_one() {
        let mut n = 0;
        for year in [
            0, 1, 1600, 1900, 1970, 1999, 2000, 2024, 2026, 2027, 2100, 2400, 9999,
        ] {
            for month in 0..=13 {
                for day in 0..=32 {
                    for (h, m, sec) in [
                        (0, 0, 0),
                        (23, 59, 59),
                        (12, 30, 60),
                        (24, 0, 0),
                        (7, 60, 5),
                    ] {
                        let s = format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{sec:02}Z");
                        let general = Timestamp::general(&s);
                        match Timestamp::plain(s.as_bytes()) {
                            Some(t) => {
                                assert_eq!(Ok(t), general, "{s}");
                                n += 1;
                            }
                            // The plain path leaves leap seconds to the general one.
                            None => assert!(general.is_err() || sec == 60, "{s}: {general:?}"),
                        }
                    }
                }
            }
        }
        assert!(n > 8_000, "{n} plain timestamps");
        for other in [
            "2026-03-11t20:23:35Z",
            "2026-03-11T20:23:35z",
            "2026-03-11T20:23:35.5Z",
            "2026-03-11T20:23:35+01:00",
        ] {
            assert_eq!(Timestamp::plain(other.as_bytes()), None, "{other}");
        }
    }

    fn body(amount: &str, last: &str) -> String {
        format!(
            r#"{{"id":"tx-1","transaction":{{"amount":{amount},"installments":2,"requested_at":"2026-03-11T18:45:53Z"}},
            "customer":{{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]}},
            "merchant":{{"id":"MERC-016","mcc":"5411","avg_amount":60.25}},
            "terminal":{{"is_online":false,"card_present":true,"km_from_home":29.23}},
            "last_transaction":{last}}}"#
        )
    }

    fn to_real(q: Query) -> Vec<f64> {
        q.iter().map(|&k| k as f64 / SCALE).collect()
    }

    #[test]
    fn contest_example_legit() {
        let b = body("41.12", "null");
        let q = vectorize(&parse(b.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            to_real(q),
            vec![
                0.0041, 0.1667, 0.05, 0.7826, 0.3333, -1.0, -1.0, 0.0292, 0.15, 0.0, 1.0, 0.0,
                0.15, 0.006
            ]
        );
    }

    #[test]
    fn contest_example_fraud() {
        let b = r#"{"id":"x","transaction":{"amount":9505.97,"installments":10,"requested_at":"2026-03-14T05:15:12Z"},
            "customer":{"avg_amount":81.28,"tx_count_24h":20,"known_merchants":["MERC-008","MERC-007","MERC-005"]},
            "merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},
            "terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}"#;
        let q = vectorize(&parse(b.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            to_real(q),
            vec![
                0.9506, 0.8333, 1.0, 0.2174, 0.8333, -1.0, -1.0, 0.9523, 1.0, 0.0, 1.0, 1.0, 0.75,
                0.0055
            ]
        );
    }

    #[test]
    fn fractional_minutes_and_clamping() {
        // 90.5 minutes before: 90.5 / 1440 = 0.062847... -> 0.0628
        let b = body(
            "41.12",
            r#"{"timestamp":"2026-03-11T17:15:23Z","km_from_current":1500}"#,
        );
        let q = vectorize(&parse(b.as_bytes()).unwrap()).unwrap();
        assert_eq!(q[5], 628);
        assert_eq!(q[6], 10_000);
        // A last transaction in the future clamps to 0 minutes.
        let b = body(
            "41.12",
            r#"{"timestamp":"2026-03-12T17:15:23Z","km_from_current":-3}"#,
        );
        let q = vectorize(&parse(b.as_bytes()).unwrap()).unwrap();
        assert_eq!((q[5], q[6]), (0, 0));
    }

    #[test]
    fn odd_amounts() {
        let zero_avg = body("10", "null").replace("82.24", "0");
        assert_eq!(
            vectorize(&parse(zero_avg.as_bytes()).unwrap()).unwrap()[2],
            10_000
        );
        let both_zero = body("0", "null").replace("82.24", "0");
        assert_eq!(
            vectorize(&parse(both_zero.as_bytes()).unwrap()).unwrap()[2],
            0
        );
        let negative = body("-5", "null");
        let q = vectorize(&parse(negative.as_bytes()).unwrap()).unwrap();
        assert_eq!((q[0], q[2]), (0, 0));
        let huge = body("1e300", "null");
        let q = vectorize(&parse(huge.as_bytes()).unwrap()).unwrap();
        assert_eq!((q[0], q[2]), (10_000, 10_000));
    }

    /// The odd-but-valid rows of docs/HOSTILE.md, dimension by dimension (the same vectors the
    /// `labeller` crate computes from the spec; local-runner/tests/data/hostile-valid.json).
    #[test]
    fn odd_values_follow_the_formulas() {
        let q = |b: String| vectorize(&parse(b.as_bytes()).unwrap()).unwrap();
        let base = || body("41.12", "null");
        assert_eq!(
            q(base().replace(r#""installments":2"#, r#""installments":0"#))[1],
            0
        );
        assert_eq!(
            q(base().replace(r#""installments":2"#, r#""installments":1e6"#))[1],
            10_000
        );
        assert_eq!(
            q(base().replace(r#""installments":2"#, r#""installments":-3"#))[1],
            0
        );
        // 2.5 / 12 = 0.208333... -> 0.2083
        assert_eq!(
            q(base().replace(r#""installments":2"#, r#""installments":2.5"#))[1],
            2083
        );
        assert_eq!(
            q(base().replace(r#""tx_count_24h":3"#, r#""tx_count_24h":-1"#))[8],
            0
        );
        assert_eq!(
            q(base().replace(r#""tx_count_24h":3"#, r#""tx_count_24h":1e9"#))[8],
            10_000
        );
        assert_eq!(q(base().replace("29.23", "-29.23"))[7], 0);
        assert_eq!(q(base().replace("29.23", "1e12"))[7], 10_000);
        assert_eq!(q(base().replace("60.25", "-60.25"))[13], 0);
        assert_eq!(
            q(base().replace(r#""avg_amount":82.24"#, r#""avg_amount":-82.24"#))[2],
            0
        );
        let unknown = q(base().replace(r#""mcc":"5411""#, r#""mcc":"""#));
        assert_eq!(unknown[12], 5000);
        assert_eq!(
            q(base().replace(r#""mcc":"5411""#, r#""mcc":"5999""#)),
            unknown
        );
        // An empty known list, or a case difference, makes the merchant unknown.
        assert_eq!(
            q(base().replace(r#"["MERC-003","MERC-016"]"#, "[]"))[11],
            10_000
        );
        assert_eq!(
            q(base().replace(r#""id":"MERC-016""#, r#""id":"merc-016""#))[11],
            10_000
        );
        // Wednesday 18:45:53Z written with an offset that moves the local day: same instant.
        let plain = q(base());
        let offset = q(base().replace("2026-03-11T18:45:53Z", "2026-03-12T03:45:53+09:00"));
        assert_eq!(offset, plain);
        // A leap second at 23:59:60 is 00:00:00 of the next day (Thursday = 3).
        let leap = q(base().replace("2026-03-11T18:45:53Z", "2026-03-11T23:59:60Z"));
        assert_eq!((leap[3], leap[4]), (0, 5000));
        // Lower-case t/z and a space separator are RFC 3339 too.
        assert_eq!(
            q(base().replace("2026-03-11T18:45:53Z", "2026-03-11 18:45:53z")),
            plain
        );
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        // C round() and f64::round agree: halves go away from zero (not to even).
        assert_eq!((2.5f64).round(), 3.0);
        assert_eq!((-2.5f64).round(), -3.0);
        assert_eq!(fixed(0.25), 2500);
        assert_eq!(fixed(-1.0), -10_000);
        assert_eq!(mcc_risk("0000"), 0.5);
        assert_eq!(mcc_risk("7995"), 0.85);
    }

    #[test]
    fn timestamps() {
        let t = Timestamp::parse("2026-03-11T20:23:35Z").unwrap();
        assert_eq!((t.hour, t.weekday), (20, 2)); // a Wednesday
        let t = Timestamp::parse("2026-03-15T23:59:59Z").unwrap();
        assert_eq!(t.weekday, 6); // Sunday
        let off = Timestamp::parse("2026-03-11T22:23:35.250+02:00").unwrap();
        assert_eq!((off.hour, off.weekday), (20, 2));
        assert_eq!(
            off.seconds - t.seconds,
            Timestamp::parse("2026-03-11T20:23:35.25Z").unwrap().seconds - t.seconds
        );
        for bad in [
            "",
            "2026-03-11",
            "2026-02-30T00:00:00Z",
            "2026-03-11T24:00:00Z",
            "2026-03-11T20:23:35",
            "2026-03-11T20:23:35+2",
            "x026-03-11T20:23:35Z",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Timestamp::parse("1970-01-01T00:00:00Z").unwrap().seconds,
            0.0
        );
        assert_eq!(
            Timestamp::parse("2000-03-01T00:00:00Z").unwrap().seconds,
            951_868_800.0
        );
    }
}
