// k6 replica of the official Rinha de Backend 2026 load test (its scenario, checks and scoring).
// Run by `cargo xtask stack smoke|submission` and `cargo measure run|floor|batch`.
//
//   MODE=full  (default) the preview: ramping-arrival-rate, startRate 1/s, one stage of 120 s up
//              to 900/s, preAllocatedVUs 100, maxVUs 250: about 54,060 requests.
//   MODE=final the final (2026-06-21/22): the same executor and VUs, gracefulStop 10 s, stages
//              60 s -> 1000/s, 300 s -> 2000/s, 60 s -> 5000/s; each payload once in file order,
//              its id replaced by crypto.randomUUID(). The official run went on for minutes
//              after its data ran out, sending nothing; this replica stops the ramp when the
//              data runs out (72,100 payloads: after ~100 s, near 1,130/s), which leaves every
//              measured request as it was.
//   MODE=smoke constant-arrival-rate, RATE/s (default 200) for DURATION (default 15s); the run
//              fails (k6 exit 99) on any HTTP error, FP or FN.
//
// Payloads are taken from the test set in file order (iteration i sends entry i), each POSTed
// with a 2001 ms timeout. An answer counts as an error if the status is not 200 or the body has
// no boolean `approved`; otherwise it is TP/TN/FP/FN with fraud (= not approved) as positive.
// The summary (p99, counts, contest score, and count/errors/p50/p99 per second in `windows`) is
// printed and written as JSON to $SUMMARY.
//
// Environment: TEST_DATA (decompressed test-data.json, required), BASE_URL (default
// http://localhost:9999; loopback only), SUMMARY (default k6-summary.json), MODE, RATE, DURATION.

import http from 'k6/http';
import exec from 'k6/execution';
import {
  BASE_URL, entries, tp, tn, fp, fn, errors, windowThresholds, windowTags, metricCount, windowSeries, withId,
} from './common.js';

const MODE = __ENV.MODE || 'full';
const SUMMARY = __ENV.SUMMARY || 'k6-summary.json';

// Seconds into the final's ramp when `n` requests have been started: 60 s up to 1000/s, then
// +1000/s per 300 s (the data runs out in the second stage for any n up to ~480,000).
function finalSeconds(n) {
  const first = 60 * (1 + 1000) / 2;
  if (n <= first) return Math.sqrt((2 * n * 60) / 999);
  const rest = n - first;
  const slope = 1000 / 300;
  return 60 + (-1000 + Math.sqrt(1000 * 1000 + 2 * slope * rest)) / slope;
}
const FINAL_END = Math.ceil(finalSeconds(entries.length)) + 1;

const scenarios = {
  final: {
    executor: 'ramping-arrival-rate',
    startRate: 1,
    timeUnit: '1s',
    preAllocatedVUs: 100,
    maxVUs: 250,
    gracefulStop: '10s',
    stages: [
      { duration: '60s', target: 1000 },
      { duration: `${FINAL_END - 60}s`, target: Math.round(1000 + ((FINAL_END - 60) * 1000) / 300) },
    ],
  },
  full: {
    executor: 'ramping-arrival-rate',
    startRate: 1,
    timeUnit: '1s',
    preAllocatedVUs: 100,
    maxVUs: 250,
    stages: [{ duration: '120s', target: 900 }],
  },
  smoke: {
    executor: 'constant-arrival-rate',
    rate: Number(__ENV.RATE || 200),
    timeUnit: '1s',
    duration: __ENV.DURATION || '15s',
    preAllocatedVUs: 20,
    maxVUs: 100,
  },
};
if (!scenarios[MODE]) {
  throw new Error(`MODE must be final, full or smoke, got ${MODE}`);
}
const SECONDS = { final: FINAL_END, full: 120 }[MODE] || parseInt(scenarios.smoke.duration, 10);

