#!/usr/bin/env python3
"""Expected answers for the odd-but-valid rows of the bad-input matrix (docs/HOSTILE.md).

An implementation of the contest labeller written from ../shared/SPEC.md alone, sharing no code
with the scorer: it vectorizes each body with the spec's formulas (IEEE doubles, fractional
minutes, clamp, C round half away from zero to 4 decimals) and scans all 3,000,000 references in
file order, keeping a candidate only when strictly closer. Where the spec's formula gives no
number (0 / 0), it applies the project's documented rule (ratio 0).

    python3 local-runner/tests/hostile_labeller.py [references.json.gz] > local-runner/tests/data/hostile-valid.json

Takes a few minutes (pure Python). The Rust test `hostile.rs` sends each body to the real server
and requires exactly the `expected` body recorded here.
"""
import datetime
import gzip
import json
import math
import re
import sys

# The base: the first (legit) entry of the public test set, with a last transaction.
BASE = ('{"id":"tx-1641912674","transaction":{"amount":441.59,"installments":1,"requested_at":"2027-07-09T16:31:06Z"},'
        '"customer":{"avg_amount":883.18,"tx_count_24h":1,"known_merchants":["MERC-004","MERC-017"]},'
        '"merchant":{"id":"MERC-004","mcc":"5411","avg_amount":302.78},'
        '"terminal":{"is_online":false,"card_present":true,"km_from_home":33.8814492067},'
        '"last_transaction":{"timestamp":"2027-06-04T14:14:22Z","km_from_current":18.4353521556}}')
# The first worked example of the contest documentation (no last transaction, legit).
DOC = ('{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},'
       '"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},'
       '"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},'
       '"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}')
# The second worked example (5 frauds), to show odd inputs can flip a decision either way.
FRAUD = ('{"id":"tx-2","transaction":{"amount":9505.97,"installments":10,"requested_at":"2026-03-14T05:15:12Z"},'
         '"customer":{"avg_amount":81.28,"tx_count_24h":20,"known_merchants":["MERC-008","MERC-007","MERC-005"]},'
         '"merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},'
         '"terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}')
# A public test entry on the decision edge (3 of 5 frauds), so that odd values are seen to move it.
EDGE = ('{"id":"tx-848457488","transaction":{"amount":1052.33,"installments":4,"requested_at":"2030-11-17T21:44:10Z"},'
        '"customer":{"avg_amount":457.82,"tx_count_24h":11,"known_merchants":["MERC-008","MERC-017"]},'
        '"merchant":{"id":"MERC-038","mcc":"5411","avg_amount":257.46},'
        '"terminal":{"is_online":true,"card_present":false,"km_from_home":88.7149329224},'
        '"last_transaction":{"timestamp":"2026-07-18T21:50:58Z","km_from_current":227.4733996688}}')


def sub(body, old, new):
    assert body.count(old) == 1, (old, body)
    return body.replace(old, new)


