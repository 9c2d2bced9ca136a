// What the k6 scripts share: the loopback-only target, the test set and the answer counters.
// Imported in the init context, so each VU gets the same SharedArray and metrics.

import { SharedArray } from 'k6/data';
import { Counter } from 'k6/metrics';

export const BASE_URL = __ENV.BASE_URL || 'http://localhost:9999';

// Traffic goes only to this machine: refuse anything but a loopback address.
if (!/^http:\/\/(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/.test(BASE_URL)) {
  throw new Error(`BASE_URL must be a loopback http://host:port, got ${BASE_URL}`);
}
if (!__ENV.TEST_DATA) {
  throw new Error('TEST_DATA must name the decompressed test-data.json');
}

// [body text, expected_approved] per entry, serialised once here rather than per request.
export const entries = new SharedArray('entries', () =>
  JSON.parse(open(__ENV.TEST_DATA)).entries.map((e) => [JSON.stringify(e.request), e.expected_approved]),
);

export const tp = new Counter('tp');
export const tn = new Counter('tn');
export const fp = new Counter('fp');
export const fn = new Counter('fn');
export const errors = new Counter('errors');
