//! The contest rules and least privilege, checked on `docker-compose config` (the files as
//! compose resolves them, parsed as YAML) and, on a running stack, on what Docker applied
//! (`docker inspect`) and what the kernel says of each container's main process (/proc).
//!
//! Rules: a balancer (`haproxy`) and at least two APIs; CPU and memory limits on every service,
//! summing to at most 1 CPU and 350 MB; bridge networks only; no host networking or privileges;
//! only the balancer publishes a port, 9999. Least privilege (docs/RESILIENCE.md): a fixed
//! non-root `user`, `read_only: true`, `cap_drop: [ALL]` without `cap_add`,
//! `no-new-privileges:true`. haproxy.cfg: `mode tcp`, `balance roundrobin`, no request logic.

use super::compose::{inspect, Compose};
use crate::util::{log, root};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use yaml_serde::Value;

#[derive(Deserialize)]
struct File {
    services: BTreeMap<String, Service>,
    #[serde(default)]
    networks: BTreeMap<String, Option<Network>>,
}

#[derive(Deserialize)]
struct Network {
    driver: Option<String>,
}

#[derive(Deserialize)]
struct Service {
    image: String,
    deploy: Option<Deploy>,
    network_mode: Option<String>,
    #[serde(default)]
    privileged: bool,
    #[serde(default)]
    ports: Vec<Port>,
    user: Option<Value>,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    cap_drop: Vec<String>,
    #[serde(default)]
    cap_add: Vec<String>,
    #[serde(default)]
    security_opt: Vec<String>,
}

#[derive(Deserialize)]
struct Deploy {
    resources: Option<Resources>,
}

#[derive(Deserialize)]
struct Resources {
    limits: Option<Limits>,
}

#[derive(Deserialize)]
struct Limits {
    cpus: Option<Value>,
    memory: Option<Value>,
}

#[derive(Deserialize)]
struct Port {
    published: Value,
}

/// What the check found: one line per service, and every problem.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub services: Vec<String>,
    pub cpus: f64,
    pub memory_mb: f64,
    pub problems: Vec<String>,
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// "150M", "50m", "1g", "52428800" -> MB.
fn memory_mb(s: &str) -> Option<f64> {
    let s = s.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let (num, mult) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1.0 / 1024.0),
        'm' => (&s[..s.len() - 1], 1.0),
        'g' => (&s[..s.len() - 1], 1024.0),
        _ => (s, 1.0 / 1048576.0),
    };
    num.parse::<f64>().ok().map(|n| n * mult)
}

fn fixed_non_root(user: &str) -> bool {
    let ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p != "0";
    match user.split_once(':') {
        Some((u, g)) => ok(u) && ok(g),
        None => ok(user),
    }
}

/// The rules on a compose configuration (YAML as `docker-compose config` prints it).
pub fn rules(yaml: &str) -> Result<Report> {
    let f: File = yaml_serde::from_str(yaml).context("parsing docker-compose config")?;
    let mut r = Report::default();
    for (name, s) in &f.services {
        let lim =
            s.deploy.as_ref().and_then(|d| d.resources.as_ref()).and_then(|r| r.limits.as_ref());
        let cpus = lim.and_then(|l| l.cpus.as_ref()).map(scalar);
        let mem = lim.and_then(|l| l.memory.as_ref()).map(scalar);
        let (Some(cpus), Some(mem)) = (cpus, mem) else {
            r.problems.push(format!("{name}: no deploy.resources.limits cpus + memory"));
            continue;
        };
        match (cpus.parse::<f64>(), memory_mb(&mem)) {
            (Ok(c), Some(m)) => {
                r.cpus += c;
                r.memory_mb += m;
            }
            _ => r.problems.push(format!("{name}: unreadable limits {cpus} / {mem}")),
        }
        if s.network_mode.is_some() || s.privileged {
            r.problems.push(format!("{name}: network_mode or privileged set"));
        }
        for p in &s.ports {
            if name != "haproxy" || scalar(&p.published) != "9999" {
                r.problems.push(format!("{name}: publishes port {}", scalar(&p.published)));
            }
        }
        let user = s.user.as_ref().map(scalar).unwrap_or_default();
        if !fixed_non_root(&user) {
            r.problems.push(format!("{name}: user {user:?} is not a fixed non-root uid[:gid]"));
        }
        if !s.read_only {
            r.problems.push(format!("{name}: read_only is not true"));
        }
        if s.cap_drop.iter().map(|c| c.to_uppercase()).collect::<Vec<_>>() != ["ALL"]
            || !s.cap_add.is_empty()
        {
            r.problems.push(format!("{name}: cap_drop is not [ALL] (or cap_add is set)"));
        }
        if !s.security_opt.iter().any(|o| o == "no-new-privileges:true") {
            r.problems.push(format!("{name}: security_opt lacks no-new-privileges:true"));
        }
        r.services.push(format!(
            "{name}: image {} cpus {cpus} memory {mem} user {user} read_only cap_drop=ALL",
            s.image
        ));
    }
    if !f.services.contains_key("haproxy") {
        r.problems.push("no haproxy balancer".into());
    }
    if f.services.keys().filter(|n| n.starts_with("api")).count() < 2 {
        r.problems.push("fewer than two APIs".into());
    }
    for (n, net) in &f.networks {
        let driver = net.as_ref().and_then(|n| n.driver.as_deref());
        if driver.unwrap_or("bridge") != "bridge" {
            r.problems.push(format!("network {n} is not bridge"));
        }
    }
    if r.cpus > 1.0 + 1e-9 {
        r.problems.push(format!("cpus sum {:.2} > 1", r.cpus));
    }
    if r.memory_mb > 350.0 + 1e-9 {
        r.problems.push(format!("memory sum {:.0} MB > 350", r.memory_mb));
    }
    Ok(r)
}

