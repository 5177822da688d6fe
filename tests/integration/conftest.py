"""Starts the real `ebb serve` on 127.0.0.1 with an ephemeral port and SmolLM2 (or the model
file a test names).

Environment: EBB_BIN (the binary), EBB_MODELS_DIR (default ~/.local/share/ebb/models),
EBB_TEST_DEVICE (default "auto"; "ref" selects the plain-C reference backend),
EBB_TEST_HTTP_POLL ("fdset" runs the portable MHD driver instead of epoll).
"""
import http.client
import json
import os
import re
import subprocess
import threading
import time

import openai
import pytest

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = MODEL_FILE[: -len(".gguf")]


def models_dir():
    return os.environ.get("EBB_MODELS_DIR") or os.path.expanduser("~/.local/share/ebb/models")


class Server:
    """One `ebb serve` process. Reads the bound port from its stdout line
    'ebb: listening on http://127.0.0.1:PORT' and waits for /health to answer 200."""

    def __init__(self, *extra, wait_ready=True, model=None, models=None):
        """models: several models (a list of -m values, [] for none: the catalogue of
        models_dir and the config's [model.NAME] sections) instead of the one model."""
        binary = os.environ.get("EBB_BIN")
        if not binary:
            pytest.skip("EBB_BIN is not set")
        model = model or os.path.join(models_dir(), MODEL_FILE)
        if models is None and not os.path.exists(model):
            pytest.skip(f"{model} is missing")
        device = os.environ.get("EBB_TEST_DEVICE", "auto")
        ms = ["-m", model] if models is None else [a for m in models for a in ("-m", m)]
        self.args = [binary, "serve", *ms, "--host", "127.0.0.1", "--port", "0",
                     "--device", device, *extra]
        if os.environ.get("EBB_TEST_HTTP_POLL"):  # "fdset" exercises the portable driver
            self.args += ["--http-poll", os.environ["EBB_TEST_HTTP_POLL"]]
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("EBB_") and k not in ("EBB_MODELS_DIR",):
                del env[k]
        env["EBB_CONFIG"] = "/dev/null"
        self.stderr_lines = []
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        line = self.proc.stdout.readline()
        m = re.match(r"ebb: listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"unexpected first line {line!r}; stderr: {self.stderr()}")
        self.port = int(m.group(1))
        self.base = f"http://127.0.0.1:{self.port}"
        if wait_ready:
            self.wait_ready()

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def stderr(self):
        return "".join(self.stderr_lines[-50:])

    def wait_log(self, text, timeout=5.0):
        """Whether the daemon's stderr shows text within timeout seconds (its reader thread can
        trail the daemon's answers)."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            if any(text in line for line in self.stderr_lines):
                return True
            time.sleep(0.05)
        return False

    def wait_ready(self, timeout=300):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ebb serve exited {self.proc.returncode}: {self.stderr()}")
            try:
                status, _, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the model did not load in time")

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Raw HTTP: returns (status, headers dict with lower-case names, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Host": f"127.0.0.1:{self.port}"}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def json(self, method, path, body=None, headers=None):
        status, hdrs, data = self.request(method, path, body, headers)
        return status, json.loads(data) if data else None

    def metrics(self, headers=None):
        status, _, data = self.request("GET", "/metrics", headers=headers)
        assert status == 200
        return data.decode()

    def client(self, **kw):
        kw.setdefault("api_key", "none")
        return openai.OpenAI(base_url=self.base + "/v1", max_retries=0, timeout=120, **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = Server("--parallel", "4", "--queue", "16", "--ctx", "1024")
    yield s
    rc = s.stop()
    assert rc == 0, s.stderr()


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture
def make_server():
    started = []

    def make(*extra, **kw):
        s = Server(*extra, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def sse_events(server, path, body, headers=None, timeout=120):
    """Posts a streaming request and returns the raw SSE events as a list of 'data' strings,
    plus the comment lines seen and the response headers."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    h = {"Host": f"127.0.0.1:{server.port}", "Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body), headers=h)
    r = c.getresponse()
    assert r.status == 200, r.read()
    raw = r.read().decode()
    c.close()
    assert raw.endswith("\n\n"), raw[-200:]
    events, comments = [], []
    for block in raw.split("\n\n")[:-1]:
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(line[len("data: "):])
            elif line.startswith(":"):
                comments.append(line)
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
    return events, comments, {k.lower(): v for k, v in r.getheaders()}
