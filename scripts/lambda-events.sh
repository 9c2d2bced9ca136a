#!/usr/bin/env bash
# Writes the sample Lambda events in events/ (checked in; rerun after changing a payload here).
#
# One folder per event source, the same five cases in each:
#   events/apigw-v2/      API Gateway HTTP API, payload format 2.0 ($default stage)
#   events/apigw-v1/      API Gateway REST API, payload format 1.0 (stage "Prod")
#   events/function-url/  Lambda Function URL (payload format 2.0, lambda-url domain)
#   events/alb/           Application Load Balancer target group
# cases: legit.json, fraud.json, null-last.json (last_transaction null), malformed.json,
# ready.json (GET /ready); apigw-v2 also has base64.json, wrong-method.json, not-found.json.
# events/payloads/ holds the same request bodies alone, for curl against a server
# (`curl -s localhost:9999/fraud-score -d @events/payloads/legit.json`).
# events/expected.tsv lists, for every event, the HTTP status and body the function must answer
# (`error` = a JSON object with an "error" string).
#
# Payloads: legit and fraud are the first two entries of the public test set
# (tests/data/test-data.json.gz, labels 0/5 and 5/5 frauds); null-last is the second worked
# example of the contest documentation (5 frauds).
set -euo pipefail
cd "$(dirname "$0")/.."
out=events
mkdir -p "$out"/{apigw-v2,apigw-v1,function-url,alb,payloads}

legit='{"id":"tx-1641912674","transaction":{"amount":441.59,"installments":1,"requested_at":"2027-07-09T16:31:06Z"},"customer":{"avg_amount":883.18,"tx_count_24h":1,"known_merchants":["MERC-004","MERC-017"]},"merchant":{"id":"MERC-004","mcc":"5411","avg_amount":302.78},"terminal":{"is_online":false,"card_present":true,"km_from_home":33.8814492067},"last_transaction":{"timestamp":"2027-06-04T14:14:22Z","km_from_current":18.4353521556}}'
fraud='{"id":"tx-853640735","transaction":{"amount":5293.06,"installments":8,"requested_at":"2028-09-19T03:34:29Z"},"customer":{"avg_amount":60.14,"tx_count_24h":11,"known_merchants":["MERC-009","MERC-001"]},"merchant":{"id":"MERC-087","mcc":"7995","avg_amount":21.57},"terminal":{"is_online":false,"card_present":false,"km_from_home":265.7823290829},"last_transaction":{"timestamp":"2024-01-04T03:43:32Z","km_from_current":722.9372664641}}'
null_last='{"id":"tx-doc-2","transaction":{"amount":9505.97,"installments":10,"requested_at":"2026-03-14T05:15:12Z"},"customer":{"avg_amount":81.28,"tx_count_24h":20,"known_merchants":["MERC-008","MERC-007","MERC-005"]},"merchant":{"id":"MERC-068","mcc":"7802","avg_amount":54.86},"terminal":{"is_online":false,"card_present":true,"km_from_home":952.27},"last_transaction":null}'
malformed='{"id":"tx-bad","transaction":{"amount":"lots","installments":1'

# $1 file, $2 method, $3 path, $4 body (JSON string or null), $5 base64 (true/false)
apigw_v2() {
  jq -n --arg m "$2" --arg p "$3" --argjson b "$4" --argjson enc "$5" '{
    version: "2.0", routeKey: "\($m) \($p)", rawPath: $p, rawQueryString: "",
    headers: ({"accept": "application/json", "host": "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
               "user-agent": "k6/1.1.0", "x-forwarded-proto": "https"}
              + (if $b == null then {} else {"content-type": "application/json"} end)),
    requestContext: {accountId: "123456789012", apiId: "a1b2c3d4e5",
      domainName: "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com", domainPrefix: "a1b2c3d4e5",
      http: {method: $m, path: $p, protocol: "HTTP/1.1", sourceIp: "203.0.113.10", userAgent: "k6/1.1.0"},
      requestId: "c6af9ac6-7b61-11e6-9a41-93e8deadbeef", routeKey: "\($m) \($p)", stage: "$default",
      time: "11/Mar/2026:20:23:35 +0000", timeEpoch: 1773260615000},
    isBase64Encoded: $enc} + (if $b == null then {} else {body: $b} end)' > "$1"
}

function_url() {
  jq -n --arg m "$2" --arg p "$3" --argjson b "$4" '{
    version: "2.0", routeKey: "$default", rawPath: $p, rawQueryString: "",
    headers: ({"accept": "application/json", "host": "abcdefghijklmnopqrstuvwxyz0123.lambda-url.us-east-1.on.aws",
               "user-agent": "k6/1.1.0", "x-forwarded-proto": "https"}
              + (if $b == null then {} else {"content-type": "application/json"} end)),
    requestContext: {accountId: "anonymous", apiId: "abcdefghijklmnopqrstuvwxyz0123",
      domainName: "abcdefghijklmnopqrstuvwxyz0123.lambda-url.us-east-1.on.aws",
      domainPrefix: "abcdefghijklmnopqrstuvwxyz0123",
      http: {method: $m, path: $p, protocol: "HTTP/1.1", sourceIp: "203.0.113.10", userAgent: "k6/1.1.0"},
      requestId: "1ac06eee-f687-44ec-9036-dfd49d0be0a3", routeKey: "$default", stage: "$default",
      time: "11/Mar/2026:20:23:35 +0000", timeEpoch: 1773260615000},
    isBase64Encoded: false} + (if $b == null then {} else {body: $b} end)' > "$1"
}