# (name, what it shows, body exactly as sent)
CASES = [
    ("base", "the base payload itself", BASE),
    ("doc_example", "contest worked example 1", DOC),
    ("doc_example_fraud", "contest worked example 2", FRAUD),
    ("extra_fields", "unknown fields at every level are ignored",
     sub(sub(sub(BASE, '{"id":"tx-', '{"version":2,"meta":{"a":[1,null,{"b":"c"}]},"id":"tx-'),
             '"installments":1', '"installments":1,"currency":"BRL"'),
         '"is_online":false', '"is_online":false,"pos":null')),
    ("id_missing", "id is optional (the decision does not use it)", sub(BASE, '"id":"tx-1641912674",', "")),
    ("id_null", "id null is the same as no id", sub(BASE, '"id":"tx-1641912674"', '"id":null')),
    ("last_missing", "last_transaction absent = null", sub(DOC, ',"last_transaction":null', "")),
    ("pretty_printed", "whitespace and key order do not matter",
     json.dumps({k: v for k, v in reversed(list(json.loads(BASE).items()))}, indent=2)),
    ("number_forms", "441.59 as 4.4159e2, 1 as 1.0, integers for floats",
     sub(sub(BASE, '"amount":441.59', '"amount":4.4159e2'), '"installments":1,', '"installments":1.0,')),
    ("unicode_escapes", "escaped strings compare by value: \\u0030 is 0",
     sub(BASE, '"merchant":{"id":"MERC-004"', '"merchant":{"id":"MERC-\\u0030\\u00304"')),
    ("negative_amount", "amount < 0 clamps dims 0 and 2 to 0", sub(BASE, '"amount":441.59', '"amount":-441.59')),
    ("zero_amount", "amount 0", sub(BASE, '"amount":441.59', '"amount":0')),
    ("huge_amount", "amount 1e300 clamps dims 0 and 2 to 1", sub(FRAUD, '"amount":9505.97', '"amount":1e300')),
    ("avg_amount_zero", "avg_amount 0, amount > 0: amount/avg = +inf clamps to 1",
     sub(BASE, '"avg_amount":883.18', '"avg_amount":0')),
    ("avg_and_amount_zero", "0 / 0: project rule, dim 2 = 0",
     sub(sub(BASE, '"avg_amount":883.18', '"avg_amount":0'), '"amount":441.59', '"amount":0')),
    ("avg_amount_negative", "avg_amount < 0: negative ratio clamps to 0",
     sub(BASE, '"avg_amount":883.18', '"avg_amount":-883.18')),
    ("installments_zero", "installments 0", sub(BASE, '"installments":1', '"installments":0')),
    ("installments_huge", "installments 1e6 clamps to 1", sub(BASE, '"installments":1', '"installments":1000000')),
    ("installments_fraction", "installments 2.5: the formula takes any number",
     sub(BASE, '"installments":1', '"installments":2.5')),
    ("installments_negative", "installments -3 clamps to 0", sub(BASE, '"installments":1', '"installments":-3')),
    ("tx_count_negative", "tx_count_24h -1 clamps to 0", sub(BASE, '"tx_count_24h":1', '"tx_count_24h":-1')),
    ("tx_count_huge", "tx_count_24h 1e9 clamps to 1", sub(BASE, '"tx_count_24h":1', '"tx_count_24h":1000000000')),
    ("km_home_negative", "km_from_home < 0 clamps to 0",
     sub(BASE, '"km_from_home":33.8814492067', '"km_from_home":-33.88')),
    ("km_home_huge", "km_from_home 1e12 clamps to 1",
     sub(BASE, '"km_from_home":33.8814492067', '"km_from_home":1e12')),
    ("km_current_negative", "km_from_current < 0 clamps to 0",
     sub(BASE, '"km_from_current":18.4353521556', '"km_from_current":-18.43')),
    ("merchant_avg_negative", "merchant.avg_amount < 0 clamps to 0",
     sub(BASE, '"avg_amount":302.78', '"avg_amount":-302.78')),
    ("last_later", "last transaction 1 day after the current one: minutes < 0 clamp to 0",
     sub(BASE, '"timestamp":"2027-06-04T14:14:22Z"', '"timestamp":"2027-07-10T16:31:06Z"')),
    ("last_same_instant", "last transaction at the same instant: minutes 0",
     sub(BASE, '"timestamp":"2027-06-04T14:14:22Z"', '"timestamp":"2027-07-09T16:31:06Z"')),
    ("last_years_ago", "last transaction 10 years earlier: minutes clamp to 1",
     sub(BASE, '"timestamp":"2027-06-04T14:14:22Z"', '"timestamp":"2017-06-04T14:14:22Z"')),
    ("mcc_unknown", "MCC outside the table: risk 0.5", sub(BASE, '"mcc":"5411"', '"mcc":"0000"')),
    ("mcc_5999", "MCC 5999 (risk 0.50, the same vector as mcc_unknown)", sub(BASE, '"mcc":"5411"', '"mcc":"5999"')),
    ("mcc_empty", "empty MCC: risk 0.5", sub(BASE, '"mcc":"5411"', '"mcc":""')),
    ("mcc_long", "a 1000-character MCC: risk 0.5", sub(BASE, '"mcc":"5411"', '"mcc":"' + "9" * 1000 + '"')),
    ("known_merchants_empty", "no known merchants: unknown_merchant 1",
     sub(BASE, '"known_merchants":["MERC-004","MERC-017"]', '"known_merchants":[]')),
    ("known_merchants_repeated", "repeated ids are allowed",
     sub(BASE, '"known_merchants":["MERC-004","MERC-017"]', '"known_merchants":["MERC-017","MERC-017","MERC-004","MERC-004"]')),
    ("merchant_id_case", "ids compare exactly: merc-004 is not MERC-004",
     sub(BASE, '"merchant":{"id":"MERC-004"', '"merchant":{"id":"merc-004"')),
    ("ts_offset", "requested_at with +02:00 offset: hour and weekday of the UTC instant",
     sub(BASE, '"requested_at":"2027-07-09T16:31:06Z"', '"requested_at":"2027-07-09T18:31:06+02:00"')),
    ("ts_offset_day_change", "offset that moves the UTC day back (Sat 01:00+03:00 = Fri 22:00Z)",
     sub(BASE, '"requested_at":"2027-07-09T16:31:06Z"', '"requested_at":"2027-07-10T01:00:00+03:00"')),
    ("ts_fraction", "fractional seconds are kept in minutes",
     sub(BASE, '"requested_at":"2027-07-09T16:31:06Z"', '"requested_at":"2027-07-09T16:31:06.999Z"')),
    ("ts_lowercase_space", "RFC 3339 allows t/z lower case and a space for T",
     sub(BASE, '"requested_at":"2027-07-09T16:31:06Z"', '"requested_at":"2027-07-09 16:31:06z"')),
    ("ts_leap_second", "second 60 counts as the next second (here: next day, 00h)",
     sub(BASE, '"requested_at":"2027-07-09T16:31:06Z"', '"requested_at":"2027-07-09T23:59:60Z"')),
    ("ts_leap_year", "29 February of a leap year",
     sub(BASE, '"requested_at":"2027-07-09T16:31:06Z"', '"requested_at":"2028-02-29T12:00:00Z"')),
    ("edge_base", "public entry tx-848457488, 3 of 5 frauds", EDGE),
    ("edge_negative_amount", "edge entry, amount < 0", sub(EDGE, '"amount":1052.33', '"amount":-1052.33')),
    ("edge_huge_amount", "edge entry, amount 1e9", sub(EDGE, '"amount":1052.33', '"amount":1e9')),
    ("edge_avg_amount_zero", "edge entry, avg_amount 0", sub(EDGE, '"avg_amount":457.82', '"avg_amount":0')),
    ("edge_installments_zero", "edge entry, installments 0", sub(EDGE, '"installments":4', '"installments":0')),
    ("edge_installments_huge", "edge entry, installments 1e6", sub(EDGE, '"installments":4', '"installments":1000000')),
    ("edge_tx_count_huge", "edge entry, tx_count_24h 1e6", sub(EDGE, '"tx_count_24h":11', '"tx_count_24h":1000000')),
    ("edge_km_home_negative", "edge entry, km_from_home < 0",
     sub(EDGE, '"km_from_home":88.7149329224', '"km_from_home":-88.71')),
    ("edge_km_current_negative", "edge entry, km_from_current < 0",
     sub(EDGE, '"km_from_current":227.4733996688', '"km_from_current":-227.47')),
    ("edge_merchant_avg_negative", "edge entry, merchant.avg_amount < 0",
     sub(EDGE, '"avg_amount":257.46', '"avg_amount":-257.46')),
    ("edge_last_later", "edge entry, last transaction 1 hour after the current one",
     sub(EDGE, '"timestamp":"2026-07-18T21:50:58Z"', '"timestamp":"2030-11-17T22:44:10Z"')),
    ("edge_last_null", "edge entry, last_transaction null (sentinel -1)",
     sub(EDGE, '{"timestamp":"2026-07-18T21:50:58Z","km_from_current":227.4733996688}', 'null')),
    ("edge_mcc_unknown", "edge entry, MCC outside the table", sub(EDGE, '"mcc":"5411"', '"mcc":"1234"')),
    ("edge_ts_offset_day_change", "edge entry, Sun 21:44Z written as Mon 02:44+05:00 (same instant)",
     sub(EDGE, '"requested_at":"2030-11-17T21:44:10Z"', '"requested_at":"2030-11-18T02:44:10+05:00"')),
]

