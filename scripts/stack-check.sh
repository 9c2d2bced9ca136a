#!/usr/bin/env bash
# Checks that docker-compose.yml keeps the contest rules, from `docker-compose config` (the file
# as compose resolves it): a balancer and at least two APIs, limits on every service summing to
# at most 1 CPU and 350 MB, bridge networks only, no host networking or privileges, port 9999
# published by the balancer only; and least privilege on every service (docs/RESILIENCE.md):
# a fixed non-root `user`, `read_only: true`, `cap_drop: [ALL]`, `no-new-privileges:true`.
# With a running stack (`--running`) it also reads what docker applied (`docker inspect`:
# NanoCpus, Memory, User, ReadonlyRootfs, CapDrop, SecurityOpt, Privileged) and what the
# kernel says of each container's main process (/proc/<pid>/status: Uid, CapEff, CapBnd,
# NoNewPrivs; /proc/<pid>/mountinfo: root mounted ro).
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
    user = str(s.get("user", ""))
    if not re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", user):
        problems.append(f"{name}: user {user!r} is not a fixed non-root uid[:gid]")
    if s.get("read_only") is not True:
        problems.append(f"{name}: read_only is not true")
    if [c.upper() for c in s.get("cap_drop", [])] != ["ALL"] or s.get("cap_add"):
        problems.append(f"{name}: cap_drop is not [ALL] (or cap_add is set)")
    if "no-new-privileges:true" not in s.get("security_opt", []):
        problems.append(f"{name}: security_opt lacks no-new-privileges:true")
    print(f"  {name:8s} image {s['image']:18s} cpus {float(lim['cpus']):.2f} memory {lim['memory']:5s} user {user} read_only={s.get('read_only')} cap_drop={','.join(s.get('cap_drop', []))} security_opt={','.join(s.get('security_opt', []))}")
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
echo "least privilege (compose): ok"
if [ "${1:-}" = --running ]; then
  bad=0
  for svc in haproxy api1 api2; do
    id=$("${COMPOSE[@]}" ps -q "$svc")
    [ -n "$id" ] || die "$svc is not running"
    docker inspect -f "  $svc NanoCpus={{.HostConfig.NanoCpus}} Memory={{.HostConfig.Memory}} NetworkMode={{.HostConfig.NetworkMode}} Privileged={{.HostConfig.Privileged}} User={{.Config.User}} ReadonlyRootfs={{.HostConfig.ReadonlyRootfs}} CapDrop={{.HostConfig.CapDrop}} CapAdd={{.HostConfig.CapAdd}} SecurityOpt={{.HostConfig.SecurityOpt}}" "$id"
    insp=$(docker inspect -f '{{.HostConfig.Privileged}} {{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}} {{.HostConfig.CapAdd}} {{.HostConfig.SecurityOpt}} {{.HostConfig.NetworkMode}}' "$id")
    [ "$insp" = "false true [ALL] [] [no-new-privileges:true] fraudstack_stack" ] || { echo "  PROBLEM: $svc docker inspect: $insp"; bad=1; }
    # What the kernel applied to the container's main process (seen from the host).
    pid=$(docker inspect -f '{{.State.Pid}}' "$id")
    if [ ! -r "/proc/$pid/status" ]; then
      echo "    (no /proc/$pid here: the Docker engine runs elsewhere; kernel-side check skipped)"
      continue
    fi
    st=$(awk '/^(Uid|Gid|CapEff|CapBnd|CapPrm|NoNewPrivs):/ { printf "%s%s ", $1, $2 }' "/proc/$pid/status")
    rootmnt=$(awk '$5 == "/" { split($6, o, ","); print o[1] }' "/proc/$pid/mountinfo" | tail -1)
    echo "    pid $pid: ${st}root=$rootmnt"
    uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
    eff=$(awk '/^CapEff:/ { print $2 }' "/proc/$pid/status")
    bnd=$(awk '/^CapBnd:/ { print $2 }' "/proc/$pid/status")
    nnp=$(awk '/^NoNewPrivs:/ { print $2 }' "/proc/$pid/status")
    if [ "$uid" = 0 ] || [ "$eff" != 0000000000000000 ] || [ "$bnd" != 0000000000000000 ] || [ "$nnp" != 1 ] || [ "$rootmnt" != ro ]; then
      echo "  PROBLEM: $svc process: uid=$uid CapEff=$eff CapBnd=$bnd NoNewPrivs=$nnp root=$rootmnt"
      bad=1
    fi
  done
  [ $bad = 0 ] || die "least privilege not applied to the running containers"
  echo "least privilege (running: docker inspect + /proc): ok"
fi
