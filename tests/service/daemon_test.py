#!/usr/bin/env python3
"""Service behaviour of the real daemon with a real model (SmolLM2 from $EBB_MODELS_DIR):

  notify        READY=1 over $NOTIFY_SOCKET only once /health answers 200, STATUS= before it,
                STOPPING=1 and exit 0 on SIGTERM
  watchdog      WATCHDOG=1 pings at about half of WATCHDOG_USEC
  listen-fds    a socket passed through LISTEN_FDS/LISTEN_PID is the one served
  sighup-key    SIGHUP swaps the API key without a restart and without dropping a keep-alive
                connection
  sigterm-stream  SIGTERM during a stream ends the stream cleanly and exits 0 within the grace
  memory-budget  memory_budget from the config file streams the model; /metrics shows the
                streamer's ebb_stream_* metrics
  second-signal  a second SIGTERM during the grace period exits at once
  sighup-model  SIGHUP with another model file in the config: the new model is loaded while the
                old one serves, a stream in flight finishes on the old one, then the new one
                serves on the same listening socket and keep-alive connection; a model that
                cannot be loaded keeps the old one

Skips (77) when the model is missing or `ebb serve` is not implemented.

usage: daemon_test.py EBB_BINARY TEST
"""
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOAD_TIMEOUT = 90


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def models_dir():
    return os.environ.get("EBB_MODELS_DIR") or os.path.expanduser("~/.local/share/ebb/models")


