//! The contest rules and least privilege (docs/RESILIENCE.md) on the compose config, and on a
//! running stack on what Docker and /proc say; a submission's images [`pinned`] too.

use super::compose::{image_inspect, inspect, Compose};
use crate::prelude::*;
use serde_json::json;
use yaml_serde::Value;

/// What the check found: one line per service, and every problem.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub services: Vec<String>,
    pub cpus: f64,
    pub memory_mb: f64,
    pub problems: Vec<String>,
}

/// A YAML scalar as text (empty for anything else, and for a missing key).
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// "150M", "50m", "1g", "52428800" -> MB.
pub fn memory_mb(s: &str) -> Option<f64> {
    let s = s.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let unit =
        [('k', 1.0 / 1024.0), ('m', 1.0), ('g', 1024.0)].into_iter().find(|u| s.ends_with(u.0));
    let (num, mult) = unit.map_or((s, 1.0 / 1048576.0), |(_, m)| (&s[..s.len() - 1], m));
    num.parse::<f64>().ok().map(|n| n * mult)
}

pub fn fixed_non_root(user: &str) -> bool {
    let ok = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p != "0";
    user.split_once(':').map_or_else(|| ok(user), |(u, g)| ok(u) && ok(g))
}

/// The rules on a compose configuration (YAML as `docker-compose config` prints it).
pub fn rules(yaml: &str) -> Result<Report> {
    let f: Value = yaml_serde::from_str(yaml).context("parsing docker-compose config")?;
    let services = f["services"].as_mapping().context("docker-compose config has no services")?;
    let mut r = Report::default();
    for (name, s) in services {
        let name = scalar(name);
        let (problems, limits) = service(&name, s);
        r.problems.extend(problems.into_iter().map(|p| format!("{name}: {p}")));
        if let Some((cpus, mb, line)) = limits {
            (r.cpus, r.memory_mb) = (r.cpus + cpus, r.memory_mb + mb);
            r.services.push(line);
        }
    }
    let names: Vec<String> = services.keys().map(scalar).collect();
    let nets = f["networks"].as_mapping().into_iter().flatten();
    let nets = nets.filter(|(_, net)| !["", "bridge"].contains(&scalar(&net["driver"]).as_str()));
    let (cpus, memory) = (r.cpus, r.memory_mb);
    r.problems.extend(util::failed([
        (!names.iter().any(|n| n == "haproxy"), "no haproxy balancer".into()),
        (names.iter().filter(|n| n.starts_with("api")).count() < 2, "fewer than two APIs".into()),
    ]));
    r.problems.extend(nets.map(|(n, _)| format!("network {} is not bridge", scalar(n))));
    r.problems.extend(util::failed([
        (cpus > 1.0 + 1e-9, format!("cpus sum {cpus:.2} > 1")),
        (memory > 350.0 + 1e-9, format!("memory sum {memory:.0} MB > 350")),
    ]));
    Ok(r)
}

