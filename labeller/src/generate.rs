//! Request bodies drawn from the distributions of the contest's data generator
//! (`data-generator/main.c` of zanfranceschi/rinha-de-backend-2026, the program that made the
//! public test set), reimplemented here with its own random source, so the scorer can be
//! compared with the labeller on payloads nobody has seen.
//!
//! Each request is LEGIT, FRAUD or BORDERLINE (the generator splits a fraud ratio f into
//! 1 - f legit, 0.9 f fraud, 0.1 f borderline; f = 0.45 here, the public set's labels are 44%
//! fraud), and every field is uniform over that profile's range: amounts with 2 decimals,
//! kilometres written with up to 10 decimals, `requested_at` any day 1-28 of 2026-03..2030-12
//! at a profile-dependent hour, and 80% of requests with a last transaction 1 minute to 10
//! years earlier (the generator's `--randomize-payload-dates`, as in the public set).
//!
//! [`reference`] draws a labelled reference the way the generator makes its reference file: the
//! same profiles and ranges but the reference dates (a day 10-27 of 2026-03, a last transaction
//! 30-719 minutes earlier for legit, 1-9 for fraud, 5-119 for borderline), the request's
//! vector rounded to 4 decimals, and the label of the profile (a borderline one is fraud with
//! probability 0.5). The contest's 3,000,000 references are 33.31 % fraud: a fraud ratio of
//! 0.35 gives 0.95 x 0.35 = 33.25 %.

/// SplitMix64, for reproducible draws.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in [0, 1].
    fn unit(&mut self) -> f64 {
        f64::from(self.u32()) / f64::from(u32::MAX)
    }

    /// Uniform in [lo, hi].
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + self.unit() * (hi - lo)
    }

    /// Uniform integer in lo..hi.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (u64::from(self.u32()) % (hi - lo) as u64) as i64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Profile {
    Legit,
    Fraud,
    Borderline,
}

/// Share of non-legit requests.
const FRAUD_RATIO: f64 = 0.45;

const LEGIT_MCCS: [&str; 4] = ["5411", "5812", "5912", "5311"];
const FRAUD_MCCS: [&str; 3] = ["7995", "7801", "7802"];
/// SPEC.md's table, from which borderline requests draw.
const ALL_MCCS: [&str; 10] = [
    "5411", "5812", "5912", "5944", "7801", "7802", "7995", "4511", "5311", "5999",
];

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// A number as the generator writes it: integers without a fraction, others with at most 10
/// decimals and no trailing zeros.
fn number(v: f64) -> String {
    if v == v.floor() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.10}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Share of non-legit references ([`reference`]), from the contest references' fraud share.
pub const REFERENCE_FRAUD_RATIO: f64 = 0.35;

/// The dates of a request: a payload's (any day, a last transaction up to 10 years back) or a
/// reference's (March 2026, a last transaction minutes back, by profile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dates {
    Payload,
    Reference,
}

/// One request body.
pub fn payload(rng: &mut Rng) -> String {
    request(rng, FRAUD_RATIO, Dates::Payload).1
}

/// One labelled reference: its vector (4 decimals) and whether it is fraud.
pub fn reference(rng: &mut Rng, fraud_ratio: f64) -> ([f64; crate::DIMS], bool) {
    let (p, body) = request(rng, fraud_ratio, Dates::Reference);
    let vector = crate::payload::query(body.as_bytes())
        .unwrap_or_else(|e| panic!("a generated reference is a valid request ({e}): {body}"));
    let fraud = match p {
        Profile::Legit => false,
        Profile::Fraud => true,
        Profile::Borderline => rng.unit() < 0.5,
    };
    (vector, fraud)
}

