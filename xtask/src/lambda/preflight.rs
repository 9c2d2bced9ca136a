//! `cargo xtask lambda preflight`: the `ReservedConcurrency` the account allows (100 stay free).

use crate::prelude::*;

#[derive(Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct Limit {
    pub concurrent_executions: u64,
    pub unreserved_concurrent_executions: u64,
}

const BY_HAND: &str = "aws lambda get-account-settings --query AccountLimit";

/// The largest reservation the account allows (`None`: none, only -1 deploys) and the advice.
pub fn advice(l: &Limit) -> (Option<u64>, String) {
    let (limit, unreserved) = (l.concurrent_executions, l.unreserved_concurrent_executions);
    let max = unreserved.checked_sub(100).filter(|m| *m >= 1);
    let text = match max {
        Some(m) => format!("ReservedConcurrency -1 (the default, no cap) or 1..={m} (`sam deploy --parameter-overrides ReservedConcurrency=N`; 0 stops all traffic)"),
        None => format!("ReservedConcurrency -1 only (the default, no cap): a reservation of N needs {} unreserved, this account has {unreserved} of {limit} (raise the limit through Service Quotas to cap the function)", "100 + N"),
    };
    (max, format!("account limit {limit}, unreserved {unreserved}: {text}"))
}

fn has_credentials(list: &str) -> bool {
    let key = list.lines().find(|l| l.trim_start().starts_with("access_key"));
    key.is_some_and(|l| !l.contains("<not set>"))
}

pub fn run() -> Result<()> {
    let aws = |args: &[&str]| duct::cmd("aws", args).env("AWS_EC2_METADATA_DISABLED", "true");
    let fail = |why: &str| {
        let figures =
            format!("{why}; run `{BY_HAND}` by hand, then see docs/LAMBDA.md, \"Deploy\"");
        util::verdict("lambda preflight", false, &figures, &())
    };
    if aws(&["--version"]).stdout_null().stderr_null().unchecked().run().is_err() {
        return fail("no aws CLI here");
    }
    let list = util::read(&aws(&["configure", "list"]).stderr_to_stdout()).unwrap_or_default();
    if !has_credentials(&list) {
        return fail("the aws CLI has no credentials here (`aws configure list`)");
    }
    log!("asking the account: {BY_HAND}");
    let json = util::read(&aws(&["lambda", "get-account-settings", "--output", "json"]))?;
    let settings: serde_json::Value =
        serde_json::from_str(&json).context("get-account-settings")?;
    let limit: Limit =
        serde_json::from_value(settings["AccountLimit"].clone()).context("get-account-settings")?;
    util::verdict("lambda preflight", true, &advice(&limit).1, &limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_reservations_an_account_allows() {
        let limit = |c, u| Limit { concurrent_executions: c, unreserved_concurrent_executions: u };
        for ((c, u), max) in
            [((10, 10), None), ((100, 100), None), ((101, 101), Some(1)), ((1000, 900), Some(800))]
        {
            assert_eq!(advice(&limit(c, u)).0, max, "{c} {u}");
        }
        let none = advice(&limit(10, 10)).1;
        assert!(none.contains("account limit 10, unreserved 10: ReservedConcurrency -1 only"));
        assert!(advice(&limit(1000, 1000)).1.contains("or 1..=900"));
        let unset = "      Name   Value   Type  Location\n access_key     <not set>   None  None\n";
        let set = " access_key     ****************ABCD shared-credentials-file\n";
        assert_eq!([unset, set, ""].map(has_credentials), [false, true, false]);
    }
}