/// One service's problems, and its limits (CPUs, MB) and line unless it names none.
fn service(name: &str, s: &Value) -> (Vec<String>, Option<(f64, f64, String)>) {
    let list = |k: &str| s[k].as_sequence().into_iter().flatten().map(scalar).collect::<Vec<_>>();
    let limits = &s["deploy"]["resources"]["limits"];
    let (cpus, mem) = (scalar(&limits["cpus"]), scalar(&limits["memory"]));
    if cpus.is_empty() || mem.is_empty() {
        return (vec!["no deploy.resources.limits cpus + memory".into()], None);
    }
    let parsed = cpus.parse::<f64>().ok().zip(memory_mb(&mem));
    let (image, user, platform) = (scalar(&s["image"]), scalar(&s["user"]), scalar(&s["platform"]));
    let (opts, caps) = (list("security_opt"), list("cap_drop"));
    let unconfined = opts.iter().any(|o| o.contains("seccomp") && o.contains("unconfined"));
    let host = !s["network_mode"].is_null() || s["privileged"] == true;
    let pullable =
        format!("image {image:?} is not a pullable name (name:tag or name@sha256:<64 hex>)");
    let first = util::failed([
        (parsed.is_none(), format!("unreadable limits {cpus} / {mem}")),
        (host, "network_mode or privileged set".into()),
        (!s["build"].is_null(), "build: is set (the contest takes images only)".into()),
        (!s["sysctls"].is_null(), "sysctls are set (the contest rejects them)".into()),
        (unconfined, "security_opt seccomp=unconfined (the contest rejects it)".into()),
        (platform != "linux/amd64", format!("platform {platform:?} is not linux/amd64")),
        (reference(&image).is_none(), pullable),
    ]);
    let ports = s["ports"].as_sequence().into_iter().flatten().map(|p| scalar(&p["published"]));
    let ports = ports.filter(|p| name != "haproxy" || p != "9999");
    let ports = ports.map(|p| format!("publishes port {p}")).collect();
    let capped =
        caps.len() == 1 && caps[0].eq_ignore_ascii_case("ALL") && list("cap_add").is_empty();
    let nnp = opts.iter().any(|o| o == "no-new-privileges:true");
    let last = util::failed([
        (!fixed_non_root(&user), format!("user {user:?} is not a fixed non-root uid[:gid]")),
        (s["read_only"] != true, "read_only is not true".into()),
        (!capped, "cap_drop is not [ALL] (or cap_add is set)".into()),
        (!nnp, "security_opt lacks no-new-privileges:true".into()),
    ]);
    let (c, m) = parsed.unwrap_or_default();
    let line = format!(
        "{name}: image {image} cpus {cpus} memory {mem} user {user} read_only cap_drop=ALL"
    );
    ([first, ports, last].concat(), Some((c, m, line)))
}

/// Whether a pullable `[host[:port]/]path[:tag][@sha256:<64 hex>]` has the digest.
pub fn reference(image: &str) -> Option<bool> {
    let (rest, digest) = image.split_once('@').map_or((image, None), |(r, d)| (r, Some(d)));
    let host = |h: &&str| h.contains(['.', ':']) || *h == "localhost";
    let path = rest.split_once('/').filter(|(h, _)| host(h)).map_or(rest, |(_, p)| p);
    let (path, tag) = path.split_once(':').map_or((path, None), |(p, t)| (p, Some(t)));
    let chars = |s: &str, more: &[u8]| {
        let ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || more.contains(&b);
        !s.is_empty() && s.bytes().all(ok)
    };
    let hex = |d: &str| d.len() == 64 && chars(d, b"") && d.bytes().all(|b| b.is_ascii_hexdigit());
    let ok = chars(path, b"._-/")
        && tag.is_none_or(|t| t.len() <= 128 && chars(&t.to_ascii_lowercase(), b"._-"))
        && digest.is_none_or(|d| d.strip_prefix("sha256:").is_some_and(hex));
    (ok && (tag.is_some() || digest.is_some())).then_some(digest.is_some())
}

/// Every image pinned by digest, here (`arch`: `os/architecture`) as linux/amd64.
pub fn pinned(yaml: &str, arch: impl Fn(&str) -> Option<String>) -> Result<Vec<String>> {
    let f: Value = yaml_serde::from_str(yaml).context("parsing docker compose config")?;
    let mut problems = Vec::new();
    for (name, s) in f["services"].as_mapping().into_iter().flatten() {
        let (name, image) = (scalar(name), scalar(&s["image"]));
        let unpinned = format!("{name}: image {image:?} is not pinned by digest (name@sha256:...)");
        problems.extend((reference(&image) != Some(true)).then_some(unpinned));
        problems.extend(match arch(&image) {
            Some(a) if a == "linux/amd64" => None,
            Some(a) => Some(format!("{name}: image {image} is {a}, not linux/amd64")),
            None => Some(format!("{name}: image {image} is not here (docker image inspect)")),
        });
    }
    Ok(problems)
}

