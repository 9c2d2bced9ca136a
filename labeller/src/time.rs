//! Timestamps: RFC 3339 text to (seconds since the epoch, UTC hour, weekday), with its own
//! calendar arithmetic (days counted from 0001-01-01 by whole 400/100/4-year cycles, weekday
//! from that count: 0001-01-01 of the proleptic Gregorian calendar was a Monday).
//!
//! Accepted: `YYYY-MM-DD` `T`|`t`|space `HH:MM:SS`, optional `.fraction`, then `Z`|`z` or
//! `+HH:MM`|`-HH:MM`. Second 60 (a leap second) counts as the next second. Hour and weekday
//! are those of the instant in UTC (the contest's timestamps are all `Z`).

/// An instant as the vector needs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Instant {
    /// Seconds since 1970-01-01T00:00:00Z, fraction included.
    pub seconds: f64,
    /// UTC hour, 0..=23.
    pub hour: u32,
    /// Monday = 0 ... Sunday = 6.
    pub weekday: u32,
}

fn leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// Days in month `m` (1..=12) of year `y`.
fn month_len(y: i64, m: i64) -> i64 {
    const LEN: [i64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    LEN[(m - 1) as usize] + i64::from(m == 2 && leap(y))
}

/// Days from 0001-01-01 to `y`-`m`-`d` (proleptic Gregorian; negative before year 1).
fn days_from_year_one(y: i64, m: i64, d: i64) -> i64 {
    let p = y - 1;
    let before_year = 365 * p + p.div_euclid(4) - p.div_euclid(100) + p.div_euclid(400);
    let before_month: i64 = (1..m).map(|k| month_len(y, k)).sum();
    before_year + before_month + d - 1
}

/// 1970-01-01 counted from 0001-01-01.
const EPOCH_DAYS: i64 = 719_162;

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &c| n * 10 + i64::from(c - b'0')))
}

