//! What the SAM templates and the dashboards promise, held to the code: the wiring of the
//! sharded rollout, the canary's own approval-rate alarm fed with the documents the function
//! writes, and every dashboard widget or query naming metrics and dimensions the code emits.

use function::decision::Decision;
use function::handler::{Outcome, Reason};
use function::metrics::{Counters, EmfDocument, Emitter};
use http_server::latency::{Latency, Route};
use index_pack::format::{Identity, SetPart};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use xtask::lambda::image::TEMPLATE;
use xtask::lambda::sam::defaults;
use xtask::util::root;
use yaml_serde::Value;

fn template(name: &str) -> Value {
    yaml_serde::from_str(&std::fs::read_to_string(root().join(name)).unwrap()).unwrap()
}

/// The value at a dotted path (a number indexes a sequence); a step that does not exist fails
/// the test, naming the path (a mistyped path cannot pass for an absent value).
pub fn node<'a>(t: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(t, |v, k| {
        let next = match k.parse::<usize>() {
            Ok(i) => v.get(i),
            Err(_) => v.get(k),
        };
        next.unwrap_or_else(|| panic!("no {k} in {path}"))
    })
}

/// [`node`] as YAML text.
pub fn at(t: &Value, path: &str) -> String {
    yaml_serde::to_string(node(t, path)).unwrap()
}

/// The key that ends `path` is absent from a mapping that exists.
pub fn absent(t: &Value, path: &str) -> bool {
    let (parent, key) = path.rsplit_once('.').unwrap();
    let p = node(t, parent);
    assert!(p.is_mapping() || p.is_sequence(), "{parent} is neither a mapping nor a sequence");
    match key.parse::<usize>() {
        Ok(i) => p.get(i).is_none(),
        Err(_) => p.get(key).is_none(),
    }
}

#[test]
fn the_template_keeps_its_defaults_role_and_one_bounded_endpoint() {
    let d = defaults().unwrap();
    assert!(d.memory_mb >= 128 && d.timeout_s >= 1 && d.cpus.is_none(), "{d:?}");
    let t = template("template.yaml");
    let r = t["Resources"].as_mapping().unwrap();
    let of_type = |kind: &str| r.iter().filter(|(_, v)| v["Type"] == kind).count();
    let conditional = |cond: &str| r.iter().filter(|(_, v)| v["Condition"] == cond).count();
    // The scorer's role and the deployment hook's.
    assert_eq!((of_type("AWS::IAM::Role"), of_type("AWS::Lambda::Url")), (2, 1));
    assert_eq!(["WithHttpApi", "WithAlarms", "PublicUrl"].map(conditional), [6, 2, 2]);
    // Everything that makes a second endpoint or invokes the function from elsewhere is
    // behind a condition; the Function URL is the only unconditional endpoint.
    for (_, v) in r.iter() {
        let kind = v["Type"].as_str().unwrap();
        let gated = kind.starts_with("AWS::ApiGateway") || kind == "AWS::Lambda::Permission";
        assert!(!gated || v.get("Condition").is_some(), "{v:?}");
    }
    let (f, role, stage) = (
        "Resources.FraudScoreFunction.Properties",
        "Resources.FraudScoreRole.Properties",
        "Resources.FraudScoreHttpApiStage.Properties.DefaultRouteSettings",
    );
    let statement = format!("{role}.Policies.0.PolicyDocument.Statement");
    // (path, what its YAML text holds): the role may only write its own log streams (no
    // managed policy; !GetAtt FraudScoreLogGroup.Arn), the function uses it (SAM would
    // otherwise make its own) and has no event of its own.
    let holds = [
        (format!("{f}.Role"), "FraudScoreRole.Arn"),
        (format!("{f}.LoggingConfig.LogGroup"), "FraudScoreLogGroup"),
        (format!("{f}.LoggingConfig.LogFormat"), "JSON"),
        // Deployed with its defaults, the function is never public and uncapped at once: a
        // flood of an unauthenticated URL could otherwise take every unreserved execution
        // environment of the account (docs/LAMBDA.md, "What a flood costs"). Its
        // ReservedConcurrency default -1 is AWS::NoValue: no reservation (an account of 10
        // allows none), nothing the account must leave free.
        ("Parameters.FunctionUrlAuthType.Default".into(), "AWS_IAM"),
        ("Parameters.ReservedConcurrency.Default".into(), "-1"),
        (
            "Conditions.HasReservedConcurrency".into(),
            "!Not\n- !Equals\n  - !Ref ReservedConcurrency\n  - -1\n",
        ),
        (
            format!("{f}.ReservedConcurrentExecutions"),
            "!If\n- HasReservedConcurrency\n- !Ref ReservedConcurrency\n- !Ref AWS::NoValue\n",
        ),
        (format!("{statement}.0.Effect"), "Allow"),
        (format!("{statement}.0.Action"), "- logs:CreateLogStream\n- logs:PutLogEvents\n"),
        (format!("{statement}.0.Resource"), "FraudScoreLogGroup.Arn"),
        (format!("{stage}.ThrottlingBurstLimit"), "HttpApiThrottlingBurstLimit"),
        (format!("{stage}.ThrottlingRateLimit"), "HttpApiThrottlingRateLimit"),
        ("Resources.FraudScoreUrl.Properties.AuthType".into(), "FunctionUrlAuthType"),
        ("Parameters.FunctionUrlAuthType.AllowedValues".into(), "- NONE\n"),
        ("Parameters.EnableHttpApi.Default".into(), "false"),
        ("Parameters.EnableAlarms.Default".into(), "false"),
    ];
    for (path, want) in holds {
        assert!(at(&t, &path).contains(want), "{path}: {}", at(&t, &path));
    }
    let absent_paths = [
        format!("{f}.Events"),
        format!("{f}.FunctionUrlConfig"),
        format!("{role}.ManagedPolicyArns"),
        format!("{role}.Policies.1"),
        format!("{statement}.1"),
    ];
    for path in absent_paths {
        assert!(absent(&t, &path), "{path}: {}", at(&t, &path));
    }
}

