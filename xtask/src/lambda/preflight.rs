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

pub fn has_credentials(list: &str) -> bool {
    let key = list.lines().find(|l| l.trim_start().starts_with("access_key"));
    key.is_some_and(|l| !l.contains("<not set>"))
}

pub fn run() -> Result<()> {
    let aws = |w: &str| duct::cmd("aws", w.split(' ')).env("AWS_EC2_METADATA_DISABLED", "true");
    let fail = |why: &str| {
        let text = format!("{why}; run `{BY_HAND}` by hand, then see docs/LAMBDA.md, \"Deploy\"");
        util::verdict("lambda preflight", false, &text, &())
    };
    if aws("--version").stdout_null().stderr_null().unchecked().run().is_err() {
        return fail("no aws CLI here");
    }
    let list = util::read(&aws("configure list").stderr_to_stdout()).unwrap_or_default();
    if !has_credentials(&list) {
        return fail("the aws CLI has no credentials here (`aws configure list`)");
    }
    log!("asking the account: {BY_HAND}");
    let json = util::read(&aws("lambda get-account-settings --query AccountLimit --output json"))?;
    let limit: Limit = serde_json::from_str(&json).context("get-account-settings")?;
    util::verdict("lambda preflight", true, &advice(&limit).1, &limit)
}
