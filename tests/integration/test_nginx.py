"""Real nginx (the distribution's package, started unprivileged with a generated nginx.conf in a
temporary directory) in front of three `ebb serve` daemons, using deploy/nginx/ebb.conf as shipped
with only its addresses replaced (docs/SCALING.md).

The tests run in file order on one set of processes, to keep the CPU time small:
  1. nginx starts before the daemons; once they are up, requests through it succeed;
  2. concurrent requests spread over the three daemons (their /metrics counters);
  3. the Host check and allowed_hosts, on a daemon directly;
  4. one daemon drained with SIGTERM mid-stream: no client sees an error, it exits 0;
  5. one daemon killed with SIGKILL mid-stream: its streams end with an error in bounded time,
     every other request succeeds, later ones on the survivor.

nginx is found as $EBB_NGINX, on PATH, or in /usr/sbin; without it the module is skipped
(tests/integration/nginx.sh exits 77 before pytest starts).
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import Server

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(REPO, "deploy", "nginx", "ebb.conf")
DAEMON_ARGS = ["--parallel", "2", "--ctx", "512", "--queue", "16", "--shutdown-grace", "60s",
               "--allowed-hosts", "ebb.example", "--allowed-hosts", "proxy.lan:8443"]
CHAT = "/v1/chat/completions"


def find_nginx():
    for c in (os.environ.get("EBB_NGINX"), shutil.which("nginx"), "/usr/sbin/nginx",
              "/usr/local/sbin/nginx"):
        if c and os.access(c, os.X_OK):
            return c
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def site_conf(listen, ports):
    """deploy/nginx/ebb.conf with its upstream servers replaced by ports (their parameters
    kept), its listen address by 127.0.0.1:listen, and a response header naming the daemon
    that answered."""
    text = open(SHIPPED).read()
    servers = re.findall(r"^\s*server 127\.0\.0\.1:\d+ ([^;]*);\n", text, re.M)
    assert servers, "no upstream server lines in deploy/nginx/ebb.conf"
    lines = "".join(f"    server 127.0.0.1:{p} {servers[0]};\n" for p in ports)
    text = re.sub(r"(^\s*server 127\.0\.0\.1:\d+ [^;]*;\n)+", lambda m: lines, text, count=1,
                  flags=re.M)
    text, n = re.subn(r"^(\s*)listen \d+;", rf"\1listen 127.0.0.1:{listen};", text, flags=re.M)
    assert n == 1
    text, n = re.subn(r"^(\s*)location / \{\n",
                      r"\g<0>\1    add_header X-Ebb-Upstream $upstream_addr always;\n", text,
                      flags=re.M)
    assert n == 1
    return text


class Nginx:
    def __init__(self, binary, tmp, listen, ports):
        self.port = listen
        site = os.path.join(tmp, "ebb.conf")
        with open(site, "w") as f:
            f.write(site_conf(listen, ports))
        user = "user root;\n" if os.geteuid() == 0 else ""  # workers keep the test's identity
        temps = "".join(f"    {k}_temp_path {tmp}/{k};\n"
                        for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"{user}daemon off;\nworker_processes 1;\npid {tmp}/nginx.pid;\n"
                    f"error_log stderr warn;\nevents {{ worker_connections 256; }}\n"
                    f"http {{\n    access_log off;\n{temps}    include {site};\n}}\n")
        self.log = open(os.path.join(tmp, "nginx.log"), "w+")
        self.proc = subprocess.Popen([binary, "-p", tmp + "/", "-c", conf, "-e", "stderr"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while True:
            assert self.proc.poll() is None, f"nginx exited: {self.output()}"
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=1).close()
                return
            except OSError:
                assert time.time() - t0 < 10, "nginx did not listen"
                time.sleep(0.05)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def chat_body(max_tokens, stream=False):
    return {"messages": [{"role": "user", "content": "Count from one to fifty."}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}


def post(port, body, timeout=120):
    """A chat request through nginx: (status, upstream address, parsed body or text)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", CHAT, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        data = json.loads(data)
    except ValueError:
        data = data.decode(errors="replace")
    return r.status, r.getheader("X-Ebb-Upstream"), data