/// A deploy publishes a version; the endpoints call the alias, which CodeDeploy moves only after
/// the PreTraffic hook passed the new version, gradually, rolled back by the alarms; the hook
/// may invoke the scorer's versions and report to CodeDeploy, nothing more; the approval-rate
/// alarm reads the metrics the function writes (its namespace and names).
#[test]
fn the_alias_the_deployment_the_hook_and_the_alarms_are_wired_together() {
    for template in ["template.yaml", TEMPLATE] {
        let t = self::template(template);
        let f = |p: &str| format!("Resources.FraudScoreFunction.Properties.{p}");
        let hook = |p: &str| format!("Resources.PreTrafficHook.Properties.{p}");
        let role = "Resources.PreTrafficHookRole.Properties.Policies.0.PolicyDocument";
        let hook_role = |p: &str| format!("{role}.{p}");
        let rate =
            |p: &str| format!("Resources.FraudScoreApprovalRateAlarm.Properties.Metrics.{p}");
        let ns = function::metrics::NAMESPACE;
        let holds: Vec<(String, String)> = [
            (f("AutoPublishAlias"), "live"),
            (f("DeploymentPreference.Type"), "!Ref DeploymentType"),
            (f("DeploymentPreference.Alarms.0"), "!Ref FraudScoreErrorsAlarm"),
            (f("DeploymentPreference.Alarms.1"), "!Ref FraudScoreApprovalRateAlarm"),
            (f("DeploymentPreference.Alarms.2"), "!Ref FraudScoreCanaryApprovalRateAlarm"),
            (f("DeploymentPreference.Hooks.PreTraffic"), "!Ref PreTrafficHook"),
            ("Parameters.DeploymentType.Default".into(), "Canary10Percent5Minutes"),
            // Every endpoint and permission is on the alias, never on $LATEST.
            (
                "Resources.FraudScoreUrl.Properties.TargetFunctionArn".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreUrlPublicInvoke.Properties.FunctionName".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreUrlPublicInvokeUrl.Properties.FunctionName".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreHttpApiIntegration.Properties.IntegrationUri".into(),
                "FraudScoreFunction.Alias",
            ),
            (
                "Resources.FraudScoreHttpApiInvoke.Properties.FunctionName".into(),
                "FraudScoreFunction.Alias",
            ),
            // The hook: a name SAM's CodeDeploy role may invoke, the new version as its target.
            (hook("FunctionName"), "CodeDeployHook_"),
            (hook("Environment.Variables.FRAUD_TARGET"), "!Ref FraudScoreFunction.Version"),
            (hook_role("Statement.0.Action"), "lambda:InvokeFunction"),
            (hook_role("Statement.0.Resource"), "${FraudScoreFunction.Arn}:*"),
            (hook_role("Statement.1.Action"), "codedeploy:PutLifecycleEventHookExecutionStatus"),
            // The rollback alarms: errors of the alias; the approval rate of the function's
            // own metrics, unconditional (the deployment names them).
            (
                "Resources.FraudScoreErrorsAlarm.Properties.Dimensions.1.Value".into(),
                "${FraudScoreFunction}:live",
            ),
            (rate("0.MetricStat.Metric.Namespace"), ns),
            (rate("0.MetricStat.Metric.MetricName"), "Approved"),
            (rate("1.MetricStat.Metric.Namespace"), ns),
            (rate("1.MetricStat.Metric.MetricName"), "Denied"),
            (rate("3.Expression"), "ApprovalRateLowPercent"),
            (rate("3.Expression"), "ApprovalRateHighPercent"),
            (rate("3.Expression"), "ApprovalRateMinDecisions"),
        ]
        .into_iter()
        .map(|(p, w)| (p, w.to_string()))
        .collect();
        for (path, want) in holds {
            let got = at(&t, &path);
            assert!(got.contains(&want), "{template}: {path}: {got}, want {want}");
        }
        for path in [
            hook("DeploymentPreference"),
            hook_role("Statement.3"),
            "Resources.FraudScoreErrorsAlarm.Condition".into(),
            "Resources.FraudScoreApprovalRateAlarm.Condition".into(),
            "Resources.FraudScoreCanaryApprovalRateAlarm.Condition".into(),
        ] {
            assert!(absent(&t, &path), "{template}: {path} is there");
        }
    }
}

