#!/usr/bin/env python3
"""A serving daemon's memory limit changed under load (issue 35). `ebb serve` runs SmolLM2 in a
child memory cgroup (v1 memory.limit_in_bytes, or v2 memory.max) of 2 GiB while two clients
send streaming chat completions back to back; the limit is lowered, then raised again. The 2 GiB ->
400 MiB of a 1B model (about 60% of what it holds resident) scaled to SmolLM2 (about 155 MiB
resident): 2 GiB -> 130 MiB, where some layers stay resident and the rest stream
(test-cgroup.py's lower(): where v1 refuses that limit, the first step the kernel takes plus
32 MiB).

  A. Probe period 1 s (EBB_STREAM_PROBE_MS), notifications off, no token tick: the lowered
     limit is seen and the plan shrinks within the period plus slack; the raised one is seen
     and every layer is resident again within the period plus the grow hold plus slack; both in
     /metrics (ebb_stream_replans_total, ebb_stream_layers_resident/_streamed,
     ebb_stream_cgroup_limit_bytes, ebb_stream_memory_limit_changes_total, the available
     source) and logged. A raised limit grows back at the first re-plan that sees it (no hold
     time, PSI's avg10 from under the old limit ignored). Then the same with no request
     running: the probe period re-plans an idle engine too.
  B. Probe period 60 s with pressure notifications armed (cgroup v1 memory.pressure_level, v2
     PSI triggers): the limit lowered to 100 MiB, under what the group holds (about 120 MiB;
     130 MiB in A is above it, so the kernel reclaims nothing there and notifies nothing),
     makes the kernel reclaim in the group at once, the notification
     reads the probes at once and the plan shrinks within 3 s, long before the period
     (ebb_stream_pressure_notifications_total, ebb_stream_replans_notified_total).
Every request: 200, a full streamed text (finish_reason "length", [DONE]) equal to the text
all-resident; no OOM kill in either group. Exits 77 (with the reason) where cgroups cannot be
created. Usage: test-cgroup-load.py EBB [MODELS_DIR]"""
import http.client
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("tc", os.path.join(HERE, "test-cgroup.py"))
tc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tc)  # the groups, the limit steps, /metrics (argv read the same way)

MiB = tc.MiB
MODEL = tc.MODEL  # a private copy once main() made it
HIGH = 2048 * MiB
MAX_TOKENS = 24
LOW_B = 100  # MiB: under the group's usage with every layer resident (part B)
SLACK = 2.0  # s: a step of a request in flight, the metrics snapshot after it, the poll


