#!/usr/bin/env python3
"""Issue 32's GPU row: one daemon with a chat model, a fill-in-the-middle (completion) model and
an embedding model loaded together; the completion model's latency while 16 chat clients stream
from the chat model (and an embedding request goes out every second), against its latency with
nothing else running. Starts `ebb serve` without -m over a models dir holding links to the
three files, loads all three through /models/load, then:
  alone: a completion (a code-like prompt, 16 tokens, ignore_eos) every 200 ms, N of them;
  loaded: the same while 16 threads loop streamed chats of 128 tokens on the chat model and one
          thread posts /v1/embeddings every second.
Latency is from sending a non-streamed /v1/completions request to the end of its answer.

usage: bench/gpu-multimodel.py EBB_BIN CHAT.gguf FIM.gguf EMBED.gguf [--n 40] [--clients 16]
                               [--priority] [-- extra serve flags]
--priority gives the completion model `priority = high` (a [model.NAME] section in a config
file written for the run).
Prints one JSON line: the completion latencies' medians (p50) and p90s alone and under load,
their ratio, the chat tokens streamed and the embedding requests answered meanwhile.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time

CODE = ("def parse_header(line):\n    key, _, value = line.partition(':')\n    return key.strip()"
        ".lower(), value.strip()\n\n\ndef read_headers(stream):\n    headers = {}\n    for line in "
        "stream:\n        if not line.strip():\n            break\n        k, v = parse_header(line)"
        "\n        headers[k] = v\n    return headers\n\n\ndef content_length(headers):\n    ")


def post(port, path, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: HTTP {r.status}: {data[:300]!r}")
    return json.loads(data) if data else None


def fim_series(port, model, n, period, out):
    """n completions, one started every period seconds (a new one waits for the last to end)."""
    for i in range(n):
        t0 = time.monotonic()
        post(port, "/v1/completions", {"model": model, "prompt": CODE + f"# {i}\n", "max_tokens": 16,
                                       "temperature": 0, "ignore_eos": True})
        out.append(time.monotonic() - t0)
        left = period - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)


def chat_loop(port, model, stop, counts, k):
    i = 0
    while not stop.is_set():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        body = {"model": model, "stream": True, "max_tokens": 128, "temperature": 0.7,
                "ignore_eos": True, "seed": 1000 * k + i,
                "messages": [{"role": "user", "content": f"Client {k}, turn {i}: tell a story."}]}
        c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            counts["errors"] += 1
            r.read()
        else:
            for line in r:
                if line.startswith(b"data: {"):
                    counts["chunks"] += 1
        c.close()
        i += 1


def embed_loop(port, model, stop, counts):
    while not stop.is_set():
        t0 = time.monotonic()
        post(port, "/v1/embeddings", {"model": model, "input": [CODE[:200], CODE[200:400]]})
        counts["embeds"] += 1
        stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))


def p90(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * len(s)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ebb")
    ap.add_argument("chat")
    ap.add_argument("fim")
    ap.add_argument("embed")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--priority", action="store_true")
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    d = tempfile.mkdtemp(prefix="ebb-mm-")
    names = {}
    for role in ("chat", "fim", "embed"):
        names[role] = role + "-" + os.path.splitext(os.path.basename(getattr(a, role)))[0]
        os.symlink(os.path.abspath(getattr(a, role)), os.path.join(d, names[role] + ".gguf"))
    conf = os.path.join(d, "ebb.conf")
    with open(conf, "w") as f:
        if a.priority:
            f.write(f"[model.{names['fim']}]\npath = {os.path.join(d, names['fim'] + '.gguf')}\n"
                    "priority = high\n")
    env = dict(os.environ, EBB_CONFIG=conf)
    p = subprocess.Popen([a.ebb, "serve", "--models-dir", d, "--port", "0", "--ctx", "2048",
                          "--parallel", str(a.clients), "--keep-alive", "-1", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        port = int(re.search(r":(\d+)$", p.stdout.readline().strip()).group(1))
        for role in ("chat", "fim", "embed"):
            post(port, "/models/load", {"model": names[role]})
        warm = []
        fim_series(port, names["fim"], 5, 0.0, warm)  # first launches, prompt cache
        alone = []
        fim_series(port, names["fim"], a.n, 0.2, alone)
        stop = threading.Event()
        counts = {"chunks": 0, "errors": 0, "embeds": 0}
        th = [threading.Thread(target=chat_loop, args=(port, names["chat"], stop, counts, k))
              for k in range(a.clients)]
        th.append(threading.Thread(target=embed_loop, args=(port, names["embed"], stop, counts)))
        for t in th:
            t.start()
        time.sleep(3.0)  # every client streaming
        c0 = counts["chunks"]
        t0 = time.monotonic()
        loaded = []
        fim_series(port, names["fim"], a.n, 0.2, loaded)
        secs = time.monotonic() - t0
        chunks = counts["chunks"] - c0
        stop.set()
        for t in th:
            t.join()
        r = {"alone_p50_s": statistics.median(alone), "alone_p90_s": p90(alone),
             "loaded_p50_s": statistics.median(loaded), "loaded_p90_s": p90(loaded),
             "p50_ratio": statistics.median(loaded) / statistics.median(alone),
             "priority": a.priority,
             "chat_chunks_per_s_meanwhile": chunks / secs, "chat_errors": counts["errors"],
             "embed_requests": counts["embeds"], "alone": alone, "loaded": loaded}
        print(json.dumps(r))
    finally:
        p.terminate()
        p.wait(timeout=60)


if __name__ == "__main__":
    main()