class Stream(threading.Thread):
    """A streamed chat request through nginx, read event by event on its own thread."""

    def __init__(self, port, max_tokens):
        super().__init__(daemon=True)
        self.port, self.max_tokens = port, max_tokens
        self.upstream, self.status, self.events, self.error = None, None, [], None
        self.first = threading.Event()
        self.t_end = None
        self.start()

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            c.request("POST", CHAT, body=json.dumps(chat_body(self.max_tokens, True)),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            self.status, self.upstream = r.status, r.getheader("X-Ebb-Upstream")
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode().rstrip("\n")
                if line.startswith("data: "):
                    self.events.append(line[6:])
                    if len(self.events) >= 3:
                        self.first.set()
            c.close()
        except Exception as e:  # what a client of a killed daemon sees
            self.error = e
        finally:
            self.t_end = time.time()
            self.first.set()

    def ok(self):
        """Finished normally: 200, [DONE] last, no error event, every token generated."""
        if self.error or self.status != 200 or not self.events or self.events[-1] != "[DONE]":
            return False
        chunks = [json.loads(e) for e in self.events[:-1]]
        if any("error" in c for c in chunks):
            return False
        return chunks[-1]["choices"][0]["finish_reason"] == "length"


def chat_count(server):
    """Chat completions a daemon has answered 200, from its /metrics."""
    text = server.metrics()
    m = re.search(r'^ebb_requests_total\{endpoint="chat_completions",status="200"\} (\d+)$', text, re.M)
    return int(m.group(1)) if m else 0


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    binary = find_nginx()
    if not binary:
        pytest.skip("nginx is not installed (apt-get install nginx, brew install nginx, or "
                    "scripts/setup-deps.sh); set EBB_NGINX to its path if it is elsewhere")
    tmp = str(tmp_path_factory.mktemp("nginx"))
    os.chmod(tmp, 0o755)
    ports = [free_port() for _ in range(3)]
    nginx = Nginx(binary, tmp, free_port(), ports)
    farm = {"nginx": nginx, "ports": ports, "daemons": []}
    yield farm
    nginx.stop()
    for d in farm["daemons"]:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def test_nginx_first_then_daemons(farm):
    nginx = farm["nginx"]
    status, _, _ = post(nginx.port, chat_body(2))
    assert status == 502, "nothing listens yet: nginx answers 502"
    farm["daemons"] = [Server(*DAEMON_ARGS, "--port", str(p), wait_ready=False)
                       for p in farm["ports"]]
    for d in farm["daemons"]:
        d.wait_ready()
    # nginx left every daemon out for fail_timeout after the refused connects above: within
    # that (5 s) and a little, requests get through, and from then on every one does.
    t0 = time.time()
    while post(nginx.port, chat_body(2))[0] != 200:
        assert time.time() - t0 < 15, nginx.output()
        time.sleep(0.5)
    for _ in range(3):
        status, up, data = post(nginx.port, chat_body(2))
        assert status == 200, data
        assert data["choices"][0]["message"]["content"] is not None


def test_requests_spread_over_daemons(farm):
    daemons, port = farm["daemons"], farm["nginx"].port
    before = [chat_count(d) for d in daemons]
    results = [None] * 9

    def one(i):
        results[i] = post(port, chat_body(8))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r[0] == 200 for r in results), [r[:2] for r in results]
    got = [chat_count(d) - b for d, b in zip(daemons, before)]
    assert sum(got) == len(results), got  # each answered once, none retried
    assert all(n >= 1 for n in got), f"least_conn left a daemon idle: {got}"
    assert {r[1] for r in results} == {f"127.0.0.1:{p}" for p in farm["ports"]}


def test_allowed_hosts(farm):
    d = farm["daemons"][0]  # started with --allowed-hosts ebb.example --allowed-hosts proxy.lan:8443

    def code(host):
        return d.request("GET", "/v1/models", headers={"Host": host})[0]

    assert code("ebb") == 403  # what nginx sends by default: the upstream block's name
    assert code("localhost") == 200  # what deploy/nginx/ebb.conf sends
    assert code("ebb.example") == 200
    assert code("EBB.example:9000") == 200  # a name without a port: any port
    assert code("proxy.lan:8443") == 200
    assert code("proxy.lan:8444") == 403
    assert code("proxy.lan") == 403
    status, _, body = d.request("GET", "/v1/models", headers={"Host": "evil.example"})
    assert status == 403 and json.loads(body)["error"]["code"] == "host_not_allowed"


