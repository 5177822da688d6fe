#!/usr/bin/env python3
"""The expert cache (--expert-cache, docs/STREAMER.md "Experts on demand") on the OpenCL engine
(PoCL in CI).

Writes qwen3moe-tiny (3 layers, 16 experts, 4 used per token; random weights, q8_0) with
ebb-gen-model and the qwen2 vocabulary (scripts/fetch-vocabs.sh, $EBB_VOCABS_DIR; its absence
is a failure, as for the vocabs test), then runs `ebb run --json` greedily on three prompts, one
of them longer than a prefill chunk (128 rows), with every expert resident and with the cache
forced to a few slots per layer: 4 (exactly the experts a token uses: every layer evicts, and
prefill chunks run in many passes), 8, 16 (all: no eviction), and 4 through EBB_EXPERT_CACHE
with the 8-bit decode kernels forced (EBB_CL_MVQ8/KQ8). The greedy ids must be identical to the
resident run's (also with 3 copy threads filling the staging one expert at a time, and with
8 slots and prefetch of 4 guesses a layer step, and with every expert in pinned host memory
(EBB_EXPERT_PINNED=1) with 4 slots and with 8 and prefetch), and the counters must add up (with prefetch:
copies = misses + prefetched, prefetched = prefetch hits + wasted + at most one last round): lookups = hits + misses, bytes copied = misses x
one expert's bytes, evictions = misses - the slots first filled (slots x layers), layer steps = layers x
evaluations, misses > 0, hits > 0, and with 16 slots no eviction. --expert-cache auto takes
its slot count from --memory-budget (too small a budget: an error with the figures; one left
for about 8 slots: between 5 and 15; 1G: all 16), with the same ids and no layer streamer. Bad
settings must fail with a message naming the problem. `ebb serve --expert-cache 4`
shows the ebb_expert_cache_* lines in /metrics after a completion, and `ebb serve
--expert-cache auto --memory-budget 1G` (and EBB_EXPERT_CACHE=auto) all 16 slots. Then the
Q4_K_M mix of qwen3moe-tiny-k (down stacks Q6_K in layer 2, Q4_K in 0 and 1, as llama.cpp
mixes them): 4 and 8 slots (and 4 with the 8-bit decode kernels) give the resident run's
greedy ids, and the bytes copied are each missed expert's own layer's size. A prompt of
three chunks and 6 rows with the grouped MoE products on (EBB_CL_MOE_GROUP=1) runs layer-major
through the cache (docs/STREAMER.md, "Long prompts through the expert cache"): the same greedy
ids as resident, as chunk after chunk and with 8 pinned slots, each expert copied once a layer a
pass (the long_* counters), and through `ebb serve --expert-cache 4` in one pass with the
resident server's text. Missed experts computed by the host (EBB_EXPERT_HOST) on both models:
host_experts below.

Usage: test-expert-cache.py EBB-GEN-MODEL EBB WORKDIR
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

STEPS = 16
N_LAYER, N_EXPERT, K = 3, 16, 4
PROMPTS = [
    "The capital of France is",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint(fib(",
    " ".join(f"Row {i}: the keeper counts the boats that pass the mill, and writes it down."
             for i in range(10)),
]


def run(ebb, model, prompt, args=(), env_add=None):
    env = dict(os.environ)
    env.pop("EBB_EXPERT_CACHE", None)
    env.update(env_add or {})
    p = subprocess.run([ebb, "run", "-m", model, "-p", prompt, "-n", str(STEPS), "--temp", "0",
                        "--device", "auto", "--ctx", "512", "--json", *args], env=env,
                       capture_output=True, text=True)
    return p


def serve_metrics(ebb, model, args=("--expert-cache", "4"), env_add=None, slots=4):
    env = dict(os.environ)
    env.pop("EBB_EXPERT_CACHE", None)
    env.update(env_add or {})
    srv = subprocess.Popen([ebb, "serve", "-m", model, "--port", "0", "--ctx", "256", *args],
                           env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in srv.stderr:
            m = re.search(r"listening on (http://[^\s;]+)", line)
            if m:
                url = m.group(1)
                break
        if not url:
            print("ERROR: ebb serve did not say where it listens")
            return 1
        threading.Thread(target=lambda: srv.stderr.read(), daemon=True).start()
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "/health", timeout=5).read()
                break
            except OSError:
                time.sleep(0.5)
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(
            {"prompt": "Hello there", "max_tokens": 8, "temperature": 0}).encode(),
            headers={"content-type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        vals = {k: int(v) for k, v in re.findall(r"^(ebb_expert_cache_\w+) (\d+)$", text, re.M)}
        print(f"# serve /metrics: {vals}")
        want = ["slots", "pool_bytes", "lookups_total", "hits_total", "misses_total",
                "evictions_total", "bytes_copied_total"]
        if any("ebb_expert_cache_" + w not in vals for w in want):
            print(f"ERROR: /metrics lacks ebb_expert_cache_* lines: {sorted(vals)}")
            return 1
        if (vals["ebb_expert_cache_slots"] != slots or vals["ebb_expert_cache_misses_total"] <= 0 or
                vals["ebb_expert_cache_lookups_total"] != vals["ebb_expert_cache_hits_total"] +
                vals["ebb_expert_cache_misses_total"]):
            print(f"ERROR: /metrics expert cache figures ({slots} slots expected): {vals}")
            return 1
        return 0
    finally:
        srv.terminate()
        srv.wait(timeout=30)


# Long prompts layer-major through the cache (docs/STREAMER.md, "Long prompts through the expert
# cache"): 390 tokens, three chunks and 6 rows, with the grouped MoE products on from one row
# (EBB_CL_MOE_GROUP=1; GPUs have them from 8 rows), which the layer-major pass runs.
LONG = " ".join(f"Row {i}: the keeper counts the boats that pass the mill, and writes it down."
                for i in range(20))
GROUPED = {"EBB_CL_MOE_GROUP": "1"}


def serve_complete(ebb, model, args, env_add, prompt):
    """One greedy completion of prompt (16 tokens) from `ebb serve ARGS`; returns (text, the
    ebb_expert_cache_* values of /metrics after it) or (None, an error)."""
    env = dict(os.environ)
    env.pop("EBB_EXPERT_CACHE", None)
    env.update(env_add or {})
    srv = subprocess.Popen([ebb, "serve", "-m", model, "--port", "0", "--ctx", "512", *args],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in srv.stderr:
            m = re.search(r"listening on (http://[^\s;]+)", line)
            if m:
                url = m.group(1)
                break
        if not url:
            return None, "ebb serve did not say where it listens"
        threading.Thread(target=lambda: srv.stderr.read(), daemon=True).start()
        for _ in range(240):  # until the model is loaded
            try:
                urllib.request.urlopen(url + "/health", timeout=5).read()
                break
            except OSError:
                time.sleep(0.5)
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(
            {"prompt": prompt, "max_tokens": STEPS, "temperature": 0}).encode(),
            headers={"content-type": "application/json"})
        body = json.loads(urllib.request.urlopen(req, timeout=120).read())
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        vals = {k: float(v) for k, v in re.findall(r"^(ebb_expert_cache_\w+) ([\d.]+)$", text,
                                                   re.M)}
        return body["choices"][0]["text"], vals
    except OSError as e:
        return None, str(e)
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def long_prompts(ebb, model, fail):
    """LONG through `ebb run`: greedy ids identical resident, through 4 slots in one layer-major
    pass, chunk after chunk (EBB_STREAM_LONG_ROWS=0) and 8 slots pinned; the
    long_* counters: each of the 16 experts of each of the 3 layers (this prompt uses them all)
    copied once a pass. Then through `ebb serve --expert-cache 4`: the scheduler gives the lone
    prompt one pass (long_passes 1 in /metrics) and the text is the resident server's."""
    p = run(ebb, model, LONG, env_add=GROUPED)
    if p.returncode:
        return fail(f"long prompt, resident: failed: {p.stderr.strip()[-300:]}")
    d = json.loads(p.stdout)
    base = d["tokens"]
    if d.get("prompt_tokens", 0) <= 3 * 128:
        fail(f"long prompt: {d.get('prompt_tokens')} tokens, not more than three chunks")
    for label, args, env, passes in (
            ("4 slots, layer-major", ["--expert-cache", "4"], GROUPED, 1),
            ("4 slots, chunk after chunk", ["--expert-cache", "4"],
             dict(GROUPED, EBB_STREAM_LONG_ROWS="0"), 0),
            ("8 slots, pinned", ["--expert-cache", "8"], dict(GROUPED, EBB_EXPERT_PINNED="1"), 1),
            ("4 slots, layer-major, three writes an expert", ["--expert-cache", "4"],
             dict(GROUPED, EBB_EXPERT_RECT="0"), 1)):
        p = run(ebb, model, LONG, args, env)
        if p.returncode:
            fail(f"long prompt, {label}: failed: {p.stderr.strip()[-300:]}")
            continue
        d = json.loads(p.stdout)
        x = d.get("expert_cache") or {}
        print(f"# long prompt, {label}: " + ", ".join(
            f"{k} {v}" for k, v in x.items() if k.startswith("long_")))
        if d["tokens"] != base:
            fail(f"long prompt, {label}: greedy ids differ from the resident run's: "
                 f"{d['tokens']} vs {base}")
        if (x.get("long_passes") != passes or x.get("long_layer_steps") != passes * N_LAYER or
                x.get("long_copied") != passes * N_LAYER * N_EXPERT or
                x.get("long_bytes") != x.get("long_copied", -1) * x.get("expert_bytes", 0) or
                (passes and not x.get("long_ns"))):
            fail(f"long prompt, {label}: the layer-major counters are not {passes} passes of "
                 f"every expert of every layer once: {x}")
    texts = {}
    for label, args in (("resident", []), ("4 slots", ["--expert-cache", "4"])):
        text, vals = serve_complete(ebb, model, args, GROUPED, LONG)
        if text is None:
            fail(f"long prompt through ebb serve, {label}: {vals}")
            continue
        texts[label] = text
        if args:
            print(f"# long prompt through ebb serve, {label}: " + ", ".join(
                f"{k[len('ebb_expert_cache_'):]} {v:g}" for k, v in vals.items() if "long" in k))
            n = vals.get("ebb_expert_cache_long_passes_total")
            if (n != 1 or vals.get("ebb_expert_cache_long_copied_total") != N_LAYER * N_EXPERT or
                    not vals.get("ebb_expert_cache_long_seconds_total")):
                fail(f"long prompt through ebb serve: not one layer-major pass copying each "
                     f"expert once a layer: {vals}")
    if len(texts) == 2 and texts["resident"] != texts["4 slots"]:
        fail(f"long prompt through ebb serve: the text with 4 slots differs from the resident "
             f"server's: {texts['4 slots']!r} vs {texts['resident']!r}")


