-- wrk script: POST short chat requests to ebb serve and count statuses.
-- Usage: wrk -t2 -c32 -d30s -s bench/wrk-chat.lua http://127.0.0.1:8077
-- Environment: WRK_MAX_TOKENS (default 16), WRK_STREAM=1 for SSE responses.
local max_tokens = tonumber(os.getenv("WRK_MAX_TOKENS") or "16")
local stream = os.getenv("WRK_STREAM") == "1"
local prompts = {
  "Say hello.", "Name a color.", "What is 2+2?", "Give me a fruit.",
  "One word for happy?", "Count to three.", "Name an animal.", "What day follows Monday?",
}
local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
  n = 0
end

function request()
  n = n + 1
  local p = prompts[(n + id) % #prompts + 1]
  local body = string.format(
    '{"messages":[{"role":"user","content":"%s"}],"max_tokens":%d,"temperature":0%s}',
    p, max_tokens, stream and ',"stream":true' or "")
  return wrk.format("POST", "/v1/chat/completions",
    {["Content-Type"] = "application/json", ["Host"] = "127.0.0.1"}, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for k, v in pairs(s) do total[k] = (total[k] or 0) + v end
  end
  io.write("statuses:")
  for k, v in pairs(total) do io.write(string.format(" %d=%d", k, v)) end
  io.write("\n")
  local e = summary.errors
  io.write(string.format("socket errors: connect %d, read %d, write %d, timeout %d; non-2xx/3xx %d\n",
    e.connect, e.read, e.write, e.timeout, e.status))
  io.write(string.format("latency ms: p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
