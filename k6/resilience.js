// k6 load shapes of the resilience gates (docs/RESILIENCE.md): `cargo xtask stack chaos` (instance
// loss) and `cargo xtask stack overload`. Same payloads, checks and 2001 ms timeout as the contest
// replica (fraud-test.js); what differs is the load shape and what the summary keeps.
//
//   MODE=steady    constant-arrival-rate RATE/s (default 900, the official peak) for DURATION s
//                  (default 40); 100..250 VUs as in the contest. The chaos gate kills an API under
//                  it; the overload gate runs it as the steady background of its overload (wrk
//                  adds the rest).
//
// The summary ($SUMMARY) has count, errors, p50 and p99 per second (`windows`, common.js), the
// totals per phase, errors by kind (timeout, conn = refused/reset/EOF, s5xx, s_other, body) and
// how long failed requests took. With LOG_FAILURES=1 each failure is
// printed as `FAIL <epoch ms> <duration ms> <status> <error_code> <error>`, so the chaos gate can
// line failures up with its kills. Payloads are taken in file order, wrapping around.
//
// Environment: TEST_DATA (required), BASE_URL (loopback only), SUMMARY, MODE, RATE, DURATION,
// LOG_FAILURES.

import http from 'k6/http';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import {
  BASE_URL, entries, tp, tn, fp, fn, errors, windowThresholds, windowTags, metricValues, metricCount, windowSeries,
} from './common.js';

const MODE = __ENV.MODE || 'steady';
const SUMMARY = __ENV.SUMMARY || 'k6-resilience.json';
const RATE = Number(__ENV.RATE || 900);
const DURATION = Number(__ENV.DURATION || 40);
const LOG_FAILURES = (__ENV.LOG_FAILURES || '1') === '1';

const errKind = new Counter('err_kind');
const errDuration = new Trend('err_duration', true);

const KINDS = ['timeout', 'conn', 's5xx', 's_other', 'body'];
const constant = (rate, seconds, start, pre, max) => ({
  executor: 'constant-arrival-rate', rate, timeUnit: '1s', duration: `${seconds}s`,
  startTime: `${start}s`, preAllocatedVUs: pre, maxVUs: max,
});
const scenarios = {
  steady: { steady: constant(RATE, DURATION, 0, 100, 250) },
};
if (!scenarios[MODE]) throw new Error(`MODE must be steady, got ${MODE}`);
const PHASES = Object.keys(scenarios[MODE]);
const SECONDS = DURATION;

// Always-true thresholds: they only make k6 keep a submetric per window, phase and kind.
const thresholds = windowThresholds(SECONDS);
for (const p of PHASES) {
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
    const i = exec.scenario.iterationInTest;
  const [body, expectedApproved] = entries[i % entries.length];
  const start = Date.now();
  const tags = windowTags(data.t0);
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

function trend(v) {
  if (!v || !v.count) return null;
  return { n: v.count, avg: v.avg, med: v.med, p90: v['p(90)'], p99: v['p(99)'], p999: v['p(99.9)'], max: v.max };
}

export function handleSummary(data) {
  const phases = {};
  for (const p of PHASES) {
    phases[p] = {
      latency_ms: trend(metricValues(data, `http_req_duration{scenario:${p}}`)),
      errors: metricCount(data, `errors{scenario:${p}}`),
      dropped_iterations: metricCount(data, `dropped_iterations{scenario:${p}}`),
    };
  }
  const kinds = {};
  for (const k of KINDS) {
    const n = metricCount(data, `err_kind{kind:${k}}`);
    if (n) kinds[k] = { n, duration_ms: trend(metricValues(data, `err_duration{kind:${k}}`)) };
  }
  const c = {
    tp: metricCount(data, 'tp'), tn: metricCount(data, 'tn'), fp: metricCount(data, 'fp'),
    fn: metricCount(data, 'fn'), errors: metricCount(data, 'errors'),
  };
  const result = {
    mode: MODE,
    rate: RATE,
    t0_ms: data.setup_data ? data.setup_data.t0 : null,
    requests: c.tp + c.tn + c.fp + c.fn + c.errors,
    ...c,
    dropped_iterations: metricCount(data, 'dropped_iterations'),
    vus_max: data.metrics.vus_max ? data.metrics.vus_max.values.max : null,
    latency_ms: trend(metricValues(data, 'http_req_duration')),
    phases,
    error_kinds: kinds,
    windows: windowSeries(data, SECONDS),
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