/// Parses an RFC 3339 timestamp; `None` when it is not one (or names no real date and time).
pub fn parse(text: &str) -> Option<Instant> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let (date, sep, clock, rest) = (&b[..10], b[10], &b[11..19], &b[19..]);
    if date[4] != b'-' || date[7] != b'-' || !matches!(sep, b'T' | b't' | b' ') {
        return None;
    }
    if clock[2] != b':' || clock[5] != b':' {
        return None;
    }
    let (y, mo, d) = (
        digits(&date[..4])?,
        digits(&date[5..7])?,
        digits(&date[8..])?,
    );
    let (h, mi, s) = (
        digits(&clock[..2])?,
        digits(&clock[3..5])?,
        digits(&clock[6..])?,
    );
    if !(1..=12).contains(&mo) || !(1..=month_len(y, mo)).contains(&d) {
        return None;
    }
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // Optional fraction: '.' and at least one digit, read as the decimal 0.xxx.
    let (fraction, zone) = match rest.split_first() {
        Some((b'.', tail)) => {
            let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                return None;
            }
            let f: f64 = format!("0.{}", std::str::from_utf8(&tail[..n]).ok()?)
                .parse()
                .ok()?;
            (f, &tail[n..])
        }
        _ => (0.0, rest),
    };
    let offset = match zone {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), hh @ .., b':', m1, m2] if hh.len() == 2 => {
            let (oh, om) = (digits(hh)?, digits(&[*m1, *m2])?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = 60 * (60 * oh + om);
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let days = days_from_year_one(y, mo, d) - EPOCH_DAYS;
    let whole = 86_400 * days + 3_600 * h + 60 * mi + s - offset;
    let utc_days = whole.div_euclid(86_400);
    Some(Instant {
        seconds: whole as f64 + fraction,
        hour: (whole.rem_euclid(86_400) / 3_600) as u32,
        weekday: (utc_days + EPOCH_DAYS).rem_euclid(7) as u32,
    })
}

/// The UTC text `YYYY-MM-DDTHH:MM:SSZ` of whole seconds since the epoch (for the generator).
pub fn format(seconds: i64) -> String {
    let mut days = seconds.div_euclid(86_400) + EPOCH_DAYS;
    let secs = seconds.rem_euclid(86_400);
    // Whole years first (by cycles), then months: the inverse of `days_from_year_one`.
    let mut y = 1 + 400 * days.div_euclid(146_097);
    days = days.rem_euclid(146_097);
    loop {
        let len = if leap(y) { 366 } else { 365 };
        if days < len {
            break;
        }
        days -= len;
        y += 1;
    }
    let mut m = 1;
    while days >= month_len(y, m) {
        days -= month_len(y, m);
        m += 1;
    }
    format!(
        "{y:04}-{m:02}-{:02}T{:02}:{:02}:{:02}Z",
        days + 1,
        secs / 3_600,
        secs % 3_600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        let t = parse("1970-01-01T00:00:00Z").unwrap();
        assert_eq!((t.seconds, t.hour, t.weekday), (0.0, 0, 3)); // a Thursday
        let t = parse("2000-03-01T00:00:00Z").unwrap();
        assert_eq!(t.seconds, 951_868_800.0);
        // The contest's worked examples: Wednesday 18h and Saturday 05h.
        let t = parse("2026-03-11T18:45:53Z").unwrap();
        assert_eq!((t.hour, t.weekday), (18, 2));
        let t = parse("2026-03-14T05:15:12Z").unwrap();
        assert_eq!((t.hour, t.weekday), (5, 5));
        assert_eq!(parse("2026-03-15T23:59:59Z").unwrap().weekday, 6);
        assert_eq!(parse("2028-02-29T12:00:00Z").unwrap().weekday, 1);
    }

    #[test]
    fn zones_fractions_and_leap_seconds() {
        let z = parse("2027-07-09T16:31:06Z").unwrap();
        assert_eq!(parse("2027-07-09T18:31:06+02:00").unwrap(), z);
        assert_eq!(parse("2027-07-09 16:31:06z").unwrap(), z);
        let back = parse("2027-07-10T01:00:00+03:00").unwrap();
        assert_eq!((back.hour, back.weekday), (22, 4)); // Friday 22h UTC
        let f = parse("2027-07-09T16:31:06.999Z").unwrap();
        assert_eq!(f.seconds, z.seconds + 0.999);
        let leap = parse("2027-07-09T23:59:60Z").unwrap();
        assert_eq!((leap.hour, leap.weekday), (0, 5));
        assert_eq!(leap.seconds, parse("2027-07-10T00:00:00Z").unwrap().seconds);
    }

    #[test]
    fn refuses_non_timestamps() {
        for bad in [
            "",
            "2026-03-11",
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-03-11T24:00:00Z",
            "2026-03-11T20:60:00Z",
            "2026-03-11T20:23:35",
            "2026-03-11T20:23:35+2",
            "2026-03-11T20:23:35+24:00",
            "2026-03-11T20:23:35.Z",
            "2026-03-11X20:23:35Z",
            "x026-03-11T20:23:35Z",
            "2026-03-11T20:23:35ZZ",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn format_inverts_parse() {
        for s in [
            "1970-01-01T00:00:00Z",
            "2016-12-31T23:59:59Z",
            "2026-03-01T00:32:40Z",
            "2028-02-29T12:00:00Z",
            "2030-12-28T19:51:51Z",
            "2100-03-01T01:02:03Z",
        ] {
            let t = parse(s).unwrap();
            assert_eq!(format(t.seconds as i64), s);
        }
        // Every day of 1960..2040 round-trips.
        let start = parse("1960-01-01T12:00:00Z").unwrap().seconds as i64;
        for day in 0..(80 * 366) {
            let s = format(start + day * 86_400);
            assert_eq!(
                parse(&s).unwrap().seconds as i64,
                start + day * 86_400,
                "{s}"
            );
        }
    }
}