#[test]
fn paths_that_do_not_exist_fail() {
    let t = template("template.yaml");
    assert!(absent(&t, "Resources.FraudScoreFunction.Properties.Events"));
    assert!(!absent(&t, "Resources.FraudScoreFunction.Properties.Handler"));
    let typo = std::panic::catch_unwind(|| at(&t, "Resources.FraudScoreFunktion.Properties"));
    assert!(typo.is_err(), "a mistyped path must not read as absent");
    let typo = std::panic::catch_unwind(|| absent(&t, "Resources.Nope.Properties.Events"));
    assert!(typo.is_err());
}

/// A new set rolls out as one: the shards publish versions, the front pins them (never
/// `$LATEST` or a moving alias), and the front's alias moves only through CodeDeploy, after
/// its PreTraffic hook, rolled back by its alarms; the front may invoke only its shards.
#[test]
fn the_sharded_set_rolls_out_as_one() {
    let t = template("template-sharded.yaml");
    let front = |p: &str| format!("Resources.Front.Properties.{p}");
    let shards = at(&t, &front("Environment.Variables.FRAUD_SHARDS"));
    for k in 0..4 {
        assert!(shards.contains(&format!("Shard{k}.Version")), "{shards}");
        let s = format!("Resources.Shard{k}.Properties");
        assert!(at(&t, &format!("{s}.AutoPublishAlias")).contains("set"));
        assert!(absent(&t, &format!("{s}.DeploymentPreference")), "a shard moves with the front");
    }
    let holds = [
        (front("AutoPublishAlias"), "live"),
        (front("DeploymentPreference.Type"), "!Ref DeploymentType"),
        (front("DeploymentPreference.Hooks.PreTraffic"), "!Ref PreTrafficHook"),
        (front("DeploymentPreference.Alarms.0"), "FrontErrorsAlarm"),
        (front("DeploymentPreference.Alarms.1"), "FrontShardFailuresAlarm"),
        (front("DeploymentPreference.Alarms.2"), "FrontCanaryApprovalRateAlarm"),
        ("Resources.FrontUrl.Properties.TargetFunctionArn".into(), "Front.Alias"),
        ("Resources.FrontUrlPublicInvoke.Properties.FunctionName".into(), "Front.Alias"),
        (
            "Resources.PreTrafficHook.Properties.Environment.Variables.FRAUD_TARGET".into(),
            "Front.Version",
        ),
        ("Resources.PreTrafficHook.Properties.FunctionName".into(), "CodeDeployHook_"),
        (
            "Resources.FrontShardFailuresAlarm.Properties.Dimensions.1.Value".into(),
            Reason::ShardUnavailable.name(),
        ),
    ];
    for (path, want) in holds {
        let got = at(&t, &path);
        assert!(got.contains(want), "{path}: {got}, want {want}");
    }
    // The front's role names each shard and its versions: no pattern that other stacks' functions
    // could match.
    let role =
        at(&t, "Resources.FrontRole.Properties.Policies.0.PolicyDocument.Statement.0.Resource");
    assert!(!role.contains('*') || role.matches(".Arn}:*").count() == 4, "{role}");
    for k in 0..4 {
        assert!(role.contains(&format!("Shard{k}.Arn")), "{role}");
    }
}