MCC = {"5411": 0.15, "5812": 0.30, "5912": 0.20, "5944": 0.45, "7801": 0.80,
       "7802": 0.75, "7995": 0.85, "4511": 0.35, "5311": 0.25, "5999": 0.50}

TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def instant(s):
    """(seconds since the epoch as a double, hour UTC, weekday Monday=0) of an RFC 3339 string."""
    m = TS.match(s)
    assert m, s
    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    leap = sec == 60  # RFC 3339 leap second: the same instant as second 0 of the next minute
    dt = datetime.datetime(y, mo, d, h, mi, 59 if leap else sec, tzinfo=datetime.timezone.utc)
    if leap:
        dt += datetime.timedelta(seconds=1)
    z = m.group(8)
    if z not in ("Z", "z"):
        off = datetime.timedelta(hours=int(z[1:3]), minutes=int(z[4:6]))
        dt -= off if z[0] == "+" else -off
    whole = int(dt.timestamp())
    frac = float("0" + m.group(7)) if m.group(7) else 0.0
    return whole + frac, dt.hour, dt.weekday()


def clamp(x):
    return 0.0 if x < 0 else 1.0 if x > 1 else x


def div(a, b):
    """IEEE division; 0/0 gives the project's 0 (the spec's formula gives no number)."""
    if b == 0:
        if a == 0:
            return 0.0
        return math.inf if a > 0 else -math.inf
    return a / b


