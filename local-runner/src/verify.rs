//! `verify`: replays a file in the contest's test format through the handler, JSON in and JSON
//! out, and reports the confusion matrix, the contest's detection score and the handler's
//! latency.
//!
//! Each request's original JSON text is passed to [`Scorer::handle`] exactly as a client would
//! send it; the response body is parsed back, so what is checked is what a client would see.
//! Latency is the wall time of `handle` alone (parse + vectorize + search + response).
//!
//! `verify --neighbours` (the binary's `neighbours` module) reads the same files through
//! [`read`] and compares neighbours with the labeller instead.

use anyhow::{bail, Context, Result};
use function::{Readiness, Request, Scorer};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

/// A file in the contest's test format.
#[derive(Deserialize)]
pub struct TestFile {
    /// SHA-256 of the references the answers were labelled against.
    #[serde(default)]
    pub references_checksum_sha256: Option<String>,
    pub entries: Vec<Entry>,
}

/// One payload and its labelled answer.
#[derive(Deserialize)]
pub struct Entry {
    /// The request body exactly as written in the file.
    pub request: Box<RawValue>,
    pub expected_approved: bool,
    pub expected_fraud_score: f64,
}

#[derive(Deserialize)]
struct Answer {
    approved: bool,
    fraud_score: f64,
}

/// The summary line (its keys are part of the interface: the harness reads it as this type).
pub use index_pack::report::Answers as Report;

/// The contest's detection score for N requests.
pub fn detection_score(n: u64, fp: u64, fn_: u64, errors: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let e = (fp + 3 * fn_ + 5 * errors) as f64;
    if (fp + fn_ + errors) as f64 / n as f64 > 0.15 {
        return -3000.0;
    }
    1000.0 * (1.0 / (e / n as f64).max(0.001)).log10() - 300.0 * (1.0 + e).log10()
}

/// Reads a test file: the public set's JSON, or the final's CSV layout when the name holds
/// `.csv` (gzip when it ends in .gz).
pub fn read(path: &Path) -> Result<TestFile> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut text = String::new();
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file).read_to_string(&mut text)
    } else {
        std::io::BufReader::new(file).read_to_string(&mut text)
    }
    .with_context(|| format!("cannot read {}", path.display()))?;
    if path.to_string_lossy().contains(".csv") {
        return from_csv(&text)
            .with_context(|| format!("{} is not a contest CSV test file", path.display()));
    }
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a contest test file", path.display()))
}

/// The columns of the final's CSV layout after its `# total=...` line.
const CSV_HEADER: &str = "id,amount,installments,requested_at,cust_avg,tx_count_24h,known_merchants,merch_id,mcc,merch_avg,is_online,card_present,km_from_home,last_ts,last_km,expected_approved,expected_fraud_score";

/// The final's CSV layout: each line becomes the request body the contest's load test sends
/// (its `id` aside, which the decision does not read), numbers kept as written.
fn from_csv(text: &str) -> Result<TestFile> {
    let mut lines = text.lines();
    let stats = lines.next().unwrap_or_default();
    let total: Option<usize> = stats
        .strip_prefix("# total=")
        .and_then(|s| s.split(',').next())
        .and_then(|n| n.parse().ok());
    let Some(total) = total else {
        bail!("the first line is not `# total=N,...`: {stats:?}");
    };
    if lines.next() != Some(CSV_HEADER) {
        bail!("the second line is not the header {CSV_HEADER}");
    }
    let entries = lines
        .enumerate()
        .map(|(i, line)| csv_entry(line).with_context(|| format!("line {}: {line}", i + 3)))
        .collect::<Result<Vec<_>>>()?;
    if entries.len() != total {
        bail!("{} data lines, the first line says {total}", entries.len());
    }
    Ok(TestFile {
        references_checksum_sha256: None,
        entries,
    })
}

