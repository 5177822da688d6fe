"""Generation defaults of `ebb serve` (api/defaults/defaults.h): a sampling field a request does
not send takes the model's general.sampling.* value, else the configured [generation] one, else the
built-in one (llama-server's); a field the request sends always wins. /v1/models/{id} reports
the effective defaults in its `ebb` object.

The effect is observed through top_k: at top_k 1 every temperature gives the greedy text, while
at temperature 1.5 and top_k 40 the text leaves the greedy path for some seed (checked on the
unchanged model first, so the tests cannot pass by accident)."""
import os
import signal
import subprocess
import time

import pytest

from conftest import MODEL_FILE, MODEL_ID, models_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = (1, 2, 3)
SAME = ("--parallel", "4", "--ctx", "1024")  # as the session server, so texts compare
BUILTIN = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0,
           "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def complete(server, **fields):
    body = {"prompt": "Once upon a time", "max_tokens": 8, **fields}
    status, out = server.json("POST", "/v1/completions", body)
    assert status == 200, out
    return out["choices"][0]["text"]


def defaults_of(server):
    status, m = server.json("GET", f"/v1/models/{MODEL_ID}")
    assert status == 200, m
    return m["ebb"]


@pytest.fixture(scope="module")
def recommending_model(tmp_path_factory):
    """SmolLM2 with general.sampling.* keys (same file name, so the same model id): top_k 1,
    temperature 1.5, and an XTC sampler ebb does not have."""
    src = os.path.join(models_dir(), MODEL_FILE)
    if not os.path.exists(src):
        pytest.skip(f"{src} is missing")
    dst = tmp_path_factory.mktemp("rec") / MODEL_FILE
    subprocess.run(["python3", os.path.join(ROOT, "scripts", "gguf-set-kv.py"), src, str(dst),
                    "general.sampling.top_k=i32:1", "general.sampling.temp=f32:1.5",
                    "general.sampling.xtc_probability=f32:0.5"], check=True)
    yield str(dst)
    os.unlink(dst)


@pytest.fixture(scope="module")
def reference(server):
    """From the unchanged model, with every field sent: the greedy text and the texts at
    temperature 1.5, top_k 40 for each seed (which must not all be greedy)."""
    greedy = complete(server, temperature=0)
    hot = [complete(server, temperature=1.5, top_k=40, seed=s) for s in SEEDS]
    assert any(t != greedy for t in hot), (greedy, hot)
    return greedy, hot


def test_models_report_builtin_defaults(server):
    ext = defaults_of(server)
    assert ext["generation_defaults"] == {
        k: {"value": v, "source": "builtin"} for k, v in BUILTIN.items()}
    assert ext["model_sampling"] is True and ext["model_sampling_notes"] == []
    status, lst = server.json("GET", "/v1/models")
    assert lst["data"][0]["ebb"] == ext


def test_builtin_defaults_apply(server, reference):
    # Nothing sent but temperature and top_k: top_p 0.95 and min_p 0.05 come from the built-in
    # defaults, so the text equals the one with them sent.
    for s in SEEDS[:2]:
        assert complete(server, temperature=1.5, top_k=40, seed=s) == \
            complete(server, temperature=1.5, top_k=40, top_p=0.95, min_p=0.05, seed=s)


def test_gguf_recommendation_and_client_override(make_server, server, recommending_model,
                                                 reference):
    greedy, hot = reference
    s = make_server("-m", recommending_model, *SAME)
    ext = defaults_of(s)
    d = ext["generation_defaults"]
    assert d["top_k"] == {"value": 1, "source": "gguf"}
    assert d["temperature"] == {"value": 1.5, "source": "gguf"}
    assert d["top_p"] == {"value": 0.95, "source": "builtin"}
    assert any("xtc_probability" in n and "not used" in n for n in ext["model_sampling_notes"])
    # No sampling field sent: the model's top_k 1 makes every seed greedy.
    for seed in SEEDS:
        assert complete(s, seed=seed) == greedy, seed
    # The client's top_k wins (and the model's temperature 1.5 still applies): the same texts
    # as the unchanged model gives with both sent.
    assert [complete(s, top_k=40, seed=seed) for seed in SEEDS] == hot
    # temperature 1 sent means 1, not the model's 1.5: it matches the unchanged model at 1.
    assert complete(s, temperature=1, top_k=40, seed=1) == \
        complete(server, temperature=1, top_k=40, seed=1)


def test_config_over_builtin(make_server, tmp_path, reference):
    greedy, hot = reference
    conf = tmp_path / "ebb.conf"
    conf.write_text("[generation]\ntop_k = 1\ntemperature = 1.5\n")
    s = make_server("--config", str(conf), *SAME)
    d = defaults_of(s)["generation_defaults"]
    assert d["top_k"] == {"value": 1, "source": "config"}
    assert d["temperature"] == {"value": 1.5, "source": "config"}
    assert d["min_p"] == {"value": 0.05, "source": "builtin"}
    for seed in SEEDS:
        assert complete(s, seed=seed) == greedy, seed
    assert [complete(s, top_k=40, seed=seed) for seed in SEEDS] == hot
    # A flag is configuration too, and beats the file.
    s2 = make_server("--config", str(conf), "--top-k", "40", *SAME)
    assert defaults_of(s2)["generation_defaults"]["top_k"] == {"value": 40, "source": "config"}
    assert [complete(s2, seed=seed) for seed in SEEDS] == hot


def test_gguf_over_config_unless_model_sampling_off(make_server, tmp_path, recommending_model,
                                                    reference):
    greedy, hot = reference
    conf = tmp_path / "ebb.conf"
    conf.write_text("[generation]\ntop_k = 40\n")
    s = make_server("-m", recommending_model, "--config", str(conf), *SAME)
    assert defaults_of(s)["generation_defaults"]["top_k"] == {"value": 1, "source": "gguf"}
    assert complete(s, seed=2) == greedy
    s2 = make_server("-m", recommending_model, "--config", str(conf), "--model-sampling",
                     "false", "--temperature", "1.5", *SAME)
    ext = defaults_of(s2)
    assert ext["model_sampling"] is False and ext["model_sampling_notes"] == []
    assert ext["generation_defaults"]["top_k"] == {"value": 40, "source": "config"}
    assert [complete(s2, seed=seed) for seed in SEEDS] == hot


def test_reload_changes_defaults(make_server, tmp_path, reference):
    greedy, hot = reference
    conf = tmp_path / "ebb.conf"
    conf.write_text("[generation]\ntemperature = 1.5\n")
    s = make_server("--config", str(conf), *SAME)
    assert defaults_of(s)["generation_defaults"]["top_k"]["source"] == "builtin"
    assert complete(s, top_k=40, seed=1) == hot[0]
    conf.write_text("[generation]\ntemperature = 1.5\ntop_k = 1\n")
    s.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 20
    while defaults_of(s)["generation_defaults"]["top_k"]["source"] != "config":
        assert time.time() < deadline, s.stderr()
        time.sleep(0.1)
    assert complete(s, seed=1) == greedy
    # A bad value on reload keeps the running defaults; the log names file, line and key.
    conf.write_text("[generation]\n\ntop_k = lots\n")
    s.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 20
    while f"{conf}:3: top_k: 'lots'" not in s.stderr():
        assert time.time() < deadline, s.stderr()
        time.sleep(0.1)
    assert defaults_of(s)["generation_defaults"]["top_k"] == {"value": 1, "source": "config"}