/// The balancer's configuration: `mode tcp`, `balance roundrobin`, nothing that answers or routes
/// by request content.
pub fn haproxy_cfg(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).collect();
    let mut problems = Vec::new();
    if !lines.contains(&"mode tcp") || !lines.contains(&"balance roundrobin") {
        problems.push("haproxy.cfg: expected mode tcp and balance roundrobin".to_string());
    }
    if lines.iter().any(|l| l.starts_with("http-request") || l.starts_with("use_backend")) {
        problems.push("haproxy.cfg answers or routes by request content".to_string());
    }
    problems
}

/// Least privilege as applied to a running container: `docker inspect` and /proc/<pid>.
fn running(service: &str, id: &str, network: &str) -> Result<(String, Vec<String>)> {
    let i = inspect(id)?;
    let h = &i.host_config;
    let mut problems = Vec::new();
    let caps = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    if h.privileged
        || !h.readonly_rootfs
        || caps(&h.cap_drop) != ["ALL"]
        || !caps(&h.cap_add).is_empty()
        || caps(&h.security_opt) != ["no-new-privileges:true"]
        || h.network_mode != network
    {
        problems.push(format!("{service}: docker inspect shows {h:?}"));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", i.state.pid))
        .with_context(|| format!("reading /proc/{}/status of {service}", i.state.pid))?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", i.state.pid))?;
    // Field 5 is the mount point, field 6 its options; the last mount on / is the root.
    let root_ro = mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(4) == Some(&"/")).then(|| f.get(5).map(|o| o.starts_with("ro")))?
        })
        .next_back()
        .unwrap_or(false);
    let (uid, eff, bnd, nnp) =
        (field("Uid:"), field("CapEff:"), field("CapBnd:"), field("NoNewPrivs:"));
    let zero = "0000000000000000";
    if uid == "0" || eff != zero || bnd != zero || nnp != "1" || !root_ro {
        problems.push(format!(
            "{service}: process uid {uid} CapEff {eff} CapBnd {bnd} NoNewPrivs {nnp} root ro {root_ro}"
        ));
    }
    let line = format!(
        "{service}: NanoCpus {} Memory {} User {} pid {}: Uid {uid} CapEff {eff} CapBnd {bnd} NoNewPrivs {nnp} root ro {root_ro}",
        h.nano_cpus, h.memory, i.config.user, i.state.pid
    );
    Ok((line, problems))
}

/// The whole check on `compose`; with `running`, also the running containers.
pub fn check(compose: &Compose, running_too: bool) -> Result<Report> {
    let mut r = rules(&compose.config()?)?;
    let cfg = root().join("docker/haproxy/haproxy.cfg");
    r.problems.extend(haproxy_cfg(&std::fs::read_to_string(&cfg)?));
    if running_too {
        let network = format!("{}_stack", compose.project);
        for svc in compose.services()? {
            let (line, problems) = running(&svc, &compose.id(&svc)?, &network)?;
            r.services.push(line);
            r.problems.extend(problems);
        }
    }
    for l in &r.services {
        log!("  {l}");
    }
    for p in &r.problems {
        log!("  PROBLEM: {p}");
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
networks:
  stack:
    driver: bridge
services:
  api1: &api
    image: fraud-api:latest
    user: 65534:65534
    read_only: true
    cap_drop: [ALL]
    security_opt: [no-new-privileges:true]
    deploy: {resources: {limits: {cpus: 0.3, memory: 150M}}}
  api2: *api
  haproxy:
    image: haproxy:2.6
    user: "99:99"
    read_only: true
    cap_drop: [ALL]
    security_opt: [no-new-privileges:true]
    ports: [{published: 9999, target: 9999}]
    deploy: {resources: {limits: {cpus: 0.4, memory: 50M}}}
"#;

    #[test]
    fn the_contest_layout_passes() {
        let r = rules(GOOD).unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert!((r.cpus - 1.0).abs() < 1e-9);
        assert!((r.memory_mb - 350.0).abs() < 1e-9);
    }

    #[test]
    fn each_breach_is_named() {
        let bad = GOOD
            .replace("memory: 50M", "memory: 60M")
            .replace("user: \"99:99\"", "user: \"0\"")
            .replace(
                "ports: [{published: 9999",
                "cap_add: [NET_ADMIN]\n    ports: [{published: 8080",
            );
        let r = rules(&bad).unwrap();
        let all = r.problems.join("\n");
        assert!(all.contains("memory sum 360 MB > 350"), "{all}");
        assert!(all.contains("haproxy: user \"0\""), "{all}");
        assert!(all.contains("cap_add"), "{all}");
        assert!(all.contains("publishes port 8080"), "{all}");
        let no_ro = GOOD.replace("read_only: true\n    cap_drop: [ALL]\n    security_opt: [no-new-privileges:true]\n    ports", "ports");
        assert!(rules(&no_ro).unwrap().problems.len() >= 3);
    }

    #[test]
    fn memory_units() {
        assert_eq!(memory_mb("150M"), Some(150.0));
        assert_eq!(memory_mb("1g"), Some(1024.0));
        assert_eq!(memory_mb("52428800"), Some(50.0));
        assert!(
            fixed_non_root("65534:65534") && !fixed_non_root("0:0") && !fixed_non_root("nobody")
        );
    }

    #[test]
    fn the_balancer_has_no_request_logic() {
        assert!(
            haproxy_cfg("defaults\n    mode tcp\nbackend b\n    balance roundrobin\n").is_empty()
        );
        let http = "    mode http\n    balance roundrobin\n    http-request return status 200\n";
        assert_eq!(haproxy_cfg(http).len(), 2);
    }
}
