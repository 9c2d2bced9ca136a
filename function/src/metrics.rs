//! What a scorer answered, counted, and the two forms the transports publish it in: Prometheus
//! text (`local-runner serve`, `GET /metrics`) and CloudWatch Embedded Metric Format documents
//! (the Lambda function's log lines).
//!
//! Counting is one array increment per answer ([`Counters::record`], from the [`Outcome`] the
//! handler put in the response), so it stays off the request's cost; rendering happens only when
//! a transport publishes.
//!
//! Decisions are counted by fraud score (frauds among the 5 nearest / 5): six counters, which are
//! the exact distribution (there are only six possible answers); approvals are the first three.

use crate::decision::Decision;
use crate::handler::{Outcome, Reason};
use crate::search::K;
use index_pack::format::Identity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The namespace of the CloudWatch metrics.
pub const NAMESPACE: &str = "FraudScore";

/// Counts of answers since the counters were made (or last taken).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Decisions by frauds among the 5 nearest.
    pub decisions: [u64; K + 1],
    /// `/ready` answers.
    pub ready: u64,
    /// Refusals, by [`Reason::index`].
    pub rejected: [u64; Reason::ALL.len()],
}

impl Counters {
    /// Counts one answer.
    #[inline]
    pub fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Decided(d) => self.decisions[d.frauds] += 1,
            Outcome::Ready => self.ready += 1,
            Outcome::Metrics => {}
            Outcome::Rejected(r) => self.rejected[r.index()] += 1,
        }
    }

    /// Decisions that approved the transaction (fraud score below 0.6).
    pub fn approved(&self) -> u64 {
        (0..=K)
            .filter(|&f| Decision::new(f).approved())
            .map(|f| self.decisions[f])
            .sum()
    }

    pub fn denied(&self) -> u64 {
        self.decisions.iter().sum::<u64>() - self.approved()
    }

    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        *self == Counters::default()
    }

    /// The counters in Prometheus's text format (0.0.4). Every counter carries the served
    /// index's CRC32 as its `index` label; `fraud_index_info` names the index in full.
    pub fn prometheus(&self, index: &[Identity]) -> String {
        let label = index_label(index);
        let mut out = String::new();
        let family = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        family(
            &mut out,
            "fraud_decisions_total",
            "counter",
            "Transactions scored, by decision (approved) and fraud score (frauds among the 5 nearest references / 5).",
        );
        for (frauds, n) in self.decisions.iter().enumerate() {
            let d = Decision::new(frauds);
            let _ = writeln!(
                out,
                "fraud_decisions_total{{approved=\"{}\",fraud_score=\"{:.1}\",index=\"{label}\"}} {n}",
                d.approved(),
                d.fraud_score()
            );
        }
        family(
            &mut out,
            "fraud_requests_rejected_total",
            "counter",
            "Requests refused, by reason (bad_body: a 400 about the transaction; busy: a 503 at the connection cap or memory budget).",
        );
        for r in Reason::ALL {
            let _ = writeln!(
                out,
                "fraud_requests_rejected_total{{reason=\"{}\",index=\"{label}\"}} {}",
                r.name(),
                self.rejected[r.index()]
            );
        }
        family(
            &mut out,
            "fraud_ready_requests_total",
            "counter",
            "Readiness checks answered (GET or HEAD /ready).",
        );
        let _ = writeln!(
            out,
            "fraud_ready_requests_total{{index=\"{label}\"}} {}",
            self.ready
        );
        family(
            &mut out,
            "fraud_index_info",
            "gauge",
            "The index served (the base or shard first, then deltas), as labels; the value is 1.",
        );
        for (i, id) in index.iter().enumerate() {
            let _ = writeln!(
                out,
                "fraud_index_info{{order=\"{i}\",references_sha256=\"{}\",references=\"{}\",first_position=\"{}\",part=\"{}\",format_version=\"{}\",crc32=\"{}\",packer=\"{}\"}} 1",
                id.references_sha256,
                id.references,
                id.first_position,
                id.part,
                id.format_version,
                id.crc32,
                id.packer
            );
        }
        out
    }

    /// The counters as CloudWatch Embedded Metric Format documents (one JSON line each):
    /// `Approved`, `Denied` and `Rejected` by function, by function and index, and by function
    /// and version (the executing version: a canary's own rate); `Decisions` by function and
    /// fraud score, one document per score counted; `Rejected` by function and reason, one
    /// document per reason counted. Nothing when nothing was counted.
    pub fn emf(
        &self,
        function: &Emitter<'_>,
        index: &[Identity],
        timestamp_ms: u64,
    ) -> Vec<String> {
        if self.is_empty() {
            return Vec::new();
        }
        let label = index_label(index);
        let document = |dimensions: Vec<Vec<&str>>,
                        metrics: &[&str],
                        members: Vec<(&str, serde_json::Value)>| {
            let doc = EmfDocument {
                aws: Aws {
                    timestamp: timestamp_ms,
                    cloud_watch_metrics: vec![Directive {
                        namespace: NAMESPACE.into(),
                        dimensions: dimensions
                            .into_iter()
                            .map(|d| d.into_iter().map(String::from).collect())
                            .collect(),
                        metrics: metrics
                            .iter()
                            .map(|m| MetricDefinition {
                                name: m.to_string(),
                                unit: "Count".into(),
                            })
                            .collect(),
                    }],
                },
                members: members
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .chain([("Function".to_string(), function.function.into())])
                    .collect(),
            };
            serde_json::to_string(&doc).expect("an EMF document serializes")
        };
        // CloudWatch takes no empty dimension value: a process that knows no index (a front
        // whose shards are not proven) or no version counts without that dimension.
        let mut dimensions = vec![vec!["Function"]];
        let mut members: Vec<(&str, serde_json::Value)> = vec![];
        for (name, value) in [("Index", label.as_str()), ("Version", function.version)] {
            if !value.is_empty() {
                dimensions.push(vec!["Function", name]);
                members.push((name, value.into()));
            }
        }
        members.extend([
            ("Approved", self.approved().into()),
            ("Denied", self.denied().into()),
            ("Rejected", self.rejected_total().into()),
        ]);
        let mut out = vec![document(
            dimensions,
            &["Approved", "Denied", "Rejected"],
            members,
        )];
        for (frauds, &n) in self.decisions.iter().enumerate().filter(|(_, &n)| n > 0) {
            let score = format!("{:.1}", Decision::new(frauds).fraud_score());
            out.push(document(
                vec![vec!["Function", "FraudScore"]],
                &["Decisions"],
                vec![("FraudScore", score.into()), ("Decisions", n.into())],
            ));
        }
        for r in Reason::ALL
            .into_iter()
            .filter(|r| self.rejected[r.index()] > 0)
        {
            out.push(document(
                vec![vec!["Function", "Reason"]],
                &["Rejected"],
                vec![
                    ("Reason", r.name().into()),
                    ("Rejected", self.rejected[r.index()].into()),
                ],
            ));
        }
        out
    }
}