export const options = {
  scenarios: { fraud: scenarios[MODE] },
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)', 'p(99.9)', 'count'],
  thresholds: {
    ...windowThresholds(SECONDS),
    ...(MODE === 'smoke' ? { errors: ['count==0'], fp: ['count==0'], fn: ['count==0'] } : {}),
  },
  discardResponseBodies: false,
};

export function setup() {
  // One zero sample each, so every counter exists in the summary and its threshold is evaluated.
  for (const c of [tp, tn, fp, fn, errors]) c.add(0);
  return { t0: Date.now() };
}

const headers = { 'Content-Type': 'application/json' };

export default function (data) {
  const i = exec.scenario.iterationInTest;
  if (i >= entries.length) return;
  const [stored, expectedApproved] = entries[i];
  const body = MODE === 'final' ? withId(stored) : stored;
  const tags = windowTags(data.t0);
  const res = http.post(`${BASE_URL}/fraud-score`, body, { headers, timeout: '2001ms', tags });
  let approved;
  if (res.status === 200) {
    try {
      approved = JSON.parse(res.body).approved;
    } catch (_) {
      approved = undefined;
    }
  }
  if (typeof approved !== 'boolean') {
    errors.add(1, tags);
  } else if (expectedApproved) {
    (approved ? tn : fp).add(1);
  } else {
    (approved ? fn : tp).add(1);
  }
}

// The contest's formulas (SPEC.md "Load test and score").
export function score(p99, n, fpN, fnN, errN) {
  const p99Score = p99 > 2000 ? -3000 : 1000 * Math.log10(1000 / Math.max(p99, 1));
  const e = fpN + 3 * fnN + 5 * errN;
  let detection;
  if (n === 0 || (fpN + fnN + errN) / n > 0.15) detection = -3000;
  else detection = 1000 * Math.log10(1 / Math.max(e / n, 0.001)) - 300 * Math.log10(1 + e);
  return { p99_score: p99Score, detection_score: detection, final_score: Math.min(p99Score + detection, 6000) };
}

export function handleSummary(data) {
  const d = data.metrics.http_req_duration;
  const v = d ? d.values : {};
  const c = { tp: metricCount(data, 'tp'), tn: metricCount(data, 'tn'), fp: metricCount(data, 'fp'), fn: metricCount(data, 'fn'), errors: metricCount(data, 'errors') };
  const n = c.tp + c.tn + c.fp + c.fn + c.errors;
  const p99 = v['p(99)'] || 0;
  const result = {
    mode: MODE,
    base_url: BASE_URL,
    requests: n,
    http_reqs: metricCount(data, 'http_reqs'),
    dropped_iterations: metricCount(data, 'dropped_iterations'),
    ...c,
    latency_ms: { avg: v.avg, min: v.min, med: v.med, p90: v['p(90)'], p95: v['p(95)'], p99, p999: v['p(99.9)'], max: v.max },
    ...score(p99, n, c.fp, c.fn, c.errors),
    vus_max: data.metrics.vus_max ? data.metrics.vus_max.values.max : null,
    t0_ms: data.setup_data ? data.setup_data.t0 : null,
    windows: windowSeries(data, SECONDS),
    state: { test_run_duration_ms: data.state.testRunDurationMs },
  };
  const f = (x) => (x === undefined ? 'n/a' : x.toFixed(3));
  const text =
    `\n[${MODE}] requests ${n}  TP ${c.tp}  TN ${c.tn}  FP ${c.fp}  FN ${c.fn}  errors ${c.errors}  dropped ${result.dropped_iterations}\n` +
    `latency ms: med ${f(v.med)}  p90 ${f(v['p(90)'])}  p99 ${f(p99)}  p99.9 ${f(v['p(99.9)'])}  max ${f(v.max)}\n` +
    `score: p99 ${result.p99_score.toFixed(2)} + detection ${result.detection_score.toFixed(2)} = ${result.final_score.toFixed(2)}\n`;
  return { stdout: text, [SUMMARY]: JSON.stringify(result, null, 2) + '\n' };
}
