"""n choices in one request against n concurrent one-choice requests (docs/PERFORMANCE.md).

Usage: python3 bench/choices.py http://127.0.0.1:PORT  (an `ebb serve --parallel 4`).
Each run sends a ~780-token completions prompt once with n=4 and once as four concurrent
requests of n=1 (a different prefix per run and per side, so the prompt cache helps neither),
32 tokens per choice, temperature 0.8, and prints the wall times and token counts."""
import json, sys, time, urllib.request, concurrent.futures as cf
base = sys.argv[1]
prompt = "Summarize the following text. " + " ".join(f"Item {i} is a small red box with a label." for i in range(60))
def post(body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())
common = {"prompt": prompt, "max_tokens": 32, "temperature": 0.8, "seed": 1}
# distinct prompts per run so the prompt cache does not help either side
for run in range(3):
    p = f"Run {run}. "
    t0 = time.time(); r = post({**common, "prompt": p + "A " + prompt, "n": 4}); t_n = time.time() - t0
    t0 = time.time()
    with cf.ThreadPoolExecutor(4) as ex:
        rs = list(ex.map(lambda i: post({**common, "prompt": p + "B " + prompt, "seed": 1 + i}), range(4)))
    t_4 = time.time() - t0
    print(f"run {run}: prompt {r['usage']['prompt_tokens']} tokens, n=4 one request {t_n:.2f} s "
          f"({r['usage']['completion_tokens']} tokens); 4 concurrent n=1 requests {t_4:.2f} s "
          f"({sum(x['usage']['completion_tokens'] for x in rs)} tokens)")
