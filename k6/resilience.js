// k6 scenarios for the resilience runs of issue 4 (docs/RESILIENCE.md): instance loss under load
// (scripts/stack-chaos.sh) and overload (scripts/stack-overload.sh). Same payloads, checks and
// 2001 ms timeout as the contest replica (fraud-test.js); what differs is the load shape and the
// time series written to the summary.
//
//   MODE=steady    constant-arrival-rate RATE/s (default 900, the official peak) for DURATION s
//                  (default 40); preAllocatedVUs 100, maxVUs 250 as in the contest.
//   MODE=replica   the official ramp (1 -> 900/s over 120 s, 100..250 VUs), as in fraud-test.js.
//   MODE=overload  three constant-arrival-rate phases one after another:
//                    before    RATE/s for BEFORE s (default 15)   100..250 VUs
//                    overload  FACTOR*RATE/s (default 3 x 900 = 2700) for OVER s (default 30),
//                              OVER_VUS pre-allocated (default 600), up to MAX_VUS (default 3000)
//                    after     RATE/s for AFTER s (default 45)    100..250 VUs
//
// Every request is tagged with its one-second window `w` (seconds since the end of setup), and
// a submetric per window makes k6 keep count, errors and latency percentiles per second: the
// summary (written to $SUMMARY) has `windows: [{w, n, errors, p50, p99, max}]` next to the phase
// totals, errors by kind (timeout, conn = refused/reset/EOF, s5xx, s_other, body) and how long
// the failed requests took before failing (fast errors vs hangs). Payloads are taken in file
// order, wrapping around after the last one (the overload needs more than 54,100).
// With LOG_FAILURES=1 (default in steady and replica) each failure is printed as
// `FAIL <epoch ms> <duration ms> <status> <error_code> <error>`: stack-chaos.sh lines them up
// with the kill.
//
// Environment: TEST_DATA (decompressed test-data.json, required), BASE_URL (loopback only),
// SUMMARY, MODE, RATE, DURATION, BEFORE, OVER, AFTER, FACTOR, OVER_VUS, MAX_VUS, LOG_FAILURES.

import http from 'k6/http';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { BASE_URL, entries, tp, tn, fp, fn, errors } from './common.js';

const MODE = __ENV.MODE || 'steady';
const SUMMARY = __ENV.SUMMARY || 'k6-resilience.json';
const RATE = Number(__ENV.RATE || 900);
const DURATION = Number(__ENV.DURATION || 40);
const BEFORE = Number(__ENV.BEFORE || 15);
const OVER = Number(__ENV.OVER || 30);
const AFTER = Number(__ENV.AFTER || 45);
const FACTOR = Number(__ENV.FACTOR || 3);
const OVER_VUS = Number(__ENV.OVER_VUS || 600);
const MAX_VUS = Number(__ENV.MAX_VUS || 3000);
const LOG_FAILURES = (__ENV.LOG_FAILURES || (MODE === 'overload' ? '0' : '1')) === '1';

const errKind = new Counter('err_kind');
const errDuration = new Trend('err_duration', true);

const KINDS = ['timeout', 'conn', 's5xx', 's_other', 'body'];
const PHASES = { steady: ['steady'], replica: ['replica'], overload: ['before', 'overload', 'after'] };

const scenarios = {
  steady: {
    steady: {
      executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: `${DURATION}s`,
      preAllocatedVUs: 100, maxVUs: 250,
    },
  },
  replica: {
    replica: {
      executor: 'ramping-arrival-rate', startRate: 1, timeUnit: '1s', preAllocatedVUs: 100, maxVUs: 250,
      stages: [{ duration: '120s', target: 900 }],
    },
  },
  overload: {
    before: {
      executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: `${BEFORE}s`,
      preAllocatedVUs: 100, maxVUs: 250,
    },
    overload: {
      executor: 'constant-arrival-rate', rate: FACTOR * RATE, timeUnit: '1s', duration: `${OVER}s`,
      startTime: `${BEFORE}s`, preAllocatedVUs: OVER_VUS, maxVUs: MAX_VUS,
    },
    after: {
      executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: `${AFTER}s`,
      startTime: `${BEFORE + OVER}s`, preAllocatedVUs: 100, maxVUs: 250,
    },
  },
};
if (!scenarios[MODE]) throw new Error(`MODE must be steady, replica or overload, got ${MODE}`);

const total = { steady: DURATION, replica: 120, overload: BEFORE + OVER + AFTER }[MODE];
const WINDOWS = total + 5; // a request started in the last second may finish 2 s later
// Always-true thresholds: they only make k6 keep a submetric per window, phase and kind.
const thresholds = {};
for (let w = 0; w < WINDOWS; w++) {
  thresholds[`http_req_duration{w:${w}}`] = ['max>=0'];
  thresholds[`errors{w:${w}}`] = ['count>=0'];
}
for (const p of PHASES[MODE]) {
  thresholds[`http_req_duration{scenario:${p}}`] = ['max>=0'];
  thresholds[`errors{scenario:${p}}`] = ['count>=0'];
  thresholds[`dropped_iterations{scenario:${p}}`] = ['count>=0'];
}
for (const k of KINDS) {
  thresholds[`err_kind{kind:${k}}`] = ['count>=0'];
  thresholds[`err_duration{kind:${k}}`] = ['max>=0'];
}