/// The balancer: `mode tcp`, `balance roundrobin`, nothing routing by request content.
pub fn haproxy_cfg(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).collect();
    let tcp = lines.contains(&"mode tcp") && lines.contains(&"balance roundrobin");
    let routes =
        lines.iter().any(|l| l.starts_with("http-request") || l.starts_with("use_backend"));
    util::failed([
        (!tcp, "haproxy.cfg: expected mode tcp and balance roundrobin".into()),
        (routes, "haproxy.cfg answers or routes by request content".into()),
    ])
}

/// Least privilege as applied to a running container: `docker inspect` and /proc/<pid>.
fn running(service: &str, id: &str, network: &str) -> Result<(String, Vec<String>)> {
    let i = inspect(id)?;
    let (h, pid) = (&i["HostConfig"], i["State"]["Pid"].as_u64().context("inspect: no pid")?);
    let want = json!({"Privileged": false, "ReadonlyRootfs": true, "CapDrop": ["ALL"],
        "CapAdd": null, "SecurityOpt": ["no-new-privileges:true"], "NetworkMode": network});
    let off = |(k, v): (&String, &serde_json::Value)| {
        let fine = h[k] == *v || v.is_null() && h[k] == json!([]);
        (!fine).then(|| format!("{k} {}", h[k]))
    };
    let off: Vec<String> = want.as_object().into_iter().flatten().filter_map(off).collect();
    let proc = |f: &str| {
        let path = format!("/proc/{pid}/{f}");
        fs::read_to_string(&path).with_context(|| format!("reading {path} of {service}"))
    };
    let (status, mounts) = (proc("status")?, proc("mountinfo")?);
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)?.split_whitespace().next());
    let field = |k: &str| field(k).unwrap_or("").to_string();
    // Field 5 is the mount point, field 6 its options; the last mount on / is the root.
    let mut fields = mounts.lines().map(|l| l.split_whitespace().collect::<Vec<_>>());
    let root = fields.rfind(|f| f.get(4) == Some(&"/"));
    let root_ro = root.is_some_and(|f| f.get(5).is_some_and(|o| o.starts_with("ro")));
    let [uid, eff, bnd, nnp] = ["Uid:", "CapEff:", "CapBnd:", "NoNewPrivs:"].map(field);
    let zero = "0000000000000000";
    let caps = format!("CapEff {eff} CapBnd {bnd} NoNewPrivs {nnp} root ro {root_ro}");
    let confined = uid != "0" && eff == zero && bnd == zero && nnp == "1" && root_ro;
    let problems = util::failed([
        (!off.is_empty(), format!("{service}: docker inspect shows {}", off.join(", "))),
        (!confined, format!("{service}: process uid {uid} {caps}")),
    ]);
    let (cpus, memory, user) = (&h["NanoCpus"], &h["Memory"], &i["Config"]["User"]);
    let user = user.as_str().unwrap_or_default();
    let line = format!(
        "{service}: NanoCpus {cpus} Memory {memory} User {user} pid {pid}: Uid {uid} {caps}"
    );
    Ok((line, problems))
}

/// The whole check on `compose`; with `running`, also the running containers.
pub fn check(compose: &Compose, running_too: bool) -> Result<Report> {
    let yaml = compose.config()?;
    let mut r = rules(&yaml)?;
    if compose.pinned {
        let arch = |image: &str| image_inspect(image, "{{.Os}}/{{.Architecture}}");
        r.problems.extend(pinned(&yaml, arch)?);
    }
    let cfg = util::read_text(&compose.dir.join("docker/haproxy/haproxy.cfg"))?;
    r.problems.extend(haproxy_cfg(&cfg));
    if running_too {
        let network = format!("{}_stack", compose.project);
        for svc in compose.services()? {
            let (line, problems) = running(&svc, &compose.id(&svc)?, &network)?;
            r.services.push(line);
            r.problems.extend(problems);
        }
    }
    r.services.iter().for_each(|l| log!("  {l}"));
    r.problems.iter().for_each(|p| log!("  PROBLEM: {p}"));
    Ok(r)
}
