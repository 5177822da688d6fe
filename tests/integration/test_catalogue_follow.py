"""A several-model daemon's catalogue follows its models directory (issue 32): a GGUF copied or
linked in while it runs is listed and served, with the [model.NAME] section that names it; one
removed (`ebb rm`, or a plain unlink) leaves the listings and names at once, a request for it
is 404 model_not_found, and a loaded one is unloaded only once its streaming request has
finished whole. Real SmolLM2 (copies and links of one file), ctx 256, a few tokens."""
import http.client
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import MODEL_FILE, Server, models_dir

SRC = os.path.join(models_dir(), MODEL_FILE)


def ids(server, path="/v1/models"):
    st, o = server.json("GET", path)
    assert st == 200, o
    if path == "/api/tags":
        return {m["name"].split(":")[0] for m in o["models"]}
    return {m["id"] for m in o["data"]}


def chat(server, model, max_tokens=3):
    return server.json("POST", "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": max_tokens, "temperature": 0})


def status_of(server, model):
    _, o = server.json("GET", "/models/status")
    return {m["id"]: m for m in o["data"]}.get(model)


def ebb_rm(server, mdir, name):
    env = dict(os.environ, EBB_CONFIG="/dev/null", EBB_MODELS_DIR=mdir)
    return subprocess.run([os.environ["EBB_BIN"], "rm", "--port", str(server.port), name],
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def follow(tmp_path_factory):
    if not os.path.exists(SRC):
        pytest.skip(f"{SRC} is missing")
    root = tmp_path_factory.mktemp("follow")
    mdir = root / "models"
    mdir.mkdir()
    os.symlink(SRC, mdir / "first.gguf")
    conf = root / "ebb.conf"
    # A section for a file that is not there yet: served with its settings once it appears.
    conf.write_text("[model.late]\npath = later-file.gguf\nctx = 128\nkeep_alive = 7m\n")
    s = Server("--config", str(conf), "--models-dir", str(mdir), "--ctx", "256",
               "--parallel", "1", "--keep-alive", "-1", models=[])
    yield s, str(mdir)
    assert s.stop() == 0, s.stderr()


def test_a_copied_file_is_listed_and_served(follow):
    s, mdir = follow
    assert ids(s) == {"first"}
    shutil.copy(SRC, os.path.join(mdir, "copied.gguf"))
    assert ids(s) == {"first", "copied"}
    assert ids(s, "/api/tags") == {"first", "copied"}
    assert status_of(s, "copied")["size"] == os.path.getsize(SRC)
    st, o = chat(s, "copied")
    assert st == 200, o
    assert o["model"] == "copied" and o["usage"]["completion_tokens"] == 3


def test_a_section_applies_to_a_file_that_appears_after_start(follow):
    s, mdir = follow
    assert "late" not in ids(s)
    os.symlink(SRC, os.path.join(mdir, "later-file.gguf"))
    assert "late" in ids(s) and "later-file" not in ids(s)
    m = status_of(s, "late")
    assert m["keep_alive"] == 420
    st, o = chat(s, "late")
    assert st == 200, o
    assert status_of(s, "late")["context"] == 128  # the section's ctx, not the daemon's 256


def test_ebb_rm_drops_the_model_and_a_request_for_it_is_404(follow):
    s, mdir = follow
    os.symlink(SRC, os.path.join(mdir, "doomed.gguf"))
    assert "doomed" in ids(s)
    r = ebb_rm(s, mdir, "doomed")
    assert r.returncode == 0, r.stderr
    assert f"port {s.port}: doomed unloaded, no longer served" in r.stdout
    for path in ("/v1/models", "/api/tags", "/models/status"):
        assert "doomed" not in ids(s, path), path
    st, o = chat(s, "doomed")
    assert st == 404 and o["error"]["code"] == "model_not_found", o
    # A plain unlink too, with nothing telling the daemon.
    os.unlink(os.path.join(mdir, "copied.gguf"))
    assert "copied" not in ids(s)
    st, o = chat(s, "copied")
    assert st == 404 and o["error"]["code"] == "model_not_found", o


def test_ebb_rm_while_streaming_lets_the_stream_finish_then_unloads(follow):
    s, mdir = follow
    os.symlink(SRC, os.path.join(mdir, "busy.gguf"))
    st, o = chat(s, "busy")
    assert st == 200, o
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    c.request("POST", "/v1/chat/completions", body=json.dumps({
        "model": "busy", "stream": True, "max_tokens": 32, "temperature": 0,
        "ignore_eos": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Count to fifty."}]}),
        headers={"Content-Type": "application/json", "Host": f"127.0.0.1:{s.port}"})
    resp = c.getresponse()
    assert resp.status == 200
    events = []
    while not events:  # the first token is out: the request is in flight
        line = resp.readline().decode()
        assert line, "the stream ended before its first event"
        if line.startswith("data: "):
            events.append(line[6:].strip())
    r = ebb_rm(s, mdir, "busy")
    assert r.returncode == 0, r.stderr
    assert "busy no longer served; unloaded once its 1 request(s) in flight are done" in r.stdout
    assert "busy" not in ids(s)
    st, o = chat(s, "busy")
    assert st == 404 and o["error"]["code"] == "model_not_found", o
    while events[-1] != "[DONE]":
        line = resp.readline().decode()
        assert line, "the stream ended before [DONE]"
        if line.startswith("data: "):
            events.append(line[6:].strip())
    c.close()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = [x["usage"] for x in chunks if x.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 32, usage
    finish = [x["choices"][0]["finish_reason"] for x in chunks if x["choices"]]
    assert finish[-1] == "length"
    t0 = time.time()
    while "unloading busy (its file is gone)" not in "".join(s.stderr_lines):
        assert time.time() - t0 < 10, s.stderr()
        time.sleep(0.1)


def test_ebb_rm_without_a_daemon_is_no_error(tmp_path):
    if not os.path.exists(SRC):
        pytest.skip(f"{SRC} is missing")
    os.symlink(SRC, tmp_path / "x.gguf")
    env = dict(os.environ, EBB_CONFIG="/dev/null", EBB_MODELS_DIR=str(tmp_path))
    r = subprocess.run([os.environ["EBB_BIN"], "rm", "--port", "1", "x"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"removed {tmp_path}/x.gguf" and not r.stderr


def test_a_single_model_daemon_keeps_its_fixed_list(make_server, tmp_path):
    if not os.path.exists(SRC):
        pytest.skip(f"{SRC} is missing")
    os.symlink(SRC, tmp_path / "one.gguf")
    s = make_server("--models-dir", str(tmp_path), "--ctx", "256", "--parallel", "1",
                    model=str(tmp_path / "one.gguf"))
    os.symlink(SRC, tmp_path / "two.gguf")
    assert ids(s) == {"one"}
    st, o = chat(s, "two")
    assert st == 404 and o["error"]["code"] == "model_not_found", o
