#!/usr/bin/env python3
"""Writes the Lambda events of the bad-input matrix (docs/HOSTILE.md) and their expected answers.

    python3 events/hostile/make.py

Each event is a sample event of events/<source>/legit.json with its body (and for some, path,
query string or base64 flag) replaced. The expected answers of the valid ones come from
local-runner/tests/data/hostile-valid.json (the independent labeller's answers), so the Lambda
path is held to the same numbers as the HTTP server. scripts/ci-lambda.sh replays them under
AWS's Runtime Interface Emulator; `error:<field>` means a 400 whose error starts with
`<field>: `.
"""
import base64
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
events = os.path.dirname(here)
root = os.path.dirname(events)
valid = {c["name"]: c for c in json.load(open(os.path.join(root, "local-runner/tests/data/hostile-valid.json")))}
base = valid["base"]["body"]


def sub(old, new, body=base):
    assert body.count(old) == 1, old
    return body.replace(old, new)


def template(source):
    return json.load(open(os.path.join(events, source, "legit.json")))


def event(source, body, *, b64=False, query=""):
    e = template(source)
    if body is None:
        e.pop("body", None)
    elif b64:
        e["body"] = base64.b64encode(body).decode()
    else:
        e["body"] = body
    e["isBase64Encoded"] = b64
    if query:
        if "rawQueryString" in e:
            e["rawQueryString"] = query
        k, v = query.split("=")
        key = "multiValueQueryStringParameters" if "multiValueQueryStringParameters" in e else None
        e["queryStringParameters"] = {k: v}
        if key:
            e[key] = {k: [v]}
    return e


cases = [
    # (file, source, event, expected status, expected body or error:<field>)
    ("empty-body", "apigw-v2", event("apigw-v2", None), 400, "error:."),
    ("wrong-type", "apigw-v2", event("apigw-v2", sub('"amount":441.59', '"amount":"441.59"')), 400, "error:transaction.amount"),
    ("missing-field", "apigw-v2", event("apigw-v2", sub('"mcc":"5411",', "")), 400, "error:merchant"),
    ("null-field", "apigw-v2", event("apigw-v2", sub('"is_online":false', '"is_online":null')), 400, "error:terminal.is_online"),
    ("nan", "apigw-v2", event("apigw-v2", sub('"amount":441.59', '"amount":NaN')), 400, "error:transaction.amount"),
    ("bad-timestamp", "apigw-v2", event("apigw-v2", sub('"2027-07-09T16:31:06Z"', '"2027-02-30T16:31:06Z"')), 400, "error:transaction.requested_at"),
    ("positional-array", "apigw-v2", event("apigw-v2", sub('{"is_online":false,"card_present":true,"km_from_home":33.8814492067}', "[false,true,33.88]")), 400, "error:terminal"),
    ("non-utf8", "apigw-v2", event("apigw-v2", sub('"tx-1641912674"', '"tx-\x00"').encode().replace(b"\x00", b"\xff"), b64=True), 400, "error:."),
    ("query-string", "apigw-v2", event("apigw-v2", base, query="x=1"), 200, valid["base"]["expected"]),
    ("wrong-type-v1", "apigw-v1", event("apigw-v1", sub('"is_online":false', '"is_online":"no"')), 400, "error:terminal.is_online"),
    ("wrong-type-function-url", "function-url", event("function-url", sub('"is_online":false', '"is_online":"no"')), 400, "error:terminal.is_online"),
    ("wrong-type-alb", "alb", event("alb", sub('"is_online":false', '"is_online":"no"')), 400, "error:terminal.is_online"),
]
for name in ["extra_fields", "avg_amount_zero", "mcc_unknown", "edge_negative_amount", "edge_huge_amount",
             "edge_km_current_negative", "edge_installments_zero", "edge_last_later", "edge_last_null"]:
    c = valid[name]
    cases.append((name.replace("_", "-"), "apigw-v2", event("apigw-v2", c["body"]), 200, c["expected"]))

rows = ["event\tstatus\tbody"]
for name, _, e, status, body in cases:
    with open(os.path.join(here, name + ".json"), "w") as f:
        json.dump(e, f, indent=2)
        f.write("\n")
    rows.append(f"hostile/{name}.json\t{status}\t{body}")
with open(os.path.join(here, "expected.tsv"), "w") as f:
    f.write("\n".join(rows) + "\n")
print(f"{len(cases)} events in {here}")