export const options = {
  scenarios: scenarios[MODE],
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(99)', 'p(99.9)', 'count'],
  thresholds,
  discardResponseBodies: false,
};

export function setup() {
  for (const c of [tp, tn, fp, fn, errors]) c.add(0);
  return { t0: Date.now() };
}

const headers = { 'Content-Type': 'application/json' };

export default function (data) {
  const i = exec.scenario.iterationInTest + (MODE === 'overload' ? phaseOffset() : 0);
  const [body, expectedApproved] = entries[i % entries.length];
  const start = Date.now();
  const w = String(Math.max(0, Math.floor((start - data.t0) / 1000)));
  const tags = { w };
  const res = http.post(`${BASE_URL}/fraud-score`, body, { headers, timeout: '2001ms', tags });
  let kind = null;
  let approved;
  if (res.error_code === 1050) kind = 'timeout';
  else if (res.status === 0) kind = 'conn';
  else if (res.status >= 500) kind = 's5xx';
  else if (res.status !== 200) kind = 's_other';
  else {
    try {
      approved = JSON.parse(res.body).approved;
    } catch (_) {
      approved = undefined;
    }
    if (typeof approved !== 'boolean') kind = 'body';
  }
  if (kind) {
    errors.add(1, tags);
    errKind.add(1, { kind });
    errDuration.add(Date.now() - start, { kind }); // wall time: k6's timings stop early for timeouts
    if (LOG_FAILURES) {
      console.log(`FAIL ${start} ${Date.now() - start} ${res.status} ${res.error_code} ${res.error}`);
    }
    return;
  }
  if (expectedApproved) (approved ? tn : fp).add(1);
  else (approved ? fn : tp).add(1);
}

// Overload: each phase starts where the previous one's payloads would end, so the `after` phase
// sends different payloads from `before`.
function phaseOffset() {
  const name = exec.scenario.name;
  if (name === 'overload') return BEFORE * RATE;
  if (name === 'after') return BEFORE * RATE + OVER * FACTOR * RATE;
  return 0;
}

function vals(data, name) {
  const m = data.metrics[name];
  return m ? m.values : null;
}
function count(data, name) {
  const v = vals(data, name);
  return v ? v.count || 0 : 0;
}
function trend(v) {
  if (!v || !v.count) return null;
  return { n: v.count, avg: v.avg, med: v.med, p90: v['p(90)'], p99: v['p(99)'], p999: v['p(99.9)'], max: v.max };
}

export function handleSummary(data) {
  const windows = [];
  for (let w = 0; w < WINDOWS; w++) {
    const t = trend(vals(data, `http_req_duration{w:${w}}`));
    if (!t) continue;
    windows.push({ w, n: t.n, errors: count(data, `errors{w:${w}}`), p50: t.med, p99: t.p99, max: t.max });
  }
  const phases = {};
  for (const p of PHASES[MODE]) {
    phases[p] = {
      latency_ms: trend(vals(data, `http_req_duration{scenario:${p}}`)),
      errors: count(data, `errors{scenario:${p}}`),
      dropped_iterations: count(data, `dropped_iterations{scenario:${p}}`),
    };
  }
  const kinds = {};
  for (const k of KINDS) {
    const n = count(data, `err_kind{kind:${k}}`);
    if (n) kinds[k] = { n, duration_ms: trend(vals(data, `err_duration{kind:${k}}`)) };
  }
  const c = { tp: count(data, 'tp'), tn: count(data, 'tn'), fp: count(data, 'fp'), fn: count(data, 'fn'), errors: count(data, 'errors') };
  const all = trend(vals(data, 'http_req_duration'));
  const result = {
    mode: MODE,
    rate: RATE,
    t0_ms: data.setup_data ? data.setup_data.t0 : null,
    requests: c.tp + c.tn + c.fp + c.fn + c.errors,
    ...c,
    dropped_iterations: count(data, 'dropped_iterations'),
    vus_max: data.metrics.vus_max ? data.metrics.vus_max.values.max : null,
    latency_ms: all,
    phases,
    error_kinds: kinds,
    windows,
  };
  const f = (x) => (x === undefined || x === null ? 'n/a' : x.toFixed(2));
  let text = `\n[${MODE}] requests ${result.requests}  FP ${c.fp}  FN ${c.fn}  errors ${c.errors}  dropped ${result.dropped_iterations}  vus_max ${result.vus_max}\n`;
  for (const [p, v] of Object.entries(phases)) {
    const l = v.latency_ms || {};
    text += `  ${p}: n ${l.n || 0} errors ${v.errors} dropped ${v.dropped_iterations} p50 ${f(l.med)} p99 ${f(l.p99)} max ${f(l.max)} ms\n`;
  }
  for (const [k, v] of Object.entries(kinds)) {
    text += `  error ${k}: ${v.n} (took ${f(v.duration_ms && v.duration_ms.med)} ms median, ${f(v.duration_ms && v.duration_ms.max)} max)\n`;
  }
  return { stdout: text, [SUMMARY]: JSON.stringify(result, null, 2) + '\n' };
}
