#!/usr/bin/env python3
"""Issue 35's table: `ebb run` under a memory cgroup limit, the model file's page cache dropped
before each run (posix_fadvise DONTNEED on that file only), as a markdown table: prefill ms,
decode tok/s, the group's failed charges (v1 memory.failcnt, v2 memory.events "max") and OOM
kills, what the planner saw (available_source, resident layers, stream I/O mode).

    bench/cgroup-limit.py EBB MODEL [LIMIT_MIB]      (root; not run by the tests)

Rows: no limit; LIMIT_MIB (default 400) with --memory-budget auto (the I/O mode ebb picks);
the same with each --stream-io mode named; then with a fixed budget of LIMIT-20 MiB and each
mode. Environment: GEN (tokens, default 16),
PROMPT (default "Hello, my name is"). Groups are made under this process's own memory cgroup
and removed afterwards."""
import json
import os
import re
import subprocess
import sys
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
            "-n", os.environ.get("GEN", "16"), "--temp", "0"] + extra
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


def main():
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
    print("cgroup v%d under %s; %s; %s tokens" % (ver, parent, os.path.basename(model),
                                                  os.environ.get("GEN", "16")))
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