def mixed(gen_model, ebb, vocab, work, fail):
    """The Q4_K_M mix as the real files have it: qwen3moe-tiny-k's down stacks are Q6_K in layer
    2 and Q4_K in layers 0 and 1, so a layer 2 expert is larger. Greedy ids must equal the
    resident run's (with a layer's pools in one buffer and an expert's records in one
    rectangular write, the default, and with three pools and three writes, EBB_EXPERT_RECT=0,
    from the staging and from the pinned tier), and each miss copies one expert of its own
    layer's size: bytes copied =
    a x the small size + b x the large one with a + b = misses, both sizes seen."""
    model = os.path.join(work, "qwen3moe-tiny-k.gguf")
    subprocess.run([gen_model, "--shape", "qwen3moe-tiny-k", "--tokenizer-from", vocab, "--type",
                    "q4_k_m", "-o", model], check=True, stdout=subprocess.DEVNULL)
    q8 = {"EBB_CL_MVQ8": "1", "EBB_CL_KQ8": "1"}
    pinned = {"EBB_EXPERT_PINNED": "1"}  # every expert in pinned host memory, per layer's size
    # by default one buffer a layer: layers 0 and 1 take an expert in one write of three rows,
    # layer 2 (its down records larger) gate and up in one and down in another; RECT=0 takes
    # three pools and three writes an expert
    rect = {"EBB_EXPERT_RECT": "0"}
    rect_pinned = {"EBB_EXPERT_RECT": "0", "EBB_EXPERT_PINNED": "1"}
    for i, env in ((0, None), (2, None), (0, q8), (2, pinned), (0, rect), (2, rect_pinned)):
        p = run(ebb, model, PROMPTS[i], env_add=env)
        if p.returncode:
            fail(f"mixed, prompt {i}: resident run failed: {p.stderr.strip()[-300:]}")
            continue
        base = json.loads(p.stdout)["tokens"]
        for slots in (4, 8) if not env else (4,):
            p = run(ebb, model, PROMPTS[i], ["--expert-cache", str(slots)], env)
            if p.returncode:
                fail(f"mixed, prompt {i}, {slots} slots: failed: {p.stderr.strip()[-300:]}")
                continue
            d = json.loads(p.stdout)
            x = d.get("expert_cache") or {}
            label = ("" if not env else " (pinned)" if env is pinned else
                     " (8-bit decode)" if env is q8 else f" ({env})")
            print(f"# mixed, prompt {i}, {slots} slots{label}: {x}")
            if d["tokens"] != base:
                fail(f"mixed, prompt {i}, {slots} slots: greedy ids differ from the resident "
                     f"run's: {d['tokens']} vs {base}")
            big, small = x.get("expert_bytes", 0), x.get("expert_bytes_min", 0)
            if not 0 < small < big:
                fail(f"mixed, prompt {i}, {slots} slots: the experts' sizes do not differ "
                     f"between layers: {x}")
                continue
            if (env or {}).get("EBB_EXPERT_PINNED") == "1" and (
                    x.get("host_bytes") != N_EXPERT * ((N_LAYER - 1) * small + big)):
                fail(f"mixed, prompt {i}, pinned: host_bytes is not every expert's: {x}")
            extra = x["bytes_copied"] - x["misses"] * small
            if (x["lookups"] != x["hits"] + x["misses"] or extra <= 0 or
                    extra % (big - small) or extra // (big - small) >= x["misses"]):
                fail(f"mixed, prompt {i}, {slots} slots: the counters do not add up: {x}")
    return 0


def host_experts(ebb, models, fail):
    """EBB_EXPERT_HOST (docs/STREAMER.md, "Missed experts on the host"): up to N missed experts
    of a one-token step left out of the slots and computed by the host's threads from the mapped
    file. On qwen3moe-tiny (Q8_0: 32-block inputs) and the Q4_K/Q6_K mix (256-block inputs),
    4 slots, N = 2 and N = 4 (every miss of a decode step), 1, 2 and 3 threads (the engine
    thread one of them), polling between jobs or sleeping at once, and N = auto (each step's
    share from the measured costs of an expert on the host and over the link, both reported
    and above 0 here, 0 without auto): the load log says
    so, the greedy ids equal the resident run's on two prompts (the host's 8-bit inputs, like
    llama.cpp's CPU products, moved no pick here; the family test holds qwen3moe-tiny to
    llama.cpp's ids under the near-tie rule the same way), lookups = hits + misses +
    host_experts with host_experts > 0 and at most N a layer step, and the bytes copied are
    the slot misses' alone. A value above the experts a token uses fails, naming it."""
    for label, model in models:
        for i in (0, 1):
            p = run(ebb, model, PROMPTS[i])
            if p.returncode:
                fail(f"host experts, {label}, prompt {i}: resident run failed")
                continue
            base = json.loads(p.stdout)["tokens"]
            for n, threads, spin in (("2", "2", "2000"), ("4", "1", "2000"), ("4", "3", "0"),
                                     ("auto", "2", "2000")):
                most = "4" if n == "auto" else n
                env = {"EBB_EXPERT_HOST": n, "EBB_EXPERT_HOST_THREADS": threads,
                       "EBB_EXPERT_HOST_SPIN_US": spin}
                p = run(ebb, model, PROMPTS[i], ["--expert-cache", "4"], env)
                name = f"host experts, {label}, prompt {i}, N={n}, {threads} threads, spin {spin}"
                if p.returncode:
                    fail(f"{name}: failed: {p.stderr.strip()[-300:]}")
                    continue
                if f"up to {most} missed experts a one-token step computed on the host" not in p.stderr:
                    fail(f"{name}: the load log does not say so: {p.stderr.strip()[-300:]}")
                d = json.loads(p.stdout)
                x = d.get("expert_cache") or {}
                print(f"# {name}: {x.get('lookups')} lookups, {x.get('hits')} hits, "
                      f"{x.get('misses')} misses, {x.get('host_experts')} on the host")
                if d["tokens"] != base:
                    fail(f"{name}: greedy ids differ from the resident run's: {d['tokens']} vs "
                         f"{base}")
                he = x.get("host_experts", 0)
                if (he <= 0 or he > int(most) * x["layer_steps"] or
                        x["lookups"] != x["hits"] + x["misses"] + he or x.get("host_ns", -1) < 0):
                    fail(f"{name}: the counters do not add up: {x}")
                if n == "auto" and not (x.get("host_cost_ns", 0) > 0 and
                                        x.get("link_cost_ns", 0) > 0):
                    fail(f"{name}: the costs auto weighs were not measured: {x}")
                if n != "auto" and x.get("host_cost_ns") != 0:
                    fail(f"{name}: a host cost reported without auto: {x}")
                if x["expert_bytes"] == x["expert_bytes_min"] and (
                        x["bytes_copied"] != x["misses"] * x["expert_bytes"]):
                    fail(f"{name}: bytes copied != slot misses x expert bytes: {x}")
    p = run(ebb, models[0][1], PROMPTS[0], ["--expert-cache", "4"], {"EBB_EXPERT_HOST": "5"})
    if p.returncode == 0 or "EBB_EXPERT_HOST='5'" not in p.stderr:
        fail(f"EBB_EXPERT_HOST=5 (more than the 4 experts a token uses): expected an error "
             f"naming it, rc {p.returncode}: {p.stderr.strip()[-300:]}")


def pinned_auto(ebb, model, work, fail):
    """EBB_EXPERT_PINNED unset: every expert goes into pinned host memory on a discrete device
    (EBB_TEST_STREAM_DISCRETE=1 here) when half the host's available memory (the probes' test
    file) holds them, not otherwise, and never on this CPU device or with EBB_EXPERT_PINNED=0."""
    probe = os.path.join(work, "memprobe.txt")
    for avail, extra, want in (("64G", {"EBB_TEST_STREAM_DISCRETE": "1"}, True),
                               ("1M", {"EBB_TEST_STREAM_DISCRETE": "1"}, False),
                               ("64G", {"EBB_TEST_STREAM_DISCRETE": "1", "EBB_EXPERT_PINNED": "0"},
                                False),
                               ("64G", {}, False)):
        with open(probe, "w") as f:
            f.write(f"available={avail}\n")
        env = dict(extra, EBB_TEST_MEMPROBE_FILE=probe)
        p = run(ebb, model, PROMPTS[0], ["--expert-cache", "4"], env)
        if p.returncode:
            fail(f"auto pinning, {avail} {extra}: failed: {p.stderr.strip()[-300:]}")
            continue
        x = json.loads(p.stdout).get("expert_cache") or {}
        got = x.get("host_bytes") == N_EXPERT * N_LAYER * x.get("expert_bytes", -1)
        said = "half the host's available memory holds them" in p.stderr
        print(f"# auto pinning, available {avail}, {extra}: host_bytes {x.get('host_bytes')}")
        if got != want or said != want or (not want and x.get("host_bytes")):
            fail(f"auto pinning, available {avail}, {extra}: pinned {got}, expected {want}: "
                 f"{p.stderr.strip()[-300:]}")


def main():
    gen_model, ebb, work = sys.argv[1:4]
    vocabs = os.environ.get("EBB_VOCABS_DIR") or os.path.expanduser("~/.cache/ebb/vocabs")
    vocab = os.path.join(vocabs, "ggml-vocab-qwen2.gguf")
    if not os.path.exists(vocab):
        print(f"missing {vocab}: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR",
              file=sys.stderr)
        return 1
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "qwen3moe-tiny.gguf")
    dense = os.path.join(work, "qwen3-tiny.gguf")
    subprocess.run([gen_model, "--shape", "qwen3moe-tiny", "--tokenizer-from", vocab, "--type",
                    "q8_0", "-o", model], check=True, stdout=subprocess.DEVNULL)
    bad = 0

    def fail(msg):
        nonlocal bad
        print("ERROR: " + msg)
        bad += 1

    configs = [
        ("4 slots", ["--expert-cache", "4"], None),
        ("8 slots", ["--expert-cache", "8"], None),
        ("16 slots", ["--expert-cache", "16"], None),
        ("4 slots (env, 8-bit decode)", [], {"EBB_EXPERT_CACHE": "4", "EBB_CL_MVQ8": "1",
                                             "EBB_CL_KQ8": "1"}),
        # the staging filled by 3 threads one expert at a time (a record split 1..3 ways)
        ("4 slots, 3 threads, batches of 1", ["--expert-cache", "4"],
         {"EBB_EXPERT_THREADS": "3", "EBB_EXPERT_BATCH": "1"}),
        # prefetch: up to 4 guesses for the next layer at the end of each layer step
        ("8 slots, prefetch 4", ["--expert-cache", "8"], {"EBB_EXPERT_PREFETCH": "4"}),
        # every expert in pinned host memory: misses and prefetches copied from there
        ("4 slots, pinned", ["--expert-cache", "4"], {"EBB_EXPERT_PINNED": "1"}),
        ("8 slots, pinned, prefetch 4", ["--expert-cache", "8"],
         {"EBB_EXPERT_PINNED": "1", "EBB_EXPERT_PREFETCH": "4"}),
        # three pools a layer and three writes an expert (the default: one buffer, one
        # rectangular write)
        ("4 slots, three writes an expert", ["--expert-cache", "4"], {"EBB_EXPERT_RECT": "0"}),
        ("4 slots, pinned, three writes an expert", ["--expert-cache", "4"],
         {"EBB_EXPERT_PINNED": "1", "EBB_EXPERT_RECT": "0"}),
    ]
    base_ids = {}
    for i, prompt in enumerate(PROMPTS):
        p = run(ebb, model, prompt)
        if p.returncode:
            fail(f"prompt {i}: resident run failed: {p.stderr.strip()[-300:]}")
            continue
        base = json.loads(p.stdout)
        base_ids[i] = base["tokens"]
        if "expert_cache" in base:
            fail(f"prompt {i}: the resident run reports an expert cache")
        q8 = run(ebb, model, prompt, env_add={"EBB_CL_MVQ8": "1", "EBB_CL_KQ8": "1"})
        base_q8 = json.loads(q8.stdout)["tokens"] if q8.returncode == 0 else None
        n_prompt = base["prompt_tokens"]
        # evaluations: the prompt in chunks of 128, then one per generated token but the last
        n_eval = (n_prompt + 127) // 128 + STEPS - 1
        print(f"# prompt {i}: {n_prompt} tokens + {STEPS} steps: {base['tokens'][:6]}...")
        for name, args, env in configs:
            p = run(ebb, model, prompt, args, env)
            if p.returncode:
                fail(f"prompt {i}, {name}: failed: {p.stderr.strip()[-300:]}")
                continue
            if "expert cache on" not in p.stderr:
                fail(f"prompt {i}, {name}: the load log does not say the cache is on")
            want_th = (env or {}).get("EBB_EXPERT_THREADS")
            if want_th and f"{want_th} copy threads" not in p.stderr:
                fail(f"prompt {i}, {name}: the load log does not say {want_th} copy threads")
            d = json.loads(p.stdout)
            want = base_q8 if env and "EBB_CL_MVQ8" in env else base["tokens"]
            if d["tokens"] != want:
                k = next(j for j, (a, b) in enumerate(zip(d["tokens"], want)) if a != b)
                fail(f"prompt {i}, {name}: greedy ids differ at step {k}: {d['tokens'][k]} vs "
                     f"{want[k]}")
            x = d.get("expert_cache")
            if not x:
                fail(f"prompt {i}, {name}: no expert_cache in the report")
                continue
            slots = x["slots"]
            print(f"#   {name}: {x['lookups']} lookups, {x['hits']} hits, {x['misses']} misses, "
                  f"{x['evictions']} evictions, {x['bytes_copied']} bytes, {x['passes']} passes")
            if x.get("threads", 0) < 1 or x.get("fill_ns", 0) <= 0 or x.get("ids_ns", 0) <= 0:
                fail(f"prompt {i}, {name}: threads, fill_ns and ids_ns should be set: {x}")
            pinned = (env or {}).get("EBB_EXPERT_PINNED") == "1"
            if x.get("host_bytes") != (N_EXPERT * N_LAYER * x["expert_bytes"] if pinned else 0):
                fail(f"prompt {i}, {name}: host_bytes {x.get('host_bytes')}: {x}")
            if pinned and "every expert in pinned host memory" not in p.stderr:
                fail(f"prompt {i}, {name}: the load log does not mention the pinned experts")
            if x["lookups"] != x["hits"] + x["misses"]:
                fail(f"prompt {i}, {name}: lookups != hits + misses: {x}")
            pf = x["prefetched"]
            want_pf = int((env or {}).get("EBB_EXPERT_PREFETCH", "0"))
            if (want_pf and pf <= 0) or (not want_pf and pf):
                fail(f"prompt {i}, {name}: {pf} experts prefetched: {x}")
            # every prefetch is used by its layer's step (a hit too) or wasted, but the last
            # round (for layer 0 of an evaluation that never came)
            if (not 0 <= pf - x["prefetch_hits"] - x["prefetch_wasted"] <= want_pf or
                    x["prefetch_hits"] > x["hits"]):
                fail(f"prompt {i}, {name}: prefetch counters do not add up: {x}")
            if (x["bytes_copied"] != (x["misses"] + pf) * x["expert_bytes"] or
                    x["expert_bytes_min"] != x["expert_bytes"]):
                fail(f"prompt {i}, {name}: bytes copied != misses x expert bytes: {x}")
            if x["misses"] <= 0 or x["hits"] <= 0:
                fail(f"prompt {i}, {name}: hits and misses should both move: {x}")
            if x["layer_steps"] != N_LAYER * n_eval:
                fail(f"prompt {i}, {name}: {x['layer_steps']} layer steps, expected "
                     f"{N_LAYER * n_eval}")
            # every layer fills its slots before it evicts (each does, at these settings)
            if slots < N_EXPERT and x["evictions"] != x["misses"] + pf - slots * N_LAYER:
                fail(f"prompt {i}, {name}: evictions != misses + prefetched - {slots} x "
                     f"{N_LAYER}: {x}")
            if slots == N_EXPERT and (x["evictions"] or x["misses"] > N_EXPERT * N_LAYER):
                fail(f"prompt {i}, {name}: all experts fit, yet {x}")
            if slots == K and x["evictions"] <= 0:
                fail(f"prompt {i}, {name}: {K} slots and no eviction: {x}")
            if slots == K and x["passes"] <= x["layer_steps"] and n_prompt > 1:
                fail(f"prompt {i}, {name}: a {n_prompt}-token prefill in one pass per layer "
                     f"with {K} slots: {x}")

    # The daemon: --expert-cache 4, one completion, the ebb_expert_cache_* lines of /metrics;
    # then auto from --memory-budget, by flag and by EBB_EXPERT_CACHE (all 16 slots fit in 1G).
    long_prompts(ebb, model, fail)
    bad += serve_metrics(ebb, model)
    bad += serve_metrics(ebb, model, ["--expert-cache", "auto", "--memory-budget", "1G"],
                         slots=N_EXPERT)
    bad += serve_metrics(ebb, model, ["--memory-budget", "1G"], {"EBB_EXPERT_CACHE": "auto"},
                         slots=N_EXPERT)

    bad += mixed(gen_model, ebb, vocab, work, fail)
    host_experts(ebb, [("qwen3moe-tiny", model),
                       ("qwen3moe-tiny-k", os.path.join(work, "qwen3moe-tiny-k.gguf"))], fail)
    pinned_auto(ebb, model, work, fail)

    # --expert-cache auto: sized from --memory-budget. A budget too small names its figures;
    # from them, one that leaves about 8 slots a layer; a large one holds every expert.
    p = run(ebb, model, PROMPTS[0], ["--expert-cache", "auto", "--memory-budget", "40M"])
    m = re.search(r"leaves room for \d+ expert slots per layer, fewer than the 4 a token uses "
                  r"\(other weights ([\d.]+) MiB, KV cache ([\d.]+) MiB, buffers ([\d.]+) MiB; "
                  r"one slot in every layer ([\d.]+) MiB\)", p.stderr)
    if p.returncode == 0 or not m:
        fail(f"auto with 40M: expected the sizing error, rc {p.returncode}: "
             f"{p.stderr.strip()[-300:]}")
    else:
        other, kv, bufs, slot = (float(v) for v in m.groups())
        budget = int((other + kv + bufs + 8.5 * slot) * 1024)
        for args, lo, hi in ((["--memory-budget", f"{budget}K"], 5, 15),
                             (["--memory-budget", "1G"], N_EXPERT, N_EXPERT)):
            p = run(ebb, model, PROMPTS[1], ["--expert-cache", "auto", *args])
            if p.returncode:
                fail(f"auto {args}: failed: {p.stderr.strip()[-300:]}")
                continue
            d = json.loads(p.stdout)
            x = d.get("expert_cache") or {}
            print(f"# auto {args}: {x.get('slots')} slots a layer")
            if not lo <= x.get("slots", 0) <= hi or "sized from the budget" not in p.stderr:
                fail(f"auto {args}: {x.get('slots')} slots, expected {lo}..{hi}")
            if "stream" in d:
                fail(f"auto {args}: the layer streamer is on as well")
            if d["tokens"] != base_ids[1]:
                fail(f"auto {args}: greedy ids differ from the resident run's")
        # a count the budget cannot hold
        p = run(ebb, model, PROMPTS[0], ["--expert-cache", "16", "--memory-budget", f"{budget}K"])
        if p.returncode == 0 or "expert slots per layer (--expert-cache auto" not in p.stderr:
            fail(f"16 slots in a budget for about 8: rc {p.returncode}: "
                 f"{p.stderr.strip()[-300:]}")

    # Bad settings: clear errors, no crash.
    subprocess.run([gen_model, "--shape", "qwen3-tiny", "--tokenizer-from", vocab, "--type",
                    "q8_0", "-o", dense], check=True, stdout=subprocess.DEVNULL)
    cases = [
        (model, ["--expert-cache", "3"], None, "between 4"),
        (model, ["--expert-cache", "17"], None, "and 16"),
        (model, ["--expert-cache", "0"], None, "bad value"),
        (model, ["--expert-cache", "-4"], None, "bad value"),
        (model, ["--expert-cache", "four"], None, "bad value"),
        (model, ["--expert-cache", "4", "--residency", "0.5"], None, "layer streamer"),
        (model, ["--expert-cache", "4", "--device", "ref"], None, "OpenCL engine"),
        (model, ["--expert-cache", "auto"], None, "--memory-budget SIZE"),
        (model, ["--expert-cache", "4", "--memory-budget", "1G", "--host-layers", "1"], None,
         "--host-layers"),
        (model, [], {"EBB_EXPERT_CACHE": "x4"}, "EBB_EXPERT_CACHE"),
        (model, ["--expert-cache", "4"], {"EBB_EXPERT_THREADS": "0"}, "EBB_EXPERT_THREADS"),
        (model, ["--expert-cache", "4"], {"EBB_EXPERT_BATCH": "17"}, "EBB_EXPERT_BATCH"),
        (model, ["--expert-cache", "4"], {"EBB_EXPERT_PREFETCH": "-1"}, "EBB_EXPERT_PREFETCH"),
        (model, ["--expert-cache", "4"], {"EBB_EXPERT_PINNED": "2"}, "EBB_EXPERT_PINNED"),
        (dense, ["--expert-cache", "4"], None, "no experts"),
    ]
    for path, args, env, msg in cases:
        p = run(ebb, path, "Hello", args, env)
        if p.returncode == 0 or p.returncode < 0 or msg not in p.stderr:
            fail(f"{args} {env or ''}: rc {p.returncode}, expected a message with '{msg}': "
                 f"{p.stderr.strip()[-300:]}")
    print("ok" if not bad else f"{bad} failure(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
