#!/usr/bin/env python3
"""A third model under a budget that fits two (issue 32): it loads, an idle model gives way, no
in-flight request fails, and the daemon's RSS against the budget. Starts `ebb serve` without -m
over a models dir holding three files (links), with models_budget chosen so that any two of
them fit and the three do not; loads the idle model and the busy one, starts a long streamed
chat on the busy one, and while it streams sends a chat to the third (which loads on it).
The daemon's /proc/PID/status (VmRSS, RssAnon, RssFile, RssShmem) is sampled every 50 ms from
start to stop, and /models/status every 0.2 s while the third loads.

usage: bench/catalogue-budget.py EBB_BIN [--budget 460M] [--idle ID] [--busy ID] [--third ID]
                                 [--models-dir DIR] [--file PATH ...] [--tokens 200]
                                 [--ctx 256] [--prompts 0] [--log FILE] [-- extra serve flags]
The three models default to SmolLM2 (idle), a random-weight SmolLM2-135M shape at Q8_0 (busy:
written by `ebb-gen-model --shape smollm2-135m --type q8_0 --tokenizer-from SmolLM2's file -o
rand-smollm2-135m-q8_0.gguf`, in the models dir or named by --file) and Gemma 3 270M (the
third). A model id's file is ID.gguf in --models-dir, else the --file of that name. Prints one JSON line: the planned size of each model
(memory_bytes), whether the third loaded and answered, which model gave way (layers streamed,
unloads, shrinks), whether the stream finished with [DONE] and finish_reason "length" and was
still running when the third answered, and the RSS peaks in MiB next to the budget, with the
mapped .gguf files' share of RssFile at the peak (from /proc/PID/smaps).
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import tempfile
import threading
import time

from importlib import util

spec = util.spec_from_file_location("ct", os.path.join(os.path.dirname(__file__),
                                                       "catalogue-ttft.py"))
ct = util.module_from_spec(spec)
spec.loader.exec_module(ct)
SMOL, GEMMA, req = ct.SMOL, ct.GEMMA, ct.req
RAND = "rand-smollm2-135m-q8_0"
MIB = 1 << 20


def size(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)", s.strip().upper())
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": MIB, "G": 1 << 30}[m.group(2)])


def status(port):
    return {m["id"]: m for m in req(port, "GET", "/models/status")[1]["data"]}


def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def smaps(pid):
    """Rss in bytes by kind of mapping: each .gguf file, other files (libraries), anonymous."""
    out, cur = {"gguf": {}, "other_files": 0, "anon": 0, "by_file": {}}, None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                p = line.split()
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    cur = p[5] if len(p) > 5 else ""
                elif p[0] == "Rss:":
                    b = int(p[1]) * 1024
                    if cur.endswith(".gguf"):
                        n = os.path.basename(cur)
                        out["gguf"][n] = out["gguf"].get(n, 0) + b
                    elif cur.startswith("/"):
                        out["other_files"] += b
                        n = os.path.basename(cur)
                        out["by_file"][n] = out["by_file"].get(n, 0) + b
                    else:
                        out["anon"] += b
    except OSError:
        pass
    return out


class Sampler(threading.Thread):
    """/proc/PID/status every period seconds; the peak of each field, and smaps at VmRSS's
    peak (taken when a sample beats the last peak by 4 MiB, so that it stays cheap)."""

    def __init__(self, pid, period=0.05):
        super().__init__(daemon=True)
        self.pid, self.period, self.stop = pid, period, threading.Event()
        self.peak, self.n, self.at_peak, self.smaps_peak, self.smaps_rss = {}, 0, {}, {}, 0

    def run(self):
        while not self.stop.is_set():
            s = proc_status(self.pid)
            if s:
                self.n += 1
                for k, v in s.items():
                    self.peak[k] = max(self.peak.get(k, 0), v)
                if s.get("VmRSS", 0) >= self.at_peak.get("VmRSS", 0):
                    self.at_peak = s
                if s.get("VmRSS", 0) > self.smaps_rss + 4 * MIB:
                    self.smaps_rss, self.smaps_peak = s["VmRSS"], smaps(self.pid)
            time.sleep(self.period)


def stream(port, model, tokens, out):
    """A streamed chat of tokens tokens (ignore_eos); out gets its status, [DONE], the last
    finish_reason, the token count and when it ended."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": model, "stream": True, "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": "Count to fifty."}]}
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out.update(status=r.status, done=False, finish=None, chunks=0, error=None, tokens=None)
    for line in r:
        line = line.decode().strip()
        if line == "data: [DONE]":
            out["done"] = True
        elif line.startswith("data: "):
            o = json.loads(line[6:])
            if "error" in o:
                out["error"] = o["error"]
            if o.get("usage"):
                out["tokens"] = o["usage"]["completion_tokens"]
            for ch in o.get("choices", []):
                out["chunks"] += 1
                if ch.get("finish_reason"):
                    out["finish"] = ch["finish_reason"]
    out["end"] = time.perf_counter()
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ebb")
    ap.add_argument("--budget", default="460M", help="models_budget (default 460M)")
    ap.add_argument("--idle", default=SMOL)
    ap.add_argument("--busy", default=RAND)
    ap.add_argument("--third", default=GEMMA)
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.local/share/ebb/models"))
    ap.add_argument("--file", action="append", default=[],
                    help="a model file outside --models-dir (repeatable)")
    ap.add_argument("--tokens", type=int, default=200, help="the busy model's stream")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--log", help="the daemon's log goes here")
    ap.add_argument("--prompts", type=int, default=0,
                    help="distinct short chats sent to the idle and the busy model first (each "
                         "evicted prompt goes to the prompt-cache store, which is host memory "
                         "on PoCL and not in memory_bytes)")
    a, extra = ap.parse_known_args()
    a.extra = [x for x in extra if x != "--"]
    d = tempfile.mkdtemp(prefix="ebb-budget-")
    for m in (a.idle, a.busy, a.third):
        src = os.path.join(a.models_dir, m + ".gguf")
        for f in a.file:
            if not os.path.exists(src) and os.path.basename(f) == m + ".gguf":
                src = f
        os.symlink(os.path.realpath(src), os.path.join(d, m + ".gguf"))
    env = dict(os.environ, EBB_CONFIG="/dev/null")
    p = subprocess.Popen([a.ebb, "serve", "--models-dir", d, "--port", "0", "--ctx", str(a.ctx),
                          "--parallel", "1", "--keep-alive", "-1", "--models-budget", a.budget,
                          *a.extra],
                         stdout=subprocess.PIPE, text=True, env=env,
                         stderr=open(a.log, "w") if a.log else subprocess.DEVNULL)
    port = int(re.search(r":(\d+)$", p.stdout.readline().strip()).group(1))
    smp = Sampler(p.pid)
    smp.start()
    budget = size(a.budget)
    res = {"budget_mib": budget / MIB, "extra_flags": a.extra, "idle": a.idle, "busy": a.busy,
           "third": a.third}
    polls = []
    try:
        for m in (a.idle, a.busy):
            st, o = req(port, "POST", "/models/load", {"model": m})
            if st != 200:  # refused under the budget: recorded, not a crash of the script
                res["load_refused"] = {"model": m, "status": st, "answer": o}
                print(json.dumps(res))
                return 1
        words = "apple river stone cloud metal tiger piano garden rocket candle".split()
        for i in range(a.prompts):
            text = " ".join(words[(i * 7 + j * 3) % 10] + str(i * j) for j in range(40))
            for m in (a.idle, a.busy):
                st, o = req(port, "POST", "/v1/chat/completions", {
                    "model": m, "max_tokens": 1,
                    "messages": [{"role": "user", "content": text}]})
                assert st == 200, (m, st, o)
        st0 = status(port)
        res["device"] = st0[a.busy]["replicas"][0]["device"]
        res["planned_mib_before"] = {k: round(v["memory_bytes"] / MIB, 1)
                                     for k, v in st0.items() if v["loaded"]}
        out = {}
        t = threading.Thread(target=stream, args=(port, a.busy, a.tokens, out))
        t.start()
        t0 = time.perf_counter()
        while status(port)[a.busy]["in_flight"] < 1:
            assert time.perf_counter() - t0 < 30
            time.sleep(0.02)
        stop_poll = threading.Event()

        def poll():
            while not stop_poll.is_set():
                polls.append({k: (v["state"], (v.get("layers") or {}).get("streamed"),
                                  v.get("memory_bytes", 0)) for k, v in status(port).items()})
                time.sleep(0.2)

        pt = threading.Thread(target=poll, daemon=True)
        pt.start()
        t1 = time.perf_counter()
        st, o = req(port, "POST", "/v1/chat/completions", {
            "model": a.third, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Hi"}]})
        t_third = time.perf_counter()
        res["third_status"] = st
        res["third_seconds"] = round(t_third - t1, 2)
        res["third_sent_after_stream_start_s"] = round(t1 - t0, 2)
        res["third_answer"] = (o["choices"][0]["message"]["content"] if st == 200
                               else o)
        res["stream_in_flight_when_third_answered"] = t.is_alive()
        t.join()
        stop_poll.set()
        pt.join()
        res["stream"] = {k: out.get(k) for k in ("status", "done", "finish", "chunks", "tokens",
                                            "error")}
        res["stream"]["seconds"] = round(out["end"] - t0, 2)
        res["stream_ok"] = (out.get("status") == 200 and out.get("done") and
                            out.get("finish") == "length" and not out.get("error"))
        st1 = status(port)
        res["after"] = {k: {"state": v["state"], "layers": v.get("layers"),
                            "memory_mib": round(v.get("memory_bytes", 0) / MIB, 1),
                            "unloads": v["unloads"], "shrinks": v["shrinks"],
                            "regrows": v["regrows"]} for k, v in st1.items()}
        res["third_load_seconds"] = st1[a.third].get("load_seconds")
        res["gave_way"] = {k: ("unloaded" if v["unloads"] else
                               "streams %d of %d layers" % (v["layers"]["streamed"],
                                                            v["layers"]["total"])
                               if v.get("layers") and v["layers"]["streamed"] else None)
                           for k, v in st1.items()}
        res["planned_mib_sum_max"] = round(max(
            sum(x[2] for x in pl.values() if x[0] in ("loaded", "loading")) for pl in polls)
            / MIB, 1) if polls else None
        res["planned_mib_sum_after"] = round(sum(v.get("memory_bytes", 0) for v in st1.values()
                                                 if v["loaded"]) / MIB, 1)
        res["states_seen"] = sorted({"%s:%s%s" % (k, x[0], "" if not x[1] else "/%d" % x[1])
                                     for pl in polls for k, x in pl.items()})
        time.sleep(0.3)
    finally:
        smp.stop.set()
        smp.join()
        p.terminate()
        p.wait()
    res["rss_samples"] = smp.n
    res["rss_peak_mib"] = {k: round(v / MIB, 1) for k, v in smp.peak.items()}
    res["rss_at_vmrss_peak_mib"] = {k: round(v / MIB, 1) for k, v in smp.at_peak.items()}
    res["rss_over_budget"] = smp.peak.get("VmRSS", 0) > budget
    res["rss_peak_over_budget_x"] = round(smp.peak.get("VmRSS", 0) / budget, 2)
    sm = smp.smaps_peak
    res["smaps_at_peak_mib"] = {"gguf": {k: round(v / MIB, 1) for k, v in sm["gguf"].items()},
                                "other_files": round(sm["other_files"] / MIB, 1),
                                "largest_other_files": {
                                    k: round(v / MIB, 1) for k, v in
                                    sorted(sm["by_file"].items(), key=lambda x: -x[1])[:5]},
                                "anon": round(sm["anon"] / MIB, 1)} if sm else None
    with open("/proc/loadavg") as f:
        res["loadavg"] = f.read().split()[:3]
    print(json.dumps(res))


if __name__ == "__main__":
    raise SystemExit(main())
