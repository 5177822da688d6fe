#!/bin/sh
# Decode speed with and without a JSON schema: starts ebb serve with SmolLM2 on an ephemeral
# port, runs ROUNDS rounds of one plain and one schema-constrained chat request (greedy, the same
# prompt, max_tokens TOKENS), and reads the decode tokens and seconds from /metrics around each
# request, so prompt evaluation is left out. Prints tokens/s of both and their ratio.
# Usage: bench/grammar-bench.sh [path/to/ebb] (default build/daemon/ebb)
# Environment: ROUNDS (3), TOKENS (96), EBB_TEST_DEVICE (auto), EBB_MODELS_DIR.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ebb=${1:-$here/../build/daemon/ebb}
models=${EBB_MODELS_DIR:-$HOME/.local/share/ebb/models}
out=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT
EBB_CONFIG=/dev/null "$ebb" serve -m "$models/SmolLM2-135M-Instruct.Q4_1.gguf" --port 0 \
    --device "${EBB_TEST_DEVICE:-auto}" --log-level warn >"$out" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
    port=$(sed -n 's|^ebb: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$out")
    [ -n "$port" ] && break
    sleep 0.1
done
url=http://127.0.0.1:$port
for _ in $(seq 1 1500); do
    curl -sf "$url/health" >/dev/null && break
    sleep 0.2
done
URL=$url ROUNDS=${ROUNDS:-3} TOKENS=${TOKENS:-96} python3 - <<'EOF'
import json, os, re, urllib.request

url, rounds, tokens = os.environ["URL"], int(os.environ["ROUNDS"]), int(os.environ["TOKENS"])
schema = {"type": "object", "properties": {"products": {"type": "array", "minItems": 8,
          "items": {"type": "object", "properties": {
              "name": {"type": "string"}, "price": {"type": "number"},
              "tags": {"type": "array", "items": {"type": "string"}},
              "in_stock": {"type": "boolean"}},
              "required": ["name", "price", "tags", "in_stock"],
              "additionalProperties": False}}},
          "required": ["products"], "additionalProperties": False}
msgs = [{"role": "user", "content": "List ten products of a hardware store with name, price, "
         "tags and whether they are in stock, as JSON."}]

def post(body):
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))

def metrics():
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    get = lambda k: float(re.search(r"^%s (\S+)$" % k, text, re.M).group(1))
    return get("ebb_generated_tokens_total"), get("ebb_decode_seconds_total")

def run(constrained):
    body = {"messages": msgs, "max_tokens": tokens, "temperature": 0}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "store", "schema": schema}}
    n0, s0 = metrics()
    r = post(body)
    n1, s1 = metrics()
    if constrained and r["choices"][0]["finish_reason"] == "stop":
        json.loads(r["choices"][0]["message"]["content"])  # complete output must parse
    # the first generated token comes with the prefill, so decode time covers n - 1 tokens
    return n1 - n0 - 1, s1 - s0

run(False)  # warm-up
tot = {False: [0, 0.0], True: [0, 0.0]}
for i in range(rounds):
    for c in (False, True):
        n, s = run(c)
        tot[c][0] += n
        tot[c][1] += s
        print("round %d %-10s %4d tokens %7.3f s %7.2f tok/s" % (i + 1, "schema" if c else "plain",
              n, s, n / s))
plain, constr = tot[False][0] / tot[False][1], tot[True][0] / tot[True][1]
print("plain %.2f tok/s, schema %.2f tok/s, time per token with schema / without: %.3f"
      % (plain, constr, plain / constr))
EOF