/// A request of a profile drawn with `fraud_ratio`, and its body.
fn request(rng: &mut Rng, fraud_ratio: f64, dates: Dates) -> (Profile, String) {
    use Profile::*;
    let u = rng.unit();
    let p = if u < 1.0 - fraud_ratio {
        Legit
    } else if u < 1.0 - fraud_ratio * 0.1 {
        Fraud
    } else {
        Borderline
    };
    // Ranges per profile: (legit, fraud, borderline).
    let pick = |l: (f64, f64), f: (f64, f64), b: (f64, f64)| match p {
        Legit => l,
        Fraud => f,
        Borderline => b,
    };
    let id = rng.u32();
    let (lo, hi) = pick((10.0, 500.0), (2000.0, 10_000.0), (400.0, 3000.0));
    let amount = round2(rng.range(lo, hi));
    let (lo, hi) = pick((1.0, 4.0), (6.0, 13.0), (3.0, 8.0));
    let installments = rng.int(lo as i64, hi as i64);
    let (lo, hi) = pick((8.0, 21.0), (0.0, 7.0), (6.0, 23.0));
    let hour = rng.int(lo as i64, hi as i64);
    let (minute, second) = (rng.int(0, 60), rng.int(0, 60));
    let (year, month, day) = match dates {
        Dates::Payload => {
            let year = rng.int(2026, 2031);
            let month = if year == 2026 {
                rng.int(3, 13)
            } else {
                rng.int(1, 13)
            };
            (year, month, rng.int(1, 29))
        }
        Dates::Reference => (2026, 3, rng.int(10, 28)),
    };
    let requested_at = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z");
    let avg_amount = round2(match p {
        // The generator's legit range is [amount / 0.5, amount * 2], a single point.
        Legit => rng.range(amount / 0.5, amount * 2.0),
        Fraud => rng.range(50.0, 300.0),
        Borderline => rng.range(100.0, 500.0),
    });
    let (lo, hi) = pick((1.0, 6.0), (8.0, 21.0), (4.0, 12.0));
    let tx_count = rng.int(lo as i64, hi as i64);
    let known: Vec<String> = (0..rng.int(2, 6))
        .map(|_| format!("MERC-{:03}", rng.int(1, 20)))
        .collect();
    let merchant = match p {
        Legit => known[rng.int(0, known.len() as i64) as usize].clone(),
        Fraud => format!("MERC-{:03}", rng.int(50, 100)),
        Borderline if rng.unit() < 0.5 => known[rng.int(0, known.len() as i64) as usize].clone(),
        Borderline => format!("MERC-{:03}", rng.int(30, 60)),
    };
    let mcc = match p {
        Legit => LEGIT_MCCS[rng.int(0, 4) as usize],
        Fraud => FRAUD_MCCS[rng.int(0, 3) as usize],
        Borderline => ALL_MCCS[rng.int(0, 10) as usize],
    };
    let (lo, hi) = pick((30.0, 500.0), (20.0, 100.0), (50.0, 300.0));
    let merchant_avg = round2(rng.range(lo, hi));
    let online_share = match p {
        Legit => 0.3,
        Fraud => 0.8,
        Borderline => 0.5,
    };
    let online = rng.unit() < online_share;
    let card_present = !online && rng.unit() < 0.9;
    let (lo, hi) = pick((0.0, 50.0), (200.0, 1000.0), (30.0, 400.0));
    let km_home = rng.range(lo, hi);
    let last = if rng.unit() < 0.2 {
        "null".to_string()
    } else {
        let now = crate::time::parse(&requested_at)
            .expect("a valid date")
            .seconds as i64;
        let back = match dates {
            Dates::Payload => 60 + (rng.next_u64() % (10 * 365 * 24 * 3600)) as i64,
            Dates::Reference => {
                let (lo, hi) = pick((30.0, 720.0), (1.0, 10.0), (5.0, 120.0));
                60 * rng.int(lo as i64, hi as i64)
            }
        };
        let (lo, hi) = pick((0.0, 20.0), (200.0, 1000.0), (20.0, 300.0));
        format!(
            r#"{{"timestamp":"{}","km_from_current":{}}}"#,
            crate::time::format(now - back),
            number(rng.range(lo, hi))
        )
    };
    let known = known
        .iter()
        .map(|m| format!("\"{m}\""))
        .collect::<Vec<_>>()
        .join(",");
    let body = format!(
        concat!(
            r#"{{"id":"tx-{}","transaction":{{"amount":{},"installments":{},"requested_at":"{}"}},"#,
            r#""customer":{{"avg_amount":{},"tx_count_24h":{},"known_merchants":[{}]}},"#,
            r#""merchant":{{"id":"{}","mcc":"{}","avg_amount":{}}},"#,
            r#""terminal":{{"is_online":{},"card_present":{},"km_from_home":{}}},"#,
            r#""last_transaction":{}}}"#
        ),
        id,
        number(amount),
        installments,
        requested_at,
        number(avg_amount),
        tx_count,
        known,
        merchant,
        mcc,
        number(merchant_avg),
        online,
        card_present,
        number(km_home),
        last
    );
    (p, body)
}