/// Which function writes the EMF documents: its name and the executing version
/// (`AWS_LAMBDA_FUNCTION_VERSION`; empty where there is none).
#[derive(Clone, Copy, Debug)]
pub struct Emitter<'a> {
    pub function: &'a str,
    pub version: &'a str,
}

/// The index's short name in metrics, of bounded length whatever the number of parts: the
/// first part's CRC32 (the base, or shard 0); with more parts, `+`, their count, `:` and the
/// CRC32 of their CRC32s in order (`df6362c1+3:8e21a0f4`). Every delta changes it, so an
/// operator can tell which environments serve which chain. At most 8 + 1 + 3 + 1 + 8 characters
/// for up to 999 more parts (CloudWatch takes 1,024 in a dimension value; a search takes 254
/// deltas at most).
pub fn index_label(index: &[Identity]) -> String {
    let Some((first, rest)) = index.split_first() else {
        return String::new();
    };
    if rest.is_empty() {
        return first.crc32.clone();
    }
    let mut h = crc32fast::Hasher::new();
    for part in rest {
        h.update(part.crc32.as_bytes());
    }
    format!("{}+{}:{:08x}", first.crc32, rest.len(), h.finalize())
}

/// One Embedded Metric Format document: the metadata under `_aws`, then the members its
/// directives name (dimension values and metric values). Deserializes too, so that tests and
/// the harness read the documents with this same type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmfDocument {
    #[serde(rename = "_aws")]
    pub aws: Aws,
    #[serde(flatten)]
    pub members: BTreeMap<String, serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Aws {
    /// Milliseconds since the epoch.
    pub timestamp: u64,
    #[serde(rename = "CloudWatchMetrics")]
    pub cloud_watch_metrics: Vec<Directive>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Directive {
    pub namespace: String,
    pub dimensions: Vec<Vec<String>>,
    pub metrics: Vec<MetricDefinition>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MetricDefinition {
    pub name: String,
    pub unit: String,
}

/// One metric value a document holds, with its dimensions.
#[derive(Clone, Debug, PartialEq)]
pub struct EmfValue {
    pub name: String,
    pub dimensions: BTreeMap<String, String>,
    pub value: f64,
}

impl EmfDocument {
    /// Checks the document as CloudWatch would before taking its metrics: every dimension and
    /// metric a directive names is a member, dimension values are strings, metric values
    /// numbers, at most 30 dimensions in a set. Returns each metric's value with its dimensions.
    pub fn metrics(&self) -> Result<Vec<EmfValue>, String> {
        let mut out = Vec::new();
        for d in &self.aws.cloud_watch_metrics {
            for set in &d.dimensions {
                if set.len() > 30 {
                    return Err(format!("{} dimensions in a set", set.len()));
                }
                let mut dims = BTreeMap::new();
                for key in set {
                    let v = self.members.get(key).and_then(|v| v.as_str());
                    let v = v.ok_or_else(|| format!("dimension {key} is not a string member"))?;
                    dims.insert(key.clone(), v.to_string());
                }
                for m in &d.metrics {
                    let v = self.members.get(&m.name).and_then(|v| v.as_f64());
                    let v = v.ok_or_else(|| format!("metric {} is not a number member", m.name))?;
                    out.push(EmfValue {
                        name: m.name.clone(),
                        dimensions: dims.clone(),
                        value: v,
                    });
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(crc: &str) -> Identity {
        Identity {
            references_sha256: "ab".repeat(32),
            references: 3_000_000,
            first_position: 0,
            end_position: 3_000_000,
            part: index_pack::format::SetPart::Whole,
            format_version: 6,
            codec: "i16".into(),
            crc32: crc.into(),
            packer: "index-pack 0.1.0".into(),
            edited_by: Vec::new(),
        }
    }

    const SCORER: Emitter = Emitter {
        function: "fraud-score",
        version: "7",
    };

    fn counted() -> Counters {
        let mut c = Counters::default();
        for frauds in [0, 0, 1, 3, 5, 5, 5] {
            c.record(Outcome::Decided(Decision::new(frauds)));
        }
        c.record(Outcome::Ready);
        c.record(Outcome::Rejected(Reason::BadBody));
        c.record(Outcome::Rejected(Reason::BadBody));
        c.record(Outcome::Rejected(Reason::NotFound));
        c
    }

    #[test]
    fn outcomes_are_counted() {
        let c = counted();
        assert_eq!(c.decisions, [2, 1, 0, 1, 0, 3]);
        assert_eq!(
            (c.approved(), c.denied(), c.rejected_total(), c.ready),
            (3, 4, 3, 1)
        );
        assert!(!c.is_empty() && Counters::default().is_empty());
    }

    #[test]
    fn prometheus_text_names_every_counter_and_the_index() {
        let text = counted().prometheus(&[identity("0000abcd")]);
        assert!(text.contains(
            "fraud_decisions_total{approved=\"false\",fraud_score=\"1.0\",index=\"0000abcd\"} 3\n"
        ));
        assert!(text
            .contains("fraud_requests_rejected_total{reason=\"bad_body\",index=\"0000abcd\"} 2\n"));
        assert!(text.contains("fraud_ready_requests_total{index=\"0000abcd\"} 1\n"));
        assert!(text.contains("crc32=\"0000abcd\""));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split('{').next().unwrap();
            assert!(
                name.ends_with("_total") || name.ends_with("_info"),
                "{line}"
            );
        }
    }

    #[test]
    fn emf_documents_hold_every_count_once() {
        let c = counted();
        let index = [identity("0000abcd"), identity("1111ef00")];
        let lines = c.emf(&SCORER, &index, 1_700_000_000_000);
        let mut sums: BTreeMap<(String, String), f64> = BTreeMap::new();
        for line in &lines {
            let doc: EmfDocument = serde_json::from_str(line).unwrap();
            assert_eq!(doc.aws.cloud_watch_metrics[0].namespace, NAMESPACE);
            for m in doc.metrics().unwrap() {
                let key: Vec<String> = m
                    .dimensions
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                *sums.entry((m.name, key.join(","))).or_default() += m.value;
            }
        }
        let get = |name: &str, dims: &str| sums.get(&(name.into(), dims.into())).copied();
        assert_eq!(get("Approved", "Function=fraud-score"), Some(3.0));
        let label = index_label(&index);
        assert_eq!(
            get("Denied", &format!("Function=fraud-score,Index={label}")),
            Some(4.0)
        );
        assert_eq!(get("Approved", "Function=fraud-score,Version=7"), Some(3.0));
        assert_eq!(
            get("Decisions", "FraudScore=1.0,Function=fraud-score"),
            Some(3.0)
        );
        assert_eq!(
            get("Decisions", "FraudScore=0.4,Function=fraud-score"),
            None
        );
        assert_eq!(
            get("Rejected", "Function=fraud-score,Reason=bad_body"),
            Some(2.0)
        );
        assert_eq!(get("Rejected", "Function=fraud-score"), Some(3.0));
        assert!(Counters::default().emf(&SCORER, &index, 0).is_empty());
        // A document whose metric is not a member is not EMF.
        let mut doc: EmfDocument = serde_json::from_str(&lines[0]).unwrap();
        doc.members.remove("Denied");
        assert!(doc.metrics().is_err());
    }

    /// However many deltas, the index's name stays short, and each delta changes it.
    #[test]
    fn the_index_label_is_bounded_and_names_the_chain() {
        let base = identity("df6362c1");
        assert_eq!(index_label(std::slice::from_ref(&base)), "df6362c1");
        assert_eq!(index_label(&[]), "");
        let mut chain = vec![base];
        let mut seen = std::collections::BTreeSet::new();
        // The search takes at most 254 deltas (`Searcher::with_deltas`).
        for d in 0..254u32 {
            chain.push(identity(&format!("{d:08x}")));
            let label = index_label(&chain);
            assert!(label.len() <= 21, "{label}");
            assert!(label.starts_with("df6362c1+"), "{label}");
            assert!(seen.insert(label), "a delta left the label as it was");
        }
    }

    /// The front over shards knows no index of its own: no document may carry an empty
    /// dimension value (CloudWatch drops such a metric).
    #[test]
    fn without_an_index_the_counts_go_by_function_only() {
        let front = Emitter {
            function: "front",
            version: "",
        };
        for line in counted().emf(&front, &[], 1_700_000_000_000) {
            let doc: EmfDocument = serde_json::from_str(&line).unwrap();
            for m in doc.metrics().unwrap() {
                assert!(
                    m.dimensions
                        .iter()
                        .all(|(k, v)| !v.is_empty() && k != "Index" && k != "Version"),
                    "{line}"
                );
            }
        }
    }
}