/// Resolves the intrinsics the alarms use (`!Ref`, `!Select`, `!Split`, `!Sub`) with `refs` for
/// the resources and the parameters' defaults.
fn resolve(v: &Value, refs: &BTreeMap<&str, &str>, t: &Value) -> String {
    let Value::Tagged(tagged) = v else {
        return v.as_str().map(String::from).unwrap_or_else(|| yaml_serde::to_string(v).unwrap());
    };
    let args = tagged.value.as_sequence();
    match tagged.tag.to_string().trim_start_matches('!') {
        "Ref" => {
            let name = tagged.value.as_str().unwrap();
            refs.get(name)
                .map(|s| s.to_string())
                .unwrap_or_else(|| at(t, &format!("Parameters.{name}.Default")).trim().to_string())
        }
        "Select" => {
            let args = args.unwrap();
            let i = args[0].as_u64().unwrap() as usize;
            let list = resolve_list(&args[1], refs, t);
            list[i].clone()
        }
        "Sub" => {
            let mut s = tagged.value.as_str().unwrap().to_string();
            while let Some(start) = s.find("${") {
                let end = start + s[start..].find('}').unwrap();
                let name = &s[start + 2..end];
                let value = refs.get(name).map(|v| v.to_string()).unwrap_or_else(|| {
                    at(t, &format!("Parameters.{name}.Default")).trim().to_string()
                });
                s.replace_range(start..=end, &value);
            }
            s
        }
        other => panic!("intrinsic {other} not resolved here"),
    }
}

fn resolve_list(v: &Value, refs: &BTreeMap<&str, &str>, t: &Value) -> Vec<String> {
    let Value::Tagged(tagged) = v else { panic!("a list intrinsic: {v:?}") };
    assert!(tagged.tag == "Split", "{v:?}");
    let args = tagged.value.as_sequence().unwrap();
    let text = resolve(&args[1], refs, t);
    text.split(args[0].as_str().unwrap()).map(String::from).collect()
}

