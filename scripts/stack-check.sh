#!/usr/bin/env bash
# Checks that docker-compose.yml keeps the contest rules, from `docker-compose config` (the file
# as compose resolves it): a balancer and at least two APIs, limits on every service summing to
# at most 1 CPU and 350 MB, bridge networks only, no host networking or privileges, port 9999
# published by the balancer only. With a running stack (`--running`) it also reads the limits
# docker applied (`docker inspect` NanoCpus / Memory).
set -euo pipefail
# shellcheck source=scripts/stack-lib.sh
. "$(dirname "$0")/stack-lib.sh"

"${COMPOSE[@]}" config >"$ROOT/target/compose-config.yml" 2>/dev/null || {
  mkdir -p "$ROOT/target" && "${COMPOSE[@]}" config >"$ROOT/target/compose-config.yml"
}
# Debian's system python has PyYAML (docker-compose depends on it).
/usr/bin/python3 - "$ROOT/target/compose-config.yml" <<'PY'
import re, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
svcs = cfg["services"]
def mem_mb(v):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([bkmg]?)b?", str(v).strip().lower())
    n, u = float(m.group(1)), m.group(2)
    return n * {"": 1 / 2**20, "b": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024}[u]
problems, cpus, mem = [], 0.0, 0.0
for name, s in svcs.items():
    lim = s.get("deploy", {}).get("resources", {}).get("limits", {})
    if "cpus" not in lim or "memory" not in lim:
        problems.append(f"{name}: no deploy.resources.limits cpus+memory")
        continue
    cpus += float(lim["cpus"]); mem += mem_mb(lim["memory"])
    if s.get("network_mode") or s.get("privileged"):
        problems.append(f"{name}: network_mode/privileged set")
    for p in s.get("ports", []):
        if name != "haproxy" or int(p["published"]) != 9999:
            problems.append(f"{name}: publishes {p}")
    print(f"  {name:8s} image {s['image']:18s} cpus {float(lim['cpus']):.2f} memory {lim['memory']}")
apis = [n for n in svcs if n.startswith("api")]
if "haproxy" not in svcs: problems.append("no haproxy balancer")
if len(apis) < 2: problems.append("fewer than two APIs")
for n, net in cfg.get("networks", {}).items():
    if (net or {}).get("driver", "bridge") != "bridge": problems.append(f"network {n} is not bridge")
print(f"  total    cpus {cpus:.2f} (<= 1.00)  memory {mem:.0f} MB (<= 350)")
if cpus > 1.0 + 1e-9: problems.append(f"cpus sum {cpus} > 1")
if mem > 350 + 1e-9: problems.append(f"memory sum {mem} MB > 350")
for p in problems: print("  PROBLEM:", p)
sys.exit(1 if problems else 0)
PY
echo "compose rules: ok"
cfg=$ROOT/docker/haproxy/haproxy.cfg
grep -Eq '^\s*mode tcp' "$cfg" && grep -Eq '^\s*balance roundrobin' "$cfg" || die "haproxy.cfg: expected mode tcp + balance roundrobin"
grep -Eq 'http-request return|use_backend|http-request' "$cfg" && die "haproxy.cfg must not answer or route by request content"
echo "haproxy.cfg: mode tcp, roundrobin, no request logic: ok"
if [ "${1:-}" = --running ]; then
  for svc in haproxy api1 api2; do
    id=$("${COMPOSE[@]}" ps -q "$svc")
    [ -n "$id" ] || die "$svc is not running"
    docker inspect -f "  $svc NanoCpus={{.HostConfig.NanoCpus}} Memory={{.HostConfig.Memory}} NetworkMode={{.HostConfig.NetworkMode}} Privileged={{.HostConfig.Privileged}} User={{.Config.User}}" "$id"
  done
fi
