// What the k6 scripts share: the loopback guard, the test set, the answer counters and the
// per-second windows. Imported in the init context, so each VU gets the same SharedArray and metrics.
//
// Per-second windows: every request is tagged `w` = whole seconds since the end of setup(), and an
// always-true threshold per window makes k6 keep a submetric for it, so the summary can carry
// count, errors, p50 and p99 for each second (the stack gates judge them, `cargo measure` plots them).

import { SharedArray } from 'k6/data';
import { Counter } from 'k6/metrics';

export const BASE_URL = __ENV.BASE_URL || 'http://localhost:9999';

// Traffic goes only to this machine: refuse anything but a loopback address.
if (!/^http:\/\/(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/.test(BASE_URL)) {
  throw new Error(`BASE_URL must be a loopback http://host:port, got ${BASE_URL}`);
}
if (!__ENV.TEST_DATA) {
  throw new Error('TEST_DATA must name a decompressed test set: test-data.json or a .csv of the final');
}

// The final's CSV layout (`# total=...`, a header, then one payload per line) as the body its
// load test sends: the object it builds from the columns, serialised by JSON.stringify. The id
// is left empty here: the final replaced it per request (see withId).
function csvEntries(text) {
  const lines = text.split('\n').filter((l) => l.length > 0);
  const header = lines[1].split(',');
  return lines.slice(2).map((line) => {
    const f = line.split(',');
    const c = Object.fromEntries(header.map((h, i) => [h, f[i]]));
    const body = {
      id: '',
      transaction: { amount: parseFloat(c.amount), installments: parseInt(c.installments, 10), requested_at: c.requested_at },
      customer: {
        avg_amount: parseFloat(c.cust_avg),
        tx_count_24h: parseInt(c.tx_count_24h, 10),
        known_merchants: c.known_merchants === '' ? [] : c.known_merchants.split('|'),
      },
      merchant: { id: c.merch_id, mcc: c.mcc, avg_amount: parseFloat(c.merch_avg) },
      terminal: { is_online: c.is_online === 'true', card_present: c.card_present === 'true', km_from_home: parseFloat(c.km_from_home) },
      last_transaction: c.last_ts === '' ? null : { timestamp: c.last_ts, km_from_current: parseFloat(c.last_km) },
    };
    return [JSON.stringify(body), c.expected_approved === 'true'];
  });
}

// [body text, expected_approved] per entry, serialised once here rather than per request.
export const entries = new SharedArray('entries', () => {
  const text = open(__ENV.TEST_DATA);
  if (__ENV.TEST_DATA.endsWith('.csv')) return csvEntries(text);
  return JSON.parse(text).entries.map((e) => [JSON.stringify(e.request), e.expected_approved]);
});

// A body whose id is replaced by a fresh UUID, as the final did (`crypto.randomUUID()`).
export function withId(body) {
  return `{"id":"${crypto.randomUUID()}"${body.slice(body.indexOf(','))}`;
}

export const tp = new Counter('tp');
export const tn = new Counter('tn');
export const fp = new Counter('fp');
export const fn = new Counter('fn');
export const errors = new Counter('errors');

// Thresholds that only make k6 keep latency and errors per window, for `seconds` of load plus 5
// (a request started in the last second may finish 2 s later).
export function windowThresholds(seconds) {
  const t = {};
  for (let w = 0; w < seconds + 5; w++) {
    t[`http_req_duration{w:${w}}`] = ['max>=0'];
    t[`errors{w:${w}}`] = ['count>=0'];
  }
  return t;
}

// The tags of a request started now, given setup()'s start time.
export function windowTags(t0) {
  return { w: String(Math.max(0, Math.floor((Date.now() - t0) / 1000))) };
}

export function metricValues(data, name) {
  const m = data.metrics[name];
  return m ? m.values : null;
}

export function metricCount(data, name) {
  const v = metricValues(data, name);
  return v ? v.count || 0 : 0;
}

// [{w, n, errors, p50, p99, max}] for every window that saw a request.
export function windowSeries(data, seconds) {
  const out = [];
  for (let w = 0; w < seconds + 5; w++) {
    const v = metricValues(data, `http_req_duration{w:${w}}`);
    if (!v || !v.count) continue;
    out.push({ w, n: v.count, errors: metricCount(data, `errors{w:${w}}`), p50: v.med, p99: v['p(99)'], max: v.max });
  }
  return out;
}