/// Writes `count` references drawn from `seed` as the contest's references file (one JSON
/// array of `{"vector": [14 numbers], "label": "fraud" | "legit"}`, numbers as the generator
/// writes them; with `ids`, each record also has `"id": "<ids><index>"`), streamed; `progress` is told how many are written. Returns how many are fraud.
pub fn write_references(
    out: &mut impl std::io::Write,
    count: usize,
    seed: u64,
    ids: Option<&str>,
    progress: &dyn Fn(usize),
) -> std::io::Result<usize> {
    let mut rng = Rng::new(seed);
    let mut frauds = 0;
    out.write_all(b"[")?;
    for i in 0..count {
        let (v, fraud) = reference(&mut rng, REFERENCE_FRAUD_RATIO);
        frauds += usize::from(fraud);
        let sep = if i == 0 { "" } else { "," };
        let numbers: Vec<String> = v.iter().map(|&x| number(x)).collect();
        let label = if fraud { "fraud" } else { "legit" };
        let id = ids.map_or(String::new(), |prefix| format!(r#""id":"{prefix}{i}","#));
        write!(
            out,
            r#"{sep}{{{id}"vector":[{}],"label":"{label}"}}"#,
            numbers.join(",")
        )?;
        if i % 65_536 == 0 {
            progress(i);
        }
    }
    out.write_all(b"]\n")?;
    progress(count);
    Ok(frauds)
}

/// `n` request bodies from `seed`.
pub fn payloads(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| payload(&mut rng)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_valid_requests_with_the_generators_ranges() {
        let bodies = payloads(2_000, 7);
        assert_eq!(bodies, payloads(2_000, 7), "reproducible");
        let mut last_null = 0;
        let mut fraud_like = 0;
        for b in &bodies {
            let q = crate::payload::query(b.as_bytes()).unwrap_or_else(|e| panic!("{e}: {b}"));
            let v: serde_json::Value = serde_json::from_str(b).unwrap();
            let amount = v["transaction"]["amount"].as_f64().unwrap();
            assert!((10.0..=10_000.0).contains(&amount), "{b}");
            assert!(q[3] * 23.0 <= 22.0 + 1e-9, "hours stop at 22: {b}");
            last_null += usize::from(v["last_transaction"].is_null());
            fraud_like += usize::from(amount >= 2000.0);
        }
        // 20% without a last transaction, ~40% fraud-profile amounts (0.9 x 0.45).
        assert!((300..500).contains(&last_null), "{last_null}");
        assert!((650..950).contains(&fraud_like), "{fraud_like}");
    }

    #[test]
    fn references_follow_the_generators_reference_profiles() {
        let mut out = Vec::new();
        let frauds = write_references(&mut out, 20_000, 3, None, &|_| {}).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(rows.len(), 20_000);
        // 0.95 x 0.35 fraud; a fifth with the -1 sentinel; legit rows' amount/avg is 0.5 (0.05).
        assert!((6_300..7_000).contains(&frauds), "{frauds}");
        let (mut sentinel, mut legit_ratio) = (0, 0);
        for r in &rows {
            let v: Vec<f64> = r["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            assert_eq!(v.len(), 14);
            assert!(
                v.iter().all(|x| (x * 1e4 - (x * 1e4).round()).abs() < 1e-6),
                "4 decimals: {v:?}"
            );
            sentinel += usize::from(v[5] == -1.0);
            // Reference dates: the last transaction at most 719 minutes back, under 0.5 of a day.
            assert!(v[5] == -1.0 || v[5] < 0.5, "{v:?}");
            legit_ratio += usize::from(r["label"] == "legit" && v[2] == 0.05);
        }
        assert!((3_600..4_400).contains(&sentinel), "{sentinel}");
        assert!(legit_ratio > 10_000, "{legit_ratio}");
        assert!(text.starts_with(r#"[{"vector":["#) && text.ends_with("}]\n"));
    }

    /// The committed final-shape set (tests/data/README.md: `generate-csv --count 72100 --seed
    /// 20260622`) is pinned, and this generator still draws its payloads: a change to the draws
    /// fails here instead of leaving the set unreproducible.
    #[test]
    fn the_committed_final_shape_set_is_pinned_and_still_drawn() {
        use sha2::Digest;
        use std::io::Read;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/data/final-test-data.csv.gz"
        );
        let gz = std::fs::read(path).unwrap();
        let sha256 = format!("{:x}", sha2::Sha256::digest(&gz));
        assert_eq!(
            sha256,
            "0b1e48ae58e31538859862b5cdfcbf6bd8091a9c364fee07c771583ae7208fe7"
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap();
        // The statistics line and the header, then one row per payload in the order drawn: the
        // first N rows are `payloads(N, seed)`, whatever the count.
        let rows: Vec<&str> = text.lines().skip(2).take(300).collect();
        let drawn = payloads(rows.len(), 20260622);
        // The request columns: all but the last two (the labeller's answer).
        let request = |row: &str| row.rsplitn(3, ',').nth(2).unwrap().to_string();
        for (i, (row, body)) in rows.iter().zip(&drawn).enumerate() {
            let written = crate::csv::row(body, 0).unwrap();
            assert_eq!(request(row), request(&written), "row {i}");
        }
        assert_eq!(rows.len(), 300);
    }

    #[test]
    fn numbers_are_written_like_the_generator() {
        assert_eq!(number(441.59), "441.59");
        assert_eq!(number(12.0), "12");
        assert_eq!(number(33.881449206712), "33.8814492067");
        assert_eq!(number(0.5), "0.5");
    }
}
