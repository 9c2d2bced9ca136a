//! A request body for a given query vector: SPEC.md's 14 dimensions read backwards, so that a
//! query built on the vectors themselves (an adversarial tie, [`crate::adversarial`]) can be sent
//! over HTTP like any transaction.
//!
//! Each component picks the field values its formula maps to it (an amount of `v0 x 10000`, an
//! hour of `v3 x 23`, a last transaction `v5 x 1440` minutes back, an MCC of the risk `v12`,
//! ...), and the body is kept only if [`crate::payload::query`] reads it back to exactly the
//! same vector. Some vectors have no body (an hour that is not a whole number of 23rds, an
//! amount_vs_avg of 1 with an amount of 0): then there is none.

use crate::payload::query;
use crate::Query;

/// The Monday that weekdays count from (2026-03-09).
const MONDAY: (u32, u32, u32) = (2026, 3, 9);

/// An MCC of each risk in SPEC.md's table (`5999` is 0.5, as every code outside it).
const MCC_OF_RISK: [(f64, &str); 10] = [
    (0.15, "5411"),
    (0.30, "5812"),
    (0.20, "5912"),
    (0.45, "5944"),
    (0.80, "7801"),
    (0.75, "7802"),
    (0.85, "7995"),
    (0.35, "4511"),
    (0.25, "5311"),
    (0.50, "5999"),
];

/// The shortest decimal text of `v` that reads back as `v`.
fn num(v: f64) -> String {
    format!("{v}")
}

/// A whole number `n` in `0..=max` whose `n / max`, rounded to 4 decimals, is `v`.
fn whole(v: f64, max: f64) -> Option<u32> {
    let n = (v * max).round();
    (crate::payload::round4(n / max) == v && (0.0..=max).contains(&n)).then_some(n as u32)
}

/// A body whose query is exactly `q`, if there is one.
pub fn body_for(q: &Query) -> Option<String> {
    let hour = whole(q[3], 23.0)?;
    let weekday = whole(q[4], 6.0)?;
    let binary = |v: f64| (v == 0.0 || v == 1.0).then_some(v == 1.0);
    let (online, card_present, unknown) = (binary(q[9])?, binary(q[10])?, binary(q[11])?);
    let mcc = MCC_OF_RISK
        .iter()
        .find(|(r, _)| *r == q[12])
        .map(|(_, c)| *c)?;
    let amount = q[0] * 10_000.0;
    // amount / avg_amount / 10 = v2: a ratio of 20 clamps to 1; a huge avg gives 0.
    let avg_amount = match q[2] {
        v if v >= 1.0 && amount > 0.0 => amount / 20.0,
        v if v <= 0.0 && amount > 0.0 => amount * 1e6,
        0.0 => 1.0,
        v if amount > 0.0 => amount / (v * 10.0),
        _ => return None,
    };
    let (y, m, d) = MONDAY;
    let day = d + weekday;
    let requested = format!("{y:04}-{m:02}-{day:02}T{hour:02}:00:00Z");
    let (none5, none6) = (q[5] == -1.0, q[6] == -1.0);
    let last = match (q[5], q[6]) {
        _ if none5 && none6 => "null".to_string(),
        _ if none5 || none6 => return None,
        (v5, v6) => {
            // The seconds back, to the millisecond, from the requested hour.
            let back_ms = (v5 * 86_400_000.0).round() as i64;
            let at_ms = (day as i64 * 86_400 + hour as i64 * 3600) * 1000 - back_ms;
            let (at_day, rest) = (at_ms.div_euclid(86_400_000), at_ms.rem_euclid(86_400_000));
            if at_day < 1 {
                return None;
            }
            let (h, mi, s, ms) = (
                rest / 3_600_000,
                rest / 60_000 % 60,
                rest / 1000 % 60,
                rest % 1000,
            );
            format!(
                r#"{{"timestamp":"{y:04}-{m:02}-{at_day:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z","km_from_current":{}}}"#,
                num(v6 * 1000.0)
            )
        }
    };
    let merchant = if unknown { "MERC-999" } else { "MERC-001" };
    let body = format!(
        r#"{{"id":"tx-inverted","transaction":{{"amount":{},"installments":{},"requested_at":"{requested}"}},"customer":{{"avg_amount":{},"tx_count_24h":{},"known_merchants":["MERC-001"]}},"merchant":{{"id":"{merchant}","mcc":"{mcc}","avg_amount":{}}},"terminal":{{"is_online":{online},"card_present":{card_present},"km_from_home":{}}},"last_transaction":{last}}}"#,
        num(amount),
        num(q[1] * 12.0),
        num(avg_amount),
        num(q[8] * 20.0),
        num(q[13] * 10_000.0),
        num(q[7] * 1000.0),
    );
    (query(body.as_bytes()).ok()? == *q).then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_requests_come_back_from_their_vectors() {
        let bodies = crate::generate::payloads(500, 11);
        let mut realized = 0;
        for b in &bodies {
            let q = query(b.as_bytes()).unwrap();
            if let Some(body) = body_for(&q) {
                assert_eq!(query(body.as_bytes()).unwrap(), q, "{body}");
                realized += 1;
            }
        }
        // Every generated request's vector has a body (the generator's own values are one).
        assert!(realized >= 490, "{realized} of 500");
    }

    #[test]
    fn vectors_without_a_body_have_none() {
        let mut q = query(crate::generate::payloads(1, 3)[0].as_bytes()).unwrap();
        q[3] = 0.5; // not a whole number of 23rds of a day
        assert_eq!(body_for(&q), None);
        let mut q2 = query(crate::generate::payloads(1, 3)[0].as_bytes()).unwrap();
        q2[5] = -1.0; // a sentinel in one of the two last-transaction dimensions only
        q2[6] = 0.5;
        assert_eq!(body_for(&q2), None);
    }
}
