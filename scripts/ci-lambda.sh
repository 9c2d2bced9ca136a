#!/usr/bin/env bash
# CI entry for the AWS Lambda function: the real release `bootstrap` under AWS's own Runtime
# Interface Emulator (RIE, shipped in the PyPI aws-sam-cli package; no Docker needed).
#
#  1. installs aws-sam-cli (into a venv) if missing; validates template.yaml (offline);
#  2. builds the release bootstrap (static) and its zip package; checks the sizes against
#     Lambda's limits (50 MB zipped for direct upload, 250 MB unzipped);
#  3. starts the RIE on loopback with the packaged bootstrap, times the cold start;
#  4. invokes every event in events/ (API Gateway v2 and v1, Function URL, ALB) and checks
#     status, content type and body against events/expected.tsv, then the body-level rows of
#     the bad-input matrix (events/hostile, docs/HOSTILE.md) against events/hostile/expected.tsv;
#  5. replays public payloads from tests/data/test-data.json.gz, cycling through the four event
#     formats, and checks each answer against expected_approved / expected_fraud_score;
#  6. prints the measurements and a last line "N passed, M failed"; exits non-zero on any
#     failure. The emulator is always stopped.
#
# Settings: LAMBDA_REPLAY (payloads spread over the file, default 4000; the 645 edge cases
# with exactly 3 frauds in 5 are always added), LAMBDA_SKIP_BUILD=1 (use the existing build),
# LAMBDA_UNIT_TESTS=1 (also run the bootstrap's unit tests: one more fat-LTO link, ~3 min),
# LAMBDA_CPUS (see below), LAMBDA_MEMORY_MB, LAMBDA_VENV (see scripts/lambda-common.sh). Results also go to
# target/lambda-ci/metrics.json.
set -euo pipefail
# shellcheck source=scripts/lambda-common.sh
source "$(dirname "$0")/lambda-common.sh"
cd "$LAMBDA_ROOT"
REPLAY=${LAMBDA_REPLAY:-4000}
WORK=$LAMBDA_TARGET_DIR/lambda-ci
mkdir -p "$WORK"
started=$SECONDS
passed=0
failed=0
check() { # $1 = name, rest = command
  local name=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
    lambda_log "ok: $name"
  else
    failed=$((failed + 1))
    lambda_log "FAILED: $name"
  fi
}

lambda_tools sam
check "sam validate --lint" "$SAM" validate --lint --template template.yaml

if [ "${LAMBDA_SKIP_BUILD:-0}" = 1 ] && [ -x "$LAMBDA_OUT/bootstrap/bootstrap" ]; then
  BOOTSTRAP=$LAMBDA_TARGET_DIR/$LAMBDA_TARGET/release/bootstrap
  PACKAGE_DIR=$LAMBDA_OUT/bootstrap
  ZIP=$LAMBDA_OUT/bootstrap.zip
else
  lambda_build
fi
if [ "${LAMBDA_UNIT_TESTS:-0}" = 1 ]; then
  # The adapter's unit tests (every event through lambda_http's own parser). Host build, not
  # the static one: the crate's dev-dependencies (faiss) do not link statically.
  lambda_build_env
  check "bootstrap unit tests" env -u RUSTFLAGS cargo test --release -p function --features lambda --bin bootstrap
fi
read -r zipped unzipped < <(lambda_sizes)
lambda_log "package: $ZIP $zipped bytes zipped, $unzipped bytes unzipped"
check "unzipped package within 250 MB" test "$unzipped" -le $((250 * 1024 * 1024))

# The emulator: API on $api_port, runtime API for the bootstrap on $rt_port, both loopback.
api_port=$(lambda_free_port)
rt_port=$(lambda_free_port)
rie_log=$WORK/rie.log
rie_pid=""
cgroup=""
descendants() { # $1 = pid; prints its descendants' pids (from /proc: procps may be missing)
  local c
  for c in $(awk -v pp="$1" '/^Pid:/ { pid = $2 } /^PPid:/ { if ($2 == pp) print pid }' /proc/[0-9]*/status 2> /dev/null); do
    echo "$c"
    descendants "$c"
  done
}
stop_rie() {
  if [ -n "$rie_pid" ] && kill -0 "$rie_pid" 2>/dev/null; then
    local kids
    kids=$(descendants "$rie_pid")
    kill "$rie_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$rie_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$rie_pid" 2>/dev/null || true
    for pid in $kids; do kill -9 "$pid" 2>/dev/null || true; done
  fi
  rie_pid=""
}
remove_cgroup() { if [ -n "$cgroup" ]; then rmdir "$cgroup" 2> /dev/null || true; fi; }
trap 'stop_rie; remove_cgroup' EXIT
trap 'exit 130' INT TERM