class Daemon:
    """ebb serve on an ephemeral port, its stderr collected in the background."""

    def __init__(self, ebb, args, env_extra=None, pass_fds=(), wrapper=None, home=None,
                 model=MODEL):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("EBB_", "LISTEN_", "WATCHDOG_", "NOTIFY_"))}
        env["XDG_CONFIG_HOME"] = home  # no user config file
        env["EBB_MODELS_DIR"] = models_dir()
        env.update(env_extra or {})
        cmd = [ebb, "serve"] + (["-m", model] if model else []) + args
        if wrapper:
            cmd = wrapper + cmd
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, pass_fds=pass_fds)
        self.err = []
        self.port = None
        self.drain = threading.Thread(target=self._drain_err, daemon=True)
        self.drain.start()

    def _drain_err(self):
        for line in self.proc.stderr:
            self.err.append(line)

    def wait_listening(self, timeout=30):
        """Reads the 'ebb: listening on http://HOST:PORT' line from stdout."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                line = self.proc.stdout.readline()
                if not line:
                    break
                if "listening on http://" in line:
                    self.port = int(line.rsplit(":", 1)[1].strip().strip("/"))
                    return self.port
            if self.proc.poll() is not None:
                break
        if self.proc.poll() is not None:
            self.drain.join(2)
        log = "".join(self.err)
        if "not yet implemented" in log:
            skip("ebb serve is not implemented yet")
        raise AssertionError(f"daemon did not start (rc={self.proc.poll()}):\n{log}")

    def health(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            c.request("GET", "/health")
            return c.getresponse().status
        except OSError:
            return None

    def wait_healthy(self, timeout=LOAD_TIMEOUT):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.health() == 200:
                return
            assert self.proc.poll() is None, "daemon died:\n" + "".join(self.err)
            time.sleep(0.05)
        raise AssertionError("model did not become ready:\n" + "".join(self.err))

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon did not exit after SIGTERM:\n" + "".join(self.err))


class NotifyListener:
    """A datagram socket standing in for systemd's notify socket."""

    def __init__(self, d):
        self.path = os.path.join(d, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.msgs = []  # (time, text)

    def poll(self, timeout):
        r, _, _ = select.select([self.sock], [], [], timeout)
        if r:
            m = self.sock.recv(4096).decode()
            self.msgs.append((time.time(), m))
            return m
        return None

    def wait_for(self, field, timeout, on_each=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.poll(min(0.1, max(0.0, deadline - time.time())))
            if on_each:
                on_each()
            if m and field in m.split("\n"):
                return m
        return None


def test_notify(ebb, home):
    n = NotifyListener(home)
    d = Daemon(ebb, ["--port", "0"], {"NOTIFY_SOCKET": n.path}, home=home)
    d.wait_listening()
    health_seen = []
    m = n.wait_for("READY=1", LOAD_TIMEOUT, on_each=lambda: health_seen.append(d.health()))
    assert m, "no READY=1:\n" + "".join(d.err) + f"\nmessages: {n.msgs}"
    # The moment READY=1 is out, /health must already answer 200.
    st = d.health()
    print(f"messages before READY: {[x[1] for x in n.msgs[:-1]]}; /health after READY: {st}; "
          f"/health before: {sorted(set(map(str, health_seen)))}")
    assert st == 200, st
    assert any(x[1].startswith("STATUS=") for x in n.msgs[:-1]), "no STATUS= while loading"
    assert 503 in health_seen or len(health_seen) < 3, "never saw /health loading"
    rc = d.stop()
    m = n.wait_for("STOPPING=1", 2)
    assert m, f"no STOPPING=1: {n.msgs}"
    assert rc == 0, f"exit status {rc}"
    print("ok: READY=1 only with /health 200; STOPPING=1; exit 0")


def test_watchdog(ebb, home):
    n = NotifyListener(home)
    d = Daemon(ebb, ["--port", "0"], {"NOTIFY_SOCKET": n.path, "WATCHDOG_USEC": "400000"},
               home=home)
    d.wait_listening()
    assert n.wait_for("READY=1", LOAD_TIMEOUT), "no READY=1"
    t0 = time.time()
    pings = 0
    while time.time() - t0 < 1.5:
        if n.wait_for("WATCHDOG=1", 1.5 - (time.time() - t0)):
            pings += 1
    print(f"WATCHDOG=1 pings in 1.5 s with WATCHDOG_USEC=400000: {pings}")
    assert pings >= 3, pings
    assert d.stop() == 0
    print("ok: watchdog pings")


def test_listen_fds(ebb, home):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    port = s.getsockname()[1]
    fd = s.fileno()
    # systemd passes the socket as fd 3 with LISTEN_PID = the daemon's pid: a shell moves it
    # there and execs ebb, keeping its own pid (bash: dash only knows fds 0-9).
    move = f"exec 3<&{fd} {fd}<&-; " if fd != 3 else ""
    wrapper = ["bash", "-c", move + 'LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=http exec "$@"',
               "bash"]
    d = Daemon(ebb, ["--port", "1"], pass_fds=(fd,), wrapper=wrapper, home=home)
    s.close()  # only the daemon holds it now
    d.port = port
    got = d.wait_listening()
    assert got == port, f"daemon says port {got}, the passed socket is {port}"
    d.wait_healthy()
    print(f"served on the passed socket 127.0.0.1:{port}")
    assert d.stop() == 0
    print("ok: LISTEN_FDS socket served")


def request(conn, method, path, key=None, body=None):
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    conn.request(method, path, body=json.dumps(body) if body else None, headers=h)
    r = conn.getresponse()
    return r.status, r.read()


def test_sighup_key(ebb, home):
    conf = os.path.join(home, "ebb.conf")
    with open(conf, "w") as f:
        f.write("api_key = key-one\n")
    d = Daemon(ebb, ["--port", "0", "--config", conf], home=home)
    d.wait_listening()
    d.wait_healthy()
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
    assert request(c, "GET", "/v1/models", "key-one")[0] == 200
    assert request(c, "GET", "/v1/models", "key-two")[0] == 401
    pid = d.proc.pid
    with open(conf, "w") as f:
        f.write("api_key = key-two\n")
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while time.time() < deadline:
        st = request(c, "GET", "/v1/models", "key-two")[0]  # same keep-alive connection
        if st == 200:
            break
        time.sleep(0.1)
    assert st == 200, "new key not accepted after SIGHUP:\n" + "".join(d.err)
    assert request(c, "GET", "/v1/models", "key-one")[0] == 401
    assert d.proc.poll() is None and d.proc.pid == pid
    assert d.stop() == 0
    print("ok: SIGHUP swapped the API key on a live connection, same process")


def test_sigterm_stream(ebb, home):
    d = Daemon(ebb, ["--port", "0", "--shutdown-grace", "1s"], home=home)
    d.wait_listening()
    d.wait_healthy()
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    body = {"stream": True, "max_tokens": 4000, "temperature": 0,
            "messages": [{"role": "user", "content": "Count from 1 to 10000, one per line."}]}
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    events = []
    t_sig = None
    while True:
        line = r.readline()  # chunked decoding: a torn stream raises IncompleteRead
        if not line:
            break
        line = line.decode().strip()
        if line.startswith("data: "):
            events.append(line[6:])
            if len(events) == 3 and t_sig is None:
                d.proc.send_signal(signal.SIGTERM)
                t_sig = time.time()
    assert t_sig, f"stream ended before SIGTERM: {events}"
    rc = d.proc.wait(10)
    elapsed = time.time() - t_sig
    last = events[-1]
    print(f"{len(events)} events; last two: {events[-2:]}; exit {rc} after {elapsed:.2f} s")
    assert rc == 0, rc
    assert elapsed < 1.0 + 3.0, elapsed
    ok_end = last == "[DONE]" or '"error"' in last or '"finish_reason":"' in last
    assert ok_end, f"stream did not end cleanly: {last}"
    print("ok: SIGTERM mid-stream ended the stream cleanly and exited 0 within the grace")


def test_memory_budget(ebb, home):
    conf = os.path.join(home, "ebb.conf")
    with open(conf, "w") as f:
        f.write("memory_budget = 300M\nprefetch = 2\nctx = 512\nparallel = 1\n")
    d = Daemon(ebb, ["--port", "0", "--config", conf], home=home)
    d.wait_listening()
    d.wait_healthy()
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    st, body = request(c, "POST", "/v1/completions",
                       body={"prompt": "Hello", "max_tokens": 4, "temperature": 0})
    assert st == 200, (st, body)
    st, body = request(c, "GET", "/metrics")
    assert st == 200
    m = {}
    for line in body.decode().splitlines():
        if line.startswith("ebb_stream_") and " " in line:
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    print({k: m[k] for k in ("ebb_stream_layers_total", "ebb_stream_layers_resident",
                             "ebb_stream_memory_limit_bytes") if k in m})
    assert m.get("ebb_stream_layers_total") == 30, m
    assert m.get("ebb_stream_memory_limit_bytes") == 300 * 2**20, m
    assert d.stop() == 0
    print("ok: memory_budget reaches the streamer; its metrics are on /metrics")


def test_second_signal(ebb, home):
    d = Daemon(ebb, ["--port", "0", "--shutdown-grace", "60s"], home=home)
    d.wait_listening()
    d.wait_healthy()
    c, r = stream_start(d.port, None, 4000)
    assert len(stream_events(r, 2)) == 2
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert d.proc.poll() is None, "exited before the grace period with a stream in flight"
    t = time.time()
    d.proc.send_signal(signal.SIGTERM)
    rc = d.proc.wait(10)
    elapsed = time.time() - t
    print(f"second SIGTERM: exit {rc} after {elapsed:.2f} s (grace 60 s)")
    assert elapsed < 3.0, elapsed
    assert "second signal" in "".join(d.err)
    print("ok: a second signal exits at once")


def stream_start(port, model, max_tokens, prompt="Count from 1 to 100, one per line.",
                 ignore_eos=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"stream": True, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}
    if ignore_eos:
        body["ignore_eos"] = True  # all max_tokens of them, whatever the model would stop at
    if model:
        body["model"] = model
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    return c, r


def stream_events(r, n=None):
    """Reads data: events (all, or the next n)."""
    out = []
    while n is None or len(out) < n:
        line = r.readline()
        if not line:
            break
        line = line.decode().strip()
        if line.startswith("data: "):
            out.append(line[6:])
    return out


def model_ids(c):
    st, body = request(c, "GET", "/v1/models")
    assert st == 200, st
    return [m["id"] for m in json.loads(body)["data"]]


def test_sighup_model(ebb, home):
    mdir = os.path.join(home, "models")
    os.mkdir(mdir)
    real = os.path.join(models_dir(), MODEL)
    os.symlink(real, os.path.join(mdir, MODEL))
    os.symlink(real, os.path.join(mdir, "smol-copy.gguf"))
    with open(os.path.join(mdir, "broken.gguf"), "wb") as f:
        f.write(b"GGUF" + b"\0" * 60)
    conf = os.path.join(home, "ebb.conf")
    with open(conf, "w") as f:
        f.write(f"model = {MODEL}\n")
    n = NotifyListener(home)
    d = Daemon(ebb, ["--port", "0", "--config", conf],
               {"NOTIFY_SOCKET": n.path, "EBB_MODELS_DIR": mdir}, home=home, model=None)
    d.wait_listening()
    assert n.wait_for("READY=1", LOAD_TIMEOUT), "no READY=1:\n" + "".join(d.err)
    old_id = MODEL[:-5]
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)  # kept alive throughout
    assert model_ids(c) == [old_id]
    pid, port = d.proc.pid, d.port

    # A stream in flight on the old model while the new one loads and is swapped in.
    sc, sr = stream_start(port, old_id, 60)
    first = stream_events(sr, 2)
    n.msgs.clear()
    with open(conf, "w") as f:
        f.write("model = smol-copy.gguf\n")
    t_hup = time.time()
    d.proc.send_signal(signal.SIGHUP)
    rest = stream_events(sr)
    events = first + rest
    assert events[-1] == "[DONE]", f"the stream in flight did not finish: {events[-3:]}"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(ch["model"] == old_id for ch in chunks), "a chunk of the old stream changed model"
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
    assert text.strip(), "the stream in flight produced no text"
    m = n.wait_for("READY=1", LOAD_TIMEOUT)
    t_ready = time.time() - t_hup
    assert m, "no READY=1 after the reload:\n" + "".join(d.err)
    statuses = [x[1] for x in n.msgs]
    print(f"notify messages during the reload: {statuses}")
    assert any("STATUS=loading smol-copy" in x for x in statuses), statuses
    ids = model_ids(c)  # the keep-alive connection opened before the reload
    assert ids == ["smol-copy"], ids
    st, body = request(c, "POST", "/v1/chat/completions", body={
        "model": "smol-copy", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}]})
    assert st == 200, (st, body)
    reply = json.loads(body)
    assert reply["model"] == "smol-copy" and reply["choices"][0]["message"]["content"], reply
    st, _ = request(c, "POST", "/v1/chat/completions", body={
        "model": old_id, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]})
    assert st == 404, st
    log = "".join(d.err)
    # The new file is read into the page cache with progress, or found there already (the
    # copy above left its pages cached) and not read again.
    assert ("[progress] loading smol-copy.gguf" in log or
            "[load] loading smol-copy.gguf: already in the page cache" in log), log
    print(f"swapped to smol-copy {t_ready:.2f} s after SIGHUP; stream in flight: {len(events)} "
          f"events ending in [DONE]; keep-alive connection, pid {pid}, port {port} unchanged")

    # A request that arrives while a stream drains waits for the swap and is served by the new
    # model (slow the stream down with a long generation, and keep it going past the load).
    with open(conf, "w") as f:
        f.write(f"model = {MODEL}\nparallel = 2\n")
    box = {}

    def read_stream():
        box["events"] = stream_events(sr)
        box["t_end"] = time.time()
    # (1000 tokens past any end of text: on a loaded machine the reload has taken longer than
    # 250 tokens' decode, and once longer than a 500-token stream that may stop early)
    sc, sr = stream_start(port, "smol-copy", 1000, "Count from 1 to 1000, one per line.",
                          ignore_eos=True)
    th = threading.Thread(target=read_stream, daemon=True)
    th.start()
    n.msgs.clear()
    swaps = "".join(d.err).count("swapping it in once")
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + LOAD_TIMEOUT
    while time.time() < deadline and "".join(d.err).count("swapping it in once") == swaps:
        time.sleep(0.05)
    assert "".join(d.err).count("swapping it in once") > swaps, "".join(d.err)
    assert th.is_alive(), "the stream ended before the new model was loaded"
    c2 = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t_req = time.time()
    st, rb = request(c2, "POST", "/v1/completions",
                     body={"prompt": "Hello", "max_tokens": 4, "temperature": 0})
    t_done = time.time()
    th.join(120)
    assert st == 200, (st, rb)
    assert json.loads(rb)["model"] == old_id, rb
    assert box["events"][-1] == "[DONE]", box["events"][-2:]
    assert box["t_end"] <= t_done, "the waiting request was answered before the stream ended"
    print(f"a request sent during the drain waited {t_done - t_req:.2f} s, was answered by "
          f"{old_id} after the stream in flight ({len(box['events'])} events) ended")
    assert n.wait_for("READY=1", 10)
    st, body = request(c, "GET", "/metrics")
    slots = [l for l in body.decode().splitlines() if l.startswith("ebb_slots ")]
    assert slots == ["ebb_slots 2"], slots  # parallel changed with the model: 2 slots now

    # A model that cannot be loaded: the old one keeps serving.
    n.msgs.clear()
    with open(conf, "w") as f:
        f.write("model = broken.gguf\nparallel = 2\n")
    d.proc.send_signal(signal.SIGHUP)
    m = n.wait_for("READY=1", LOAD_TIMEOUT)
    assert m, "no READY=1 after the failed reload"
    assert "reload failed" in m, m
    assert model_ids(c) == [old_id]
    st, body = request(c, "POST", "/v1/completions",
                       body={"prompt": "Hello", "max_tokens": 4, "temperature": 0})
    assert st == 200, (st, body)
    log = "".join(d.err)
    assert "cannot load" in log and "broken.gguf" in log, log
    assert d.proc.poll() is None and d.proc.pid == pid
    assert d.stop() == 0
    print("ok: SIGHUP loaded and swapped in another model on the same socket; "
          "a broken model kept the old one")


TESTS = {
    "memory-budget": test_memory_budget,
    "second-signal": test_second_signal,
    "sighup-model": test_sighup_model,
    "notify": test_notify,
    "watchdog": test_watchdog,
    "listen-fds": test_listen_fds,
    "sighup-key": test_sighup_key,
    "sigterm-stream": test_sigterm_stream,
}


def main():
    ebb, name = os.path.abspath(sys.argv[1]), sys.argv[2]
    if not os.path.exists(os.path.join(models_dir(), MODEL)):
        skip(f"{MODEL} not in {models_dir()}")
    with tempfile.TemporaryDirectory() as home:
        TESTS[name](ebb, home)


if __name__ == "__main__":
    main()