def c_round4(v):
    """round(v * 10000) / 10000 with C round (half away from zero)."""
    x = v * 10000.0
    a = abs(x)
    r = math.floor(a)
    if a - r >= 0.5:
        r += 1
    return math.copysign(r, x) / 10000.0


def vectorize(p):
    t, c, m, term, last = p["transaction"], p["customer"], p["merchant"], p["terminal"], p.get("last_transaction")
    secs, hour, wd = instant(t["requested_at"])
    v = [
        clamp(div(t["amount"], 10000.0)),
        clamp(div(t["installments"], 12.0)),
        clamp(div(div(t["amount"], c["avg_amount"]), 10.0)),
        hour / 23.0,
        wd / 6.0,
        -1.0, -1.0,
        clamp(div(term["km_from_home"], 1000.0)),
        clamp(div(c["tx_count_24h"], 20.0)),
        1.0 if term["is_online"] else 0.0,
        1.0 if term["card_present"] else 0.0,
        0.0 if m["id"] in c["known_merchants"] else 1.0,
        MCC.get(m["mcc"], 0.5),
        clamp(div(m["avg_amount"], 10000.0)),
    ]
    if last is not None:
        lsecs, _, _ = instant(last["timestamp"])
        v[5] = clamp(div((secs - lsecs) / 60.0, 1440.0))
        v[6] = clamp(div(last["km_from_current"], 1000.0))
    return [c_round4(x) for x in v]


def main():
    refs_path = sys.argv[1] if len(sys.argv) > 1 else "resources/references.json.gz"
    vectors = {}
    for name, _, body in CASES:
        vectors[name] = vectorize(json.loads(body))
    unique = sorted({tuple(v) for v in vectors.values()})
    print(f"{len(CASES)} cases, {len(unique)} distinct vectors; reading {refs_path}", file=sys.stderr)
    with gzip.open(refs_path, "rb") as f:
        refs = json.load(f)
    print(f"{len(refs)} references; scanning", file=sys.stderr)
    rows = [(tuple(r["vector"]), r["label"] == "fraud") for r in refs]
    del refs
    # One pass per distinct query; distance summed in dimension order (d += e * e), unrolled.
    terms = " + ".join(f"(q[{k}] - r[{k}]) * (q[{k}] - r[{k}])" for k in range(14))
    distance = eval(f"lambda q, r: {terms}")  # noqa: S307 - a fixed expression built above
    best = {}
    for n, q in enumerate(unique):
        top = []  # (distance, index, fraud), sorted, at most 5; strict < to enter, file order
        for i, (r, fraud) in enumerate(rows):
            d = distance(q, r)
            if len(top) < 5 or d < top[-1][0]:
                pos = len(top)
                while pos > 0 and d < top[pos - 1][0]:
                    pos -= 1
                top.insert(pos, (d, i, fraud))
                del top[5:]
        best[q] = top
        print(f"  query {n + 1}/{len(unique)}: {sum(f for _, _, f in top)} frauds", file=sys.stderr)
    bodies = ['{"approved":true,"fraud_score":0.0}', '{"approved":true,"fraud_score":0.2}',
              '{"approved":true,"fraud_score":0.4}', '{"approved":false,"fraud_score":0.6}',
              '{"approved":false,"fraud_score":0.8}', '{"approved":false,"fraud_score":1.0}']
    out = []
    for name, what, body in CASES:
        q = tuple(vectors[name])
        frauds = sum(1 for _, _, f in best[q] if f)
        out.append({"name": name, "what": what, "body": body, "vector": list(q),
                    "neighbours": [i for _, i, _ in best[q]], "frauds": frauds, "expected": bodies[frauds]})
    json.dump(out, sys.stdout, indent=1)
    print(file=sys.stdout)


if __name__ == "__main__":
    main()
