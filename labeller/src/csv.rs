//! The contest's CSV test-set layout (the final's `test/test-data.csv`), written from request
//! bodies and the labeller's answers.
//!
//! ```text
//! # total=..,fraud_count=..,fraud_rate=..,legit_count=..,legit_rate=..,edge_case_rate=..
//! id,amount,installments,requested_at,cust_avg,tx_count_24h,known_merchants,merch_id,mcc,merch_avg,is_online,card_present,km_from_home,last_ts,last_km,expected_approved,expected_fraud_score
//! tx-1,441.59,1,2027-07-09T16:31:06Z,883.18,1,MERC-004|MERC-017,MERC-004,5411,302.78,false,true,33.8814492067,2027-06-04T14:14:22Z,18.4353521556,true,0
//! ```
//!
//! `known_merchants` is joined by `|`; `last_ts` and `last_km` are empty when there is no last
//! transaction. Numbers keep the text of the body they come from, so a reader that rebuilds the
//! body (or parses them as doubles, as a JavaScript load test does) gets the same values.

use crate::scan::K;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The header line after the statistics line.
pub const HEADER: &str = "id,amount,installments,requested_at,cust_avg,tx_count_24h,known_merchants,merch_id,mcc,merch_avg,is_online,card_present,km_from_home,last_ts,last_km,expected_approved,expected_fraud_score";

#[derive(Deserialize)]
struct Body<'a> {
    id: &'a str,
    #[serde(borrow)]
    transaction: Transaction<'a>,
    #[serde(borrow)]
    customer: Customer<'a>,
    #[serde(borrow)]
    merchant: Merchant<'a>,
    #[serde(borrow)]
    terminal: Terminal<'a>,
    #[serde(borrow)]
    last_transaction: Option<Last<'a>>,
}

#[derive(Deserialize)]
struct Transaction<'a> {
    #[serde(borrow)]
    amount: &'a RawValue,
    #[serde(borrow)]
    installments: &'a RawValue,
    requested_at: &'a str,
}

#[derive(Deserialize)]
struct Customer<'a> {
    #[serde(borrow)]
    avg_amount: &'a RawValue,
    #[serde(borrow)]
    tx_count_24h: &'a RawValue,
    #[serde(borrow)]
    known_merchants: Vec<&'a str>,
}

#[derive(Deserialize)]
struct Merchant<'a> {
    id: &'a str,
    mcc: &'a str,
    #[serde(borrow)]
    avg_amount: &'a RawValue,
}

#[derive(Deserialize)]
struct Terminal<'a> {
    is_online: bool,
    card_present: bool,
    #[serde(borrow)]
    km_from_home: &'a RawValue,
}

#[derive(Deserialize)]
struct Last<'a> {
    timestamp: &'a str,
    #[serde(borrow)]
    km_from_current: &'a RawValue,
}

/// One data line for `body` (a request without escapes in its strings, no `,` or `|` in them),
/// whose 5 nearest references hold `frauds` frauds.
pub fn row(body: &str, frauds: usize) -> Result<String, String> {
    let b: Body = serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))?;
    let strings = [
        b.id,
        b.transaction.requested_at,
        b.merchant.id,
        b.merchant.mcc,
    ];
    let all = strings
        .iter()
        .chain(&b.customer.known_merchants)
        .chain(b.last_transaction.as_ref().map(|l| &l.timestamp));
    if let Some(s) = all
        .clone()
        .find(|s| s.contains([',', '|', '"', '\n', '\r']))
    {
        return Err(format!("{s:?} cannot be written in the CSV layout: {body}"));
    }
    let (last_ts, last_km) = match &b.last_transaction {
        Some(l) => (l.timestamp, l.km_from_current.get()),
        None => ("", ""),
    };
    let score = frauds as f64 / K as f64;
    Ok([
        b.id,
        b.transaction.amount.get(),
        b.transaction.installments.get(),
        b.transaction.requested_at,
        b.customer.avg_amount.get(),
        b.customer.tx_count_24h.get(),
        &b.customer.known_merchants.join("|"),
        b.merchant.id,
        b.merchant.mcc,
        b.merchant.avg_amount.get(),
        if b.terminal.is_online {
            "true"
        } else {
            "false"
        },
        if b.terminal.card_present {
            "true"
        } else {
            "false"
        },
        b.terminal.km_from_home.get(),
        last_ts,
        last_km,
        if score < 0.6 { "true" } else { "false" },
        &format!("{score}"),
    ]
    .join(","))
}

/// The statistics line for the answers' fraud counts, as the contest writes it (rates with 4
/// decimals; an edge case is a vote of exactly 3 of 5).
pub fn stats_line(frauds: &[usize]) -> String {
    let total = frauds.len();
    let fraud = frauds.iter().filter(|&&f| f * 5 >= 3 * K).count();
    let edge = frauds.iter().filter(|&&f| f == 3).count();
    let rate = |n: usize| n as f64 / total.max(1) as f64;
    format!(
        "# total={total},fraud_count={fraud},fraud_rate={:.4},legit_count={},legit_rate={:.4},edge_case_rate={:.4}",
        rate(fraud),
        total - fraud,
        rate(total - fraud),
        rate(edge)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"id":"tx-1641912674","transaction":{"amount":441.59,"installments":1,"requested_at":"2027-07-09T16:31:06Z"},"customer":{"avg_amount":883.18,"tx_count_24h":1,"known_merchants":["MERC-004","MERC-017"]},"merchant":{"id":"MERC-004","mcc":"5411","avg_amount":302.78},"terminal":{"is_online":false,"card_present":true,"km_from_home":33.8814492067},"last_transaction":{"timestamp":"2027-06-04T14:14:22Z","km_from_current":18.4353521556}}"#;

    #[test]
    fn rows_keep_the_bodys_text() {
        assert_eq!(
            row(BODY, 0).unwrap(),
            "tx-1641912674,441.59,1,2027-07-09T16:31:06Z,883.18,1,MERC-004|MERC-017,MERC-004,5411,302.78,false,true,33.8814492067,2027-06-04T14:14:22Z,18.4353521556,true,0"
        );
        let null_last = BODY.replace(
            r#"{"timestamp":"2027-06-04T14:14:22Z","km_from_current":18.4353521556}"#,
            "null",
        );
        assert!(row(&null_last, 3)
            .unwrap()
            .ends_with(",true,33.8814492067,,,false,0.6"));
        assert!(row(&BODY.replace("MERC-017", "MERC,17"), 0).is_err());
        assert_eq!(
            HEADER.split(',').count(),
            row(BODY, 5).unwrap().split(',').count()
        );
    }

    #[test]
    fn stats_count_frauds_and_edges() {
        assert_eq!(
            stats_line(&[0, 3, 5, 2]),
            "# total=4,fraud_count=2,fraud_rate=0.5000,legit_count=2,legit_rate=0.5000,edge_case_rate=0.2500"
        );
    }
}