/// A tiny reader of CloudWatch metric math: numbers, ids, `+ - * /`, comparisons, `AND`, `OR`,
/// `IF(c, a, b)` and parentheses (what the alarms use).
fn eval(expr: &str, ids: &BTreeMap<String, f64>) -> f64 {
    let spaced = expr.replace('(', " ( ").replace(')', " ) ").replace(',', " , ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut at = 0;
    let v = or(&tokens, &mut at, ids);
    assert_eq!(at, tokens.len(), "{expr}");
    v
}

type Parse = fn(&[&str], &mut usize, &BTreeMap<String, f64>) -> f64;

fn binary(
    t: &[&str],
    at: &mut usize,
    ids: &BTreeMap<String, f64>,
    ops: &[&str],
    next: Parse,
) -> f64 {
    let mut v = next(t, at, ids);
    while *at < t.len() && ops.contains(&t[*at]) {
        let op = t[*at];
        *at += 1;
        let w = next(t, at, ids);
        let b = |x: bool| f64::from(u8::from(x));
        v = match op {
            "OR" => b(v != 0.0 || w != 0.0),
            "AND" => b(v != 0.0 && w != 0.0),
            "<" => b(v < w),
            ">" => b(v > w),
            "<=" => b(v <= w),
            ">=" => b(v >= w),
            "+" => v + w,
            "-" => v - w,
            "*" => v * w,
            _ => v / w,
        };
    }
    v
}

fn or(t: &[&str], at: &mut usize, ids: &BTreeMap<String, f64>) -> f64 {
    binary(t, at, ids, &["OR"], and)
}
fn and(t: &[&str], at: &mut usize, ids: &BTreeMap<String, f64>) -> f64 {
    binary(t, at, ids, &["AND"], cmp)
}
fn cmp(t: &[&str], at: &mut usize, ids: &BTreeMap<String, f64>) -> f64 {
    binary(t, at, ids, &["<", ">", "<=", ">="], sum)
}
fn sum(t: &[&str], at: &mut usize, ids: &BTreeMap<String, f64>) -> f64 {
    binary(t, at, ids, &["+", "-"], product)
}
fn product(t: &[&str], at: &mut usize, ids: &BTreeMap<String, f64>) -> f64 {
    binary(t, at, ids, &["*", "/"], atom)
}
fn atom(t: &[&str], at: &mut usize, ids: &BTreeMap<String, f64>) -> f64 {
    let tok = t[*at];
    *at += 1;
    match tok {
        "(" => {
            let v = or(t, at, ids);
            *at += 1; // ")"
            v
        }
        "IF" => {
            *at += 1; // "("
            let c = or(t, at, ids);
            *at += 1; // ","
            let a = or(t, at, ids);
            *at += 1; // ","
            let b = or(t, at, ids);
            *at += 1; // ")"
            if c != 0.0 {
                a
            } else {
                b
            }
        }
        n => n.parse().unwrap_or_else(|_| *ids.get(n).unwrap_or_else(|| panic!("no {n}"))),
    }
}

/// What an alarm's metric math gives over `documents` (EMF lines): each `MetricStat` sums the
/// values of its metric with exactly its dimensions, then the expressions are evaluated in
/// order; the value of the one that returns data.
fn alarm(t: &Value, name: &str, refs: &BTreeMap<&str, &str>, documents: &[String]) -> f64 {
    let mut values: BTreeMap<(String, BTreeMap<String, String>), f64> = BTreeMap::new();
    for line in documents {
        let doc: EmfDocument = serde_json::from_str(line).unwrap();
        for m in doc.metrics().unwrap() {
            *values.entry((m.name, m.dimensions)).or_default() += m.value;
        }
    }
    let metrics = node(t, &format!("Resources.{name}.Properties.Metrics")).as_sequence().unwrap();
    let mut ids = BTreeMap::new();
    let mut result = f64::NAN;
    for m in metrics {
        let id = m["Id"].as_str().unwrap().to_string();
        let v = if let Some(stat) = m.get("MetricStat") {
            let metric = &stat["Metric"];
            let dims: BTreeMap<String, String> = metric["Dimensions"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|d| (d["Name"].as_str().unwrap().to_string(), resolve(&d["Value"], refs, t)))
                .collect();
            let key = (metric["MetricName"].as_str().unwrap().to_string(), dims);
            values.get(&key).copied().unwrap_or(0.0)
        } else {
            eval(&resolve(&m["Expression"], refs, t), &ids)
        };
        if m["ReturnData"].as_bool() == Some(true) {
            result = v;
        }
        ids.insert(id, v);
    }
    result
}

/// The documents of one version's environments: `decided` decisions, `approved` of them.
fn documents(function: &str, version: &str, decided: u64, approved: u64) -> Vec<String> {
    let mut c = Counters::default();
    c.decisions[0] = approved;
    c.decisions[5] = decided - approved;
    c.emf(&Emitter { function, version }, &[identity()], 1_700_000_000_000)
}

fn identity() -> Identity {
    Identity {
        references_sha256: "ab".repeat(32),
        references: 3_000_000,
        first_position: 0,
        end_position: 3_000_000,
        part: SetPart::Whole,
        format_version: 6,
        codec: "i16".into(),
        crc32: "df6362c1".into(),
        packer: "index-pack".into(),
        edited_by: Vec::new(),
    }
}

/// A 10 % canary that approves everything: its own alarm fires, while the alarm over every
/// version together cannot see it (55.7 % approved before, about 60 % blended, inside the band).
#[test]
fn the_canary_s_own_approval_rate_alarm_fires_on_an_all_approving_canary() {
    let (function, arn) =
        ("stack-fraud-score", "arn:aws:lambda:us-east-1:1:function:stack-fraud-score:7");
    for (file, alarm_name, blended, resource) in [
        (
            "template.yaml",
            "FraudScoreCanaryApprovalRateAlarm",
            Some("FraudScoreApprovalRateAlarm"),
            "FraudScoreFunction",
        ),
        ("template-sharded.yaml", "FrontCanaryApprovalRateAlarm", None, "Front"),
    ] {
        let t = template(file);
        let version_ref = format!("{resource}.Version");
        let refs: BTreeMap<&str, &str> = [(resource, function), (version_ref.as_str(), arn)].into();
        let mut docs = documents(function, "6", 9_000, 5_013); // 55.7 % of the old version's
        docs.extend(documents(function, "7", 1_000, 1_000)); // the canary approves everything
        assert_eq!(
            alarm(&t, alarm_name, &refs, &docs),
            1.0,
            "{file}: the canary alarm stayed quiet"
        );
        if let Some(b) = blended {
            assert_eq!(alarm(&t, b, &refs, &docs), 0.0, "the blended rate left its band");
        }
        // A right canary: quiet.
        let mut docs = documents(function, "6", 9_000, 5_013);
        docs.extend(documents(function, "7", 1_000, 560));
        assert_eq!(alarm(&t, alarm_name, &refs, &docs), 0.0, "{file}: a right canary fired it");
    }
}

/// Every (metric, dimension names) the function writes as EMF, from its own code.
fn emitted() -> BTreeSet<(String, BTreeSet<String>)> {
    let mut c = Counters::default();
    for frauds in 0..=5 {
        c.record(Outcome::Decided(Decision::new(frauds)));
    }
    for r in Reason::ALL {
        c.record(Outcome::Rejected(r));
    }
    let docs = c.emf(&Emitter { function: "f", version: "1" }, &[identity()], 1);
    let mut out = BTreeSet::new();
    for line in docs {
        let doc: EmfDocument = serde_json::from_str(&line).unwrap();
        for m in doc.metrics().unwrap() {
            out.insert((m.name, m.dimensions.into_keys().collect()));
        }
    }
    out
}

/// Lambda's own metrics a widget may name, with the dimensions Lambda gives them.
const LAMBDA_METRICS: [&str; 5] =
    ["Duration", "Errors", "Throttles", "Invocations", "ConcurrentExecutions"];
const LAMBDA_DIMENSIONS: [&str; 3] = ["FunctionName", "Resource", "ExecutedVersion"];

/// Every CloudWatch dashboard widget names a metric the function writes with those dimensions
/// (its EMF), or one of Lambda's own: a renamed metric cannot leave an empty panel.
#[test]
fn every_cloudwatch_widget_names_what_the_code_writes() {
    let emitted = emitted();
    for (file, dashboard) in
        [("template.yaml", "FraudScoreDashboard"), ("template-sharded.yaml", "FrontDashboard")]
    {
        let t = template(file);
        let refs: BTreeMap<&str, &str> =
            [("AWS::Region", "us-east-1"), ("FraudScoreFunction", "f"), ("Front", "f")].into();
        let body = resolve(
            node(&t, &format!("Resources.{dashboard}.Properties.DashboardBody")),
            &refs,
            &t,
        );
        let body: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut named = 0;
        for w in body["widgets"].as_array().unwrap() {
            for m in w["properties"]["metrics"].as_array().unwrap() {
                let row = m.as_array().unwrap();
                let (metric, dims, namespace) = match row[0].as_str() {
                    Some(namespace) => {
                        let names = row.iter().skip(2).step_by(2).filter_map(|d| d.as_str());
                        (
                            row[1].as_str().unwrap().to_string(),
                            names.map(String::from).collect::<BTreeSet<_>>(),
                            namespace.to_string(),
                        )
                    }
                    None => {
                        let e = row[0]["expression"].as_str().unwrap();
                        let Some(schema) =
                            e.split_once("SEARCH('{").map(|(_, s)| s.split('}').next().unwrap())
                        else {
                            continue; // math over the searches
                        };
                        let mut parts = schema.split(',').map(String::from);
                        let namespace = parts.next().unwrap();
                        let metric =
                            e.split("MetricName=\"").nth(1).unwrap().split('"').next().unwrap();
                        (metric.to_string(), parts.collect(), namespace)
                    }
                };
                named += 1;
                let known = match namespace.as_str() {
                    "AWS/Lambda" => {
                        LAMBDA_METRICS.contains(&metric.as_str())
                            && dims.iter().all(|d| LAMBDA_DIMENSIONS.contains(&d.as_str()))
                    }
                    ns => {
                        ns == function::metrics::NAMESPACE
                            && emitted.contains(&(metric.clone(), dims.clone()))
                    }
                };
                assert!(known, "{file}: {namespace} {metric} {dims:?} is not written");
            }
        }
        assert!(named >= 8, "{file}: {named} metrics named");
    }
}

/// Every query of the Grafana dashboard names metrics and labels that the servers' Prometheus
/// text holds (`function::metrics` and `http_server::latency`, rendered here).
#[test]
fn every_grafana_query_names_what_the_servers_expose() {
    let mut c = Counters::default();
    c.record(Outcome::Decided(Decision::new(0)));
    c.record(Outcome::Rejected(Reason::BadBody));
    let mut text = c.prometheus(&[identity()]);
    let mut l = Latency::default();
    l.record(Route::FraudScore, Outcome::Decided(Decision::new(0)), Duration::from_micros(40));
    l.prometheus("df6362c1", &mut text);
    // Each series' name and label names, as the text holds them.
    let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, rest) = line.split_once('{').unwrap_or((line.split(' ').next().unwrap(), ""));
        let set = labels.entry(name.to_string()).or_default();
        for pair in rest.split(',') {
            if let Some((k, _)) = pair.split_once('=') {
                set.insert(k.to_string());
            }
        }
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("docs/grafana/fraud-scorer.json")).unwrap(),
    )
    .unwrap();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            queries += 1;
            let words: Vec<&str> =
                expr.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
            let metrics: Vec<&str> =
                words.iter().copied().filter(|w| w.starts_with("fraud_")).collect();
            assert!(!metrics.is_empty(), "{expr}");
            for m in &metrics {
                let have = labels.get(*m).unwrap_or_else(|| panic!("{m} of {expr} is not exposed"));
                // Labels in `by (...)` and in matchers `{label=...}`.
                let by = expr
                    .split("by (")
                    .skip(1)
                    .flat_map(|s| s.split(')').next().unwrap().split(','));
                let matchers =
                    expr.split('{').skip(1).flat_map(|s| s.split('}').next().unwrap().split(','));
                for label in by
                    .chain(matchers.filter_map(|m| m.split('=').next()))
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                {
                    assert!(have.contains(label), "{m} has no label {label} ({expr})");
                }
            }
        }
    }
    assert!(queries >= 7, "{queries} queries");
}