# LAMBDA_CPUS=0.29 runs the bootstrap (not the emulator) under a CFS quota of that many CPUs, as
# Lambda does (CPU share = memory / 1,769 MB: 0.29 at 512 MB). Needs a writable cgroup-v1 cpu
# controller; measurement only, the default is no limit.
entry=./bootstrap
if [ -n "${LAMBDA_CPUS:-}" ]; then
  cgroup=/sys/fs/cgroup/cpu/lambda-ci-$$
  mkdir "$cgroup"
  echo 100000 > "$cgroup/cpu.cfs_period_us"
  quota=$(python3 -c "print(int(float('$LAMBDA_CPUS') * 100000))")
  echo "$quota" > "$cgroup/cpu.cfs_quota_us"
  printf '#!/bin/sh\necho $$ > %s/cgroup.procs && exec ./bootstrap\n' "$cgroup" > "$WORK/limited-bootstrap"
  chmod +x "$WORK/limited-bootstrap"
  entry=$WORK/limited-bootstrap
  lambda_log "bootstrap limited to $LAMBDA_CPUS CPU ($cgroup)"
fi

launch_ns=$(date +%s%N)
(cd "$PACKAGE_DIR" && exec env AWS_LAMBDA_FUNCTION_MEMORY_SIZE="$LAMBDA_MEMORY_MB" AWS_LAMBDA_FUNCTION_TIMEOUT=5 \
  "$RIE" --runtime-interface-emulator-address "127.0.0.1:$api_port" \
  --runtime-api-address "127.0.0.1:$rt_port" "$entry") > "$rie_log" 2>&1 &
rie_pid=$!
lambda_log "emulator pid $rie_pid on 127.0.0.1:$api_port (runtime API 127.0.0.1:$rt_port)"

set +e
python3 - "$api_port" "$rie_pid" "$launch_ns" "$REPLAY" "$WORK/driver.json" <<'PY'
"""Drives the emulator: cold start, sample events, replay. Writes its results as JSON."""
import base64, gzip, http.client, json, os, socket, sys, time

port, rie_pid, launch_ns, replay, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
INVOKE = "/2015-03-31/functions/function/invocations"
res = {"passed": 0, "failed": 0, "failures": []}


def fail(what):
    res["failed"] += 1
    if len(res["failures"]) < 20:
        res["failures"].append(what)
        print("FAILED:", what, file=sys.stderr)


# Wait (bounded) until the emulator listens; it starts the bootstrap on the first invoke.
deadline = time.monotonic() + 20
while True:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            print("the emulator did not start listening", file=sys.stderr)
            sys.exit(2)
        time.sleep(0.01)
listening_ns = time.time_ns()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)


def invoke(event_bytes):
    conn.request("POST", INVOKE, body=event_bytes, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"emulator answered HTTP {r.status}: {data[:200]!r}")
    return json.loads(data)


def unpack(resp):
    """(status, content type, body text) of a lambda_http response, whatever the event source."""
    if "statusCode" not in resp:
        raise RuntimeError(f"function error: {json.dumps(resp)[:300]}")
    headers = {k.lower(): v for k, v in (resp.get("headers") or {}).items()}
    for k, v in (resp.get("multiValueHeaders") or {}).items():
        headers.setdefault(k.lower(), v[0] if v else "")
    body = resp.get("body") or ""
    if resp.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    return resp["statusCode"], headers.get("content-type"), body, headers


events_dir = "events"
load = lambda name: open(os.path.join(events_dir, name), "rb").read()