class Daemon:
    def __init__(self, g, env):
        tc.drop_cache(MODEL)
        # meson sets MALLOC_PERTURB_, which fills every allocation: the KV cache and the
        # device buffers PoCL takes with malloc (about 330 MiB SmolLM2 never touches otherwise)
        # would be charged to the group, and no limit under 400 MiB could be set.
        env = {k: v for k, v in dict(os.environ, **env).items() if k != "MALLOC_PERTURB_"}
        self.p = subprocess.Popen(
            [tc.EBB, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0",
             "--memory-budget", "auto", "--parallel", "1"], preexec_fn=g.enter,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.log = []
        threading.Thread(target=lambda: [self.log.append(l.rstrip()) for l in self.p.stderr],
                         daemon=True).start()
        self.port = None
        deadline = time.monotonic() + 120
        while self.port is None and time.monotonic() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            if "listening on http://" in line:
                self.port = int(line.rsplit(":", 1)[1].strip().strip("/"))
        assert self.port, "ebb serve did not start:\n" + "\n".join(self.log)
        while "ebb_stream_layers_total" not in self.metrics():  # the model loads after listen
            assert time.monotonic() < deadline and self.p.poll() is None, "\n".join(self.log)
            time.sleep(0.2)

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        out = {}
        for line in text.splitlines():
            if line.startswith("ebb_stream_") and " " in line:
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def completion(port):
    """One streaming chat completion: (status, text, finish_reason, saw [DONE])."""
    body = json.dumps({"messages": [{"role": "user", "content": tc.PROMPT}],
                       "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    text, finish, done = "", None, False
    if r.status == 200:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            ch = json.loads(data)["choices"][0]
            text += (ch.get("delta") or {}).get("content") or ""
            finish = ch.get("finish_reason") or finish
    else:
        r.read()
    c.close()
    return r.status, text, finish, done


class Load:
    """Two clients sending streaming completions back to back until stopped."""

    def __init__(self, port):
        self.port, self.results, self.stopped = port, [], threading.Event()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(2)]
        for t in self.threads:
            t.start()
        while not self.results:
            time.sleep(0.1)

    def client(self):
        while not self.stopped.is_set():
            try:
                self.results.append(completion(self.port))
            except (OSError, ValueError) as e:
                self.results.append((str(e), "", None, False))

    def halt(self):
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=150)

    def stop(self, ref):
        self.halt()
        bad = [r for r in self.results if r != (200, ref, "length", True)]
        print("%d streamed requests, %d not 200 with the full text" % (len(self.results),
                                                                        len(bad)))
        assert not bad, "requests failed or cut short under the limit change: %s (want %r)" % (
            bad[:3], ref)


def wait_for(d, what, ok, within):
    """Polls /metrics until ok(m); returns the seconds it took. Fails past `within`."""
    t0 = time.monotonic()
    while True:
        m = d.metrics()
        if ok(m):
            dt = time.monotonic() - t0
            print("%s: %.2f s (limit %s, resident %s, streamed %s, re-plans %s, notified %s)" % (
                what, dt, m.get("ebb_stream_cgroup_limit_bytes"),
                m.get("ebb_stream_layers_resident"), m.get("ebb_stream_layers_streamed"),
                m.get("ebb_stream_replans_total"), m.get("ebb_stream_replans_notified_total")))
            return dt
        assert time.monotonic() - t0 < within, "%s: not in /metrics within %.1f s: %s" % (
            what, within, m)
        time.sleep(0.1)


def reference(port):
    st, text, finish, done = completion(port)
    assert st == 200 and finish == "length" and done and text, (st, text, finish, done)
    return text


def teardown(g, d, load):
    """Stops the load's clients, then the daemon, then waits for the clients; removes the group."""
    if load:
        load.stopped.set()
    if d:
        d.stop()
    if load:
        load.halt()
    g.remove()


def part_a(parent):
    period = 1.0
    g = tc.Group(parent, "ebb-test-%d-load-a" % os.getpid(), HIGH)
    d = load = None
    try:
        d = Daemon(g, {"EBB_STREAM_PROBE_MS": "1000", "EBB_STREAM_PRESSURE_NOTIFY": "0",
                       "EBB_STREAM_REPLAN_TOKENS": "1000000", "EBB_STREAM_GROW_HOLD_MS": "200"})
        m0 = d.metrics()
        total = m0["ebb_stream_layers_total"]
        assert m0.get("ebb_stream_cgroup_limit_bytes") == HIGH, m0
        assert m0["ebb_stream_layers_resident"] == total, m0
        assert m0.get('ebb_stream_memory_available_source{source="cgroup v1"}') or m0.get(
            'ebb_stream_memory_available_source{source="cgroup v2"}'), m0
        assert m0.get("ebb_stream_pressure_notify_armed") == 0, m0
        ref = reference(d.port)
        load = Load(d.port)
        r0 = d.metrics()["ebb_stream_replans_total"]
        low = tc.lower(g)
        wait_for(d, "A: lowered to %d MiB, plan shrunk" % low, lambda m: m.get(
            "ebb_stream_cgroup_limit_bytes") == low * MiB and m[
            "ebb_stream_layers_resident"] < total and m["ebb_stream_layers_streamed"] > 0 and m[
            "ebb_stream_replans_total"] > r0, period + SLACK)
        time.sleep(1.0)  # requests run streamed for a while
        r1 = d.metrics()["ebb_stream_replans_total"]
        g.set_limit(HIGH)
        wait_for(d, "A: raised to 2048 MiB, every layer resident", lambda m: m.get(
            "ebb_stream_cgroup_limit_bytes") == HIGH and m["ebb_stream_layers_resident"] == total
            and m["ebb_stream_layers_streamed"] == 0 and m["ebb_stream_replans_total"] > r1,
            period + SLACK)
        load.stop(ref)
        m = d.metrics()
        assert m["ebb_stream_memory_limit_changes_total"] >= 2, m
        assert m['ebb_stream_plan_changes_total{direction="shrink"}'] >= 1, m
        assert m['ebb_stream_plan_changes_total{direction="grow"}'] >= 1, m
        assert m["ebb_stream_pressure_notifications_total"] == 0, m
        assert sum("memory limit changed" in l for l in d.log) >= 2, "\n".join(d.log)
        # Idle (no request running): the probe period settles the engine, both ways.
        low = tc.lower(g)
        wait_for(d, "A idle: lowered to %d MiB, plan shrunk" % low, lambda m: m.get(
            "ebb_stream_cgroup_limit_bytes") == low * MiB and m[
            "ebb_stream_layers_resident"] < total, period + SLACK)
        g.set_limit(HIGH)
        wait_for(d, "A idle: raised to 2048 MiB, every layer resident", lambda m: m.get(
            "ebb_stream_cgroup_limit_bytes") == HIGH and m["ebb_stream_layers_resident"] == total,
            period + SLACK)
        assert tc.oom_kills(g) == 0, "OOM kill in the group"
    finally:
        teardown(g, d, load)


def part_b(parent):
    g = tc.Group(parent, "ebb-test-%d-load-b" % os.getpid(), HIGH)
    d = load = None
    try:
        d = Daemon(g, {"EBB_STREAM_PROBE_MS": "60000", "EBB_STREAM_REPLAN_TOKENS": "1000000"})
        m0 = d.metrics()
        total = m0["ebb_stream_layers_total"]
        assert m0.get("ebb_stream_pressure_notify_armed") == 1, (
            "pressure notifications not armed in a v%d group: %s" % (tc.VERSION, [
                l for l in d.log if "notification" in l]))
        ref = reference(d.port)
        load = Load(d.port)
        low = tc.lower(g, LOW_B)
        wait_for(d, "B: lowered to %d MiB, plan shrunk on a notification" % low, lambda m: m.get(
            "ebb_stream_layers_resident", total) < total and m.get(
            "ebb_stream_pressure_notifications_total", 0) >= 1 and m.get(
            "ebb_stream_replans_notified_total", 0) >= 1, 3.0)
        time.sleep(1.0)
        load.stop(ref)
        assert any("memory pressure notification" in l for l in d.log), "\n".join(d.log)
        assert tc.oom_kills(g) == 0, "OOM kill in the group"
    finally:
        teardown(g, d, load)


def main():
    tc.LOW = int(os.environ.get("EBB_TEST_CGROUP_LOW_MIB", 130))
    if os.geteuid() != 0:
        tc.skip("not root: cannot create cgroups")
    found = tc.find_parent()
    if not found:
        tc.skip("no memory cgroup controller this process can create groups under")
    tc.VERSION, parent, tc.LIMIT_FILE = found
    probe = os.path.join(parent, "ebb-test-%d-probe" % os.getpid())
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as e:
        tc.skip("cannot create a cgroup under %s: %s" % (parent, e))
    if not os.path.exists(tc.MODEL):
        tc.skip("no SmolLM2 model at %s" % tc.MODEL)
    print("memory cgroup v%d under %s" % (tc.VERSION, parent))
    # A private copy of the model: pages of the shared file that another process keeps mapped
    # (a test of another build) cannot be dropped, stay charged to that process's group, and
    # left this group's usage at 24 MiB, under every limit here (no reclaim, no notification).
    global MODEL
    tmp = tempfile.mkdtemp(prefix="ebb-cgroup-load-")
    try:
        MODEL = os.path.join(tmp, os.path.basename(tc.MODEL))
        shutil.copyfile(tc.MODEL, MODEL)
        part_a(parent)
        part_b(parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