def streams_on_every_daemon(port, daemons, max_tokens):
    """Streams through nginx until each live daemon serves one, all past their first tokens."""
    live = {f"127.0.0.1:{d.port}" for d in daemons if d.proc.poll() is None}
    streams = [Stream(port, max_tokens) for _ in live]
    for s in streams:
        assert s.first.wait(60) and s.status == 200, (s.status, s.error)
    assert {s.upstream for s in streams} == live, [s.upstream for s in streams]
    return streams


def daemon_at(farm, upstream):
    return next(d for d in farm["daemons"] if f"127.0.0.1:{d.port}" == upstream)


def test_sigterm_drain_no_client_error(farm):
    port = farm["nginx"].port
    # Long enough that the victim's stream outlasts the probes below: once its last request
    # ends, a drained daemon exits and closes them (40 tokens took ~0.8 s on a quiet machine,
    # the probes' second request comes ~0.6 s after the first tokens: a race the test lost).
    streams = streams_on_every_daemon(port, farm["daemons"], 200)
    victim = daemon_at(farm, streams[0].upstream)
    # Connections to the victim opened before the signal: they see the drain answers.
    probe, probe2 = (socket.create_connection(("127.0.0.1", victim.port)) for _ in range(2))
    time.sleep(0.3)  # accepted by the daemon before its listening socket closes
    victim.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # the daemon has closed its idle upstream connections; nginx read the FINs
    probe.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    head = probe.recv(4096).decode()
    probe.close()
    assert head.startswith("HTTP/1.1 503") and '"draining"' in head, head
    body = json.dumps(chat_body(2)).encode()
    probe2.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                   + body)
    head = probe2.recv(4096).decode()
    probe2.close()
    assert head.startswith("HTTP/1.1 503") and "server_draining" in head, head
    assert "\r\nRetry-After: 1\r\n" in head and "\r\nConnection: close\r\n" in head, head
    # New requests meanwhile: the victim's connect is refused, nginx passes them on.
    later = [post(port, chat_body(4)) for _ in range(4)]
    for s in streams:
        s.join(120)
    assert all(s.ok() for s in streams), [(s.upstream, s.error, s.events[-2:]) for s in streams]
    # Each is answered by a live daemon, except that a request nginx sent on an upstream
    # connection it had opened to the victim before the signal may get the drain's documented
    # 503 server_draining (nginx retries no POST): seen once in a loaded fresh-clone run
    # (2026-11-29), where nginx had not yet read the FIN of the idle connection the drain
    # closed. Anything else, or that answer from another daemon, fails.
    def drained(r):
        return (r[0] == 503 and r[1] == streams[0].upstream and isinstance(r[2], dict)
                and r[2].get("error", {}).get("code") == "server_draining")
    assert all(r[0] == 200 or drained(r) for r in later), later
    assert sum(r[0] == 200 for r in later) >= 3, later
    assert all(r[1] != streams[0].upstream for r in later if r[0] == 200)
    assert victim.proc.wait(60) == 0, victim.stderr()


def test_sigkill_mid_stream_clean_error_survivors_serve(farm):
    port = farm["nginx"].port
    streams = streams_on_every_daemon(port, farm["daemons"], 60)
    victim = daemon_at(farm, streams[0].upstream)
    t_kill = time.time()
    victim.proc.kill()
    victim.proc.wait()
    later = [post(port, chat_body(4)) for _ in range(4)]
    for s in streams:
        s.join(120)
        assert not s.is_alive(), "a client hung"
    for s in streams:
        if s.upstream == streams[0].upstream:
            # cut off: nginx closes the client's connection without the chunked terminator
            assert not s.ok(), s.events[-2:]
            assert s.error is not None or s.events[-1] != "[DONE]"
            assert s.t_end - t_kill < 10, "the killed daemon's client waited too long"
        else:
            assert s.ok(), (s.upstream, s.error, s.events[-2:])
    assert [r[0] for r in later] == [200] * 4, later
    assert all(r[1] != streams[0].upstream for r in later)
