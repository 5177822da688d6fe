#!/usr/bin/env python3
"""Issue 35's table: `ebb run` under a memory cgroup limit, the model file's page cache dropped
before each run (posix_fadvise DONTNEED on that file only), as a markdown table: prefill ms,
decode tok/s, the group's failed charges (v1 memory.failcnt, v2 memory.events "max") and OOM
kills, what the planner saw (available_source, resident layers, stream I/O mode).

    bench/cgroup-limit.py EBB MODEL [LIMIT_MIB]      (root; not run by the tests)
    bench/cgroup-limit.py --under-load EBB MODEL [HIGH_MIB LOW_MIB]

--under-load: "limit changed under load". `ebb serve --memory-budget auto` in a group of
HIGH_MIB (default 2048) while a client sends streaming chat completions (MAX_TOKENS, default 8)
back to back; the limit is lowered to LOW_MIB (default 400), held HOLD_S (default 20) seconds,
raised to HIGH_MIB again and held as long. Timed from each write, polling /metrics every 50 ms:
until the daemon sees the new limit (ebb_stream_cgroup_limit_bytes), until the plan has
changed (ebb_stream_layers_resident), and how many re-plans and pressure notifications that
took. Two daemons: pressure notifications armed (the default), and EBB_STREAM_PRESSURE_NOTIFY=0
(the 2 s probe period alone). Every request's status, the group's failed charges and OOM
kills are counted. Where v1 refuses the lower limit (EBUSY: the group's usage cannot be
reclaimed under it), the write is retried every 0.5 s; the table says after how long it took.
SERVE_LOG=FILE appends the daemons' logs there. MODEL may be "gen:SHAPE" (e.g. gen:llama3.2-1b): a random-weight Q4_0 file of that shape is
written once to /tmp/ebb-cg-SHAPE.gguf by build-test/bench/ebb-gen-model (GEN_MODEL), with the
tokenizer of TOKENIZER_FROM (default SmolLM2-135M-Instruct.Q4_1.gguf under EBB_MODELS_DIR).

Rows: no limit; LIMIT_MIB (default 400) with --memory-budget auto (the I/O mode ebb picks);
the same with each --stream-io mode named; then with a fixed budget of LIMIT-20 MiB and each
mode. Environment: GEN (tokens, default 16), EBB_ARGS (more arguments for every run, e.g.
"--device cl" for the OpenCL device where `auto` picks the CPU device),
PROMPT (default "Hello, my name is"). Groups are made under this process's own memory cgroup
and removed afterwards."""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

MiB = 1 << 20


def memcg_dir():
    cg = open("/proc/self/cgroup").read().splitlines()
    mounts = [l.split() for l in open("/proc/self/mountinfo").read().splitlines()]
    for line in cg:
        _, ctl, path = line.split(":", 2)
        if "memory" in ctl.split(","):
            for f in mounts:
                s = f.index("-")
                if f[s + 1] == "cgroup" and "memory" in f[s + 3].split(","):
                    rel = path[len(f[3]):] if f[3] != "/" and path.startswith(f[3]) else path
                    return 1, f[4] + rel.rstrip("/")
    for line in cg:
        if line.startswith("0::"):
            for f in mounts:
                s = f.index("-")
                if f[s + 1] == "cgroup2":
                    return 2, f[4] + line[3:].rstrip("/")
    sys.exit("no memory cgroup")


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def failed_charges(ver, d):
    if ver == 1:
        return int(open(os.path.join(d, "memory.failcnt")).read())
    ev = open(os.path.join(d, "memory.events")).read()
    return int(re.search(r"^max (\d+)", ev, re.M).group(1))


def oom_kills(d):
    text = ""
    for f in ("memory.oom_control", "memory.events"):
        p = os.path.join(d, f)
        if os.path.exists(p):
            text += open(p).read()
    m = re.search(r"^oom_kill (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def run(ebb, model, ver, parent, limit, extra):
    d = None
    pre = None
    if limit:
        d = os.path.join(parent, "ebb-bench-%d" % os.getpid())
        os.mkdir(d)
        open(os.path.join(d, "memory.limit_in_bytes" if ver == 1 else "memory.max"),
             "w").write(str(limit * MiB))

        def pre():
            open(os.path.join(d, "cgroup.procs"), "w").write(str(os.getpid()))
    drop_cache(model)
    args = [ebb, "run", "-m", model, "-p", os.environ.get("PROMPT", "Hello, my name is"),
            "-n", os.environ.get("GEN", "16"), "--temp", "0"] + extra + \
        os.environ.get("EBB_ARGS", "").split()
    try:
        r = subprocess.run(args, preexec_fn=pre, capture_output=True, text=True, timeout=900)
        row = {"rc": r.returncode}
        m = re.search(r"prompt \d+ tokens in ([\d.]+) ms.*?([\d.]+) tok/s\); stop", r.stderr)
        if m:
            row["prefill_ms"], row["decode"] = float(m.group(1)), float(m.group(2))
        s = [l for l in r.stderr.splitlines() if l.startswith("ebb run: stream {")]
        row["stream"] = json.loads(s[-1][len("ebb run: stream "):]) if s else {}
        if d:
            row["failcnt"] = failed_charges(ver, d)
            row["oom"] = oom_kills(d)
        if r.returncode:
            row["err"] = r.stderr.strip().splitlines()[-1][:120]
        return row
    finally:
        if d:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)


