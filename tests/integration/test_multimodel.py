"""Several models in one daemon (issue 32): the catalogue of models_dir, a request's "model"
picking one, load on the first request, keep_alive unloading, the admin endpoints, and a memory
budget under which an idle model gives way while a busy one keeps streaming. Real SmolLM2 and
Gemma 3 270M, small contexts and few tokens."""
import json
import os
import re
import subprocess
import threading
import time

import ollama
import pytest

from conftest import MODEL_FILE, Server, models_dir, sse_events

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
SMOL = MODEL_FILE[: -len(".gguf")]
GEMMA = GEMMA_FILE[: -len(".gguf")]


def need_models():
    for f in (MODEL_FILE, GEMMA_FILE):
        if not os.path.exists(os.path.join(models_dir(), f)):
            pytest.skip(f"{f} is missing")


def catalogue_dir(tmp):
    """A models_dir holding the two real models (links, no copies)."""
    d = tmp / "models"
    d.mkdir()
    for f in (MODEL_FILE, GEMMA_FILE):
        os.symlink(os.path.join(models_dir(), f), d / f)
    return str(d)


def counters(server, name):
    """{model: value} of the per-model metric name."""
    out = {}
    for line in server.metrics().splitlines():
        m = re.match(name + r'\{model="([^"]+)"\} (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def chat(server, model, max_tokens=3, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": max_tokens, "temperature": 0, **extra}
    return server.json("POST", "/v1/chat/completions", body)


def wait_state(server, model, state, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        _, h = server.json("GET", "/health")
        if h["models"][model] == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"{model} never became {state}: {h}")


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    need_models()
    d = catalogue_dir(tmp_path_factory.mktemp("cat"))
    s = Server("--models-dir", d, "--ctx", "256", "--parallel", "1", "--keep-alive", "-1",
               models=[])
    yield s
    assert s.stop() == 0, s.stderr()


def test_catalogue_lists_every_model(cat):
    st, o = cat.json("GET", "/v1/models")
    assert st == 200
    by = {m["id"]: m for m in o["data"]}
    assert set(by) == {SMOL, GEMMA}
    assert by[SMOL]["family"] == "llama" and by[GEMMA]["family"] == "gemma3"
    assert by[SMOL]["size"] == os.path.getsize(os.path.join(models_dir(), MODEL_FILE))
    assert by[GEMMA]["context"] > 0 and by[SMOL]["pinned"] is False
    st, h = cat.json("GET", "/health")
    assert st == 200 and h["status"] == "ok"
    assert set(h["models"]) == {SMOL, GEMMA}


def test_unknown_model_is_404_with_close_names(cat):
    st, o = chat(cat, "SmolLM3")
    assert st == 404
    assert o["error"]["code"] == "model_not_found"
    assert SMOL in o["error"]["message"]
    st, _ = cat.json("GET", "/v1/models/nope")
    assert st == 404
    # A prefix two models share would be ambiguous; one naming neither is unknown.
    st, o = cat.json("POST", "/api/chat", {"model": "llama3:8b", "messages": []})
    assert st == 404 and "error" in o


def test_ollama_show_does_not_load(cat):
    info = ollama.Client(host=cat.base).show(GEMMA)
    assert info.modelinfo["general.architecture"] == "gemma3"
    assert info.modelinfo["gemma3.embedding_length"] > 0
    assert "completion" in info.capabilities
    _, h = cat.json("GET", "/health")
    assert h["models"][GEMMA] == "unloaded"


def test_first_request_loads_then_alternating_does_not_reload(cat):
    before = counters(cat, "ebb_catalogue_model_loads_total")
    assert before == {SMOL: 0, GEMMA: 0}
    # A unique prefix (any case) picks the model; the reply names the full id.
    st, o = chat(cat, "smollm2")
    assert st == 200, o
    assert o["model"] == SMOL
    assert counters(cat, "ebb_catalogue_model_loaded") == {SMOL: 1, GEMMA: 0}
    st, o = chat(cat, "gemma")
    assert st == 200, o
    assert o["model"] == GEMMA
    for model in (SMOL, GEMMA, SMOL, GEMMA):
        st, o = chat(cat, model)
        assert st == 200, o
    assert counters(cat, "ebb_catalogue_model_loads_total") == {SMOL: 1, GEMMA: 1}
    assert counters(cat, "ebb_catalogue_model_unloads_total") == {SMOL: 0, GEMMA: 0}


def test_two_models_generate_at_once(cat):
    res = {}

    def run(model):
        res[model] = chat(cat, model, max_tokens=8)

    ts = [threading.Thread(target=run, args=(m,)) for m in (SMOL, GEMMA)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert res[SMOL][0] == 200 and res[GEMMA][0] == 200
    assert res[SMOL][1]["model"] == SMOL and res[GEMMA][1]["model"] == GEMMA


def test_ollama_client_lists_both_and_ps_shows_loaded(cat):
    c = ollama.Client(host=cat.base)
    names = sorted(m.model for m in c.list().models)
    assert names == sorted([SMOL + ":latest", GEMMA + ":latest"])
    assert {m.model for m in c.ps().models} == {SMOL + ":latest", GEMMA + ":latest"}


def test_keep_alive_0_unloads(cat):
    c = ollama.Client(host=cat.base)
    r = c.generate(model=SMOL, prompt="Hi", options={"num_predict": 2}, keep_alive=0)
    assert r.done
    wait_state(cat, SMOL, "unloaded")
    assert counters(cat, "ebb_catalogue_model_unloads_total")[SMOL] == 1
    assert GEMMA in {m.model.split(":")[0] for m in c.ps().models}
    # The next request loads it again.
    st, o = chat(cat, SMOL)
    assert st == 200, o
    assert counters(cat, "ebb_catalogue_model_loads_total")[SMOL] == 2


def test_admin_load_unload_status(cat):
    st, o = cat.json("POST", "/models/unload", {"model": SMOL})
    assert st == 200 and o["state"] == "unloaded"
    st, o = cat.json("GET", "/models/status")
    assert st == 200
    assert {m["id"]: m["state"] for m in o["data"]}[SMOL] == "unloaded"
    st, o = cat.json("POST", "/models/load", {"model": SMOL})
    assert st == 200 and o["loaded"] is True and o["state"] == "loaded"
    st, o = cat.json("POST", "/models/load", {"model": "nope"})
    assert st == 404 and o["error"]["code"] == "model_not_found"
    st, o = cat.json("POST", "/models/load", {})
    assert st == 400


def test_requests_queue_behind_one_load(cat):
    st, o = cat.json("POST", "/models/unload", {"model": GEMMA})
    assert st == 200 and o["state"] == "unloaded"
    loads = counters(cat, "ebb_catalogue_model_loads_total")[GEMMA]
    res = []
    ts = [threading.Thread(target=lambda: res.append(chat(cat, GEMMA))) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [st for st, _ in res] == [200, 200, 200], res
    assert counters(cat, "ebb_catalogue_model_loads_total")[GEMMA] == loads + 1


def test_ebb_ps_asks_the_daemon(cat):
    env = dict(os.environ, EBB_CONFIG="/dev/null")
    r = subprocess.run([os.environ["EBB_BIN"], "ps", "--port", str(cat.port)], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    rows = {l.split()[0]: l.split() for l in r.stdout.splitlines()[1:]}
    assert set(rows) == {SMOL, GEMMA}
    assert rows[SMOL][1] == "loaded" and rows[GEMMA][3] == "gemma3"
    r = subprocess.run([os.environ["EBB_BIN"], "ps", "--port", str(cat.port), "--json"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and len(json.loads(r.stdout)["data"]) == 2
    # Nothing listening: a clear failure.
    r = subprocess.run([os.environ["EBB_BIN"], "ps", "--port", "1"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "no ebb serve answered" in r.stderr


def test_ebb_run_takes_a_catalogue_name(tmp_path):
    need_models()
    env = dict(os.environ, EBB_CONFIG="/dev/null", EBB_MODELS_DIR=catalogue_dir(tmp_path))
    r = subprocess.run([os.environ["EBB_BIN"], "run", "smollm2", "-p", "The capital of France is",
                        "-n", "2", "--temp", "0", "--ctx", "64"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    r = subprocess.run([os.environ["EBB_BIN"], "run", "-m", "mistral", "-p", "x"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "no model 'mistral'" in r.stderr and SMOL in r.stderr


def test_admin_needs_the_api_key(make_server, tmp_path):
    need_models()
    # -m repeated: those two files, by name.
    s = make_server("--api-key", "k1", models=[os.path.join(models_dir(), MODEL_FILE),
                                               os.path.join(models_dir(), GEMMA_FILE)])
    st, _ = s.json("GET", "/models/status")
    assert st == 401
    st, _ = s.json("POST", "/models/unload", {"model": SMOL})
    assert st == 401
    st, o = s.json("GET", "/models/status", headers={"Authorization": "Bearer k1"})
    assert st == 200 and sorted(m["id"] for m in o["data"]) == [SMOL, GEMMA]


def stream_started(server, model, max_tokens):
    """Starts a streamed chat of max_tokens (ignore_eos) to model on a thread and returns once
    the daemon counts it in flight: (the thread, a dict whose "events" its sse_events fill)."""
    done = {}

    def stream():
        done["events"] = sse_events(server, "/v1/chat/completions", {
            "model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "messages": [{"role": "user", "content": "Count to fifty."}]})

    t = threading.Thread(target=stream)
    t.start()
    t0 = time.time()
    while counters(server, "ebb_catalogue_model_in_flight").get(model, 0) < 1:
        assert time.time() - t0 < 30
        time.sleep(0.02)
    return t, done


def test_budget_idle_model_gives_way_busy_one_does_not(make_server, tmp_path):
    """A budget that fits one model (SmolLM2 ~98 MiB, Gemma ~253 MiB, each with a 16 MiB
    prompt-cache store, 300 MiB): while SmolLM2 streams, Gemma is refused with 503 and
    Retry-After and the stream is unharmed; once SmolLM2 is idle, Gemma's load unloads it.
    Models and their settings come from [model.NAME] sections of one config file."""
    need_models()
    conf = tmp_path / "ebb.conf"
    conf.write_text(
        f"models_budget = 300M\nctx = 128\nparallel = 1\nprompt_cache = 16M\n"
        f"[model.chat]\npath = {os.path.join(models_dir(), GEMMA_FILE)}\n"
        f"[model.small]\npath = {os.path.join(models_dir(), MODEL_FILE)}\nkeep_alive = 1h\n")
    s = make_server("--config", str(conf), models=[])
    st, o = s.json("GET", "/v1/models")
    assert sorted(m["id"] for m in o["data"]) == ["chat", "small"]
    st, o = chat(s, "small")
    assert st == 200, o
    t, done = stream_started(s, "small", 60)
    st, hdrs, body = s.request("POST", "/v1/chat/completions", {
        "model": "chat", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    t.join()
    assert st == 503, body
    assert hdrs.get("retry-after")
    assert "budget" in json.loads(body)["error"]["message"]
    events = done["events"][0]
    assert events[-1] == "[DONE]"
    finish = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]
              if json.loads(e)["choices"]]
    assert finish[-1] == "length"
    st, o = chat(s, "chat")
    assert st == 200, o
    assert counters(s, "ebb_catalogue_model_loaded") == {"chat": 1, "small": 0}
    assert counters(s, "ebb_catalogue_model_unloads_total") == {"chat": 0, "small": 1}


def gauge(server, name):
    """The value of the unlabelled metric name."""
    for line in server.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def test_priority_model_holds_the_others(make_server, tmp_path):
    """[model.fim] priority = high: while its long stream runs, a request to the other model
    waits at the gate (ebb_catalogue_priority_holds_total counts its held steps) and still
    completes; the stream is unharmed. Requests one at a time hold nothing."""
    need_models()
    conf = tmp_path / "ebb.conf"
    conf.write_text(
        f"ctx = 256\nparallel = 1\nkeep_alive = -1\n"
        f"[model.chat]\npath = {os.path.join(models_dir(), GEMMA_FILE)}\n"
        f"[model.fim]\npath = {os.path.join(models_dir(), MODEL_FILE)}\npriority = high\n")
    s = make_server("--config", str(conf), models=[])
    assert s.wait_log("(priority)"), s.stderr()
    for m in ("chat", "fim"):
        st, o = chat(s, m)
        assert st == 200, o
    assert gauge(s, "ebb_catalogue_priority_holds_total") == 0
    t, done = stream_started(s, "fim", 120)
    st, o = chat(s, "chat", max_tokens=4)
    t.join()
    assert st == 200, o
    assert o["usage"]["completion_tokens"] >= 1
    events = done["events"][0]
    assert events[-1] == "[DONE]"
    assert gauge(s, "ebb_catalogue_priority_holds_total") >= 1
    assert gauge(s, "ebb_catalogue_priority_held_seconds_total") > 0

def residency(server):
    """{model: (resident, streamed)} of the loaded models that stream, from /models/status."""
    _, o = server.json("GET", "/models/status")
    return {m["id"]: (m["layers"]["resident"], m["layers"]["streamed"])
            for m in o["data"] if m.get("layers")}


def wait_streamed(server, model, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        r = residency(server).get(model)
        if r and r[1] > 0:
            return r
        time.sleep(0.1)
    raise AssertionError(f"{model} never streamed a layer: {residency(server)}")


def test_budget_idle_model_streams_layers_before_it_goes(make_server, tmp_path):
    """A budget that fits Gemma (about 275 MiB planned) and part of SmolLM2 (about 117 MiB with
    every layer resident), each with a 16 MiB prompt-cache store that counts too, 362M: Gemma's
    load makes the idle SmolLM2 stream its top layers instead of unloading it; SmolLM2 wanted
    again takes layers back from the now idle Gemma as far as the budget allows, still
    streaming some; both answer with the greedy text they gave with every layer resident, and
    nothing was unloaded."""
    need_models()
    conf = tmp_path / "ebb.conf"
    conf.write_text(
        f"models_budget = 362M\nctx = 128\nparallel = 1\nkeep_alive = 1h\nprompt_cache = 16M\n"
        f"[model.chat]\npath = {os.path.join(models_dir(), GEMMA_FILE)}\n"
        f"[model.small]\npath = {os.path.join(models_dir(), MODEL_FILE)}\n")
    s = make_server("--config", str(conf), models=[])
    st, first_small = chat(s, "small", max_tokens=8)
    assert st == 200, first_small
    assert residency(s) == {"small": (30, 0)}
    st, first_chat = chat(s, "chat", max_tokens=8)
    assert st == 200, first_chat
    wait_streamed(s, "small")
    assert residency(s)["chat"] == (18, 0)
    st, o = chat(s, "small", max_tokens=8)
    assert st == 200, o
    text = lambda o: o["choices"][0]["message"]["content"]
    assert text(o) == text(first_small)
    r = residency(s)
    assert r["small"][1] > 0 and r["chat"][1] > 0, r  # both give way, neither fully
    st, o = chat(s, "chat", max_tokens=8)
    assert st == 200, o
    assert text(o) == text(first_chat)
    assert counters(s, "ebb_catalogue_model_unloads_total") == {"chat": 0, "small": 0}
    m = s.metrics()
    assert re.search(r'ebb_catalogue_model_layers\{model="small",place="streamed"\} [1-9]', m)
    mem = counters(s, "ebb_catalogue_model_memory_bytes")
    assert set(mem) == {"chat", "small"}
    assert sum(mem.values()) <= 362 << 20, mem


def budget_server(make_server, tmp_path, budget, prompt_cache, *extra):
    """A catalogue of SmolLM2 alone ([model.small]) under models_budget, ctx 128."""
    conf = tmp_path / f"ebb-{budget}-{prompt_cache}.conf"
    conf.write_text(
        f"models_budget = {budget}\nctx = 128\nparallel = 1\nprompt_cache = {prompt_cache}\n"
        f"[model.small]\npath = {os.path.join(models_dir(), MODEL_FILE)}\n")
    return make_server("--config", str(conf), *extra, models=[])


def loaded_bytes(server, model):
    """Loads model and returns its memory_bytes from /models/status."""
    st, o = server.json("POST", "/models/load", {"model": model})
    assert st == 200, o
    return o["memory_bytes"]


def test_budget_counts_the_prompt_store(make_server, tmp_path):
    """A model counts as its plan and its prompt-cache store, the store at its whole size
    (prompt_cache, to the last whole position), whether or not prompts filled it: SmolLM2 with a
    64 MiB store counts 64 MiB more than without one. Before the load it counts the store too:
    under a 150 MiB budget SmolLM2 (a 94 MiB file, about 117 MiB planned) loads without a store
    and is refused whole with one."""
    need_models()
    with_store = loaded_bytes(budget_server(make_server, tmp_path, "1G", "64M"), "small")
    without = loaded_bytes(budget_server(make_server, tmp_path, "150M", "0"), "small")
    assert 63 << 20 < with_store - without <= 64 << 20, (with_store, without)
    s = budget_server(make_server, tmp_path, "150M", "64M")
    st, o = s.json("POST", "/models/load", {"model": "small"})
    assert st == 503, o
    msg = o["error"]["message"]
    assert "more than the whole 150 MiB budget" in msg, msg
    assert int(re.search(r"needs about (\d+) MiB", msg).group(1)) >= 150, msg


def test_budget_counts_the_cpu_repack(make_server, tmp_path):
    """--device cpu has no streamer: a loaded model counts as its file, the engine's host
    buffers (the weights' repacked copy, about the file's size again for Q4_1 with the tied
    head, the KV cache and scratch rows) and its store. Before the load the estimate has the
    repacked copy too, so a budget that the file and its KV cache would fit refuses it."""
    need_models()
    size = os.path.getsize(os.path.join(models_dir(), MODEL_FILE))
    s = budget_server(make_server, tmp_path, "1G", "0", "--device", "cpu")
    cpu = loaded_bytes(s, "small")
    assert cpu > 1.8 * size, (cpu, size)
    _, o = s.json("GET", "/models/status")
    assert o["data"][0]["replicas"][0]["device"].startswith("cpu"), o
    s = budget_server(make_server, tmp_path, "150M", "0", "--device", "cpu")
    st, o = s.json("POST", "/models/load", {"model": "small"})
    assert st == 503, o
    assert "more than the whole 150 MiB budget" in o["error"]["message"], o


def gen_model_bin():
    """bench/ebb-gen-model next to EBB_BIN's daemon/ (EBB_GEN_MODEL overrides), as
    test_families.py finds it."""
    g = os.environ.get("EBB_GEN_MODEL")
    if g:
        return g
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(os.environ["EBB_BIN"]))),
                        "bench", "ebb-gen-model")


def test_three_models_through_openai_and_curl(tmp_path):
    """The two real models and a random-weight one (ebb-gen-model, a tiny Llama 3 shape with
    SmolLM2's vocabulary) in one catalogue: the official openai client lists all three and gets
    a chat from each (the answer names the model asked for), and curl's request for the random
    model by a unique prefix of its id answers with that model."""
    need_models()
    if not os.environ.get("EBB_BIN"):
        pytest.skip("EBB_BIN is not set")
    d = catalogue_dir(tmp_path)
    rand = os.path.join(d, "rand-llama3.1-tiny-q8_0.gguf")
    subprocess.run([gen_model_bin(), "--shape", "llama3.1-tiny", "--type", "q8_0", "--seed", "3",
                    "--tokenizer-from", os.path.join(models_dir(), MODEL_FILE), "-o", rand],
                   check=True, capture_output=True)
    RAND = "rand-llama3.1-tiny-q8_0"
    s = Server("--models-dir", d, "--ctx", "256", "--parallel", "1", "--keep-alive", "-1",
               models=[])
    try:
        client = s.client()
        ids = {m.id for m in client.models.list().data}
        assert {SMOL, GEMMA, RAND} <= ids, ids
        for m in (SMOL, GEMMA, RAND):
            r = client.chat.completions.create(model=m, max_tokens=4, temperature=0,
                                               messages=[{"role": "user", "content": "Hi"}])
            assert r.model == m
            assert r.choices[0].finish_reason in ("stop", "length")
            assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens >= 1
        body = json.dumps({"model": "rand-llama", "prompt": "def f(", "max_tokens": 3,
                           "temperature": 0})
        out = subprocess.run(["curl", "-sS", "--fail-with-body", "-H",
                              "Content-Type: application/json", "-d", body,
                              s.base + "/v1/completions"],
                             check=True, capture_output=True, text=True, timeout=120)
        ans = json.loads(out.stdout)
        assert ans["model"] == RAND and ans["usage"]["completion_tokens"] >= 1, ans
        # a name the catalogue does not hold: 404 model_not_found, with close names
        out = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", "-H",
                              "Content-Type: application/json", "-d",
                              body.replace('"rand-llama"', '"rand-lama-tiny"'),
                              s.base + "/v1/completions"],
                             check=True, capture_output=True, text=True, timeout=60)
        text, code = out.stdout.rsplit("\n", 1)
        err = json.loads(text)["error"]
        assert code == "404" and err["code"] == "model_not_found", out.stdout
        assert RAND in err["message"], err
    finally:
        assert s.stop() == 0, s.stderr()
