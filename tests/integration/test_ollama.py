"""Ollama's API (/api/...) against the real daemon on SmolLM2, driven by the official `ollama`
Python client and raw HTTP: the model listing and details, chat and generate (one object and
NDJSON streams, compared token for token with the OpenAI endpoints at temperature 0), embed,
format (JSON schema), tool calls in ollama's shape, think, and the refusals in ollama's error
shape."""
import http.client
import json
import math

import jsonschema
import ollama
import pytest

from conftest import MODEL_ID

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
HI = [{"role": "user", "content": "Say hello to Bob."}]
GREEDY = {"temperature": 0, "num_predict": 8}


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.base, timeout=120)


def ndjson(server, path, body):
    """Posts body and returns (status, content type, the parsed lines), checking that the
    stream is one JSON object per line ending in a newline."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    c.request("POST", path, body=json.dumps(body),
              headers={"Host": f"127.0.0.1:{server.port}", "Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    assert raw.endswith("\n"), raw[-200:]
    lines = raw[:-1].split("\n")
    return r.status, r.getheader("Content-Type"), [json.loads(line) for line in lines]


def check_done(obj, eval_count=None):
    """The closing object's counts and nanosecond durations."""
    assert obj["done"] is True
    assert obj["done_reason"] in ("stop", "length")
    assert obj["prompt_eval_count"] > 0
    if eval_count is not None:
        assert obj["eval_count"] == eval_count
    for k in ("total_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(obj[k], int) and obj[k] > 0, k
    assert obj["load_duration"] == 0
    # Nanoseconds, not seconds or milliseconds: the whole request took more than the parts.
    assert obj["total_duration"] >= obj["prompt_eval_duration"] + obj["eval_duration"]
    assert obj["total_duration"] > 1_000_000


# ---- the model -------------------------------------------------------------------------------


def test_list_show_ps_version(oc, server):
    models = oc.list().models
    assert [m.model for m in models] == [f"{MODEL_ID}:latest"]
    assert models[0].details.format == "gguf" and models[0].details.family == "llama"
    assert models[0].size > 1_000_000
    info = oc.show(MODEL_ID)
    assert info.modelinfo["general.architecture"] == "llama"
    assert info.modelinfo["llama.context_length"] == 1024  # the fixture's --ctx
    assert {"completion", "embedding", "tools"} <= set(info.capabilities)
    assert "thinking" not in info.capabilities  # SmolLM2's template has no enable_thinking
    assert "<|im_start|>" in info.template
    running = oc.ps().models
    assert len(running) == 1 and running[0].model == f"{MODEL_ID}:latest"
    assert running[0].context_length == 1024
    status, v = server.json("GET", "/api/version")
    assert status == 200 and v["version"].count(".") == 2


@pytest.mark.parametrize("name", [MODEL_ID, f"{MODEL_ID}:latest", MODEL_ID.lower(),
                                  "SmolLM2-135M-Instruct:Q4_1", "smollm2-135m-instruct:q4_1"])
def test_model_names_that_match(oc, name):
    assert oc.show(name).modelinfo["general.architecture"] == "llama"


@pytest.mark.parametrize("name", ["llama3.2", f"{MODEL_ID}:q8_0", "SmolLM2-135M-Instruct",
                                  "SmolLM2-135M-Instruct:Q4"])
def test_unknown_model_is_404(oc, name):
    for call in (lambda: oc.show(name), lambda: oc.chat(name, messages=HI),
                 lambda: oc.generate(name, prompt="hi"), lambda: oc.embed(name, input="hi")):
        with pytest.raises(ollama.ResponseError) as e:
            call()
        assert e.value.status_code == 404
        assert e.value.error == f"model '{name}' not found"


# ---- chat and generate -------------------------------------------------------------------------


def test_chat_matches_openai(oc, client):
    r = oc.chat(MODEL_ID, messages=HI, options=GREEDY)
    assert r.message.role == "assistant" and r.message.content
    assert r.done_reason == "length" and r.eval_count == 8
    check_done(r.model_dump())
    assert r.model == MODEL_ID
    want = client.chat.completions.create(model=MODEL_ID, messages=HI, temperature=0,
                                          max_tokens=8)
    assert r.message.content == want.choices[0].message.content
    assert r.prompt_eval_count == want.usage.prompt_tokens


def test_chat_stream_is_ndjson(oc, server):
    parts = list(oc.chat(MODEL_ID, messages=HI, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    check_done(parts[-1].model_dump(), eval_count=8)
    streamed = "".join(p.message.content for p in parts)
    assert streamed == oc.chat(MODEL_ID, messages=HI, options=GREEDY).message.content
    # Streaming is the default without "stream": NDJSON, one object per line.
    status, ctype, lines = ndjson(server, "/api/chat", {"model": MODEL_ID, "messages": HI,
                                                        "options": GREEDY})
    assert status == 200 and ctype == "application/x-ndjson"
    assert len(lines) >= 2 and lines[-1]["done"] and not any(x["done"] for x in lines[:-1])
    assert "".join(x["message"]["content"] for x in lines) == streamed
    status, hdrs, body = server.request("POST", "/api/chat", {"model": MODEL_ID, "messages": HI,
                                                               "options": GREEDY,
                                                               "stream": False})
    assert status == 200 and hdrs["content-type"] == "application/json"
    assert json.loads(body)["message"]["content"] == streamed


def test_generate_matches_openai(oc, client):
    r = oc.generate(MODEL_ID, prompt="The capital of France is", raw=True, options=GREEDY)
    want = client.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                     temperature=0, max_tokens=8)
    assert r.response == want.choices[0].text and r.eval_count == 8
    check_done(r.model_dump(), eval_count=8)
    # Without raw the prompt goes through the chat template, with system first.
    r = oc.generate(MODEL_ID, prompt="Say hello to Bob.", system="Be brief.", options=GREEDY)
    want = client.chat.completions.create(
        model=MODEL_ID, temperature=0, max_tokens=8,
        messages=[{"role": "system", "content": "Be brief."}] + HI)
    assert r.response == want.choices[0].message.content
    parts = list(oc.generate(MODEL_ID, prompt="Say hello to Bob.", system="Be brief.",
                             options=GREEDY, stream=True))
    assert "".join(p.response for p in parts) == r.response and parts[-1].done


def test_options_map(oc, client):
    opts = {"temperature": 0.9, "top_k": 5, "top_p": 0.8, "min_p": 0.1, "seed": 7,
            "repeat_penalty": 1.3, "num_predict": 12, "stop": ["\n"],
            "num_ctx": 1024, "num_thread": 2}
    a = oc.chat(MODEL_ID, messages=HI, options=opts)
    b = client.chat.completions.create(
        model=MODEL_ID, messages=HI, max_tokens=12, stop=["\n"], seed=7, temperature=0.9,
        top_p=0.8, extra_body={"top_k": 5, "min_p": 0.1, "repeat_penalty": 1.3})
    assert a.message.content == b.choices[0].message.content
    assert "\n" not in a.message.content


def test_load_only_requests(server):
    for path, body, key in (("/api/generate", {"model": MODEL_ID}, "response"),
                            ("/api/chat", {"model": MODEL_ID, "messages": []}, "message")):
        status, r = server.json("POST", path, body)
        assert status == 200 and r["done"] and r["done_reason"] == "load" and key in r


@pytest.mark.parametrize("ka", ["5m", "1h30m", 0, -1, "-1", "0", 300, None])
def test_keep_alive_accepted(server, ka):
    status, r = server.json("POST", "/api/chat", {
        "model": MODEL_ID, "messages": HI, "stream": False, "keep_alive": ka,
        "options": {"num_predict": 1}})
    assert status == 200, r


# ---- embeddings ----------------------------------------------------------------------------------


def test_embed(oc, client):
    r = oc.embed(MODEL_ID, input=["hello", "a longer sentence about the sea"])
    assert len(r.embeddings) == 2 and r.prompt_eval_count > 0 and r.total_duration > 0
    for v in r.embeddings:
        assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-4
    want = client.embeddings.create(model=MODEL_ID, input=["hello"]).data[0].embedding
    assert max(abs(a - b) for a, b in zip(r.embeddings[0], want)) < 1e-5
    one = oc.embed(MODEL_ID, input="hello", dimensions=16).embeddings
    assert len(one) == 1 and len(one[0]) == 16
    # The legacy endpoint gives the raw mean-pooled vector, as ollama does.
    legacy = oc.embeddings(MODEL_ID, prompt="hello").embedding
    norm = math.sqrt(sum(x * x for x in legacy))
    assert abs(norm - 1) > 1e-3
    assert max(abs(a / norm - b) for a, b in zip(legacy, r.embeddings[0])) < 1e-5


# ---- format, tools, think ------------------------------------------------------------------------


def test_format_schema(oc):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = oc.chat(MODEL_ID, messages=[{"role": "user", "content": "Describe a person."}],
                format=schema, options={"temperature": 0, "num_predict": 80})
    assert r.done_reason == "stop"
    jsonschema.validate(json.loads(r.message.content), schema)
    r = oc.generate(MODEL_ID, format="json", options={"temperature": 0, "num_predict": 60},
                    prompt='Answer with a JSON object with one key "answer" whose value is yes.')
    assert r.done_reason == "stop" and isinstance(json.loads(r.response), dict)


FORCED = {"model": MODEL_ID, "tools": [WEATHER], "tool_choice": "required",
          "parallel_tool_calls": False, "options": {"temperature": 0, "num_predict": 60},
          "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}


def test_tool_call_shape(server):
    status, r = server.json("POST", "/api/chat", dict(FORCED, stream=False))
    assert status == 200, r
    resp = ollama.ChatResponse.model_validate(r)
    calls = resp.message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert isinstance(r["message"]["tool_calls"][0]["function"]["arguments"], dict)
    assert isinstance(calls[0].function.arguments["city"], str)
    assert "<tool_call>" not in resp.message.content
    # Streamed: the call arrives whole in one line, content never shows the markup.
    status, ctype, lines = ndjson(server, "/api/chat", FORCED)
    assert status == 200 and lines[-1]["done"]
    with_calls = [x for x in lines if x["message"].get("tool_calls")]
    assert len(with_calls) == 1
    assert with_calls[0]["message"]["tool_calls"][0]["function"] == \
        r["message"]["tool_calls"][0]["function"]
    assert "<tool_call>" not in "".join(x["message"]["content"] for x in lines)


def test_tool_round_trip(oc, server):
    """The call goes back in the history (arguments as an object) with the tool's answer."""
    status, r = server.json("POST", "/api/chat", dict(FORCED, stream=False))
    call = r["message"]["tool_calls"][0]
    history = FORCED["messages"] + [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 24 degrees Celsius"}]
    ans = oc.chat(MODEL_ID, messages=history, tools=[WEATHER],
                  options={"temperature": 0, "num_predict": 30})
    assert ans.message.role == "assistant" and ans.done
    # The tool's answer reached the prompt: the turn is longer than the one without it.
    bare = oc.chat(MODEL_ID, messages=history[:-1], tools=[WEATHER],
                   options={"num_predict": 1})
    assert ans.prompt_eval_count > bare.prompt_eval_count + 5


# A grammar that makes any model think first: the reasoning splitter's input, whatever the weights.
THINK = 'root ::= "<think>\\nThe user greets me.\\n</think>\\n\\nHello there!"'


def test_thinking_goes_to_its_own_field(oc, server):
    kw = dict(options={"num_predict": 60}, grammar=THINK)
    status, r = server.json("POST", "/api/chat", dict(kw, model=MODEL_ID, messages=HI,
                                                      stream=False))
    assert status == 200, r
    assert r["message"]["thinking"] == "The user greets me."
    assert r["message"]["content"] == "Hello there!"
    status, ctype, lines = ndjson(server, "/api/chat", dict(kw, model=MODEL_ID, messages=HI))
    assert "".join(x["message"].get("thinking", "") for x in lines) == "The user greets me."
    assert "".join(x["message"]["content"] for x in lines) == "Hello there!"
    first_content = next(i for i, x in enumerate(lines) if x["message"]["content"])
    assert all("thinking" not in x["message"] for x in lines[first_content:])
    status, r = server.json("POST", "/api/generate", dict(kw, model=MODEL_ID, prompt="Hi",
                                                          stream=False))
    assert r["thinking"] == "The user greets me." and r["response"] == "Hello there!"
    status, ctype, lines = ndjson(server, "/api/generate", dict(kw, model=MODEL_ID, prompt="Hi"))
    assert "".join(x.get("thinking", "") for x in lines) == "The user greets me."
    assert "".join(x["response"] for x in lines) == "Hello there!"
    # Past reasoning goes back to the template as reasoning_content (SmolLM2's ignores it).
    back = oc.chat(MODEL_ID, options={"num_predict": 1}, messages=HI + [
        {"role": "assistant", "content": "Hello there!", "thinking": "The user greets me."},
        {"role": "user", "content": "And?"}])
    assert back.done


def test_think(oc):
    # SmolLM2's template has no thinking switch: think is refused as ollama refuses it.
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat(MODEL_ID, messages=HI, think=True)
    assert e.value.status_code == 400 and "think" in e.value.error
    r = oc.chat(MODEL_ID, messages=HI, think=False, options=GREEDY)
    assert r.message.content and not r.message.thinking


# ---- refusals and errors -------------------------------------------------------------------------


@pytest.mark.parametrize("call,word", [
    (lambda c: c.chat(MODEL_ID, messages=[{"role": "user", "content": "hi",
                                            "images": [b"\x89PNG"]}]), "images"),
    (lambda c: c.generate(MODEL_ID, prompt="hi", images=[b"\x89PNG"]), "images"),
    (lambda c: c.chat(MODEL_ID, messages=HI, options={"mirostat": 2}), "mirostat"),
    (lambda c: c.chat(MODEL_ID, messages=HI, options={"typical_p": 0.5}), "typical_p"),
    (lambda c: c.chat(MODEL_ID, messages=HI, options={"no_such_option": 1}), "no_such_option"),
    (lambda c: c.chat(MODEL_ID, messages=HI, options={"temperature": 5}), "temperature"),
    (lambda c: c.chat(MODEL_ID, messages=HI, options={"num_predict": 0}), "num_predict"),
    (lambda c: c.chat(MODEL_ID, messages=HI, keep_alive="soon"), "keep_alive"),
    (lambda c: c.generate(MODEL_ID, prompt="hi", template="{{ .Prompt }}"), "template"),
    (lambda c: c.generate(MODEL_ID, prompt="hi", context=[1, 2, 3]), "context"),
])
def test_refused_fields_are_400(oc, call, word):
    with pytest.raises(ollama.ResponseError) as e:
        call(oc)
    assert e.value.status_code == 400 and word in e.value.error


def test_neutral_options_accepted(oc):
    r = oc.chat(MODEL_ID, messages=HI, options=dict(GREEDY, mirostat=0, typical_p=1.0,
                                                     tfs_z=1.0, num_batch=64, num_gpu=99))
    assert r.done


@pytest.mark.parametrize("call,path", [
    (lambda c: c.push("me/model"), "/api/push"),
    (lambda c: c.create("mine", from_=MODEL_ID), "/api/create"),
    (lambda c: c.copy(MODEL_ID, "other"), "/api/copy"),
    (lambda c: c.delete(MODEL_ID), "/api/delete"),
])
def test_model_management_refused(oc, call, path):
    with pytest.raises(ollama.ResponseError) as e:
        call(oc)
    assert e.value.status_code == 501
    assert e.value.error.startswith(path) and "does not push" in e.value.error


def test_pull_of_a_library_name_is_400(oc):
    # /api/pull fetches from Hugging Face (tests/cli/test-pull.py drives it against a hub-like
    # server); an ollama library name is refused before anything is fetched, saying what to give.
    with pytest.raises(ollama.ResponseError) as e:
        oc.pull("llama3.2")
    assert e.value.status_code == 400 and "hf.co/OWNER/REPO:QUANT" in e.value.error


def test_errors_take_ollama_shape(server):
    for method, path, body, code in (
            ("GET", "/api/nope", None, 404),
            ("POST", "/api/chat", "{not json", 400),
            ("POST", "/api/chat", {"messages": HI}, 400),
            ("GET", "/api/chat", None, 405),
            ("POST", "/api/embed", {"model": MODEL_ID, "input": 5}, 400),
            ("POST", "/api/chat", {"model": MODEL_ID, "messages": HI, "format": "yaml"}, 400)):
        status, hdrs, data = server.request(method, path, body)
        assert status == code, (path, data)
        obj = json.loads(data)
        assert list(obj) == ["error"] and isinstance(obj["error"], str) and obj["error"]
    # The OpenAI paths keep OpenAI's shape.
    status, obj = server.json("POST", "/v1/chat/completions", "{not json")
    assert status == 400 and "message" in obj["error"]


def test_metrics_count_ollama_endpoints(server, oc):
    oc.list()
    text = server.metrics()
    assert 'endpoint="ollama"' in text and 'endpoint="ollama_chat"' in text
