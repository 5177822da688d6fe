"""Data parallel serving (issue 34): `ebb serve --device all` opens the model once per device,
each replica with its own slots and KV pool, behind one model id. PoCL gives two CPU devices
with POCL_DEVICES="pthread pthread": concurrent requests must reach both (per-device
/metrics), greedy output must equal the one-device daemon's, /health and /models/status must
list both devices, several-model mode must load a model on every device, and a device list
naming a device that is not there must fail at start-up naming it. Real SmolLM2, a small
context and few tokens."""
import json
import os
import re
import subprocess
import threading

import pytest

from conftest import MODEL_FILE, MODEL_ID, Server, models_dir

PROMPTS = ["Say hello.", "Name a colour.", "Count to three.", "What is a cat?"]


@pytest.fixture
def two_devices(monkeypatch):
    """Two PoCL devices for the daemons this test starts (the variable is PoCL's own: a GPU
    platform ignores it). Skips where --device all would not find two devices."""
    if os.environ.get("EBB_TEST_DEVICE", "auto") == "ref":
        pytest.skip("the reference backend has no devices to spread over")
    monkeypatch.setenv("POCL_DEVICES", "pthread pthread")
    out = subprocess.run([os.environ.get("EBB_BIN") or pytest.skip("EBB_BIN is not set"),
                          "info", "--devices", "--json"], capture_output=True, text=True,
                         env={**os.environ, "POCL_DEVICES": "pthread pthread"})
    devs = [d["id"] for d in json.loads(out.stdout or "[]")]
    if any(d.get("type") == "gpu" for d in json.loads(out.stdout or "[]")):
        pytest.skip("a GPU platform: --device all takes its GPUs, not PoCL's two devices")
    if devs[:2] != ["cl:0:0", "cl:0:1"]:
        pytest.skip(f"PoCL does not list two devices here: {devs}")


def greedy(server, prompt):
    r = server.client().chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": prompt}], max_tokens=12,
        temperature=0)
    return r.choices[0].message.content


def per_device(server, name):
    """{device: value} of the per-device metric name for the model."""
    out = {}
    for line in server.metrics().splitlines():
        m = re.match(name + r'\{model="' + re.escape(MODEL_ID) + r'",device="([^"]+)"\} (\S+)$',
                     line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def test_device_all_spreads_and_matches_one_device(two_devices):
    one = Server("--device", "cl:0:0", "--parallel", "2", "--ctx", "512")
    try:
        want = {p: greedy(one, p) for p in PROMPTS}
        assert one.json("GET", "/health") == (200, {"status": "ok"})  # one device: as before
    finally:
        assert one.stop() == 0, one.stderr()

    s = Server("--device", "all", "--parallel", "2", "--ctx", "512")
    try:
        status, h = s.json("GET", "/health")
        assert status == 200 and h["devices"] == {"cl:0:0": "ok", "cl:0:1": "ok"}, h
        # Two rounds of the four prompts at once: more than one device's two slots.
        got, errors = {}, []

        def run(i, p):
            try:
                got[(i, p)] = greedy(s, p)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))

        ts = [threading.Thread(target=run, args=(i, p)) for i in range(2) for p in PROMPTS]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        for (i, p), text in got.items():
            assert text == want[p], (p, text, want[p])
        placed = per_device(s, "ebb_device_requests_total")
        assert set(placed) == {"cl:0:0", "cl:0:1"}, placed
        assert all(v >= 1 for v in placed.values()), placed
        assert sum(placed.values()) == 2 * len(PROMPTS), placed
        started = per_device(s, "ebb_device_jobs_started_total")
        assert all(v >= 1 for v in started.values()), started
        assert per_device(s, "ebb_device_ready") == {"cl:0:0": 1, "cl:0:1": 1}
        _, st = s.json("GET", "/models/status")
        reps = st["data"][0]["replicas"]
        assert [r["device"] for r in reps] == ["cl:0:0", "cl:0:1"], reps
        assert all(r["state"] == "loaded" for r in reps), reps
        assert sum(r["requests"] for r in reps) == 2 * len(PROMPTS), reps
    finally:
        assert s.stop() == 0, s.stderr()


def test_device_list_names_a_missing_device(two_devices):
    binary = os.environ["EBB_BIN"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EBB_")}
    env["EBB_CONFIG"] = "/dev/null"
    env["EBB_MODELS_DIR"] = os.environ.get("EBB_MODELS_DIR", "")
    model = os.path.join(models_dir(), MODEL_FILE)
    p = subprocess.run([binary, "serve", "-m", model, "--port", "0", "--device", "cl:0:0,cl:0:5"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "cl:0:5" in p.stderr and "no OpenCL device" in p.stderr, p.stderr
    assert p.stdout == "", p.stdout  # it never listened


def test_catalogue_replicas_on_every_device(two_devices, tmp_path):
    """Several-model mode (-m DIR): a model loads on every device at its first request, both
    devices serve it, `ebb ps` shows its devices, and an unload frees it on both."""
    d = tmp_path / "models"
    d.mkdir()
    os.symlink(os.path.join(models_dir(), MODEL_FILE), d / MODEL_FILE)
    s = Server("--device", "all", "--parallel", "1", "--ctx", "512", models=[str(d)])
    try:
        _, h = s.json("GET", "/health")
        assert h["models"] == {MODEL_ID: "unloaded"} and set(h["devices"]) == {"cl:0:0",
                                                                               "cl:0:1"}, h
        ts = [threading.Thread(target=greedy, args=(s, p)) for p in PROMPTS[:2]]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        placed = per_device(s, "ebb_device_requests_total")
        assert placed == {"cl:0:0": 1, "cl:0:1": 1}, placed  # one slot each: one request each
        env = {k: v for k, v in os.environ.items() if not k.startswith("EBB_")}
        env["EBB_CONFIG"] = "/dev/null"
        ps = subprocess.run([os.environ["EBB_BIN"], "ps", "--port", str(s.port)], env=env,
                            capture_output=True, text=True, timeout=30)
        assert ps.returncode == 0, ps.stderr
        row = [ln for ln in ps.stdout.splitlines() if ln.startswith(MODEL_ID)]
        assert row and row[0].split()[1] == "loaded" and row[0].endswith(" cl:0:0,cl:0:1"), ps
        status, st = s.json("POST", "/models/unload", {"model": MODEL_ID})
        assert status == 200, st
        assert [r["state"] for r in st["replicas"]] == ["unloaded", "unloaded"], st
        assert per_device(s, "ebb_device_ready") == {"cl:0:0": 0, "cl:0:1": 0}
    finally:
        assert s.stop() == 0, s.stderr()