def gen_model(spec):
    """A "gen:SHAPE" model written once with ebb-gen-model; a path is returned as it is."""
    if not spec.startswith("gen:"):
        return spec
    shape = spec[4:]
    out = "/tmp/ebb-cg-%s.gguf" % shape
    if not os.path.exists(out):
        here = os.path.dirname(os.path.abspath(__file__))
        gen = os.environ.get("GEN_MODEL", os.path.join(here, "..", "build-test", "bench",
                                                       "ebb-gen-model"))
        tok = os.environ.get("TOKENIZER_FROM", os.path.join(os.environ.get(
            "EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models")),
            "SmolLM2-135M-Instruct.Q4_1.gguf"))
        subprocess.run([gen, "--shape", shape, "--tokenizer-from", tok, "--type", "q4_0", "-o",
                        out], check=True)
    return out


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("ebb_stream_") and " " in line:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def chat(port, n):
    body = json.dumps({"messages": [{"role": "user", "content": os.environ.get(
        "PROMPT", "Hello, my name is")}], "max_tokens": n, "temperature": 0, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    done = False
    for raw in r:
        if raw.strip() == b"data: [DONE]":
            done = True
    c.close()
    return r.status if done else "%d, no [DONE]" % r.status


def set_limit(d, ver, mib):
    """Writes the limit, retrying every 0.5 s for 60 s where v1 answers EBUSY; returns the
    seconds the retries took."""
    t0 = time.monotonic()
    while True:
        try:
            open(os.path.join(d, "memory.limit_in_bytes" if ver == 1 else "memory.max"),
                 "w").write(str(mib * MiB))
            return time.monotonic() - t0
        except OSError:
            if time.monotonic() - t0 > 60:
                raise
            time.sleep(0.5)


def under_load(ebb, model, high, low, notify):
    """One daemon: returns (rows of timings, statuses, failed charges, OOM kills)."""
    ver, parent = memcg_dir()
    d = os.path.join(parent, "ebb-bench-load-%d" % os.getpid())
    os.mkdir(d)
    set_limit(d, ver, high)
    drop_cache(model)
    env = dict(os.environ)
    if not notify:
        env["EBB_STREAM_PRESSURE_NOTIFY"] = "0"
    p = subprocess.Popen([ebb, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0",
                          "--memory-budget", "auto", "--parallel", "1"],
                         preexec_fn=lambda: open(os.path.join(d, "cgroup.procs"), "w").write(
                             str(os.getpid())), env=env, stdout=subprocess.PIPE,
                         stderr=open(os.environ["SERVE_LOG"], "a") if os.environ.get(
                             "SERVE_LOG") else subprocess.DEVNULL, text=True)
    statuses, stop, rows = [], threading.Event(), []
    client = None
    try:
        port = None
        while port is None:
            line = p.stdout.readline()
            if not line:
                sys.exit("ebb serve did not start")
            if "listening on http://" in line:
                port = int(line.rsplit(":", 1)[1].strip().strip("/"))
        while "ebb_stream_layers_total" not in metrics(port):
            time.sleep(0.2)
        n = int(os.environ.get("MAX_TOKENS", "8"))

        def load():
            while not stop.is_set():
                try:
                    statuses.append(chat(port, n))
                except OSError as e:
                    statuses.append(str(e))

        client = threading.Thread(target=load)
        client.start()
        while not statuses:
            time.sleep(0.2)
        hold = float(os.environ.get("HOLD_S", "20"))
        for mib in (low, high):
            m0 = metrics(port)
            t0 = time.monotonic()
            retry = set_limit(d, ver, mib)
            seen = changed = None
            while time.monotonic() - t0 < hold:
                m = metrics(port)
                t = time.monotonic() - t0
                if seen is None and m.get("ebb_stream_cgroup_limit_bytes") == mib * MiB:
                    seen = t
                if changed is None and m["ebb_stream_layers_resident"] != m0[
                        "ebb_stream_layers_resident"]:
                    changed, mc = t, m
                time.sleep(0.05)
            m = metrics(port)
            rows.append({"to": mib, "retry": retry, "seen": seen, "changed": changed,
                         "from_res": m0["ebb_stream_layers_resident"],
                         "res": m["ebb_stream_layers_resident"],
                         "total": m["ebb_stream_layers_total"],
                         "replans": (mc if changed is not None else m)[
                             "ebb_stream_replans_total"] - m0["ebb_stream_replans_total"],
                         "notes": m.get("ebb_stream_pressure_notifications_total", 0) - m0.get(
                             "ebb_stream_pressure_notifications_total", 0)})
        stop.set()
        client.join()
        return rows, statuses, failed_charges(ver, d), oom_kills(d)
    finally:
        stop.set()
        p.terminate()
        p.wait()
        if client:
            client.join()
        for _ in range(50):
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.1)


def main_under_load(argv):
    ebb, model = argv[0], gen_model(argv[1])
    high = int(argv[2]) if len(argv) > 2 else 2048
    low = int(argv[3]) if len(argv) > 3 else 400
    print("%s; limit %d -> %d -> %d MiB under streaming chat completions of %s tokens" % (
        os.path.basename(model), high, low, high, os.environ.get("MAX_TOKENS", "8")))
    print("| daemon | limit | write retried | seen after | plan changed after | resident "
          "| re-plans | notifications |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for notify in (True, False):
        rows, st, fc, oom = under_load(ebb, model, high, low, notify)
        name = "notifications armed" if notify else "probe period only"
        for r in rows:
            f = lambda v: "%.2f s" % v if v is not None else "not within HOLD_S"
            print("| %s | -> %d MiB | %.1f s | %s | %s | %d -> %d of %d | %d | %d |" % (
                name, r["to"], r["retry"], f(r["seen"]), f(r["changed"]), r["from_res"],
                r["res"], r["total"], r["replans"], r["notes"]), flush=True)
        bad = [s for s in st if s != 200]
        print("| %s | %d requests, %d not 200 | failed charges %d | OOM kills %d | | | | |" % (
            name, len(st), len(bad), fc, oom), flush=True)


def main():
    if sys.argv[1] == "--under-load":
        return main_under_load(sys.argv[2:])
    ebb, model = sys.argv[1], sys.argv[2]
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    ver, parent = memcg_dir()
    fixed = "%dM" % (limit - 20)
    rows = [("no limit, --memory-budget auto", 0, ["--memory-budget", "auto"]),
            ("%d MiB cgroup, --memory-budget auto" % limit, limit, ["--memory-budget", "auto"])]
    for io in ("cached", "dontneed", "direct"):
        rows.append(("%d MiB cgroup, --memory-budget auto, --stream-io %s" % (limit, io), limit,
                     ["--memory-budget", "auto", "--stream-io", io]))
    for io in ("cached", "dontneed", "direct"):
        rows.append(("%d MiB cgroup, --memory-budget %s, --stream-io %s" % (limit, fixed, io),
                     limit, ["--memory-budget", fixed, "--stream-io", io]))
    print("cgroup v%d under %s; %s; %s tokens; %s" % (ver, parent, os.path.basename(model),
                                                      os.environ.get("GEN", "16"),
                                                      os.environ.get("EBB_ARGS", "") or
                                                      "the default device"))
    print("| run | prefill ms | decode tok/s | failed charges | OOM kills | planner saw |")
    print("| --- | --- | --- | --- | --- | --- |")
    base = None
    for name, lim, extra in rows:
        r = run(ebb, model, ver, parent, lim, extra)
        s = r["stream"]
        saw = "%s, %s/%s resident, %s" % (s.get("available_source", "-"),
                                         s.get("layers_resident", "-"),
                                         s.get("layers_total", "-"), s.get("cache", "-")) \
            if s else "no streamer"
        if "decode" in r:
            if base is None:
                base = r
            dec = "%.2f (%.2fx)" % (r["decode"], r["decode"] / base["decode"])
            pre = "%.0f (%.2fx)" % (r["prefill_ms"], base["prefill_ms"] / r["prefill_ms"])
        else:
            dec = pre = "failed (rc %d: %s)" % (r["rc"], r.get("err", ""))
        print("| %s | %s | %s | %s | %s | %s |" % (name, pre, dec, r.get("failcnt", "-"),
                                                  r.get("oom", "-"), saw), flush=True)


if __name__ == "__main__":
    main()