apigw_v1() {
  jq -n --arg m "$2" --arg p "$3" --argjson b "$4" '
    ({"Accept": "application/json", "Host": "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
      "User-Agent": "k6/1.1.0", "X-Forwarded-Proto": "https"}
     + (if $b == null then {} else {"Content-Type": "application/json"} end)) as $h
    | {resource: $p, path: $p, httpMethod: $m, headers: $h,
       multiValueHeaders: ($h | map_values([.])),
       queryStringParameters: null, multiValueQueryStringParameters: null,
       pathParameters: null, stageVariables: null,
       requestContext: {accountId: "123456789012", apiId: "a1b2c3d4e5", resourceId: "x1y2z3",
         stage: "Prod", requestId: "c6af9ac6-7b61-11e6-9a41-93e8deadbeef",
         extendedRequestId: "MLa1bFakeIdA=", requestTime: "11/Mar/2026:20:23:35 +0000",
         requestTimeEpoch: 1773260615000, resourcePath: $p, httpMethod: $m, path: "/Prod\($p)",
         protocol: "HTTP/1.1", domainName: "a1b2c3d4e5.execute-api.us-east-1.amazonaws.com",
         domainPrefix: "a1b2c3d4e5",
         identity: {sourceIp: "203.0.113.10", userAgent: "k6/1.1.0"}},
       body: $b, isBase64Encoded: false}' > "$1"
}

alb() {
  jq -n --arg m "$2" --arg p "$3" --argjson b "$4" '{
    requestContext: {elb: {targetGroupArn:
      "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/fraud-score/0123456789abcdef"}},
    httpMethod: $m, path: $p, queryStringParameters: {},
    headers: ({"accept": "application/json", "host": "fraud-alb-123456789.us-east-1.elb.amazonaws.com",
               "user-agent": "k6/1.1.0", "x-forwarded-for": "203.0.113.10", "x-forwarded-port": "443",
               "x-forwarded-proto": "https"}
              + (if $b == null then {} else {"content-type": "application/json"} end)),
    body: ($b // ""), isBase64Encoded: false}' > "$1"
}

printf '%s\n' "$legit" > "$out/payloads/legit.json"
printf '%s\n' "$fraud" > "$out/payloads/fraud.json"
printf '%s\n' "$null_last" > "$out/payloads/null-last.json"
printf '%s\n' "$malformed" > "$out/payloads/malformed.json"

expected=$out/expected.tsv
printf 'event\tstatus\tbody\n' > "$expected"
ok_legit='{"approved":true,"fraud_score":0.0}'
ok_fraud='{"approved":false,"fraud_score":1.0}'
ready='{"ready":true}'
for src in apigw-v2 apigw-v1 function-url alb; do
  gen() {
    case $src in
      apigw-v2) apigw_v2 "$@" false ;;
      *) "${src//-/_}" "$@" ;;
    esac
  }
  gen "$out/$src/legit.json" POST /fraud-score "$(jq -Rn --arg s "$legit" '$s')"
  gen "$out/$src/fraud.json" POST /fraud-score "$(jq -Rn --arg s "$fraud" '$s')"
  gen "$out/$src/null-last.json" POST /fraud-score "$(jq -Rn --arg s "$null_last" '$s')"
  gen "$out/$src/malformed.json" POST /fraud-score "$(jq -Rn --arg s "$malformed" '$s')"
  gen "$out/$src/ready.json" GET /ready null
  printf '%s\t200\t%s\n' "$src/legit.json" "$ok_legit" "$src/fraud.json" "$ok_fraud" \
    "$src/null-last.json" "$ok_fraud" >> "$expected"
  printf '%s\t400\terror\n' "$src/malformed.json" >> "$expected"
  printf '%s\t200\t%s\n' "$src/ready.json" "$ready" >> "$expected"
done
apigw_v2 "$out/apigw-v2/base64.json" POST /fraud-score "$(printf %s "$legit" | base64 -w0 | jq -Rs 'rtrimstr("\n")')" true
apigw_v2 "$out/apigw-v2/wrong-method.json" GET /fraud-score null false
apigw_v2 "$out/apigw-v2/not-found.json" POST /score "$(jq -Rn --arg s "$legit" '$s')" false
printf '%s\t200\t%s\n' apigw-v2/base64.json "$ok_legit" >> "$expected"
printf '%s\t405\terror\n' apigw-v2/wrong-method.json >> "$expected"
printf '%s\t404\terror\n' apigw-v2/not-found.json >> "$expected"
echo "wrote $(($(wc -l < "$expected") - 1)) events under $out/"