# 1. Cold start: the first invoke makes the emulator exec the bootstrap and run its init.
t0 = time.time_ns()
first = invoke(load("apigw-v2/ready.json"))
t1 = time.time_ns()
res["cold"] = {
    "first_invoke_ms": (t1 - t0) / 1e6,
    "launch_to_first_response_ms": (t1 - launch_ns) / 1e6,
    "emulator_listening_ms": (listening_ns - launch_ns) / 1e6,
}
if unpack(first)[:2] != (200, "application/json"):
    fail(f"first invoke (GET /ready): {first}")


def bootstrap_pid():
    """The bootstrap process that the emulator started (a descendant of it), through /proc."""
    def status(pid):
        try:
            return dict(l.split(":\t", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in l)
        except OSError:
            return {}

    for d in filter(str.isdigit, os.listdir("/proc")):
        st = status(d)
        if st.get("Name", "").strip() != "bootstrap":
            continue
        parent = st.get("PPid", "0").strip()
        for _ in range(4):
            if parent == str(rie_pid):
                return int(d)
            parent = status(parent).get("PPid", "0").strip()
    return None


# 2. Every sample event against events/expected.tsv, and the bad-input matrix's events
# (events/hostile, docs/HOSTILE.md) against events/hostile/expected.tsv. `error` = a JSON
# error; `error:<field>` = one whose message starts with "<field>: ".
rows = []
for table in ("expected.tsv", "hostile/expected.tsv"):
    rows += [l.rstrip("\n").split("\t") for l in open(os.path.join(events_dir, table))][1:]
for name, status, body in rows:
    try:
        got_status, ctype, got_body, headers = unpack(invoke(load(name)))
        ok = got_status == int(status) and ctype == "application/json"
        parsed = json.loads(got_body)
        if body == "error":
            ok = ok and isinstance(parsed.get("error"), str) and parsed["error"] != ""
        elif body.startswith("error:"):
            ok = ok and isinstance(parsed.get("error"), str) and parsed["error"].startswith(body[6:] + ": ")
        else:
            ok = ok and parsed == json.loads(body)
        if int(status) == 405:
            ok = ok and headers.get("allow") == "POST"
        if ok:
            res["passed"] += 1
        else:
            fail(f"{name}: got {got_status} {ctype} {got_body}, want {status} {body}")
    except Exception as e:  # noqa: BLE001 - any failure is a failed case
        fail(f"{name}: {e}")
res["events"] = len(rows)

# 3. Replay public payloads, spread over the file, plus every edge case, through all formats.
with gzip.open("tests/data/test-data.json.gz", "rb") as f:
    entries = json.load(f)["entries"]
stride = max(1, len(entries) // max(1, replay))
picked = list(range(0, len(entries), stride))[:replay]
seen = set(picked)
picked += [i for i, e in enumerate(entries) if e["expected_fraud_score"] == 0.6 and i not in seen]
templates = [json.loads(load(f"{s}/legit.json")) for s in ("apigw-v2", "apigw-v1", "function-url", "alb")]
lat = []
mismatches = 0
for n, i in enumerate(picked):
    e = entries[i]
    event = dict(templates[n % 4])
    event["body"] = json.dumps(e["request"], separators=(",", ":"))
    data = json.dumps(event).encode()
    try:
        t = time.perf_counter_ns()
        resp = invoke(data)
        lat.append(time.perf_counter_ns() - t)
        status, _, body, _ = unpack(resp)
        got = json.loads(body)
        if (
            status == 200
            and got.get("approved") == e["expected_approved"]
            and abs(got.get("fraud_score", -1) - e["expected_fraud_score"]) < 1e-9
        ):
            res["passed"] += 1
        else:
            mismatches += 1
            fail(f"entry {i} ({e['request']['id']}): got {status} {body}, want "
                 f"approved={e['expected_approved']} fraud_score={e['expected_fraud_score']}")
    except Exception as ex:  # noqa: BLE001
        mismatches += 1
        fail(f"entry {i}: {ex}")
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] / 1e6 if lat else None
res["replay"] = {"payloads": len(picked), "mismatches": mismatches,
                 "client_rtt_ms": {"p50": pct(0.50), "p99": pct(0.99), "max": lat[-1] / 1e6 if lat else None}}

# Memory of the bootstrap after the replay (index pages it touched count as file-backed RSS).
res["bootstrap_pid"] = bootstrap_pid()
if res["bootstrap_pid"]:
    try:
        status = dict(l.split(":", 1) for l in open(f"/proc/{res['bootstrap_pid']}/status") if ":" in l)
        res["bootstrap_memory_kb"] = {k: int(status[k].split()[0]) for k in ("VmHWM", "RssAnon", "RssFile") if k in status}
    except OSError:
        pass
json.dump(res, open(out, "w"), indent=1)
PY
driver_rc=$?
set -e
stop_rie

if [ $driver_rc -ne 0 ] || [ ! -s "$WORK/driver.json" ]; then
  failed=$((failed + 1))
  lambda_log "FAILED: the emulator driver (exit $driver_rc); emulator log:"
  tail -40 "$rie_log" >&2
else
  # Fold in the driver's counts and the emulator's own timings.
  python3 - "$WORK/driver.json" "$rie_log" "$zipped" "$unzipped" "$WORK/metrics.json" <<'PY'
import json, re, sys
res = json.load(open(sys.argv[1]))
log = open(sys.argv[2], errors="replace").read()
init = [float(x) for x in re.findall(r"INIT REPORT\(durationMs: ([0-9.]+)\)", log)]
report_init = [float(x) for x in re.findall(r"Init Duration: ([0-9.]+) ms", log)]
durations = [float(x) for x in re.findall(r"\tDuration: ([0-9.]+) ms", log)]
ready = re.findall(r"bootstrap: index ready in (\d+) us", log)
warm = sorted(durations[1:])
pct = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None
res["emulator"] = {
    "init_duration_ms": init[0] if init else None,
    "report_init_duration_ms": report_init[0] if report_init else None,
    "first_invoke_duration_ms": durations[0] if durations else None,
    "warm_duration_ms": {"n": len(warm), "p50": pct(warm, 0.5), "p99": pct(warm, 0.99), "max": warm[-1] if warm else None},
    "bootstrap_index_ready_us": int(ready[0]) if ready else None,
}
res["package"] = {"zipped_bytes": int(sys.argv[3]), "unzipped_bytes": int(sys.argv[4]),
                  "limit_zipped_direct_upload": 50 * 1024 * 1024, "limit_unzipped": 250 * 1024 * 1024}
json.dump(res, open(sys.argv[5], "w"), indent=1)
mb = lambda b: b / 1024 / 1024
c, e, r, p = res["cold"], res["emulator"], res["replay"], res["package"]
print(f"cold start: first invoke {c['first_invoke_ms']:.1f} ms round trip (exec + init + invoke); "
      f"launch to first response {c['launch_to_first_response_ms']:.1f} ms; emulator INIT REPORT "
      f"{e['init_duration_ms']} ms; bootstrap index ready {e['bootstrap_index_ready_us']} us")
w = e["warm_duration_ms"]
print(f"warm invokes: emulator Duration p50 {w['p50']} ms, p99 {w['p99']} ms, max {w['max']} ms (n={w['n']}); "
      f"client round trip p50 {r['client_rtt_ms']['p50']:.3f} ms, p99 {r['client_rtt_ms']['p99']:.3f} ms")
print(f"replay: {r['payloads']} public payloads, {r['mismatches']} mismatches")
if "bootstrap_memory_kb" in res:
    m = res["bootstrap_memory_kb"]
    print(f"bootstrap memory after replay: peak RSS {m.get('VmHWM', 0) / 1024:.1f} MB "
          f"(anon {m.get('RssAnon', 0) / 1024:.1f} MB, file {m.get('RssFile', 0) / 1024:.1f} MB)")
print(f"package: {mb(p['zipped_bytes']):.1f} MB zipped (direct upload limit 50 MB: "
      f"{'fits' if p['zipped_bytes'] <= p['limit_zipped_direct_upload'] else 'too big, deploy through S3 (sam deploy)'}), "
      f"{mb(p['unzipped_bytes']):.1f} MB unzipped (limit 250 MB)")
PY
  read -r dp df < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["passed"], r["failed"])' "$WORK/driver.json")
  passed=$((passed + dp))
  failed=$((failed + df))
  if grep -q "Runtime.ExitError\|panic" "$rie_log"; then
    failed=$((failed + 1))
    lambda_log "FAILED: the bootstrap crashed or panicked (see $rie_log)"
  fi
fi
lambda_log "done in $((SECONDS - started)) s; emulator log in $rie_log"
echo "lambda: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