fn csv_entry(line: &str) -> Result<Entry> {
    let f: Vec<&str> = line.split(',').collect();
    let [id, amount, installments, at, cust_avg, count, known, merch, mcc, merch_avg, online, present, km_home, last_ts, last_km, approved, score] =
        f[..]
    else {
        bail!("{} fields, the layout has 17", f.len());
    };
    let number = |name: &str, v: &str| -> Result<()> {
        serde_json::from_str::<f64>(v)
            .map(drop)
            .map_err(|_| anyhow::anyhow!("{name} is not a JSON number: {v:?}"))
    };
    let boolean = |name: &str, v: &str| -> Result<bool> {
        v.parse()
            .map_err(|_| anyhow::anyhow!("{name} is not true or false: {v:?}"))
    };
    for (name, v) in [
        ("amount", amount),
        ("installments", installments),
        ("cust_avg", cust_avg),
        ("tx_count_24h", count),
        ("merch_avg", merch_avg),
        ("km_from_home", km_home),
    ] {
        number(name, v)?;
    }
    let strings = [id, at, merch, mcc, last_ts]
        .into_iter()
        .chain(known.split('|'));
    if let Some(s) = strings
        .clone()
        .find(|s| s.contains(['"', '\\']) || s.chars().any(char::is_control))
    {
        bail!("{s:?} needs escaping, which the layout does not have");
    }
    let known: Vec<String> = if known.is_empty() {
        Vec::new()
    } else {
        known.split('|').map(|m| format!("\"{m}\"")).collect()
    };
    let last = if last_ts.is_empty() && last_km.is_empty() {
        "null".to_string()
    } else {
        number("last_km", last_km)?;
        format!(r#"{{"timestamp":"{last_ts}","km_from_current":{last_km}}}"#)
    };
    let body = format!(
        concat!(
            r#"{{"id":"{}","transaction":{{"amount":{},"installments":{},"requested_at":"{}"}},"#,
            r#""customer":{{"avg_amount":{},"tx_count_24h":{},"known_merchants":[{}]}},"#,
            r#""merchant":{{"id":"{}","mcc":"{}","avg_amount":{}}},"#,
            r#""terminal":{{"is_online":{},"card_present":{},"km_from_home":{}}},"#,
            r#""last_transaction":{}}}"#
        ),
        id,
        amount,
        installments,
        at,
        cust_avg,
        count,
        known.join(","),
        merch,
        mcc,
        merch_avg,
        boolean("is_online", online)?,
        boolean("card_present", present)?,
        km_home,
        last
    );
    Ok(Entry {
        request: RawValue::from_string(body)?,
        expected_approved: boolean("expected_approved", approved)?,
        expected_fraud_score: serde_json::from_str(score)
            .map_err(|_| anyhow::anyhow!("expected_fraud_score is not a number: {score:?}"))?,
    })
}

/// Replays `path`; prints progress lines for the human and returns the report.
pub fn run(
    scorer: &Scorer,
    path: &Path,
    source_sha256: &str,
    show_mismatches: usize,
) -> Result<Report> {
    let file = read(path)?;
    if let Some(expected) = &file.references_checksum_sha256 {
        if !expected.eq_ignore_ascii_case(source_sha256) {
            eprintln!("warning: {} was labelled against references {expected}, the index was built from {source_sha256}", path.display());
        }
    }
    if file.entries.is_empty() {
        bail!("{} holds no entries", path.display());
    }
    let mut r = Report::default();
    let mut lat = Vec::with_capacity(file.entries.len());
    let mut shown = 0;
    for (i, e) in file.entries.iter().enumerate() {
        let body = e.request.get().as_bytes();
        let t = Instant::now();
        let resp = scorer.handle(
            &Request::new("POST", "/fraud-score", body),
            Readiness::Ready,
        );
        lat.push(t.elapsed().as_nanos() as u64);
        r.total += 1;
        let answer = (resp.status == 200)
            .then(|| serde_json::from_str::<Answer>(&resp.body).ok())
            .flatten();
        let Some(a) = answer else {
            r.errors += 1;
            if shown < show_mismatches {
                eprintln!("entry {i}: HTTP {} {}", resp.status, resp.body);
                shown += 1;
            }
            continue;
        };
        match (e.expected_approved, a.approved) {
            (false, false) => r.tp += 1,
            (true, true) => r.tn += 1,
            (true, false) => r.fp += 1,
            (false, true) => r.fn_ += 1,
        }
        if (a.fraud_score - e.expected_fraud_score).abs() > 1e-9 {
            r.score_mismatches += 1;
            if shown < show_mismatches {
                eprintln!(
                    "entry {i}: fraud_score {} expected {}",
                    a.fraud_score, e.expected_fraud_score
                );
                shown += 1;
            }
        }
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1] as f64 / 1000.0
    };
    r.p50_us = pct(0.50);
    r.p99_us = pct(0.99);
    r.detection_score = detection_score(r.total, r.fp, r.fn_, r.errors);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_lines_become_the_bodies_the_load_test_sends() {
        let text = format!(
            "# total=2,fraud_count=1,fraud_rate=0.5,legit_count=1,legit_rate=0.5,edge_case_rate=0\n{CSV_HEADER}\n{}\n{}\n",
            "tx-1,441.59,1,2027-07-09T16:31:06Z,883.18,1,MERC-004|MERC-017,MERC-004,5411,302.78,false,true,33.8814492067,2027-06-04T14:14:22Z,18.4353521556,true,0",
            "tx-2,9505.97,10,2026-03-14T05:15:12Z,81.28,20,,MERC-068,7802,54.86,false,true,952.27,,,false,1",
        );
        let f = from_csv(&text).unwrap();
        assert_eq!(
            f.entries[0].request.get(),
            r#"{"id":"tx-1","transaction":{"amount":441.59,"installments":1,"requested_at":"2027-07-09T16:31:06Z"},"customer":{"avg_amount":883.18,"tx_count_24h":1,"known_merchants":["MERC-004","MERC-017"]},"merchant":{"id":"MERC-004","mcc":"5411","avg_amount":302.78},"terminal":{"is_online":false,"card_present":true,"km_from_home":33.8814492067},"last_transaction":{"timestamp":"2027-06-04T14:14:22Z","km_from_current":18.4353521556}}"#
        );
        assert!(f.entries[1].request.get().ends_with(r#""known_merchants":[]},"merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},"terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}"#));
        assert_eq!(
            (
                f.entries[1].expected_approved,
                f.entries[1].expected_fraud_score
            ),
            (false, 1.0)
        );
        // Wrong counts, headers and fields are refused with the line.
        assert!(from_csv(&text.replace("total=2", "total=3")).is_err());
        assert!(from_csv(&text.replace("last_km,", "last_kms,")).is_err());
        let Err(e) = from_csv(&text.replace("441.59", "lots")) else {
            panic!("a bad amount was read");
        };
        assert!(
            format!("{e:#}").contains("line 3") && format!("{e:#}").contains("amount"),
            "{e:#}"
        );
    }

    #[test]
    fn detection_score_matches_spec_examples() {
        assert!((detection_score(54_059, 0, 0, 0) - 3000.0).abs() < 1e-9);
        // SPEC: at N = 54,059 one FP costs about 90 points, one FN 181, one error 233.
        let base = detection_score(54_059, 0, 0, 0);
        assert!((base - detection_score(54_059, 1, 0, 0) - 90.3).abs() < 1.0);
        assert!((base - detection_score(54_059, 0, 1, 0) - 180.6).abs() < 1.0);
        assert!((base - detection_score(54_059, 0, 0, 1) - 233.4).abs() < 1.0);
        assert_eq!(detection_score(100, 16, 0, 0), -3000.0);
    }
}
